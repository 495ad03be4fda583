"""The kernel-iteration loop's rules (SPEC.md R19-R25) as small, pure checks.

Each check is named after its rule and raises :class:`~perfledger.errors.RuleRefused` with that
rule id (through :func:`perfledger.commands.workflow.rules.refuse`) when it refuses. The checks read the
run's recorded state (:class:`~perfledger.projections.loop.RunView`) and its catalog (stored in
``RunSetUp``), never a file: the same checks run before the CLI measures anything and again in
the deciders, so a refused selection costs no GPU time and leaves the ledger unchanged.

Unlike the tools this loop comes from, the reasons given for skipping a higher-priority method
(R24) are *checked*: ``no_trigger`` and ``skip_condition`` against the ncu metrics recorded in
the iteration's input profile, ``already_selected`` and ``ineffective`` against the run's history,
``arch_incompatible`` against the catalog's per-architecture feature map.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events import catalog as cat
from perfledger.events.loop import (
    AXES,
    MAX_CORRECTNESS_ATTEMPTS,
    AxisSelection,
    BottleneckEvidence,
    Catalog,
    CatalogMethod,
    Skipped,
)
from perfledger.projections.loop import RunView, failed_attempts, input_profile

#: The iteration's selection as requested: axis -> object with ``chosen``, ``skipped`` (objects
#: with ``method``, ``reason``, ``detail``) and ``reuse_metric``.
SelectionLike = Mapping[str, object]


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/loop.md describes the method catalog and the skip reasons (R19-R25)"


def _method(catalog: Catalog, method_id: str, rule: str, what: str) -> CatalogMethod:
    found = cat.method(catalog, method_id)
    if found is None:
        raise refuse(
            rule,
            f"{what} {method_id!r} is not in catalog {catalog.catalog_id}",
            f"choose one of catalog {catalog.catalog_id}'s ids (`perfledger loop state` lists them)",
        )
    return found


def r19_one_method_per_axis(catalog: Catalog, selection: SelectionLike) -> dict[str, CatalogMethod]:
    """R19: exactly one method per axis (compute, memory, latency), each from its axis of the
    run's catalog. Returns axis -> the chosen catalog method."""
    missing = [axis for axis in AXES if axis not in selection]
    if missing:
        raise refuse(
            "R19",
            f"each iteration selects exactly one method per axis; missing: {', '.join(missing)}",
            hint="methods.json needs compute, memory and latency",
        )
    chosen: dict[str, CatalogMethod] = {}
    for axis in AXES:
        method_id = getattr(selection[axis], "chosen")  # noqa: B009
        method_ = _method(catalog, method_id, "R19", f"the {axis} method")
        if method_.axis != axis:
            raise refuse(
                "R19",
                f"{method_id} is a {method_.axis} method, chosen for axis {axis}",
                f"choose a {axis} method for axis {axis}, or choose {method_id} for its own axis {method_.axis}",
            )
        chosen[axis] = method_
    return chosen


def r20_not_selected_before(run: RunView, chosen: Mapping[str, CatalogMethod]) -> None:
    """R20: no method already selected in the run (adopted into the best kernel's lineage by an
    improved iteration) is selected again."""
    again = [m.id for m in chosen.values() if m.id in run.selected]
    if again:
        raise refuse(
            "R20",
            f"{', '.join(again)} was already selected in run {run.setup.run_id}",
            hint="choose the next method in priority order and skip this one as already_selected",
        )


