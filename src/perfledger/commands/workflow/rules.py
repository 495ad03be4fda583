"""The workflow rules of SPEC.md section 4 as small, pure checks on the folded state.

Each check is named after its rule (``r1_...``) and raises
:class:`~perfledger.errors.RuleRefused` with ``rule="R<n>"`` when the rule refuses; otherwise it
returns what the decider needs (the Target view, the figures of a claim, ...). The deciders of
:mod:`perfledger.commands.workflow.deciders` compose them; an auditor's replay re-runs the same deciders.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable
from typing import Any

from perfledger.errors import RuleRefused
from perfledger.events.workflow import (
    ORIGINAL,
    R14_MAX_SPAN,
    TAIL_STATISTICS,
    ClaimFigures,
    Reference,
    TargetDefinition,
    TestSet,
)
from perfledger.projections import amdahl
from perfledger.projections.target_kind import measuring_command
from perfledger.projections.verdicts import MIN_PAIRS_PER_CASE_FLOOR
from perfledger.projections.workflow import ExperimentView, TargetView, WorkflowState

#: Scopes of a rejection or preregistered failure, from narrowest to widest (R9, R15).
SCOPE_ORDER = {"implementation": 0, "integration": 1, "mechanism": 2}
#: Strings that mark an unknown value (R2 lineage, R6 versions and units).
UNKNOWN = frozenset({"", "unknown", "?", "n/a", "na", "none", "null", "unspecified"})


def refuse(rule: str, message: str, hint: str) -> RuleRefused:
    """Return the refusal of ``rule`` (``"R7"``) with ``message`` and ``hint``, what the rules
    accept instead (required: a refusal without one is a dead end) (raise it)."""
    return RuleRefused(f"{rule}: {message}", rule=rule, hint=hint)


def is_unknown(value: str | None) -> bool:
    """True when ``value`` is missing or one of the :data:`UNKNOWN` markers (case-insensitive)."""
    return value is None or value.strip().lower() in UNKNOWN


# ------------------------------------------------------------------------------------ R1


def r1_target_frozen(state: WorkflowState, target_id: str) -> TargetView:
    """R1: a Target must be frozen before anything refers to it. Returns its view."""
    target = state.targets.get(target_id)
    if target is None:
        raise refuse(
            "R1",
            f"no Target {target_id!r} is frozen",
            "freeze it first: `perfledger target freeze --request FILE`",
        )
    return target


def r1_target_current(state: WorkflowState, target_id: str) -> TargetView:
    """R1: decisions go to the current Target only; a superseded one is frozen history."""
    target = r1_target_frozen(state, target_id)
    if target.status != "current":
        raise refuse(
            "R1",
            f"Target {target_id!r} was superseded by {target.superseded_by!r}",
            f"use Target {target.superseded_by!r}",
        )
    return target


def r1_target_id_free(state: WorkflowState, target_id: str) -> None:
    """R1: a frozen Target never changes; freezing an existing id again is refused."""
    if target_id in state.targets:
        raise refuse(
            "R1",
            f"Target {target_id!r} is already frozen and never changes",
            "freeze a new Target with `perfledger target supersede`",
        )


# ------------------------------------------------------------------------------------ R2-R4


def r2_min_pairs(min_pairs_per_case: int) -> None:
    """R2/R12: statistical requirements never ask for fewer than 5 valid pairs per case."""
    if min_pairs_per_case < MIN_PAIRS_PER_CASE_FLOOR:
        raise refuse(
            "R2",
            f"min_pairs_per_case {min_pairs_per_case} is below the floor of "
            f"{MIN_PAIRS_PER_CASE_FLOOR} pairs per case",
            f"set statistics.min_pairs_per_case to at least {MIN_PAIRS_PER_CASE_FLOOR}",
        )


def r2_ready(target: TargetView) -> None:
    """R2: formal samples need recorded readiness, and a diagnostic Target takes none."""
    tid = target.definition.target_id
    if target.definition.diagnostic:
        raise refuse(
            "R2",
            f"Target {tid!r} is diagnostic: it binds existing reports only and can never yield "
            "a workload-level result",
            "freeze a non-diagnostic Target for formal samples",
        )
    if target.readiness is None:
        raise refuse(
            "R2",
            f"no readiness is recorded for Target {tid!r}",
            "record it first: `perfledger readiness record --request FILE`",
        )


def r3_metric_audited(target: TargetView) -> None:
    """R3: a metric audit of the primary precedes the first candidate sample."""
    primary = target.definition.primary.name
    if primary not in target.metric_audits:
        raise refuse(
            "R3",
            f"the primary metric {primary!r} of Target {target.definition.target_id!r} has no "
            "metric audit",
            "record one: `perfledger metric-audit record --request FILE`",
        )


def declared_baseline_note(target: TargetView) -> str:
    """R4 (``BaselineRecorded`` schema 2): the words that say a typed baseline is recorded but
    decides nothing, where the Target has one and no measured baseline; else ""."""
    if target.baseline is not None or not target.declared_baseline:  # UNSET is falsy
        return ""
    return (
        " (a typed baseline is recorded as declared and decides nothing: baselines, like "
        "resolutions, come only from measured runs; run `perfledger measure baseline`)"
    )


def r4_baseline_and_resolution(target: TargetView) -> None:
    """R4: the original's baseline and measurement resolution precede candidate experiments."""
    tid = target.definition.target_id
    if target.baseline is None:
        raise refuse(
            "R4",
            f"no measured baseline of the original is recorded for Target {tid!r}"
            + declared_baseline_note(target),
            f"measure it: `perfledger measure baseline --target {tid} ...` (`perfledger status` "
            "names the command of this Target's kind)",
        )
    if target.resolution is None:
        raise refuse(
            "R4", f"no measurement resolution is recorded for Target {tid!r}",
            "measure it, the original against itself: `perfledger measure aa --target "
            f"{tid} --cmd CMD --record`",
        )  # fmt: skip


