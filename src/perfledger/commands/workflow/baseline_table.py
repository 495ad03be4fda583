"""R4: a baseline decides only when perfledger measured it (issue 34: baselines, like
resolutions, come only from measured runs).

From ``BaselineRecorded`` schema :data:`~perfledger.events.workflow.R4_MEASURED_BASELINE` a
``baseline.record`` request that names an attached raw table (``raw_table``, written by
``perfledger measure baseline`` as ``baseline.json``) has its values re-derived from that table,
here, at record time and again at audit (the decider reads the attachment through
:attr:`perfledger.commands.workflow.deciders.DecisionContext.artifact`); a request without one
is recorded as ``declared`` and decides nothing (the Target's baseline stays the latest
measured one, :attr:`perfledger.projections.workflow.TargetView.baseline`).

What the table must hold (:func:`rederive_baseline`), read by the Target's kind, never by what
the table says of itself:

- ``binding``: the Target and the original's content hash it measured, equal to the request's
  Target and its readiness's original (a table of another Target is not this one's).
- a kernel Target: ``table`` is the harness's comparisons of the REFERENCE against itself, per
  case (``{"case", "flags", "rows": [{"ref_s", ...}]}``); every row's ``ref_s`` (seconds) in
  the primary's unit is one value, call id ``CASE-K-I`` (K: the case's K-th comparison).
- a workload Target whose primary is observed (``wall_time``, ``cpu_time``): the worker
  protocol's per-call rows; every non-warm-up row's value is its own clock in the primary's unit
  (``wall_s = end_s - start_s``) and every output was judged and none failed, as for measured
  samples (R5); ``measure baseline`` runs two workers of the original as a formal stage runs
  its subjects, so every timed call of both is one value.
- any other workload Target: the self-timed driver's per-call rows, each ``ok`` and
  ``correct``; every value of the primary a call printed is one value, call id
  ``CALL_ID-I``.
- In a workload table every call id appears once and no two calls overlap in time (calls
  copied to lengthen the baseline are refused).

What this proves, and what it does not: a typed figure cannot pass for a measured one, a table
cannot be re-used for another Target, and values that do not follow from their table are
refused. A library caller that writes a table of invented clock readings consistent with itself
is not caught here (provenance is not a signature; docs/verdicts.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from perfledger.commands.workflow.aa_table import AaTableMismatch, bound_table
from perfledger.commands.workflow.aa_table import _refuse_copied_calls as refuse_copied_calls
from perfledger.commands.workflow.foreign_share import (
    FOREIGN_SHARE_LIMIT,
    over_limit,
    windows_share,
)
from perfledger.commands.workflow.raw_table import observed_rows_mismatch, wall_consistent
from perfledger.commands.workflow.rules import refuse
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.projections.target_kind import target_kind

#: The hint of every refusal of a baseline that claims to be measured.
MEASURE_HINT = "record what `perfledger measure baseline --target T ...` measured, unchanged"


class BaselineTableMismatch(ValueError):
    """A baseline raw table that does not re-derive the baseline (the message says why)."""


def rederive_baseline(
    raw: bytes, *, target_id: str, original_hash: str, primary: Any, kernel: bool
) -> tuple[list[float], list[str], list[str]]:
    """Re-derive a baseline's values from its raw table (module docstring; R4).

    Args:
        raw: the attached table's bytes (JSON).
        target_id: the Target; original_hash: its readiness's original content hash.
        primary: the Target's primary metric (``name``, ``unit``).
        kernel: whether the Target is a kernel Target (its readiness driver is the harness).
    Returns: ``(values, cases, call_ids)``, one entry per value, in the primary's unit (a case
        is "" where a workload row names none).
    Raises: BaselineTableMismatch with the reason.
    """
    table = bound_table(
        raw, target_id, original_hash, "the baseline raw table", BaselineTableMismatch
    )
    rows = table.get("table")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        raise BaselineTableMismatch("the baseline raw table holds no per-call rows")
    if kernel:
        return _kernel(rows, primary.unit)
    try:
        refuse_copied_calls(rows)
    except AaTableMismatch as exc:
        raise BaselineTableMismatch(str(exc).replace("A/A", "baseline")) from None
    if primary.name in OBSERVED_METRICS:
        return _observed(rows, primary)
    return _driver(rows, primary.name)


def _observed(rows: list[dict[str, Any]], primary: Any) -> tuple[list[float], list[str], list[str]]:
    """The worker protocol's rows: each value is the row's own clock (R5)."""
    timed = [r for r in rows if not r.get("warmup")]
    found = observed_rows_mismatch({primary.name: primary.unit}, timed)
    if found is not None:
        raise BaselineTableMismatch(f"the baseline per-call table: {found}")
    torn = [r.get("call_id") for r in timed if not wall_consistent(r)]
    if torn:
        raise BaselineTableMismatch(
            f"the baseline per-call table: call {torn[0]!r}: its wall_s is not end_s - start_s"
        )
    values, cases, call_ids = [], [], []
    for row in timed:
        if row.get("correct") is False:  # R5: an original that fails has no baseline
            raise BaselineTableMismatch(
                f"the baseline per-call table: call {row.get('call_id')!r} failed its output "
                "check; an original that fails has no baseline (R5)"
            )
        got = _values(row, primary.name)
        if len(got) != 1:
            raise BaselineTableMismatch(
                f"the baseline per-call table: call {row.get('call_id')!r} has no value of "
                f"{primary.name!r}"
            )
        values.append(got[0])
        cases.append(_case(row))
        call_ids.append(str(row.get("call_id")))
    return values, cases, call_ids


def _driver(rows: list[dict[str, Any]], metric: str) -> tuple[list[float], list[str], list[str]]:
    """The self-timed driver's rows: every call ok and correct, its values of ``metric``."""
    values, cases, call_ids = [], [], []
    for row in rows:
        call = row.get("call_id")
        if not (row.get("ok") is True and row.get("correct") is True):
            raise BaselineTableMismatch(
                f"the baseline per-call table: call {call!r} failed or was not correct; an "
                "original that fails has no baseline (R5)"
            )
        got = _values(row, metric)
        if not got:
            raise BaselineTableMismatch(
                f"the baseline per-call table: call {call!r} has no value of {metric!r}"
            )
        values += got
        cases += [_case(row)] * len(got)
        call_ids += [f"{call}-{i}" for i in range(len(got))]
    return values, cases, call_ids


