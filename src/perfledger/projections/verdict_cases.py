"""Per-case verdicts with the Target's declared statistic (SPEC.md R12, methods ``per_case/v1``
and ``per_case/v2``).

A verdict is derived, never asserted: an auditor recomputes it from the recorded samples on any
machine, without a GPU, and gets the same bytes (floats rounded to 12 significant digits).

The derivation, step by step (``docs/verdicts.md`` says the same for users):

1. **Per case, per subject**, the Target's statistic over the case's valid calls (a call whose
   accuracy check failed, on either side, is excluded with its pair, R5), in the metric's unit:

   - ``median``: the median of the per-call medians (each call's values summarised first, so a
     call that reports 100 repeats weighs as much as one reporting 3);
   - ``mean``: the mean of every per-call value of the case (total over count);
   - ``p95`` / ``p99``: the quantile (linear interpolation, numpy's default) of every per-request
     value of the case pooled; each subject needs at least :func:`tail_min_values` values per
     case (200 for p95, 1,000 for p99: ten values beyond the quantile), else the verdict is
     refused (:func:`tail_support_problems`);
   - ``throughput``: the values are rates, each over one unit of the case's work, so the case's
     throughput is total work over total time: the harmonic mean of the per-call values.

2. **Per case**, the ratio ``r = cand / ref`` of the two statistics; the case's improvement is
   ``1 - r`` for a lower-is-better metric and ``r - 1`` for a higher-is-better one (ratios,
   positive is better).
3. **Aggregation**, as the Target's readiness statistics declare (``aggregation``):
   ``geomean`` (default): the geometric mean of the per-case ratios; ``total``: the test set's
   total, ``sum(cand) / sum(ref)`` of the per-case statistics; ``every_case``: every case must
   pass on its own (the geometric mean is reported for information).
4. **Confidence intervals**: one seeded percentile bootstrap (PCG64, seed from the blake3 of the
   canonical inputs; default 10,000 resamples, 95 %) resamples whole pairs within each case, and
   every figure (each subject's statistic, each case's improvement, the aggregate) is computed
   on the same resamples.
5. **Status**: a case passes when its CI's lower end is at or above the minimum effect and above
   its own resolution, fails when its upper end is below the minimum effect, else is
   inconclusive; it has *regressed* when its CI's upper end is below ``-resolution`` (wholly on
   the losing side beyond the noise). The primary is ``inconclusive`` with fewer valid pairs than
   required in any case or a degenerate (zero-width) CI; ``fail`` when a case regressed and the
   Target does not allow a per-case regression (the case is named); otherwise, for ``geomean``
   and ``total``, the aggregate CI against the minimum effect and the Target's resolution (the
   noise of the same aggregate in an A/A run, :func:`aa_resolution`), and for ``every_case``
   ``pass`` only if every case passes, ``fail`` if any fails.
6. **A losing case cannot be outvoted** (``per_case/v2``, :data:`METHOD_V2`; verdicts recorded
   under ``per_case/v1`` are re-derived without this step): a case whose point estimate is a
   loss larger than the minimum effect (``estimate < -min_effect``), or whose CI's upper end is
   below zero, makes the primary at most ``inconclusive`` (the case is named in the reason and
   in ``blocking``), unless the Target allows a per-case regression. A noisy case that lost
   (its CI too wide to call it *regressed*) thus cannot be outvoted by the other cases. A case
   whose CI is wider than :data:`UNRESOLVED_WIDTH` times the minimum effect is *unresolved*:
   named in the reason (it does not change the status by itself).

Guardrails are judged per case on the per-call medians: ``fail`` when any case's regression CI
lies wholly above the allowed regression, ``pass`` when every case's upper end is within it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perfledger.events.workflow import DerivedCase, DerivedGuardrail, DerivedVerdict
from perfledger.projections.verdicts import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    MIN_PAIRS_PER_CASE_FLOOR,
    Direction,
    Pair,
    Status,
    bootstrap_seed,
    improvements,
    wilcoxon_p,
)

#: The first per-case method: a case blocks ``pass`` only when it regressed beyond its noise.
METHOD_V1 = "per_case/v1"
#: The current method: also a case that lost more than the minimum effect (point estimate), or
#: whose CI lies below zero, caps the primary at ``inconclusive`` (step 6 of the module doc).
METHOD_V2 = "per_case/v2"
#: The derivation method recorded in every verdict this module derives by default.
METHOD = METHOD_V2
METHODS = (METHOD_V1, METHOD_V2)
#: The bootstrap's seed tag: the same for both methods, so v2 differs from v1 only in step 6.
_SEED_TAG = METHOD_V1
#: A case whose CI is wider than this multiple of the minimum effect is "unresolved" (v2).
UNRESOLVED_WIDTH = 4.0
#: Statistics this module derives; ``p95``/``p99`` need per-request samples.
STATISTICS = ("median", "mean", "p95", "p99", "throughput")
TAIL_QUANTILES = {"p95": 0.95, "p99": 0.99}
#: A tail statistic needs at least this many values beyond its quantile, per subject and case.
TAIL_VALUES_BEYOND = 10
AGGREGATIONS = ("geomean", "total", "every_case")
#: Bound on the floats one bootstrap chunk materialises (resamples x values of a case).
_CHUNK_VALUES = 4_000_000


def _round(value: float) -> float:
    return float(f"{value:.12g}")


def _opt(value: float | None) -> float | None:
    return None if value is None else _round(value)


def tail_min_values(statistic: str) -> int:
    """Per-request values each subject needs per case for ``statistic``: ``ceil(10 / (1 - q))``
    for a tail quantile ``q`` (200 for p95, 1,000 for p99), 1 otherwise."""
    q = TAIL_QUANTILES.get(statistic)
    if q is None:
        return 1
    return math.ceil(TAIL_VALUES_BEYOND / (1.0 - q) - 1e-9)


def tail_support_problems(pairs: Sequence[Pair], statistic: str) -> list[str]:
    """The cases whose valid calls hold too few per-request values for a tail ``statistic``, as
    ``"case: ref N, cand M values (need K)"``; empty when supported (or not a tail)."""
    need = tail_min_values(statistic)
    if need <= 1:
        return []
    counts: dict[str, list[int]] = {}
    for p in pairs:
        entry = counts.setdefault(p.case, [0, 0])
        if p.valid:
            entry[0] += len(p.ref)
            entry[1] += len(p.cand)
    return [
        f"{case}: ref {n_ref}, cand {n_cand} values (need {need})"
        for case, (n_ref, n_cand) in sorted(counts.items())
        if min(n_ref, n_cand) < need
    ]


# ------------------------------------------------------------------------- statistics of a case


def _case_statistic(values: Sequence[Sequence[float]], statistic: str) -> Callable[[Any], Any]:
    """Return ``f(idx)``: the ``statistic`` of the calls ``values`` (one row of values per valid
    call) for each row of pair indices ``idx`` (shape (R, n)), as an array of shape (R,)."""
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    if statistic == "median":
        per_call = np.array([float(np.median(v)) for v in values])

        def median(idx: Any) -> Any:
            return np.median(per_call[idx], axis=1)

        return median
    if statistic in ("mean", "throughput"):
        counts = np.array([len(v) for v in values], dtype=np.float64)
        if statistic == "mean":
            sums = np.array([math.fsum(v) for v in values])
        else:  # harmonic mean: total work (count) over total time (sum of reciprocal rates)
            sums = np.array([math.fsum(1.0 / x for x in v) for v in values])

        def ratio_of_sums(idx: Any) -> Any:
            if statistic == "mean":
                return sums[idx].sum(axis=1) / counts[idx].sum(axis=1)
            return counts[idx].sum(axis=1) / sums[idx].sum(axis=1)

        return ratio_of_sums
    q = TAIL_QUANTILES[statistic]
    width = max(len(v) for v in values)
    padded = np.full((len(values), width), np.nan)
    for row, v in enumerate(values):
        padded[row, : len(v)] = v

    def quantile(idx: Any) -> Any:
        rows = padded[idx].reshape(idx.shape[0], -1)
        return np.nanquantile(rows, q, axis=1)

    def quantile_full(idx: Any) -> Any:
        return np.quantile(padded[idx].reshape(idx.shape[0], -1), q, axis=1)

    # With no padding (every call holds as many values), np.quantile gives nanquantile's values
    # bit for bit (nanquantile runs the same linear interpolation on each row, one Python call
    # per row) at a fraction of the cost: resamples times subjects rows per derivation.
    return quantile if np.isnan(padded).any() else quantile_full


def _improvement(ratio: Any, direction: Direction) -> Any:
    return 1.0 - ratio if direction == "lower_is_better" else ratio - 1.0


def _judge(low: float, high: float, min_effect: float, resolution: float) -> Status:
    if low == high:
        return "inconclusive"
    if low >= min_effect and low > resolution:
        return "pass"
    if high < min_effect:
        return "fail"
    return "inconclusive"


class _Bootstrap:
    """Per-case statistics of both subjects on shared stratified resamples (whole pairs within
    each case); ``figures[case]`` holds arrays over resamples, ``points[case]`` the point
    values."""

    def __init__(
        self,
        by_case: Mapping[str, list[Pair]],
        statistic: str,
        resamples: int,
        seed: int,
    ) -> None:
        import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

        rng = np.random.Generator(np.random.PCG64(seed))
        self.points: dict[str, tuple[float, float]] = {}
        self.draws: dict[str, tuple[Any, Any]] = {}
        for case in sorted(by_case):
            pairs = by_case[case]
            n = len(pairs)
            ref_f = _case_statistic([p.ref for p in pairs], statistic)
            cand_f = _case_statistic([p.cand for p in pairs], statistic)
            whole = np.arange(n)[None, :]
            self.points[case] = (float(ref_f(whole)[0]), float(cand_f(whole)[0]))
            width = max(max(len(p.ref), len(p.cand)) for p in pairs)
            chunk = max(1, min(resamples, _CHUNK_VALUES // max(1, n * width)))
            ref_d = np.empty(resamples)
            cand_d = np.empty(resamples)
            for start in range(0, resamples, chunk):
                stop = min(resamples, start + chunk)
                idx = rng.integers(0, n, size=(stop - start, n))
                ref_d[start:stop] = ref_f(idx)
                cand_d[start:stop] = cand_f(idx)
            self.draws[case] = (ref_d, cand_d)


def _interval(draws: Any, confidence: float) -> tuple[float, float]:
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [alpha, 1.0 - alpha])
    return _round(float(low)), _round(float(high))


def _case_figures(
    boot: _Bootstrap,
    case: str,
    *,
    direction: Direction,
    min_effect: float,
    resolution: float,
    required: int,
    n_pairs: int,
    n_values: int,
    confidence: float,
) -> tuple[DerivedCase, Any]:
    """The :class:`DerivedCase` of ``case`` and its improvement draws (None without pairs)."""
    if case not in boot.points:
        empty = DerivedCase(
            case=case, n_pairs=0, n_values=0, ref=None, ref_low=None, ref_high=None,
            cand=None, cand_low=None, cand_high=None, estimate=None, ci_low=None,
            ci_high=None, resolution=resolution, status="inconclusive", regressed=False,
        )  # fmt: skip
        return empty, None
    ref_p, cand_p = boot.points[case]
    ref_d, cand_d = boot.draws[case]
    gains = _improvement(cand_d / ref_d, direction)
    low, high = _interval(gains, confidence)
    ref_low, ref_high = _interval(ref_d, confidence)
    cand_low, cand_high = _interval(cand_d, confidence)
    status = _judge(low, high, min_effect, resolution) if n_pairs >= required else "inconclusive"
    figures = DerivedCase(
        case=case, n_pairs=n_pairs, n_values=n_values, ref=_round(ref_p), ref_low=ref_low,
        ref_high=ref_high, cand=_round(cand_p), cand_low=cand_low, cand_high=cand_high,
        estimate=_round(float(_improvement(cand_p / ref_p, direction))), ci_low=low,
        ci_high=high, resolution=resolution, status=status,
        regressed=n_pairs >= required and low != high and high < -resolution,
    )  # fmt: skip
    return figures, gains


def _group(pairs: Sequence[Pair]) -> tuple[dict[str, list[Pair]], list[str]]:
    """Valid pairs by case (checked as :func:`improvements` checks them) and every case seen."""
    for p in pairs:
        if p.valid and (not p.ref or not p.cand):
            raise ValueError(f"pair of case {p.case!r} has no values for a subject")
    by_case: dict[str, list[Pair]] = {}
    for p in pairs:
        if p.valid:
            by_case.setdefault(p.case, []).append(p)
    return by_case, sorted({p.case for p in pairs})


def derive_case_verdict(
    pairs: Sequence[Pair],
    *,
    direction: Direction,
    min_effect: float,
    statistic: str = "median",
    aggregation: str = "geomean",
    resolution: float = 0.0,
    case_resolution: Mapping[str, float] | None = None,
    allow_case_regression: bool = False,
    min_pairs_per_case: int = MIN_PAIRS_PER_CASE_FLOOR,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    method: str = METHOD,
) -> DerivedVerdict:
    """Derive a metric's verdict per test case and aggregate it (R12, R5; module docstring).

    Args:
        pairs: the paired calls (invalid ones are counted and excluded, R5).
        direction: the metric's direction.
        min_effect: the minimum effect (ratio, e.g. 0.05).
        statistic: the Target's statistic (:data:`STATISTICS`).
        aggregation: :data:`AGGREGATIONS`.
        resolution: the Target's resolution (ratio): the aggregate's threshold, and each case's
            where ``case_resolution`` lacks it.
        case_resolution: case -> its own measured resolution (ratio).
        allow_case_regression: a regressed case does not block ``pass``.
        min_pairs_per_case: required valid pairs per case (raised to the floor of 5).
        resamples, confidence: bootstrap parameters.
        method: :data:`METHOD_V2` (default): a case that lost more than the minimum effect, or
            whose CI lies below zero, caps the primary at ``inconclusive`` and unresolved cases
            are named (step 6); :data:`METHOD_V1`: the rule of verdicts recorded before that.
    Returns: a :class:`DerivedVerdict` with ``method`` and per-case ``cases``.
    Raises: ValueError for an unknown method, statistic or aggregation, a pair without values, a
        non-positive statistic (no ratio), or a tail statistic without enough values per case
        (:func:`tail_support_problems`; the verdict decider refuses before deriving).
    """
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    if method not in METHODS:
        raise ValueError(f"unknown per-case method {method!r}; expected one of {METHODS}")
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; expected one of {STATISTICS}")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r}; expected one of {AGGREGATIONS}")
    short_tail = tail_support_problems(pairs, statistic)
    if short_tail:
        raise ValueError(f"too few per-request values for {statistic}: {'; '.join(short_tail)}")
    required = max(min_pairs_per_case, MIN_PAIRS_PER_CASE_FLOOR)
    by_case, all_cases = _group(pairs)
    for case, case_pairs in by_case.items():
        for p in case_pairs:
            if min(p.ref) <= 0 or min(p.cand) <= 0:
                raise ValueError(f"pair of case {case!r}: values must be positive for a ratio")
    per_case = {c: len(by_case.get(c, [])) for c in all_cases}
    resolutions = {c: float((case_resolution or {}).get(c, resolution)) for c in all_cases}
    # the aggregate's noise is the Target's resolution (measured on the aggregate by
    # :func:`aa_resolution`); each case is judged against its own
    threshold_res = (
        resolution if aggregation != "every_case" else max([resolution, *resolutions.values()])
    )
    seed = bootstrap_seed(
        _SEED_TAG, direction, statistic, aggregation, min_effect, resolution, sorted(resolutions.items()),
        resamples, confidence, [[c, [[list(p.ref), list(p.cand)] for p in by_case[c]]] for c in sorted(by_case)],
    )  # fmt: skip
    boot = _Bootstrap(by_case, statistic, resamples, seed)
    cases: list[DerivedCase] = []
    ratios_d: dict[str, Any] = {}
    for c in all_cases:
        figures, _gains = _case_figures(
            boot, c, direction=direction, min_effect=min_effect, resolution=resolutions[c],
            required=required, n_pairs=per_case[c],
            n_values=sum(len(p.ref) + len(p.cand) for p in by_case.get(c, [])),
            confidence=confidence,
        )  # fmt: skip
        cases.append(figures)
        if c in boot.draws:
            ref_d, cand_d = boot.draws[c]
            ratios_d[c] = (ref_d, cand_d)
    gains_pooled = [g for _, g in improvements(pairs, direction)]
    common: dict[str, Any] = {
        "direction": direction, "min_effect": min_effect, "resolution": threshold_res,
        "n_pairs": sum(per_case.values()), "n_excluded": sum(1 for p in pairs if not p.valid),
        "pairs_per_case": per_case, "resamples": resamples, "confidence": confidence,
        "seed": seed, "method": method, "statistic": statistic, "aggregation": aggregation,
        "cases": tuple(cases),
    }  # fmt: skip
    short = [c for c, n in per_case.items() if n < required]
    if not by_case or short:
        return DerivedVerdict(
            status="inconclusive",
            reason=f"too few valid pairs: need {required} per case, short in {short or all_cases}",
            estimate=None, ci_low=None, ci_high=None, degenerate=False, clear_loss=False,
            wilcoxon_p=None, **common,
        )  # fmt: skip
    # the aggregate on the same resamples as the cases
    names = sorted(ratios_d)
    if aggregation == "total":
        ref_total = sum(ratios_d[c][0] for c in names)
        cand_total = sum(ratios_d[c][1] for c in names)
        agg_ratio_d = cand_total / ref_total
        ref_sum = math.fsum(boot.points[c][0] for c in names)
        cand_sum = math.fsum(boot.points[c][1] for c in names)
        agg_point = cand_sum / ref_sum
    else:
        logs = np.mean([np.log(ratios_d[c][1] / ratios_d[c][0]) for c in names], axis=0)
        agg_ratio_d = np.exp(logs)
        agg_point = math.exp(
            math.fsum(math.log(boot.points[c][1] / boot.points[c][0]) for c in names) / len(names)
        )
    estimate = _round(float(_improvement(agg_point, direction)))
    low, high = _interval(_improvement(agg_ratio_d, direction), confidence)
    degenerate = low == high
    clear_loss = high < 0.0
    status, reason = _aggregate_status(
        cases, aggregation, low, high, min_effect, threshold_res, clear_loss
    )
    blocking = () if allow_case_regression else tuple(c.case for c in cases if c.regressed)
    if blocking and status != "fail" and not degenerate:
        # R12: a case worse beyond its noise blocks pass whatever the aggregate says
        status = "fail"
        worst = ", ".join(
            f"{c.case} (improvement {100 * c.estimate:.2f} %, CI [{100 * c.ci_low:.2f} %, "
            f"{100 * c.ci_high:.2f} %], resolution {100 * c.resolution:.2f} %)"
            for c in cases
            if c.case in blocking
            and c.ci_low is not None
            and c.ci_high is not None
            and c.estimate is not None
        )
        reason = (
            f"case(s) regressed beyond their resolution: {worst}; the Target allows no "
            f"per-case regression (without it: {reason})"
        )
    if method == METHOD_V2:
        status, reason, blocking = _no_outvoting(
            cases, status, reason, blocking, min_effect, allow_case_regression, degenerate
        )
    return DerivedVerdict(
        status=status, reason=reason, estimate=estimate, ci_low=low, ci_high=high,
        degenerate=degenerate, clear_loss=clear_loss, wilcoxon_p=wilcoxon_p(gains_pooled),
        blocking=blocking, **common,
    )  # fmt: skip


#: How a primary capped by a losing case (``per_case/v2``) begins its reason.
LOSING = "case(s) lost more than the minimum effect"
#: How a ``per_case/v2`` reason names the cases whose CI is too wide to judge them.
UNRESOLVED = "unresolved case(s)"


def _case_figure(c: DerivedCase) -> str:
    return (
        f"{c.case} (improvement {100 * (c.estimate or 0.0):.2f} %, CI "
        f"[{100 * (c.ci_low or 0.0):.2f} %, {100 * (c.ci_high or 0.0):.2f} %])"
    )


def _no_outvoting(
    cases: Sequence[DerivedCase],
    status: Status,
    reason: str,
    blocking: tuple[str, ...],
    min_effect: float,
    allow_case_regression: bool,
    degenerate: bool,
) -> tuple[Status, str, tuple[str, ...]]:
    """Step 6 (``per_case/v2``, R12): a case that lost (point estimate below ``-min_effect``, or
    CI upper end below zero) caps the primary at ``inconclusive`` unless the Target allows a
    per-case regression; cases whose CI is wider than :data:`UNRESOLVED_WIDTH` x ``min_effect``
    are unresolved and named in the reason (:data:`UNRESOLVED`). Returns: (status, reason,
    blocking)."""
    # every case has its required pairs here (a short case made the primary inconclusive)
    judged = [c for c in cases if c.estimate is not None and c.ci_high is not None]
    unresolved = tuple(
        c.case
        for c in judged
        if c.ci_low is not None
        and c.ci_high is not None
        and c.ci_high - c.ci_low > UNRESOLVED_WIDTH * min_effect
    )
    losing = tuple(
        c.case
        for c in judged
        if c.case not in blocking
        and c.estimate is not None
        and c.ci_high is not None
        and (c.estimate < -min_effect or c.ci_high < 0.0)
    )
    if losing and not allow_case_regression and not degenerate:
        named = ", ".join(_case_figure(c) for c in cases if c.case in losing)
        blocking = blocking + losing
        if status == "pass":
            # a case that lost cannot be outvoted by the others, whatever its CI's width
            status = "inconclusive"
            reason = (
                f"{LOSING} ({100 * min_effect:.2f} %) or lie wholly below zero: {named}; the "
                f"other cases cannot outvote them and the Target allows no per-case regression "
                f"(without it: {reason})"
            )
        else:
            reason = f"{reason}; case(s) lost more than the minimum effect: {named}"
    if unresolved:
        reason = (
            f"{reason}; {UNRESOLVED} (CI wider than {UNRESOLVED_WIDTH:g} x the minimum effect): "
            f"{', '.join(unresolved)} (measure more pairs to resolve them)"
        )
    return status, reason, blocking


def _aggregate_status(
    cases: Sequence[DerivedCase],
    aggregation: str,
    low: float,
    high: float,
    min_effect: float,
    resolution: float,
    clear_loss: bool,
) -> tuple[Status, str]:
    """The primary's status and reason from the aggregate CI [low, high] (ratios) or, for
    ``every_case``, from the cases' own statuses; before any per-case regression blocks it."""
    if low == high:
        return "inconclusive", (
            "degenerate interval: the paired values are identical, which proves nothing"
        )
    if aggregation == "every_case":
        failing = [c.case for c in cases if c.status == "fail"]
        open_ = [c.case for c in cases if c.status != "pass"]
        if failing:
            return "fail", f"every case must pass; failed: {failing}"
        if open_:
            return "inconclusive", f"every case must pass; not passed: {open_}"
        return "pass", "every case passed its minimum effect and resolution"
    status = _judge(low, high, min_effect, resolution)
    label = "geometric mean of per-case ratios" if aggregation == "geomean" else "total"
    if status == "pass":
        return status, (
            f"{label}: CI lower end {low:.4g} >= minimum effect {min_effect:.4g} and > "
            f"resolution {resolution:.4g}"
        )
    if status == "fail":
        return status, f"{label}: CI upper end {high:.4g} < minimum effect {min_effect:.4g}" + (
            " (a clear loss: the whole CI is below zero)" if clear_loss else ""
        )
    return status, (
        f"{label}: CI [{low:.4g}, {high:.4g}] straddles the minimum effect {min_effect:.4g} or "
        f"does not clear the resolution {resolution:.4g}"
    )