def r21_ineffective_needs_changed_bottleneck(
    run: RunView,
    catalog: Catalog,
    iteration: int,
    chosen: Mapping[str, CatalogMethod],
    selection: SelectionLike,
) -> dict[str, BottleneckEvidence]:
    """R21: a method recorded ineffective is barred unless the bottleneck changed, with
    evidence: ``reuse_metric`` must have changed by at least the catalog's
    ``bottleneck_change_min`` (relative) between the input profile of the iteration that found
    the method ineffective and this iteration's input profile. Returns axis -> the derived
    evidence for each re-selected method."""
    evidence: dict[str, BottleneckEvidence] = {}
    for axis, method_ in chosen.items():
        found_in = run.ineffective.get(method_.id)
        if found_in is None:
            continue
        metric = getattr(selection[axis], "reuse_metric", None)
        if not metric:
            raise refuse(
                "R21",
                f"{method_.id} was recorded ineffective in iteration {found_in}; it may be reused "
                "only when the bottleneck changed",
                hint="set reuse_metric on that axis to a metric that changed between the input "
                "profiles, or skip the method as ineffective",
            )
        before_profile = input_profile(run, found_in)
        after_profile = input_profile(run, iteration)
        before = (
            cat.metric_value(catalog, before_profile.metrics, metric) if before_profile else None
        )
        after = cat.metric_value(catalog, after_profile.metrics, metric) if after_profile else None
        if before is None or after is None:
            raise refuse(
                "R21",
                f"no evidence for reusing {method_.id}: {metric} is not recorded in the input "
                f"profiles of iterations {found_in} and {iteration}",
                f"record {metric} in the profiles of both iterations, or choose another method",
            )
        change = abs(after - before) / abs(before) if before != 0 else (0.0 if after == 0 else 1e9)
        if change < catalog.bottleneck_change_min:
            raise refuse(
                "R21",
                f"{method_.id} was ineffective in iteration {found_in} and {metric} changed by "
                f"{change:.1%} ({before:g} -> {after:g}), less than the "
                f"{catalog.bottleneck_change_min:.0%} that shows a changed bottleneck",
                "choose another method, or reuse it once the metric it addresses has changed by the catalog's threshold",
            )
        evidence[axis] = BottleneckEvidence(
            metric=metric, before=before, after=after, relative_change=float(f"{change:.12g}")
        )
    return evidence


def r22_coupled_groups(catalog: Catalog, chosen: Mapping[str, CatalogMethod]) -> None:
    """R22: at most one method per coupled group per iteration (``memory.multi_stage_pipeline``
    and ``latency.async_pipeline`` are never selected together in the default catalog)."""
    by_group: dict[str, list[str]] = {}
    for method_ in chosen.values():
        if method_.group is not None:
            by_group.setdefault(method_.group, []).append(method_.id)
    for group, members in sorted(by_group.items()):
        if len(members) > 1:
            raise refuse(
                "R22",
                f"{' and '.join(members)} are coupled (group {group!r}) and may not be selected "
                "together",
                hint=catalog.groups.get(group, ""),
            )


def r23_arch_compatible(
    catalog: Catalog, sm_arch: str, chosen: Mapping[str, CatalogMethod]
) -> None:
    """R23: every chosen method's required SM features are in the catalog's feature map for the
    device's architecture (an architecture the catalog does not list has no features)."""
    for method_ in chosen.values():
        lacking = cat.missing_features(catalog, method_, sm_arch)
        if lacking:
            raise refuse(
                "R23",
                f"{method_.id} needs {', '.join(lacking)}, which {sm_arch} does not have",
                hint=f"skip it as arch_incompatible; {sm_arch} has: "
                + ", ".join(catalog.architectures.get(sm_arch, ())),
            )


def _mentions(text: str, method_id: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(method_id)}(?![\w])", text) is not None


def r24_skip_reasons(
    run: RunView,
    catalog: Catalog,
    iteration: int,
    chosen: Mapping[str, CatalogMethod],
    selection: SelectionLike,
    analysis: str,
) -> dict[str, tuple[Skipped, ...]]:
    """R24: the analysis says why each higher-priority method was not chosen.

    Per axis, every method of higher priority than the chosen one is listed exactly once in
    ``skipped`` (and nothing else is), each reason holds against the record, and the analysis
    text names each skipped method id. Reasons are checked: ``already_selected`` (selected in
    the run, R20), ``ineffective`` (recorded ineffective, R21), ``arch_incompatible`` (the
    architecture lacks a required feature, R23), ``coupled_group`` (a method chosen in this
    iteration shares its coupled group, R22: a code added to the issue's six, since R19's strict
    priority and R22 otherwise contradict each other), ``feature_unavailable`` (the detail names a
    required feature), ``no_trigger`` (every trigger is recorded and false on this iteration's
    input profile), ``skip_condition`` (a skip condition is recorded and true on it).

    Returns: axis -> the skipped entries as payload parts.
    """
    profile = input_profile(run, iteration)
    metrics = profile.metrics if profile is not None else {}
    where = f"input profile of iteration {iteration}"
    sm_arch = run.setup.sm_arch
    out: dict[str, tuple[Skipped, ...]] = {}
    for axis, chosen_method in chosen.items():
        higher = [
            m for m in cat.methods_of_axis(catalog, axis) if m.priority < chosen_method.priority
        ]
        entries = list(getattr(selection[axis], "skipped", ()))
        listed = [e.method for e in entries]
        for entry_id in listed:
            if listed.count(entry_id) > 1:
                raise refuse(
                    "R24",
                    f"{axis}: {entry_id} is listed twice as skipped",
                    "list each skipped method once",
                )
        higher_ids = [m.id for m in higher]
        stray = [e for e in listed if e not in higher_ids]
        if stray:
            raise refuse(
                "R24",
                f"{axis}: {', '.join(stray)} is not a higher-priority {axis} method than "
                f"{chosen_method.id}",
                "list as skipped only the methods ranked above the chosen one on that axis",
            )
        unexplained = [m for m in higher_ids if m not in listed]
        if unexplained:
            raise refuse(
                "R24",
                f"{axis}: higher-priority method(s) {', '.join(unexplained)} not chosen without "
                f"a reason (chosen {chosen_method.id}, priority {chosen_method.priority})",
                hint="list each in skipped with already_selected, arch_incompatible, "
                "feature_unavailable, skip_condition, no_trigger or ineffective",
            )
        parts = []
        for entry in entries:
            method_ = _method(catalog, entry.method, "R24", "skipped method")
            _check_reason(
                run, catalog, sm_arch, method_, entry.reason, entry.detail, metrics, where, chosen
            )
            if not _mentions(analysis, method_.id):
                raise refuse(
                    "R24",
                    f"the analysis does not say why {method_.id} was not chosen (it never names it)",
                    hint="analysis.md names each skipped higher-priority method with its reason",
                )
            parts.append(Skipped(method=method_.id, reason=entry.reason, detail=entry.detail))
        out[axis] = tuple(parts)
    return out


