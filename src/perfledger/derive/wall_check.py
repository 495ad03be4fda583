"""Self-reported times checked against the workload driver's wall clock (SPEC.md section 5,
"Workload driver"; R5, R12, R13). A pure function of recorded samples: ``samples.record``
derives it, the auditor re-derives it.

A workload command reports its own times; the driver times every call itself
(:attr:`perfledger.kernels.workload.driver.CallResult.wall_s`, from before the command starts to when its
exit is seen, a clock the command cannot reach). Whatever a command reports, the time it saves
must be spent less on the wall: a candidate that is really faster saves wall time too, one that
reports less time than it spends does not.

The rule (method :data:`METHOD`), for each time-like metric (unit ``s``, ``ms``, ``us``/``µs``,
``ns``) and each test case, over the pairs where both calls were correct and timed by the driver:

- a call's *reported total* is the sum of its values of the metric, in seconds (a list of values
  is taken as the call's consecutive samples);
- per pair ``i``: reported saving ``r_i = ref total - cand total``, wall saving
  ``w_i = ref wall_s - cand wall_s``, excess ``e_i = r_i - w_i`` (for a higher-is-better time
  metric the candidate's favour is the other sign: ``e_i = w_i - r_i``);
- ``E = median(e_i)``; the wall clock's *resolution* on these pairs is
  ``res = max(FLOOR_S, K * 1.2533 * 1.4826 * MAD(e) / sqrt(n))`` (``K`` standard errors of a
  median, the spread taken from the paired differences themselves);
- ``L`` = a one-sided lower confidence bound of the median excess (the ``k``-th smallest
  ``e_i``, ``k`` the largest with ``P(Binomial(n, 1/2) < k) <= ALPHA``: the smallest of 5 to 7
  pairs, the second of 8 to 10): a wall clock's heavy-tailed noise (a loaded host) moves
  single pairs, not all of them;
- **flagged** when ``L > REL * |median(r_i)| + res`` (so ``E`` too): more than :data:`REL` of
  the reported saving (plus the resolution) is not seen on the wall clock, in nearly every pair;
- otherwise **unresolved** when ``|median(r_i)| <= res / (1 - REL)``: a saving that small,
  even if wholly invented, would not be flagged: not verifiable at this resolution (shown, not
  blocking); else **consistent**.

From :data:`METHOD_V2` on, in every pair of a case the two calls must report the same number of
values of each time-like metric (the readiness driver fixes the repeats): a candidate that pads
its list with values that never ran (``[t, t, t, 1e-4, 1e-4, 1e-4, 1e-4]``) keeps its reported
total, so the wall clock sees nothing, while the median or mean of its values collapses. Pairs
whose counts differ flag the case. With equal counts, a candidate could still move its time
into one repeat (``[0.01, 0.01, 2.98] x t`` for ``[t, t, t]``): its median collapses, its total
does not. So a case whose per-call medians gain more than its per-call means, in nearly every
pair, beyond :data:`SHAPE_REL` of the gain plus :data:`SHAPE_ABS`, is flagged too
(:func:`_median_beyond_mean`). And the resolution's spread is the smaller of ``MAD(e)`` and ``sqrt(2) x`` the MAD of the
reference's wall times: a candidate that adds random sleeps outside its timer widens ``MAD(e)``
(with sleeps of ``U(0, 2r)`` a lie of ``r`` per call was never flagged, only "unresolved"), but
it cannot widen the reference's spread. Samples checked by :data:`METHOD` keep that rule.

A *rate* (unit ``<work>/<time unit>``: ``tokens/s``, ``items/ms``) is checked too where its
Target names the metric that counts its work (``work_metric``, reported with every call: the
tokens a call generated): each value becomes time, ``work / rate`` (a list of rates is one per
repeat, with a work value per repeat or one for all), lower is better, and the rule above
applies to that time. Both calls of a pair must count the same work (the same case is the same
work): a candidate that counts more work than the reference, or reports a rate without its
work, flags the case. A time per unit of work (``ms/token``) with a work metric is checked the
same way, its time being ``work x value``. A rate without a declared work metric has no known
amount of work to turn it into time: it is not checked (``unchecked_rates`` names it).

Besides, a call whose reported total exceeds its own wall time (``> wall_s * (1 + OVER_REL) +
OVER_ABS_S``) reports time it cannot have spent: flagged, whoever the subject.

The check is exact when a command's values cover the work it times (their sum is time spent);
for a metric that summarises several runs (a mean of N), it is one-sided: a candidate's reported
saving must not exceed its wall saving, which still catches a command that reports less time
than it spends by more than the resolution. Time moved out of the timed region (setup,
precomputation, a detached process) is not seen as saved on the wall clock and is flagged.

Imports: standard library and :mod:`perfledger.events` (SPEC.md section 1).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from types import SimpleNamespace
from typing import Any

import msgspec

from perfledger.derive.units import SECONDS_PER_UNIT, rate_seconds, time_per_work_seconds, work_unit
from perfledger.events.workflow import WallCheck, WallCheckCase

#: The rule's version, recorded with every check: ``wall_v1`` for samples recorded before the
#: value-count rule (``SamplesRecorded`` schema 4 and before), :data:`METHOD_V2` from then on.
METHOD = "wall_v1"
METHOD_V2 = "wall_v2"
#: Share of the reported saving that may be missing from the wall saving (systematic effects).
REL = 0.25
#: Standard errors of the median excess that the wall clock cannot resolve.
K = 3.0
#: The smallest resolution claimed (seconds): process start-up jitter of a shared host.
FLOOR_S = 0.005
#: A call's reported total may exceed its wall time by this share plus :data:`OVER_ABS_S`.
OVER_REL = 0.01
OVER_ABS_S = 0.001
#: Fewest pairs of a case for a check (below: unresolved); R12's own floor per case.
MIN_PAIRS = 5
#: One-sided level of the lower bound of the median excess (an order statistic).
ALPHA = 0.05
#: ``wall_v2``: how far a case's per-call median may improve beyond its per-call mean (a share
#: of the median's improvement, plus a ratio) before the case is flagged.
SHAPE_REL = 0.25
SHAPE_ABS = 0.05


def _lower_rank(n: int) -> int:
    """The largest ``k >= 1`` with ``P(Binomial(n, 1/2) <= k - 1) <= ALPHA`` (1 when none)."""
    k, below = 0, 0.0
    while k < n:
        below += math.comb(n, k) / 2.0**n  # P(X <= k)
        if below > ALPHA:
            break
        k += 1
    return max(k, 1)


def _total_s(values: Iterable[float], scale: float) -> float:
    return math.fsum(values) * scale


def _case_check(
    metric: str, case: str, pairs: list[Any], scale: float, sign: float, method: str = METHOD
) -> WallCheckCase:
    reported = [
        _total_s(p.ref.values[metric], scale) - _total_s(p.cand.values[metric], scale)
        for p in pairs
    ]
    wall = [p.ref.wall_s - p.cand.wall_s for p in pairs]
    excess = [sign * (r - w) for r, w in zip(reported, wall, strict=True)]
    n = len(pairs)
    r_med = statistics.median(reported)
    w_med = statistics.median(wall)
    e_med = statistics.median(excess)
    if n < MIN_PAIRS:
        resolution = math.inf
        e_low = -math.inf
    else:
        mad = statistics.median(abs(e - e_med) for e in excess)
        if method == METHOD_V2:  # the candidate's own noise cannot widen what is "unresolved"
            ref_wall = [p.ref.wall_s for p in pairs]
            ref_med = statistics.median(ref_wall)
            ref_mad = statistics.median(abs(w - ref_med) for w in ref_wall)
            mad = min(mad, math.sqrt(2.0) * ref_mad)
        resolution = max(FLOOR_S, K * 1.2533 * 1.4826 * mad / math.sqrt(n))
        e_low = sorted(excess)[_lower_rank(n) - 1]
    tolerance = REL * abs(r_med) + resolution
    if e_low > tolerance:
        status = "flagged"
    elif abs(r_med) <= resolution / (1.0 - REL):
        status = "unresolved"
    else:
        status = "consistent"
    finite = resolution if math.isfinite(resolution) else 0.0
    return WallCheckCase(
        metric=metric,
        case=case,
        n_pairs=n,
        reported_saving_s=r_med,
        wall_saving_s=w_med,
        excess_s=e_med,
        excess_low_s=e_low if math.isfinite(e_low) else e_med,
        resolution_s=finite,
        tolerance_s=tolerance if math.isfinite(tolerance) else 0.0,
        status=status if n >= MIN_PAIRS else "unresolved",
    )


def _median_beyond_mean(metric: str, pairs: list[Any], sign: float) -> str:
    """Why a case's per-call medians improve beyond its per-call means (``wall_v2``), or ''.

    Per pair whose calls both report several values: ``m_i`` the improvement of the call's
    median, ``t_i`` that of its mean (total over count, what the wall clock checks), both as
    ratios in the candidate's favour; flagged when the lower bound (:func:`_lower_rank`) of
    ``m_i - t_i`` exceeds ``SHAPE_REL * |median(m_i)| + SHAPE_ABS``: in nearly every pair the
    median gained what the total did not (values redistributed within a call: ``[t, t, t]``
    reported as ``[0.01, 0.01, 2.98] x t``)."""
    diffs: list[float] = []
    gains: list[float] = []
    means: list[float] = []
    for p in pairs:
        ref, cand = p.ref.values[metric], p.cand.values[metric]
        if len(ref) < 2 or len(cand) < 2:
            continue
        ref_med, ref_mean = _median_and_mean(p.ref, metric)
        cand_med, cand_mean = _median_and_mean(p.cand, metric)
        if min(ref_med, ref_mean, cand_med, cand_mean) <= 0:
            continue
        m = sign * (1.0 - cand_med / ref_med)
        t = sign * (1.0 - cand_mean / ref_mean)
        gains.append(m)
        means.append(t)
        diffs.append(m - t)
    if len(diffs) < MIN_PAIRS:
        return ""
    low = sorted(diffs)[_lower_rank(len(diffs)) - 1]
    tolerance = SHAPE_REL * abs(statistics.median(gains)) + SHAPE_ABS
    if low <= tolerance:
        return ""
    return (
        f"the candidate's per-call median improves by {statistics.median(gains):.1%}, its "
        f"per-call mean (the total the wall clock checks) by {statistics.median(means):.1%}; "
        f"in nearly every pair the "
        f"median gained {low:.1%} more (> tolerance {tolerance:.1%}): values redistributed "
        "within a call, or time moved into a few repeats"
    )


def _median_and_mean(side: Any, metric: str) -> tuple[float, float]:
    """A call's median and mean of ``metric`` as time per repeat. For a rate checked as time
    (:func:`_rate_as_time` leaves them in ``side.shape``) they are those of its time per unit
    of work: ``1 / median(rate)``, the median the verdict takes, and ``total time / total
    work``, what the wall clock checks; the two views agree when every repeat does the same
    work, and only the rate's shows time or work moved between repeats of unequal work."""
    shape = getattr(side, "shape", {}).get(metric)
    if shape is not None:
        return shape
    values = side.values[metric]
    return statistics.median(values), math.fsum(values) / len(values)


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3g} ms"