def r12_already_derived(samples_id: str, what: str) -> RuleRefused:
    """R12: a verdict (``what``: "verdict" or "final audit") is derived once from its samples;
    a second would assert again what the first derived (a retry with the same idempotency key
    returns the first instead, SPEC.md section 2). Returns: the refusal to raise, its hint
    naming how to read the one recorded."""
    read = (
        f"`perfledger verdict explain {samples_id}` or `perfledger status`"
        if what == "verdict"
        else "`perfledger champion show` or `perfledger status`"
    )
    return refuse(
        "R12",
        f"the {what} of samples {samples_id!r} is already recorded (a verdict is derived once "
        "from its samples)",
        f"read it: {read}; new samples (`perfledger status` names the measurement of this "
        "Target's kind) get a verdict of their own",
    )


# ------------------------------------------------------------------------------------ R6, R7


def r6_evidence_known(state: WorkflowState, evidence_ids: Iterable[str]) -> None:
    """R6: cited evidence must have been recorded (with its layer)."""
    missing = sorted({e for e in evidence_ids if e not in state.evidence})
    if missing:
        raise refuse(
            "R6",
            f"unknown evidence {missing}",
            "record it first: `perfledger evidence add`",
        )


#: Applicabilities from the weakest to the strongest claim about the replacement boundary (R6).
_APPLICABILITY_STRENGTH = {"diagnostic": 0, "conservative_upper_bound": 1, "same_boundary": 2}


def r6_cited_as_recorded(state: WorkflowState, cited: Iterable[tuple[str, str]]) -> None:
    """R6: a claim may not cite evidence as more applicable than it was recorded: evidence
    recorded ``diagnostic`` (a knowledge query, a triage of another workload, a report that says
    so) cannot enter a bound by being cited ``same_boundary``. Evidence recorded without an
    applicability (typed facts, older events) is cited as the claim says.

    Args:
        cited: (evidence id, applicability the claim cites) of each claim input; every id known.
    Raises: RuleRefused (R6) naming the evidence and both applicabilities.
    """
    for evidence_id, applicability in cited:
        recorded = state.evidence[evidence_id].applicability
        if recorded is None:
            continue
        if _APPLICABILITY_STRENGTH[applicability] > _APPLICABILITY_STRENGTH[recorded]:
            raise refuse(
                "R6",
                f"evidence {evidence_id!r} was recorded as {recorded} and may not be cited as "
                f"{applicability}",
                f"cite it as {recorded} (diagnostic evidence may only be used_for=context), or "
                "record evidence measured at this replacement boundary",
            )


def r6_bound_inputs(uses: Iterable[tuple[str, str, str]], tail: bool) -> None:
    """R6: only ``same_boundary`` and ``conservative_upper_bound`` evidence may enter an ROI
    bound; a numeric claim needs such evidence for its coverage and its local speedup.

    Args:
        uses: (evidence id, applicability, used_for) of each claim input.
        tail: the primary is a tail statistic (no numeric bound).
    """
    bound_uses = {"coverage", "local_speedup", "added_cost", "exposure"}
    for evidence_id, applicability, used_for in uses:
        if used_for in bound_uses and applicability == "diagnostic":
            raise refuse(
                "R6",
                f"evidence {evidence_id!r} is diagnostic for this replacement boundary and may "
                f"not enter the bound (used for {used_for})",
                "cite it with used_for=context, or obtain same-boundary evidence",
            )
    if not tail:
        backed = {u for _, a, u in uses if a != "diagnostic"}
        for needed in ("coverage", "local_speedup"):
            if needed not in backed:
                raise refuse(
                    "R6",
                    f"no same_boundary or conservative_upper_bound evidence supports the "
                    f"claim's {needed}",
                    # name the field and its values: an agent reading only the schema cannot
                    # guess that each figure needs its own cited entry
                    "each of coverage and local_speedup needs its own entry in the claim's "
                    'evidence, e.g. {"evidence_id": ID, "applicability": "same_boundary" or '
                    f'"conservative_upper_bound", "used_for": "{needed}"}} (used_for: '
                    "coverage, local_speedup, added_cost, exposure or context); cite the "
                    "evidence that measures it (`perfledger evidence add` records it), or take "
                    "the cheapest observation first",
                )


