"""R4: a resolution decides verdicts only when perfledger measured it.

From ``ResolutionEstimated`` schema :data:`~perfledger.events.workflow.R4_MEASURED_RESOLUTION`
a ``resolution.record`` request that names an attached A/A raw table (``raw_table``, written by
``perfledger measure aa --record`` as ``resolution.json``) has its figures re-derived from that
table, here, at record time and again at audit (the decider reads the attachment through
:attr:`perfledger.commands.workflow.deciders.DecisionContext.artifact`); a request without one
is recorded as ``declared`` and decides nothing (a verdict judged against it cannot pass).

What the table must hold (:func:`rederive_aa`):

- ``binding``: the Target and the original's content hash the A/A measured, equal to the
  request's Target and its readiness's original (a table of another Target is not this one's).
- ``kind: workload`` tables (``table``: the per-call rows of the driver or worker protocol): the
  valid pairs are the paired rounds whose two calls are ``ok`` and ``correct`` with values of the
  primary; the figures are :func:`perfledger.projections.verdict_cases.aa_resolution` of them
  with the Target's statistic and the readiness's aggregation, resamples and confidence. Where
  the primary is observed (``wall_time``, ``cpu_time``), every row's value is its own clock
  (``wall_s``/``cpu_s`` in the primary's unit, ``wall_s = end_s - start_s``) and every output
  was judged, as for measured samples (R5).
- ``cases`` tables (kernel: per case, the harness comparisons' ``valid`` bit and statistics):
  the figures of :func:`perfledger.kernels.harness.harness.resolution_from_aa`, per case.
- A case whose A/A pairs show the same values on both sides in every pair measured no noise
  (two real runs of a program never time alike to the nanosecond): refused; so are calls
  copied to lengthen the A/A (a call id twice, or two calls whose clock readings overlap).

What this proves, and what it does not: a typed figure cannot pass for a measured one, a table
cannot be re-used for another Target, and figures that do not follow from their table are
refused. A library caller that writes a table of invented clock readings consistent with itself
is not caught here (provenance is not a signature; docs/verdicts.md).

Imports: the standard library, events, projections; numpy/scipy inside the functions that need
them (kept off the CLI's start-up path).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from typing import Any

from perfledger.commands.workflow.raw_table import observed_rows_mismatch, wall_consistent
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.projections.verdict_cases import aa_resolution
from perfledger.projections.verdicts import Pair, median

#: The flags that make a kernel A/A comparison invalid (as
#: :attr:`perfledger.kernels.harness.harness.Comparison.valid`).
_INVALIDATING = ("side_work", "recheck", "clock", "digest", "cross_check", "pause", "sched")


class AaTableMismatch(ValueError):
    """An A/A raw table that does not re-derive a resolution (the message says why)."""


def aa_binding(target_id: str, original_hash: str) -> dict[str, str]:
    """What binds an A/A raw table to the Target whose original it measured (R4)."""
    return {"target_id": target_id, "original_hash": original_hash}


def rederive_aa(
    raw: bytes, *, target: Any, primary: Any, statistics: Any, original_hash: str
) -> tuple[float, dict[str, float], int]:
    """Re-derive an A/A's figures from its raw table (module docstring; R4).

    Args:
        raw: the attached table's bytes (JSON).
        target: the Target's id; primary: its primary metric (``name``, ``unit``, ``direction``,
            ``statistic``); statistics: the readiness's ``Statistics`` (aggregation, resamples,
            confidence); original_hash: the readiness's original content hash.
    Returns: ``(resolution, per_case, repeats)``: ratios, and the number of valid A/A pairs
        (workload) or comparisons (kernel).
    Raises: AaTableMismatch with the reason.
    """
    table = bound_table(raw, target, original_hash, "the A/A raw table", AaTableMismatch)
    if isinstance(table.get("table"), list):
        return _workload(table["table"], primary, statistics)
    if isinstance(table.get("cases"), dict):
        return _kernel(table["cases"])
    raise AaTableMismatch("the A/A raw table holds neither a per-call table nor kernel cases")


def aa_case_medians(raw: bytes, primary: Any) -> dict[str, float]:
    """Per test case, the median of a workload A/A table's per-call medians of the ``primary``
    (its name; both sides, valid and correct non-warm-up calls), in its unit: the original's
    interleaved figure the reference watch compares formal stages with (R11,
    :data:`~perfledger.events.workflow.R11_WATCHED_AGAINST_AA`). Empty for a kernel A/A table
    or one that does not parse (:func:`rederive_aa` has judged the table already)."""
    try:
        table = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return {}
    rows = table.get("table") if isinstance(table, dict) else None
    if not isinstance(rows, list):
        return {}
    per_case: dict[str, list[float]] = {}
    for row in rows:
        if not isinstance(row, dict) or row.get("warmup") or not isinstance(row.get("pair"), int):
            continue
        if not (row.get("ok") and row.get("correct")):
            continue
        values = _values(row, primary.name)
        if values:
            per_case.setdefault(str(row.get("case")), []).append(median(values))
    return {case: median(medians) for case, medians in sorted(per_case.items())}


def _workload(
    rows: list[Any], primary: Any, statistics: Any
) -> tuple[float, dict[str, float], int]:
    """The figures of a workload A/A table (driver or worker protocol rows)."""

    if not all(isinstance(r, dict) for r in rows):
        raise AaTableMismatch("the A/A per-call table has rows that are not objects")
    _refuse_copied_calls(rows)
    if primary.name in OBSERVED_METRICS:  # R5: an observed value is its own row's clock
        found = observed_rows_mismatch({primary.name: primary.unit}, rows)
        if found is not None:
            raise AaTableMismatch(f"the A/A per-call table: {found}")
        torn = [r.get("call_id") for r in rows if not wall_consistent(r)]
        if torn:
            raise AaTableMismatch(
                f"the A/A per-call table: call {torn[0]!r}: its wall_s is not end_s - start_s"
            )
    rounds: dict[int, dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row.get("warmup") or not isinstance(row.get("pair"), int):
            continue
        rounds.setdefault(row["pair"], {})[str(row.get("subject"))] = row
    pairs = []
    for _n, r in sorted(rounds.items()):
        ref, cand = r.get("ref"), r.get("cand")
        if ref is None or cand is None or ref.get("case") != cand.get("case"):
            continue
        values = [_values(side, primary.name) for side in (ref, cand)]
        if all(side.get("ok") and side.get("correct") for side in (ref, cand)) and all(values):
            pairs.append(Pair(str(ref["case"]), tuple(values[0]), tuple(values[1])))
    _refuse_identical(
        {c: [p.ref == p.cand for p in pairs if p.case == c] for c in {p.case for p in pairs}}
    )
    try:
        resolution, per_case = aa_resolution(
            pairs,
            direction=primary.direction,
            statistic=primary.statistic,
            aggregation=statistics.aggregation,
            resamples=statistics.resamples,
            confidence=statistics.confidence,
        )
    except ValueError as exc:
        raise AaTableMismatch(f"the A/A per-call table derives no resolution: {exc}") from None
    return resolution, per_case, len(pairs)


def bound_table(
    raw: bytes, target_id: str, original_hash: str, what: str, error: type[ValueError]
) -> dict[str, Any]:
    """A measured raw table (``what``: how messages name it) as a JSON object bound to
    ``target_id``'s original ``original_hash`` (its ``binding``, :func:`aa_binding`).
    Raises: ``error`` when it is not JSON, not an object, or bound to something else."""
    try:
        table = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{what} is not JSON ({exc})") from None
    if not isinstance(table, dict):
        raise error(f"{what} is not a JSON object")
    binding = aa_binding(target_id, original_hash)
    if table.get("binding") != binding:
        raise error(
            f"{what} is bound to {table.get('binding')!r}, not to this Target's "
            f"original {binding!r}"
        )
    return table


def _refuse_copied_calls(rows: list[dict[str, Any]]) -> None:
    """Calls copied to lengthen an A/A (more repeats, a smaller resolution, R4): every call id
    appears once, and calls with clock readings (``start_s``, ``end_s``) do not overlap, as
    the calls of one run never do."""
    ids = [r.get("call_id") for r in rows]
    twice = sorted({str(i) for i in ids if ids.count(i) > 1})
    if twice:
        raise AaTableMismatch(f"the A/A per-call table repeats call(s) {twice[:3]}")
    timed = sorted(
        (float(r["start_s"]), float(r["end_s"]), str(r.get("call_id")))
        for r in rows
        if isinstance(r.get("start_s"), int | float) and isinstance(r.get("end_s"), int | float)
    )
    for (_s0, end, first), (start, _e1, second) in itertools.pairwise(timed):
        if start < end:
            raise AaTableMismatch(
                f"the A/A per-call table's calls {first!r} and {second!r} overlap in time; one "
                "run's calls follow each other"
            )


def _values(row: Mapping[str, Any], metric: str) -> list[float]:
    """A row's values of ``metric`` (empty when absent or not all positive finite numbers)."""
    values = (row.get("metrics") or {}).get(metric) or []
    ok = all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in values
    )
    return [float(v) for v in values] if ok else []