def derive_case_guardrail(
    metric: str,
    pairs: Sequence[Pair],
    *,
    direction: Direction,
    allowed_regression: float,
    min_pairs_per_case: int = MIN_PAIRS_PER_CASE_FLOOR,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> DerivedGuardrail:
    """Derive a guardrail per case (R12): each case's regression (``-improvement`` of the
    per-call medians, ratio; positive is worse) and CI against ``allowed_regression``;
    ``fail`` when any case's CI lies wholly above it, ``pass`` when every case's upper end is
    within it, else ``inconclusive``. The reported regression is the geometric-mean aggregate.
    Raises: ValueError as :func:`derive_case_verdict`."""
    derived = derive_case_verdict(
        pairs, direction=direction, min_effect=0.0, statistic="median", aggregation="geomean",
        allow_case_regression=True, min_pairs_per_case=min_pairs_per_case, resamples=resamples,
        confidence=confidence, method=METHOD_V1,
    )  # fmt: skip
    common: dict[str, Any] = {
        "metric": metric, "allowed_regression": allowed_regression, "n_pairs": derived.n_pairs,
        "method": METHOD_V1, "cases": derived.cases,
    }  # fmt: skip
    if derived.ci_low is None or derived.ci_high is None or derived.estimate is None:
        required = max(min_pairs_per_case, MIN_PAIRS_PER_CASE_FLOOR)
        return DerivedGuardrail(
            status="inconclusive", reason=f"too few valid pairs (need {required} per case)",
            regression=None, ci_low=None, ci_high=None, degenerate=False, **common,
        )  # fmt: skip
    # a case's regression CI is the negated improvement CI: [-high, -low]
    over = [
        c.case for c in derived.cases if c.ci_high is not None and -c.ci_high > allowed_regression
    ]
    unsure = [c.case for c in derived.cases if c.ci_low is None or -c.ci_low > allowed_regression]
    status: Status
    if over:
        status = "fail"
        reason = f"regression CI lower end above allowed {allowed_regression:.4g} in case(s) {over}"
    elif not unsure:
        status = "pass"
        reason = f"every case's regression CI upper end <= allowed {allowed_regression:.4g}"
    else:
        status = "inconclusive"
        reason = f"regression CI straddles allowed {allowed_regression:.4g} in case(s) {unsure}"
    return DerivedGuardrail(
        status=status, reason=reason, regression=_round(-derived.estimate),
        ci_low=_round(-derived.ci_high), ci_high=_round(-derived.ci_low),
        degenerate=derived.degenerate, **common,
    )  # fmt: skip


def aa_resolution(
    pairs: Sequence[Pair],
    *,
    direction: Direction,
    statistic: str = "median",
    aggregation: str = "geomean",
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
) -> tuple[float, dict[str, float]]:
    """The measurement resolution of an A/A run (R4): the original against itself, derived as a
    verdict would derive it (same statistic, aggregation and bootstrap), so the resolution is
    the noise of exactly what a verdict compares.

    Args:
        pairs: A/A pairs (``ref`` and ``cand`` are two calls of the original); invalid ones are
            left out; every case needs at least 2 valid pairs.
        direction, statistic, aggregation, resamples, confidence: as the Target declares them; a
            tail statistic needs as many per-request values per case as its verdict
            (:func:`tail_min_values`): the median's noise would understate a tail's.
    Returns: ``(resolution, per_case)``: each case's resolution is the largest distance of its
        improvement CI's ends from 0 (ratio); the Target's is that of the aggregate CI (for
        ``every_case``, the largest per-case one).
    Raises: ValueError for a case with fewer than 2 valid pairs or non-positive values, or a
        tail statistic without enough per-request values in a case (R4, R12).
    """
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    short_tail = tail_support_problems(pairs, statistic)
    if short_tail:
        # R4: the resolution of a tail verdict is the tail's noise; the median's (the fallback
        # before) is far smaller and let a tail CI clear a resolution it did not measure
        raise ValueError(
            f"too few per-request values for {statistic}: {'; '.join(short_tail)}; measure "
            "more A/A pairs (--runs) or calls that report every request's value"
        )
    by_case, _ = _group(pairs)
    short = sorted(c for c, v in by_case.items() if len(v) < 2)
    if not by_case or short:
        raise ValueError(f"an A/A needs at least 2 valid pairs in every case; short: {short}")
    seed = bootstrap_seed(
        "aa/" + _SEED_TAG, direction, statistic, aggregation, resamples, confidence,
        [[c, [[list(p.ref), list(p.cand)] for p in by_case[c]]] for c in sorted(by_case)],
    )  # fmt: skip
    boot = _Bootstrap(by_case, statistic, resamples, seed)
    per_case: dict[str, float] = {}
    for case in sorted(by_case):
        ref_d, cand_d = boot.draws[case]
        low, high = _interval(_improvement(cand_d / ref_d, direction), confidence)
        per_case[case] = _round(max(abs(low), abs(high)))
    names = sorted(by_case)
    if aggregation == "every_case":
        return max(per_case.values()), per_case
    if aggregation == "total":
        ratio = sum(boot.draws[c][1] for c in names) / sum(boot.draws[c][0] for c in names)
    else:
        ratio = np.exp(
            np.mean([np.log(boot.draws[c][1] / boot.draws[c][0]) for c in names], axis=0)
        )
    low, high = _interval(_improvement(ratio, direction), confidence)
    return _round(max(abs(low), abs(high))), per_case