def r7_claim_figures(
    target: TargetDefinition,
    resolution: float,
    *,
    coverage: float | None,
    local_speedup: float | None,
    added_cost: float,
    stated_bound: float | None,
    affected_share: float | None,
    expected: tuple[float, float] | None,
    bound_optional: bool = False,
    improvement_units: bool = False,
) -> ClaimFigures:
    """R7: check an opportunity claim's arithmetic and explicit contradictions; return its
    figures (bound, ``s_min``, ``r_min``, predicted interval).

    Mean/throughput/median primaries: ``coverage`` in (0, 1], ``local_speedup`` > 0,
    ``added_cost`` >= 0. With ``bound_optional`` (claims from ``ExperimentCreated`` schema
    :data:`~perfledger.events.workflow.R7_COMPUTED_BOUND` on) the bound is computed and a
    ``stated_bound`` may be left out; one that is stated must equal ``1/((1-f)+f/s+c)`` within
    :data:`perfledger.projections.amdahl.STATED_BOUND_REL_TOLERANCE` (1e-6). Without it (claims
    recorded earlier, re-checked by their own rule) the stated bound is required, within
    :data:`~perfledger.projections.amdahl.LEGACY_STATED_BOUND_REL_TOLERANCE` (1e-9). Every hint
    prints the bound at full precision, a value that is accepted. The predicted improvement may
    not exceed the bound's (within the same tolerance). Tail primaries (p95, p99):
    exposure reasoning (``affected_share`` in (0, 1]) and a predicted interval instead of a bound,
    and no stated bound.

    With ``improvement_units`` (claims from ``ExperimentCreated`` schema
    :data:`~perfledger.events.workflow.R14_ONE_IMPROVEMENT` on) the predicted interval, the
    minimum effect and the resolution are in the verdict's units (R12: the fraction of time saved
    for a lower-is-better primary), so the cap is ``1 - 1/bound`` there and ``r_min = (m + c)/f``;
    without it (claims recorded earlier) the interval is speedup - 1, capped at ``bound - 1``, and
    the minimum effect is read as speedup - 1.
    """
    direction = target.primary.direction
    m = target.min_effect
    if improvement_units:  # the Amdahl arithmetic works in speedup - 1
        m = amdahl.improvement_to_gain(m, direction)
        resolution = amdahl.improvement_to_gain(resolution, direction)
    if target.primary.statistic in TAIL_STATISTICS:
        if affected_share is None:
            raise refuse(
                "R7",
                f"the primary is a tail statistic ({target.primary.statistic}): the claim must "
                "state its exposure reasoning (affected share, critical path)",
                "state claim.affected_share (the share of requests the change touches, in "
                "(0, 1]) and claim.critical_path",
            )
        if not 0.0 < affected_share <= 1.0:
            raise refuse(
                "R7",
                f"affected share {affected_share} must lie in (0, 1]",
                "state the affected share as a fraction of the requests in (0, 1]",
            )
        if stated_bound is not None:
            raise refuse(
                "R7",
                "no numeric Amdahl bound is valid for a tail primary; state exposure instead",
                "remove stated_bound",
            )
        if expected is None:
            raise refuse(
                "R7",
                "a tail claim must state its expected improvement interval",
                'state claim.expected_improvement {"low": L, "high": H}',
            )
        low, high = expected
        _r7_interval(low, high)
        return ClaimFigures(
            bound=None, s_min=None, r_min=None, reachable=True, below_min_effect=False,
            below_resolution=False, predicted_low=low, predicted_high=high,
        )  # fmt: skip
    if coverage is None or local_speedup is None:
        raise refuse(
            "R7",
            "the claim must state coverage f and local speedup s",
            "state claim.coverage (the share of time the change touches, in (0, 1]) and claim.local_speedup (its speedup there)",
        )
    try:
        bound = amdahl.amdahl_bound(coverage, local_speedup, added_cost)
    except ValueError as exc:
        raise refuse(
            "R7",
            str(exc),
            "coverage must lie in (0, 1], local speedup be positive and added cost non-negative",
        ) from None
    tolerance = (
        amdahl.STATED_BOUND_REL_TOLERANCE
        if bound_optional
        else amdahl.LEGACY_STATED_BOUND_REL_TOLERANCE
    )
    # repr: the shortest text that reads back as this float, so the value shown is accepted
    hint = (
        f'state "stated_bound": {bound!r} (1/((1-f)+f/s+c)); any value within a relative '
        f"{tolerance:g} of it is accepted" + (", or leave it out" if bound_optional else "")
    )
    if stated_bound is None and not bound_optional:
        raise refuse(
            "R7",
            f"the claim must state its end-to-end bound (from its inputs: {bound:.12g})",
            hint,
        )
    if stated_bound is not None and not amdahl.bound_matches(stated_bound, bound, tolerance):
        raise refuse(
            "R7",
            f"stated bound {stated_bound:.12g} does not follow from f={coverage:g}, "
            f"s={local_speedup:g}, c={added_cost:g}: 1/((1-f)+f/s+c) = {bound:.12g} "
            f"(relative tolerance {tolerance:g})",
            hint,
        )
    s_min = amdahl.required_local_speedup(coverage, m, added_cost)
    r_min = amdahl.required_cut(coverage, m, added_cost)
    low, high = expected if expected is not None else (min(0.0, bound - 1.0), bound - 1.0)
    _r7_interval(low, high)
    cap = amdahl.gain_to_improvement(bound - 1.0, direction) if improvement_units else bound - 1.0
    if high > cap + tolerance * abs(cap) + 1e-12:  # abs: a bound below 1 caps below 0
        units = (
            "improvement, the verdict's units"
            if improvement_units
            else "speedup - 1, the bound's units"
        )
        raise refuse(
            "R7",
            f"the expected improvement {high:.6g} exceeds the claim's own bound "
            f"{cap:.6g} ({units}; bound {bound:.6g}x)",
            f'state "high": {cap!r} or less',
        )
    return ClaimFigures(
        bound=bound,
        s_min=None if s_min is None or math.isinf(s_min) else s_min,
        r_min=r_min,
        reachable=s_min is not None and not math.isinf(s_min),
        below_min_effect=bound < 1.0 + m,
        below_resolution=bound < 1.0 + resolution,
        predicted_low=low,
        predicted_high=high,
    )