#: Relative difference of two calls' counted work beyond which they did not do the same work.
WORK_REL = 1e-9


def _rate_as_time(
    pairs: list[Any], units: Mapping[str, str], work_metrics: Mapping[str, str]
) -> tuple[list[Any], dict[str, str], set[str], list[str], set[str]]:
    """The pairs with each checked rate's values replaced by the time they imply (seconds:
    ``work / rate`` per repeat, ``work x value`` for a time per work); the units that view has;
    the rates whose case is flagged for their work (``(metric, case)`` as ``"metric\0case"``);
    the reasons; and which of the rates are times per work."""

    rates: dict[str, tuple[str, float]] = {}
    inverse: set[str] = set()  # a time per unit of work (ms/token): value x work is time
    for m, w in work_metrics.items():
        if m not in units or not w:
            continue
        per_s = rate_seconds(units[m])
        if per_s is None and (per_s := time_per_work_seconds(units[m])) is not None:
            inverse.add(m)
        if per_s is not None:
            rates[m] = (w, per_s)
    view_units = dict(units)
    for m in rates:
        view_units[m] = "s"
    flagged: set[str] = set()
    reasons: list[str] = []
    out = []
    for p in pairs:
        sides = {}
        for label in ("ref", "cand"):
            side = getattr(p, label)
            values = dict(side.values)
            shape: dict[str, tuple[float, float]] = {}
            for m, (w, per_s) in rates.items():
                rate = values.pop(m, None)
                if not rate:
                    continue
                work = side.values.get(w) or []
                if len(work) not in (1, len(rate)):
                    if side.correct:
                        flagged.add(f"{m}\0{p.case}")
                        reasons.append(
                            f"case {p.case!r}, {m}: call {side.call_id} reports "
                            f"{len(rate)} rate value(s) and {len(work)} of its work {w!r} "
                            "(one per repeat, or one for all): the rate cannot be turned into "
                            "the time the wall clock checks"
                        )
                    continue
                per_repeat = list(work) if len(work) == len(rate) else list(work) * len(rate)
                if min(rate) <= 0 or min(per_repeat) < 0 or not sum(per_repeat) > 0:
                    if side.correct:  # no time to check: a zero rate, work below zero
                        flagged.add(f"{m}\0{p.case}")
                        reasons.append(
                            f"case {p.case!r}, {m}: call {side.call_id} reports a rate that is "
                            f"not positive or work {w!r} below zero: no time to check"
                        )
                    continue
                pairs_ = zip(per_repeat, rate, strict=True)
                if m in inverse:
                    values[m] = [done * v * per_s for done, v in pairs_]
                    median = statistics.median(rate) * per_s
                else:
                    values[m] = [done / r * per_s for done, r in pairs_]
                    median = per_s / statistics.median(rate)
                # R12: the verdict takes the rate's median; the wall clock sees total time
                shape[m] = (median, math.fsum(values[m]) / sum(per_repeat))
            sides[label] = SimpleNamespace(
                call_id=side.call_id, correct=side.correct, values=values, wall_s=side.wall_s,
                shape=shape,
            )  # fmt: skip
        if p.ref.correct and p.cand.correct:
            for m, (w, _per_s) in rates.items():
                if not (p.ref.values.get(m) and p.cand.values.get(m)):
                    continue
                ref_work = _counted_work(p.ref.values, m, w)
                cand_work = _counted_work(p.cand.values, m, w)
                if abs(cand_work - ref_work) > WORK_REL * max(abs(ref_work), 1e-300):
                    flagged.add(f"{m}\0{p.case}")
                    reasons.append(
                        f"case {p.case!r}, {m}: call {p.cand.call_id} counts {cand_work:g} "
                        f"{w!r}, the reference's call {p.ref.call_id} {ref_work:g}: the same case "
                        "is the same work, so the two rates are not comparable"
                    )
        out.append(SimpleNamespace(case=p.case, ref=sides["ref"], cand=sides["cand"]))
    return out, view_units, flagged, reasons, inverse