def _kernel(rows: list[dict[str, Any]], unit: str) -> tuple[list[float], list[str], list[str]]:
    """The harness's comparisons of the REFERENCE against itself, per case."""
    scale = UNITS_PER_SECOND.get(unit)
    if scale is None:
        raise BaselineTableMismatch(f"kernel baselines are times; unit {unit!r} is not one")
    values: list[float] = []
    cases: list[str] = []
    call_ids: list[str] = []
    seen: dict[str, int] = {}
    for entry in rows:
        case, timed = _case(entry), entry.get("rows")
        if not isinstance(timed, list) or not timed:
            raise BaselineTableMismatch(f"case {case!r}: a comparison without timed rows")
        k = seen.get(case, 0)
        seen[case] = k + 1
        for i, row in enumerate(timed):
            ref_s = row.get("ref_s") if isinstance(row, dict) else None
            if not _positive(ref_s):
                raise BaselineTableMismatch(f"case {case!r}: a row without a positive ref_s")
            values.append(float(ref_s) * scale)
            cases.append(case)
            call_ids.append(f"{case}-{k}-{i}")
    return values, cases, call_ids


def _case(row: Mapping[str, Any]) -> str:
    """A row's case ("" where the row names none: its values then carry no case)."""
    case = row.get("case")
    return "" if case is None else str(case)


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def _values(row: Mapping[str, Any], metric: str) -> list[float]:
    """A row's values of ``metric`` (empty when absent or not all positive finite numbers)."""
    values = (row.get("metrics") or {}).get(metric) or []
    return [float(v) for v in values] if all(_positive(v) for v in values) else []