def _r7_interval(low: float, high: float) -> None:
    if low > high:
        raise refuse(
            "R7", f"expected improvement interval [{low}, {high}] is empty", "state low <= high"
        )


# ------------------------------------------------------------------------------------ R8-R11


def r8_formal_stage_allowed(experiment: ExperimentView, resolution: float) -> None:
    """R8: an experiment whose bound is below the minimum effect or the measured resolution may
    not enter the target stage unless it serves a declared secondary or has a merge plan."""
    created = experiment.created
    figures = created.figures
    below_resolution = figures.bound is not None and figures.bound < 1.0 + resolution
    if (figures.below_min_effect or below_resolution) and not (
        created.serves_secondary or created.merge_plan
    ):
        what = "minimum effect" if figures.below_min_effect else "measured resolution"
        raise refuse(
            "R8",
            f"experiment {created.experiment_id!r}: its bound {figures.bound:.6g} is below the "
            f"{what}; it may not enter the target stage",
            "reject it (`perfledger reject --experiment "
            f"{created.experiment_id} --closes implementation --reason TEXT`); to go on with the "
            "same idea, create a new experiment declaring the secondary it serves or an explicit "
            "merge plan, or a claim whose coverage and local speedup (from a profile) give a "
            "bound above the minimum effect",
        )


def r9_preregistered(rejects: str | None, discriminating: str | None) -> None:
    """R9: an experiment preregisters what its failure rejects; ``mechanism`` names the
    discriminating evidence it needs."""
    if rejects is None:
        raise refuse(
            "R9",
            "the experiment does not preregister its falsification",
            "add preregistration: {rejects: implementation|integration|mechanism, ...}",
        )
    if rejects == "mechanism" and is_unknown(discriminating):
        raise refuse(
            "R9",
            "a failure that would reject the mechanism must name the discriminating evidence "
            "it needs",
            "list the discriminating evidence in preregistration.discriminating_evidence, or preregister a narrower rejection (implementation)",
        )


def r10_upstream_checked(
    state: WorkflowState, component_check: str | None, approach: str, has_component: bool
) -> None:
    """R10: a new kernel, primitive or adapter needs a recorded upstream check; where an
    equivalent exists, the approach is reuse, backport or adapter unless a blocker is recorded."""
    if not has_component:
        return
    if component_check is None or component_check not in state.upstream_checks:
        raise refuse(
            "R10",
            "a new kernel, communication primitive or backend adapter needs a recorded upstream "
            f"check (got {component_check!r})",
            "record it: `perfledger upstream-check record --request FILE`",
        )
    check = state.upstream_checks[component_check]
    if check.equivalent_exists and is_unknown(check.blocker) and approach == "new":
        raise refuse(
            "R10",
            f"upstream check {component_check!r} found an equivalent ({check.equivalent}); the "
            "approach must be reuse, backport or adapter",
            "record a blocker in a new upstream check if the equivalent cannot be used",
        )