def _counted_work(values: Mapping[str, Any], rate: str, work: str) -> float:
    """A call's whole work: its work values summed over its repeats (one value for all
    repeats counts once per repeat), so two calls reporting it in either form compare."""
    done = list(values.get(work) or [])
    repeats = len(values.get(rate) or [])
    return math.fsum(done * repeats if len(done) == 1 else done)


def unchecked_rates(units: Mapping[str, str], work_metrics: Mapping[str, str]) -> list[str]:
    """The rate metrics of ``units`` (``<work>/<time unit>``, or a time per work
    ``<time unit>/<work>``) that no work metric turns into time: the wall-clock check cannot
    see through them (docs/measurement.md)."""
    return sorted(
        m for m, u in units.items() if work_unit(u) is not None and not work_metrics.get(m)
    )


def check_pairs(
    pairs: Iterable[Any],
    units: Mapping[str, str],
    directions: Mapping[str, str] | None = None,
    method: str = METHOD_V2,
    work_metrics: Mapping[str, str] | None = None,
) -> WallCheck | None:
    """Check the self-reported time-like metrics of recorded pairs against the driver's wall
    clock (the rule in the module docstring).

    Args:
        pairs: recorded pairs (``case``, and ``ref``/``cand`` with ``call_id``, ``correct``,
            ``values``: metric -> values in its unit, ``wall_s``: seconds or None), as in a
            ``samples.record`` request or a SamplesRecorded payload.
        units: metric name -> unit; metrics in ``s``, ``ms``, ``us``, ``µs``, ``ns`` are checked.
        directions: metric name -> ``lower_is_better`` (default) or ``higher_is_better``.
        method: :data:`METHOD_V2` (default: value counts must match per pair) or :data:`METHOD`
            (the rule samples recorded before it are re-checked by).
        work_metrics: rate metric -> the metric counting its work (the Target's
            ``work_metric``): those rates are checked as the time they imply.
    Returns: the :class:`~perfledger.events.workflow.WallCheck`, or None when no call carries a
        driver wall time (samples not measured by the workload driver).
    Raises: ValueError when some calls carry a wall time and others do not.
    """
    pairs = list(pairs)
    timed = [s.wall_s is not None for p in pairs for s in (p.ref, p.cand)]
    if not any(timed):
        return None
    if not all(timed):
        raise ValueError(
            "some calls carry the driver's wall time (wall_s) and others do not: record all or none"
        )
    directions = dict(directions or {})
    over: list[str] = []
    reasons: list[str] = []
    work_flagged: set[str] = set()
    if work_metrics:
        pairs, units, work_flagged, reasons, inverse = _rate_as_time(pairs, units, work_metrics)
        for m in work_metrics:
            if units.get(m) == "s" and m not in inverse:  # a time now: the rate's favour, inverted
                rate_lower = directions.get(m) == "lower_is_better"
                directions[m] = "higher_is_better" if rate_lower else "lower_is_better"
    for p in pairs:
        for side in (p.ref, p.cand):
            # each time-like metric is a view of the call's time: the largest must fit in it
            worst = max(
                (
                    _total_s(v, SECONDS_PER_UNIT[units[m]])
                    for m, v in side.values.items()
                    if units.get(m) in SECONDS_PER_UNIT
                ),
                default=0.0,
            )
            if worst > side.wall_s * (1.0 + OVER_REL) + OVER_ABS_S:
                over.append(side.call_id)
                reasons.append(
                    f"call {side.call_id} reports {_ms(worst)} but took {_ms(side.wall_s)} on "
                    "the driver's clock: it reports time it cannot have spent"
                )
    cases: list[WallCheckCase] = []
    time_metrics = sorted(m for m, u in units.items() if u in SECONDS_PER_UNIT)
    for metric in time_metrics:
        scale = SECONDS_PER_UNIT[units[metric]]
        sign = -1.0 if directions.get(metric) == "higher_is_better" else 1.0
        by_case: dict[str, list[Any]] = {}
        for p in pairs:
            if (
                p.ref.correct
                and p.cand.correct
                and p.ref.values.get(metric)
                and p.cand.values.get(metric)
            ):
                by_case.setdefault(p.case, []).append(p)
        for case, case_pairs in by_case.items():
            c = _case_check(metric, case, case_pairs, scale, sign, method)
            if c.status == "flagged":
                reasons.append(
                    f"case {case!r}, {metric}: the candidate reports saving "
                    f"{_ms(c.reported_saving_s)} per call, the driver's wall clock saw "
                    f"{_ms(c.wall_saving_s)} (unseen {_ms(c.excess_s)}, lower bound "
                    f"{_ms(c.excess_low_s)} > tolerance {_ms(c.tolerance_s)})"
                )
            padded = [
                p for p in case_pairs if len(p.ref.values[metric]) != len(p.cand.values[metric])
            ]
            if method == METHOD_V2 and padded:  # R12: the statistic moved, the total did not
                c = msgspec.structs.replace(c, status="flagged")
                p = padded[0]
                reasons.append(
                    f"case {case!r}, {metric}: the two calls of {len(padded)} of "
                    f"{len(case_pairs)} pairs report different numbers of values (e.g. "
                    f"{p.cand.call_id}: {len(p.cand.values[metric])}, {p.ref.call_id}: "
                    f"{len(p.ref.values[metric])}): values the wall clock cannot tie to time "
                    "spent move the statistic (report a fixed number of repeats per call)"
                )
            shape = _median_beyond_mean(metric, case_pairs, sign) if method == METHOD_V2 else ""
            if shape:  # R12: the median moved, the total the wall clock checks did not
                c = msgspec.structs.replace(c, status="flagged")
                reasons.append(f"case {case!r}, {metric}: {shape}")
            if f"{metric}\0{case}" in work_flagged:  # R12: a rate over different work
                c = msgspec.structs.replace(c, status="flagged")
            cases.append(c)
    for key in sorted(work_flagged):  # a flagged case with no pair left to check
        metric, case = key.split("\0")
        if not any(c.metric == metric and c.case == case for c in cases):
            cases.append(
                WallCheckCase(
                    metric=metric, case=case, n_pairs=0, reported_saving_s=0.0,
                    wall_saving_s=0.0, excess_s=0.0, excess_low_s=0.0, resolution_s=0.0,
                    tolerance_s=0.0, status="flagged",
                )
            )  # fmt: skip
    return WallCheck(
        method=method,
        flagged=bool(over) or any(c.status == "flagged" for c in cases),
        reasons=tuple(reasons[:20]),
        cases=tuple(cases),
        over_wall_calls=tuple(over),
    )


def check_driver_run(
    run: Any,
    units: Mapping[str, str],
    directions: Mapping[str, str] | None = None,
    work_metrics: Mapping[str, str] | None = None,
) -> WallCheck | None:
    """:func:`check_pairs` of a :class:`perfledger.kernels.workload.driver.DriverRun`: its usable pairs
    (both calls well formed), each call's metrics as its values and its ``wall_s``."""

    def side(call: Any) -> Any:
        return SimpleNamespace(
            call_id=call.call_id, correct=call.correct, values=call.metrics, wall_s=call.wall_s
        )

    pairs = [
        SimpleNamespace(case=p.case, ref=side(p.ref), cand=side(p.cand))
        for p in run.pairs
        if p.usable
    ]
    return check_pairs(pairs, units, directions, work_metrics=work_metrics)


def unresolved_cases(check: WallCheck | None) -> list[WallCheckCase]:
    """The cases whose reported saving the wall clock could not resolve (shown, not blocking)."""
    return [] if check is None else [c for c in check.cases if c.status == "unresolved"]


__all__ = [
    "METHOD",
    "check_driver_run",
    "check_pairs",
    "unchecked_rates",
    "unresolved_cases",
]