def _check_reason(
    run: RunView,
    catalog: Catalog,
    sm_arch: str,
    method_: CatalogMethod,
    reason: str,
    detail: str,
    metrics: Mapping[str, float],
    where: str,
    chosen: Mapping[str, CatalogMethod],
) -> None:
    def false(why: str) -> None:
        raise refuse(
            "R24",
            f"{method_.id} skipped as {reason}, but {why}",
            "skip it for a reason its recorded facts support, or choose it",
        )

    if reason == "already_selected":
        if method_.id not in run.selected:
            false(f"it was not selected earlier in run {run.setup.run_id}")
    elif reason == "ineffective":
        if method_.id not in run.ineffective:
            false("it was never recorded ineffective in this run")
    elif reason == "arch_incompatible":
        if not cat.missing_features(catalog, method_, sm_arch):
            false(f"{sm_arch} has every feature it needs ({', '.join(method_.requires) or 'none'})")
    elif reason == "feature_unavailable":
        if not any(feature in detail for feature in method_.requires):
            false(
                "the detail names none of the features it requires "
                f"({', '.join(method_.requires) or 'it requires none'})"
            )
    elif reason == "no_trigger":
        if not method_.triggers:
            false("the catalog gives it no trigger to be absent")
        results = [(c, cat.evaluate(catalog, c, metrics)) for c in method_.triggers]
        for condition, holds in results:
            if holds:
                value = cat.metric_value(catalog, metrics, condition.metric)
                false(f"its trigger {cat.describe(condition)} holds in the {where} ({value:g})")
        for condition, holds in results:
            if holds is None:
                false(f"{condition.metric} is not recorded in the {where}: it cannot be checked")
    elif reason == "skip_condition":
        if not method_.skips:
            false("the catalog gives it no skip condition")
        results = [cat.evaluate(catalog, c, metrics) for c in method_.skips]
        if not any(results):
            unrecorded = [
                c.metric for c, r in zip(method_.skips, results, strict=True) if r is None
            ]
            why = (
                f"{', '.join(unrecorded)} is not recorded in the {where}"
                if unrecorded
                else f"no skip condition holds in the {where} ("
                + "; ".join(cat.describe(c) for c in method_.skips)
                + ")"
            )
            false(why)
    elif reason == "coupled_group":
        partners = [
            m.id for m in chosen.values() if method_.group is not None and m.group == method_.group
        ]
        if not partners:
            false("no method chosen in this iteration shares a coupled group with it (R22)")
    else:  # pragma: no cover - the request model allows only these codes
        raise BadRequest(f"unknown skip reason {reason!r}", hint=_HINT)


def r25_attempts_left(run: RunView, iteration: int) -> int:
    """R25: a correctness failure may be retried, at most
    :data:`~perfledger.events.loop.MAX_CORRECTNESS_ATTEMPTS` attempts per iteration. Returns the
    number of failed attempts so far."""
    failed = failed_attempts(run, iteration)
    if failed >= MAX_CORRECTNESS_ATTEMPTS:
        raise refuse(
            "R25",
            f"iteration {iteration} of run {run.setup.run_id} already failed its correctness "
            f"check {failed} times (at most {MAX_CORRECTNESS_ATTEMPTS} attempts per iteration)",
            hint="the iteration is closed as failed_correctness; continue with the next one",
        )
    return failed