def _kernel(cases: Mapping[str, Any]) -> tuple[float, dict[str, float], int]:
    """The figures of a kernel A/A table: per case, its valid comparisons' statistics."""
    from perfledger.derive.stats import aa_comparisons_resolution  # noqa: PLC0415 (numpy via perfledger.derive.stats)

    per_case: dict[str, float] = {}
    repeats = 0
    same: dict[str, list[bool]] = {}
    for case, entry in cases.items():
        comps = entry.get("comparisons") if isinstance(entry, dict) else None
        if not isinstance(comps, list):
            raise AaTableMismatch(f"case {case!r}: no comparisons in the A/A raw table")
        stats = [
            c["stats"]
            for c in comps
            if isinstance(c, dict)
            and c.get("valid") is True
            and isinstance(c.get("stats"), dict)
            and not any(str(f).startswith(_INVALIDATING) for f in c.get("flags") or ())
        ]
        if not stats:
            raise AaTableMismatch(f"case {case!r}: no valid A/A comparison")
        try:
            lows = [float(s["ci_low"]) for s in stats]
            highs = [float(s["ci_high"]) for s in stats]
            ratios = [float(s["median_ratio"]) for s in stats]
        except (KeyError, TypeError, ValueError):
            raise AaTableMismatch(f"case {case!r}: comparisons without their statistics") from None
        if not all(r > 0 and math.isfinite(r) for r in ratios):
            raise AaTableMismatch(f"case {case!r}: a median ratio that is not positive")
        per_case[str(case)] = aa_comparisons_resolution(lows, highs, ratios)[0]
        repeats += len(stats)
        same[str(case)] = [
            lo == hi == r == 1.0 for lo, hi, r in zip(lows, highs, ratios, strict=True)
        ]
    if not per_case:
        raise AaTableMismatch("the A/A raw table has no case")
    _refuse_identical(same)
    return max(per_case.values()), per_case, repeats


def _refuse_identical(same_by_case: Mapping[str, list[bool]]) -> None:
    """A case whose every A/A pair timed both sides alike measured no noise (R4)."""
    flat = sorted(c for c, same in same_by_case.items() if same and all(same))
    if flat:
        raise AaTableMismatch(
            f"case(s) {flat}: every A/A pair shows the same values on both sides; two runs of a "
            "program never time alike, so this table measured no noise"
        )


__all__ = ["AaTableMismatch", "aa_binding", "rederive_aa"]