def measured_values(
    target: Any, req: Any, artifact: Any
) -> tuple[list[float], list[str], list[str]]:
    """R4: a baseline that claims to be measured (``req.raw_table`` named) is what its attached
    raw table re-derives: the same values, cases and call ids. ``target``: the Target's view;
    ``artifact``: the decision's attachment reader (None: nothing attached).

    Returns: ``(values, cases, call_ids)`` as the table derives them.
    Raises: RuleRefused (R4) naming the table's fault or the difference.
    """
    raw = artifact(req.raw_table) if artifact is not None else None
    if raw is None:
        raise refuse(
            "R4",
            f"the baseline names the raw table {req.raw_table!r}, which is not attached",
            "measure and record it: `perfledger measure baseline --target T ...`",
        )
    readiness = target.readiness
    try:
        derived = rederive_baseline(
            raw,
            target_id=target.definition.target_id,
            original_hash=readiness.original.content_hash,
            primary=target.definition.primary,
            kernel=target_kind(target) == "kernel",
        )
    except BaselineTableMismatch as exc:
        raise refuse(
            "R4", f"the baseline cannot be re-derived from its raw table: {exc}", MEASURE_HINT
        ) from None
    differs = same_values(derived, list(req.values), list(req.cases), list(req.call_ids))
    if differs is not None:
        raise refuse(
            "R4",
            f"the baseline is not what its raw table derives: the request has {differs}",
            MEASURE_HINT,
        )
    return derived


def baseline_windows_rule(name: str, artifact: Any) -> None:
    """R17 (``BaselineRecorded`` schema :data:`~perfledger.events.workflow.R17_BASELINE_WINDOWS`
    on): the monitor windows a measured baseline's raw table records (``monitor.windows``, as
    ``perfledger measure baseline`` of an observed primary writes them) are judged again by the
    decider, at record time and on replay, so that a baseline recorded through the library, or
    a table edited by hand, cannot skip the application layer's refusal: foreign activity in
    more than :data:`~perfledger.commands.workflow.foreign_share.FOREIGN_SHARE_LIMIT` of them
    refuses it, whatever the readiness declares. No review can lift it (a refused baseline has
    no event to review). A table that records no windows (the self-timed driver's, a kernel
    harness's: measured without a monitor) is not judged here. ``name``: the attached table's
    name; ``artifact``: the decision's attachment reader.

    Raises: RuleRefused (R17) with the figures.
    """
    raw = artifact(name) if artifact is not None else None
    try:
        table = json.loads(raw) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        table = None  # measured_values refused such a table already
    monitor = table.get("monitor") if isinstance(table, dict) else None
    if monitor is None:
        return
    windows = monitor.get("windows") if isinstance(monitor, dict) else None
    if not isinstance(windows, list):
        raise refuse(
            "R17",
            "the baseline raw table's monitor record holds no list of windows",
            MEASURE_HINT,
        )
    touched, total = windows_share(windows)
    if over_limit(touched, total):
        raise refuse(
            "R17",
            f"the baseline raw table's monitor saw foreign activity in {touched} of {total} "
            f"windows ({100 * touched / total:.0f} % > {100 * FOREIGN_SHARE_LIMIT:.0f} %): the "
            "baseline would carry another process's load; no readiness setting waives this",
            "measure the baseline again on a quieter host (`perfledger measure baseline`)",
        )


def same_values(
    derived: tuple[list[float], list[str], list[str]],
    values: list[float],
    cases: list[str],
    call_ids: list[str],
) -> str | None:
    """Whether a request's ``values`` (and its ``cases``, ``call_ids`` where given) are the
    ``derived`` ones: None when they are, else what differs."""
    d_values, d_cases, d_ids = derived
    if len(values) != len(d_values) or not all(
        math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        for a, b in zip(values, d_values, strict=True)
    ):
        return f"{len(values)} value(s) that are not the table's {len(d_values)}"
    if list(cases) != (d_cases if any(d_cases) else []):
        return "cases that are not the table's"
    if call_ids and list(call_ids) != d_ids:
        return "call ids that are not the table's"
    return None


__all__ = [
    "MEASURE_HINT",
    "BaselineTableMismatch",
    "baseline_windows_rule",
    "measured_values",
    "rederive_baseline",
    "same_values",
]