def path_in_scope(path: str, glob: str) -> bool:
    """True when the repository-relative ``path`` matches ``glob`` segment by segment: ``*`` and
    ``?`` never cross a ``/``, ``**`` matches any number of segments. A path that is absolute,
    empty, or has ``.``/``..`` segments never matches (it could name anything)."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return False
    return _match_segments(parts, glob.strip("/").split("/"))


def _match_segments(parts: list[str], pattern: list[str]) -> bool:
    if not pattern:
        return not parts
    head, rest = pattern[0], pattern[1:]
    if head == "**":
        return any(_match_segments(parts[i:], rest) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and _match_segments(parts[1:], rest)


#: How scope globs and changed paths match (said in refusals' hints, R1 and R11).
SCOPE_HINT = (
    "scope globs and changed paths are relative to the repository root (no leading '/', no '.' "
    "or '..' segments), e.g. 'src/kernels/*'; they match segment by segment: '*' and '?' stay "
    "within one directory, '**' spans any number of directories"
)


def _not_relative(path: str) -> bool:
    """True when ``path`` is not a plain repository-relative path: empty, absolute (``/x``,
    ``~/x``, ``C:...``, a backslash), or with ``.``/``..``/empty segments."""
    if not path or path.startswith(("/", "~", "\\")) or "\\" in path:
        return True
    if len(path) > 1 and path[0].isalpha() and path[1] == ":":
        return True
    return any(p in ("", ".", "..") for p in path.rstrip("/").split("/"))


def r1_scope_relative(scope: Iterable[str]) -> None:
    """R1: the Target's modification scope holds globs relative to the repository root; an
    absolute glob or one with ``.``/``..`` segments could never match a changed path (R11), and a
    frozen Target never changes, so it is refused at freeze time. Raises: RuleRefused (R1)."""
    bad = [g for g in scope if _not_relative(g)]
    if bad:
        raise refuse(
            "R1",
            f"modification scope globs must be relative to the repository root, got {bad}",
            SCOPE_HINT,
        )


def r11_paths_in_scope(paths: Iterable[str], scope: Iterable[str]) -> None:
    """R11: every path a candidate changes lies inside the Target's modification scope
    (:func:`path_in_scope`: ``*`` stays within one directory, ``..`` never escapes). A changed
    path that is not repository-relative (absolute, ``.``/``..`` segments) is refused as such.
    Raises: RuleRefused (R11)."""
    globs = list(scope)
    paths = list(paths)
    bad = [p for p in paths if _not_relative(p)]
    if bad:
        raise refuse(
            "R11",
            f"changed paths must be relative to the repository root, got {bad}",
            SCOPE_HINT,
        )
    outside = [p for p in paths if not any(path_in_scope(p, g) for g in globs)]
    if outside:
        raise refuse(
            "R11",
            f"changed paths outside the Target's modification scope {globs}: {outside}",
            SCOPE_HINT,
        )


def r11_cases_in_test_set(cases: Iterable[str], test_set: TestSet, source: str) -> None:
    """R11: compared samples measure cases of the Target's test set: no case the readiness's
    test set does not name (where it names its cases), and no more distinct cases than its
    ``case_count``. ``source`` says where the cases come from (a spec file, ``--case``, the
    request), for the message. Raises: RuleRefused (R11) naming the unknown cases."""
    chosen = sorted(set(cases))
    known = set(test_set.cases)
    unknown = [c for c in chosen if known and c not in known]
    if unknown:
        raise refuse(
            "R11",
            f"the cases {unknown} of {source} are not cases of the Target's test set "
            f"{sorted(known)}",
            "measure the Target's own test cases (readiness names them), or freeze a new Target "
            "whose test set has these cases",
        )
    if len(chosen) > test_set.case_count:
        raise refuse(
            "R11",
            f"{source} has {len(chosen)} cases; the Target's test set has {test_set.case_count}",
            "measure every case of the test set (leave --case out)",
        )


def current_reference(state: WorkflowState, target: TargetView) -> Reference:
    """The reference a target-stage comparison must use (R11): the current champion, or the
    original when there is none."""
    if target.champion is not None and target.champion_hash is not None:
        return Reference(
            kind="champion", content_hash=target.champion_hash, experiment_id=target.champion
        )
    assert target.readiness is not None
    return Reference(kind="original", content_hash=target.readiness.original.content_hash)


def is_current_reference(state: WorkflowState, target: TargetView, reference: Reference) -> bool:
    """True when ``reference`` is still the current champion (or original) (R11 stale)."""
    if target.readiness is None:
        return False
    return current_reference(state, target) == reference


# ------------------------------------------------------------------------------------ R13-R15


def r13_current_champion(target: TargetView, expected: str) -> str:
    """R13: choosing a champion is a compare-and-swap against the champion the caller saw.
    Returns the current champion (experiment id or ``original``)."""
    current = target.champion or ORIGINAL
    if expected != current:
        raise refuse(
            "R13",
            f"the current champion of Target {target.definition.target_id!r} is {current!r}, "
            f"not {expected!r}",
            "re-read it (`perfledger champion show`) and decide again",
        )
    return current


def r15_not_rejected(state: WorkflowState, experiment_id: str) -> None:
    """R15: a rejected experiment is closed: nothing measures it again.
    Raises: RuleRefused (R15) with what to do instead."""
    experiment = state.experiments.get(experiment_id)
    if experiment is not None and experiment.rejection is not None:
        raise refuse(
            "R15",
            f"experiment {experiment_id!r} was rejected",
            "a rejected experiment is closed: try another candidate (`perfledger experiment "
            "create --request FILE`); `perfledger rejected` lists what the rejections close",
        )


def r11_screen_before_target(state: WorkflowState, experiment_id: str) -> None:
    """R11: a target stage comes after the experiment's screen, and never after a failed one.
    Raises: RuleRefused (R11) naming the measurement (of the Target's kind) or the rejection the
    rules accept instead."""
    experiment = state.experiments[experiment_id]
    if not experiment.samples.get("screen"):
        target_id = experiment.created.target_id
        raise refuse(
            "R11",
            f"stages are ordered: screen before target ({experiment_id} has no screen samples yet)",
            "measure its screen first: `"
            + measuring_command(state, target_id, "samples.record", experiment_id)
            + "`",
        )
    if experiment.status == "screen_failed":
        raise refuse(
            "R11",
            "the screen rejected this experiment",
            f"reject it (`perfledger reject --experiment {experiment_id} --closes "
            f"{experiment.created.preregistration.rejects} --reason TEXT`) and try another "
            "candidate (`perfledger experiment create --request FILE`)",
        )


def r13_target_stage_hint(state: WorkflowState, experiment_id: str) -> str:
    """R13: what to run when a champion was asked of a screen (or final-audit) result: select
    the experiment's recorded target-stage result if one passed, else measure its target stage
    (with the measuring command of the Target's kind), derive its verdict and select that; for
    an experiment that can no longer be measured (rejected, R15; its screen failed, R11), a new
    experiment instead, never a measurement the rules would refuse."""
    experiment = state.experiments.get(experiment_id)
    targets = list(experiment.samples.get("target", ())) if experiment is not None else []
    passed = [s for s in targets if s in state.verdicts and state.verdicts[s].status == "pass"]
    if passed:
        return f"select its passed target-stage result instead: --samples {passed[-1]}"
    if experiment is None:
        return "`perfledger status` lists the experiments and what the rules accept next"
    if experiment.rejection is not None or experiment.status in ("screen_failed", "failed"):
        why = (
            "was rejected (R15)"
            if experiment.rejection is not None
            else ("failed its screen (R11)" if experiment.status == "screen_failed" else "failed")
        )
        return (
            f"{experiment_id} {why} and cannot become champion: try another candidate "
            "(`perfledger experiment create --request FILE`); `perfledger status` lists what "
            "the rules accept next"
        )  # fmt: skip
    sid = f"{experiment_id}-target"
    if not experiment.samples.get("screen"):
        return (
            f"{experiment_id} has no screen yet (R11: screen before target): "
            f"`{measuring_command(state, experiment.created.target_id, 'samples.record', experiment_id)}`"
            ", then its target stage, its verdict, and select the target result if it passed"
        )
    measure = measuring_command(state, experiment.created.target_id, "samples.record",
                                experiment_id)  # fmt: skip
    return (
        f"measure {experiment_id}'s target stage against the current champion, with a monitor "
        f"(`{measure} --samples {sid}`), derive its verdict (`perfledger verdict record "
        f"--samples {sid}`), then select --samples {sid} if it passed"
    )


def r14_no_pending_reconciliation(target: TargetView, what: str = "new experiment") -> None:
    """R14: an owed reconciliation (a target result outside its claim's interval, or a failed
    screen of a claim predicting at least the minimum effect) blocks ``what`` on the Target
    (a new experiment; a champion selection) until recorded. Raises: RuleRefused (R14) naming
    the experiments owed."""
    if target.pending:
        pending = sorted(target.pending)
        raise refuse(
            "R14",
            f"Target {target.definition.target_id!r} has unreconciled prediction errors: "
            f"experiments {pending} owe a reconciliation (a result contradicted the claim's "
            f"predicted interval); no {what} until they are recorded",
            "record the corrected premise and model: `perfledger reconcile --request FILE` "
            f"(experiment_id {pending[0]!r})",
        )


def r14_interval_missing(claim: Any, direction: str | None = None) -> tuple[str, str]:
    """R14: the (message, hint) of a refused claim that states no expected end-to-end
    improvement interval; the hint shows the field, with the claim's own bound where its
    inputs give one. ``direction``: the primary's, for claims in the verdict's units
    (``ExperimentCreated`` schema :data:`~perfledger.events.workflow.R14_ONE_IMPROVEMENT` on);
    None for the bound's units (speedup - 1) of claims recorded before."""
    bound = None
    if claim.coverage is not None and claim.local_speedup is not None:
        try:
            bound = amdahl.amdahl_bound(claim.coverage, claim.local_speedup, claim.added_cost)
        except ValueError:
            bound = None
    if direction is None:
        units = "in the bound's units (end-to-end speedup - 1: 0.25 = 1.25x)"
        cap = None if bound is None else bound - 1.0
        span = f"1 + high <= {R14_MAX_SPAN:g} (1 + low)"
    else:
        units = (
            "as the verdict measures it, the fraction of time saved ((ref - cand)/ref: 0.2 = 1.25x)"
            if direction == "lower_is_better"
            else "as the verdict measures it, the relative gain ((cand - ref)/ref: 0.25 = 1.25x)"
        )
        cap = None if bound is None else amdahl.gain_to_improvement(bound - 1.0, direction)
        span = f"the upper end's speedup at most {R14_MAX_SPAN:g} times the lower end's"
    upper = f"{cap:.6g}" if cap is not None else "HIGH"
    return (
        "the claim states no expected end-to-end improvement interval (claim."
        "expected_improvement): every claim states one, so that a result outside it owes a "
        "reconciliation",
        f'add "expected_improvement": {{"low": LOW, "high": {upper}}} to the claim, {units}; '
        "high may not exceed the bound's"
        + (f" = {upper}" if cap is not None else "")
        + f"; low >= 0 for a predicted gain and {span}",
    )


def r14_interval_informative(low: float, high: float, direction: str | None = None) -> None:
    """R14 (``ExperimentCreated`` schema :data:`~perfledger.events.workflow.R14_INFORMATIVE_INTERVAL`
    on): a claim's predicted interval ``[low, high]`` must be narrow enough that a wrong
    prediction shows: finite, each end a speedup above 0; a claim predicting a gain (``high > 0``)
    may not include a loss (``low >= 0``); and the upper end's speedup is at most
    :data:`~perfledger.events.workflow.R14_MAX_SPAN` times the lower end's. Any prediction can be
    stated so (a point interval is accepted); a result outside it owes a reconciliation, not a
    penalty. The upper end's cap by the claim's own bound is R7's (:func:`r7_claim_figures`).

    ``direction`` None: the interval is in the bound's units (speedup - 1; claims recorded before
    ``ExperimentCreated`` schema :data:`~perfledger.events.workflow.R14_ONE_IMPROVEMENT`), so
    ``low > -1`` and ``(1 + high) <= R14_MAX_SPAN * (1 + low)``. Otherwise it is in the verdict's
    units for a primary of that direction (R12): for lower-is-better, the fraction of time saved
    (``high < 1``; speedups ``1/(1 - g)``), for higher-is-better the relative gain (as before).
    Raises: RuleRefused (R14) with the narrowest change that is accepted."""
    lower = direction == "lower_is_better"

    def speedup(g: float) -> float:
        return 1.0 / (1.0 - g) if lower else 1.0 + g

    def improvement(s: float) -> float:
        return 1.0 - 1.0 / s if lower else s - 1.0

    finite = math.isfinite(low) and math.isfinite(high)
    if not finite or (high >= 1.0 if lower else low <= -1.0):
        ends = (
            "the upper end below 1 (saving all of the time is not a speedup)"
            if lower
            else "the lower end above -1 (a speedup above 0)"
        )
        raise refuse(
            "R14",
            f"expected improvement interval [{low}, {high}] is not a prediction: both ends must "
            f"be finite, {ends}",
            f"state a finite interval with {ends}",
        )
    floor = improvement(speedup(high) / R14_MAX_SPAN)  # lowest lower end the span allows
    if high > 0.0:
        floor = max(floor, 0.0)
    if low < floor - 1e-12 * (1.0 + abs(floor)):
        why = (
            "a claim predicting a gain may not include a loss"
            if high > 0.0 and low < 0.0
            else f"its upper speedup {speedup(high):.6g}x is more than {R14_MAX_SPAN:g} times its "
            f"lower {speedup(low):.6g}x"
        )
        raise refuse(
            "R14",
            f"expected improvement interval [{low:.6g}, {high:.6g}] is too wide to be "
            f"contradicted ({why}): a claim states what it expects, so that a result outside it "
            "owes a reconciliation",
            f'state "low": {floor!r} or more with this high, or lower "high"; a result outside '
            "the interval only asks for `perfledger reconcile`",
        )


def r17_explanations(state: WorkflowState, samples_id: str) -> tuple[set[int], list[str]]:
    """R17: the pair indices of ``samples_id`` whose foreign activity was explained after the
    samples (``ActivityExplained``), and one note per explanation for the verdict (who, which
    pairs, why), in the order they were recorded."""
    explained: set[int] = set()
    notes = []
    for e in state.explanations.get(samples_id, []):
        explained.update(e.pairs)
        notes.append(
            f"R17: foreign activity in pair(s) {list(e.pairs)} explained after the samples by "
            f"{e.explained_by}: {e.explanation}"
        )
    return explained, notes


def r17_unexplained_pairs(samples: Any, explained: set[int], typed_counts: bool = True) -> int:
    """R17: how many pairs of ``samples`` (a SamplesRecorded) overlap foreign activity that no
    later explanation (``explained``, pair indices) explains, nor, where ``typed_counts`` (the
    rule before :data:`~perfledger.events.workflow.R17_SAMPLES_TYPED_EXPLANATION_IGNORED`), an
    ``explained`` text typed into the pair's monitor record."""
    return sum(
        1
        for index, pair in enumerate(samples.pairs)
        if pair.monitor is not None
        and pair.monitor.foreign_activity
        and (not typed_counts or is_unknown(pair.monitor.explained))
        and index not in explained
    )


def r15_rejection_scope(
    experiment: ExperimentView,
    closes: str,
    local_proxy: bool,
    discriminating_ids: list[str],
    state: WorkflowState,
) -> None:
    """R15: a rejection may not close more than its evidence supports: no wider than the
    preregistered failure, and a mechanism only with the discriminating evidence obtained,
    never from a local proxy."""
    prereg = experiment.created.preregistration
    if SCOPE_ORDER[closes] > SCOPE_ORDER[prereg.rejects]:
        raise refuse(
            "R15",
            f"experiment {experiment.created.experiment_id!r} preregistered that a failure "
            f"rejects at most the {prereg.rejects}; it cannot close the {closes}",
            f"close at most the {prereg.rejects} (--closes {prereg.rejects})",
        )
    if closes == "mechanism":
        if local_proxy:
            raise refuse(
                "R15",
                "a local proxy cannot close a mechanism",
                "close the implementation (--closes implementation), or measure the workload",
            )
        if not discriminating_ids:
            raise refuse(
                "R15",
                "closing a mechanism needs the preregistered discriminating evidence "
                f"({prereg.discriminating_evidence!r}) to have been obtained",
                "cite it in discriminating_evidence_ids",
            )
        missing = sorted({e for e in discriminating_ids if e not in state.evidence})
        if missing:
            raise refuse(
                "R15",
                f"the discriminating evidence {missing} is not recorded",
                "record that evidence first (`perfledger evidence add --request FILE`)",
            )
        r15_discriminating_obtained(experiment, discriminating_ids, state)


def r15_discriminating_obtained(
    experiment: ExperimentView, discriminating_ids: list[str], state: WorkflowState
) -> None:
    """R15: closing a mechanism needs the experiment to have *preregistered* what discriminating
    evidence it needs (found by audit: an experiment written around R9 could lack it) and to have
    *obtained* it: evidence beyond the claim's own inputs (the premise that motivated the
    experiment cannot also refute its mechanism), recorded for this Target or for none."""
    created = experiment.created
    if is_unknown(created.preregistration.discriminating_evidence):
        raise refuse(
            "R15",
            f"experiment {created.experiment_id!r} did not preregister the discriminating "
            "evidence a mechanism rejection needs",
            "close the implementation instead, or run a new experiment that preregisters it",
        )
    premise = sorted({e.evidence_id for e in created.claim.evidence} & set(discriminating_ids))
    if premise:
        raise refuse(
            "R15",
            f"evidence {premise} is an input of the experiment's own claim, not discriminating "
            "evidence obtained by it",
            "record the discriminating measurement (`perfledger evidence add`) and cite that",
        )
    foreign = sorted(
        e
        for e in discriminating_ids
        if state.evidence[e].target_id not in (None, created.target_id)
    )
    if foreign:
        raise refuse(
            "R15",
            f"the discriminating evidence {foreign} belongs to another Target",
            "cite evidence recorded for this Target (`perfledger evidence list`)",
        )