def check_selection(
    run: RunView, iteration: int, selection: SelectionLike, analysis: str
) -> dict[str, AxisSelection]:
    """Check a selection against R19-R24 for ``iteration`` and return it as payload parts
    (axis -> chosen, skipped with reasons, derived R21 evidence)."""
    catalog = run.setup.catalog
    chosen = r19_one_method_per_axis(catalog, selection)
    r23_arch_compatible(catalog, run.setup.sm_arch, chosen)
    r22_coupled_groups(catalog, chosen)
    r20_not_selected_before(run, chosen)
    evidence = r21_ineffective_needs_changed_bottleneck(run, catalog, iteration, chosen, selection)
    skipped = r24_skip_reasons(run, catalog, iteration, chosen, selection, analysis)
    return {
        axis: AxisSelection(
            chosen=chosen[axis].id, skipped=skipped[axis], reuse_evidence=evidence.get(axis)
        )
        for axis in AXES
    }


def propose_selection(run: RunView, iteration: int) -> tuple[dict[str, dict[str, object]], str]:
    """Scan each axis in strict priority order (R19) and propose the first admissible method,
    every higher-priority one skipped with a reason that the checks of R24 accept: already
    selected (R20), recorded ineffective (R21), missing SM features (R23), coupled with a method
    chosen on an earlier axis this iteration (R22), a skip condition that holds, or triggers
    that are all recorded and false on the input profile. A method whose metrics were not
    recorded is never skipped: without evidence, priority wins.

    Returns: (the selection as methods.json builtins, a draft analysis in Markdown naming each
        skipped method with its reason and the metric values).
    Raises: BadRequest when an axis has no admissible method left.
    """
    catalog = run.setup.catalog
    profile = input_profile(run, iteration)
    metrics = profile.metrics if profile is not None else {}
    chosen: dict[str, CatalogMethod] = {}
    selection: dict[str, dict[str, object]] = {}
    lines = [f"# Iteration {iteration}: methods by strict priority", ""]
    for axis in AXES:
        skipped: list[dict[str, str]] = []
        pick: CatalogMethod | None = None
        for method_ in cat.methods_of_axis(catalog, axis):
            reason, detail = _why_not(run, catalog, method_, chosen, metrics)
            if reason is None:
                pick = method_
                break
            skipped.append({"method": method_.id, "reason": reason, "detail": detail})
        if pick is None:
            raise BadRequest(
                f"no admissible {axis} method is left in catalog {catalog.catalog_id}", hint=_HINT
            )
        chosen[axis] = pick
        selection[axis] = {"chosen": pick.id, "skipped": skipped}
        trigger = "; ".join(
            f"{cat.describe(c)} (recorded {_value(catalog, metrics, c.metric)})"
            for c in pick.triggers
        )
        lines.append(
            f"- {axis}: {pick.id} (priority {pick.priority})"
            + (f", trigger {trigger}" if trigger else "")
        )
        for entry in skipped:
            lines.append(f"  - {entry['method']}: {entry['reason']} ({entry['detail']})")
    return selection, "\n".join(lines) + "\n"


def _value(catalog: Catalog, metrics: Mapping[str, float], name: str) -> str:
    value = cat.metric_value(catalog, metrics, name)
    return "not recorded" if value is None else f"{value:g}"


def _why_not(
    run: RunView,
    catalog: Catalog,
    method_: CatalogMethod,
    chosen: Mapping[str, CatalogMethod],
    metrics: Mapping[str, float],
) -> tuple[str | None, str]:
    if method_.id in run.selected:
        return "already_selected", "selected in an improved iteration"
    if method_.id in run.ineffective:
        return "ineffective", f"not improved in iteration {run.ineffective[method_.id]}"
    lacking = cat.missing_features(catalog, method_, run.setup.sm_arch)
    if lacking:
        return "arch_incompatible", f"{run.setup.sm_arch} lacks {', '.join(lacking)}"
    partners = [m.id for m in chosen.values() if method_.group and m.group == method_.group]
    if partners:
        return "coupled_group", f"coupled with {', '.join(partners)}"
    for condition in method_.skips:
        if cat.evaluate(catalog, condition, metrics):
            return (
                "skip_condition",
                f"{cat.describe(condition)}: {_value(catalog, metrics, condition.metric)}",
            )
    results = [cat.evaluate(catalog, c, metrics) for c in method_.triggers]
    if results and all(r is False for r in results):
        return "no_trigger", "; ".join(
            f"{cat.describe(c)}: {_value(catalog, metrics, c.metric)}" for c in method_.triggers
        )
    return None, ""
