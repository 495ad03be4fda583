"""Paired statistics of a measurement (SPEC.md section 5, "Paired comparison"): the per-pair log
ratio, the median ratio with a seeded percentile-bootstrap CI and a Wilcoxon signed-rank p-value.

This is the *measurement's* summary (what the harness prints while it runs and what ``measure``
reports); the formal verdict of rule R12 is derived again from the recorded samples by
:mod:`perfledger.projections.verdicts`, so an auditor never trusts these numbers.

Ratios are ``cand / ref`` of a lower-is-better quantity (time): a ratio of 1.02 means the
candidate takes 2 % longer. The improvement of R12 for a lower-is-better metric is
``(ref - cand) / ref = 1 - ratio``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from perfledger.derive.signed_rank import signed_rank_p

#: Default bootstrap resamples and confidence (SPEC.md section 4, R12).
DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class PairedStats:
    """Summary of paired samples (times in seconds, ratios ``cand/ref``).

    Attributes:
        n: number of pairs.
        median_ratio: ``exp(median(log(cand/ref)))``.
        ci_low, ci_high: the percentile-bootstrap CI of the median ratio.
        confidence: the CI's level (0.95).
        resamples: bootstrap resamples.
        wilcoxon_p: two-sided Wilcoxon signed-rank p-value of the log ratios (None when every
            log ratio is zero or n < 2).
        log_ratio_std: standard deviation of the per-pair log ratios (~ relative spread).
        ref_median_s, cand_median_s: medians of each subject's samples (seconds).
        seed: the bootstrap seed.
        medians_per: what ``ref_median_s``/``cand_median_s`` are medians of: ``"sample"``, the
            values given (the kernel harness's first protocol gave ABBA block sums, two calls
            each); ``"call"``, one call's time (the harness now replaces them so).
        quantum_s: the timer's step seen in the samples (:func:`timer_quantum`; seconds, 0 when
            the values show none); the CI is never narrower than one step of the median sample
            either side (:func:`paired_stats`).
    """

    n: int
    median_ratio: float
    ci_low: float
    ci_high: float
    confidence: float
    resamples: int
    wilcoxon_p: float | None
    log_ratio_std: float
    ref_median_s: float
    cand_median_s: float
    seed: int
    medians_per: str = "sample"
    quantum_s: float = 0.0

    @property
    def improvement(self) -> float:
        """R12 improvement of a lower-is-better metric: ``1 - median_ratio``."""
        return 1.0 - self.median_ratio

    @property
    def improvement_ci(self) -> tuple[float, float]:
        """The improvement's CI ``(1 - ci_high, 1 - ci_low)``."""
        return 1.0 - self.ci_high, 1.0 - self.ci_low

    def direction(self) -> str:
        """``faster`` when the whole CI is below 1, ``slower`` when above, else ``same``."""
        if self.ci_high < 1.0:
            return "faster"
        if self.ci_low > 1.0:
            return "slower"
        return "same"

    def status(self, min_effect: float, resolution: float = 0.0) -> str:
        """The R12-shaped status of the candidate against ``min_effect`` (a ratio, 0.01 = 1 %):
        ``pass`` when the improvement CI's low end is >= ``min_effect`` and > ``resolution``;
        ``fail`` when its high end is < ``min_effect`` (no gain of that size) ; else
        ``inconclusive``. Degenerate (zero-width) CIs are ``inconclusive``."""
        low, high = self.improvement_ci
        if math.isclose(self.ci_low, self.ci_high, rel_tol=1e-12):
            return "inconclusive"
        if low >= min_effect and low > resolution:
            return "pass"
        if high < min_effect:
            return "fail"
        return "inconclusive"

    def to_json(self) -> dict[str, Any]:
        """JSON builtins, with the improvement, its CI and the direction."""
        low, high = self.improvement_ci
        return {
            **asdict(self),
            "improvement": self.improvement,
            "improvement_ci": [low, high],
            "direction": self.direction(),
        }


def log_ratios(ref_s: Sequence[float], cand_s: Sequence[float]) -> np.ndarray:
    """Per-pair ``log(cand/ref)``; the two sequences must have equal length (pyperf's pitfall:
    unequal counts are never compared) and positive finite values.

    Raises: ValueError otherwise.
    """
    ref = np.asarray(ref_s, dtype=np.float64)
    cand = np.asarray(cand_s, dtype=np.float64)
    if ref.shape != cand.shape or ref.ndim != 1:
        raise ValueError(f"paired samples need equal counts (got {ref.shape} and {cand.shape})")
    if ref.size == 0 or not (np.all(np.isfinite(ref)) and np.all(np.isfinite(cand))):
        raise ValueError("paired samples must be non-empty and finite")
    if np.any(ref <= 0) or np.any(cand <= 0):
        raise ValueError("paired samples must be positive")
    return np.log(cand / ref)


def bootstrap_median_ci(
    values: np.ndarray, *, resamples: int, confidence: float, seed: int
) -> tuple[float, float]:
    """Seeded percentile-bootstrap CI of the median of ``values`` (1-D float array)."""
    rng = np.random.default_rng(seed)
    n = values.size
    chunk = max(1, min(resamples, 20_000_000 // max(n, 1)))
    meds = np.empty(resamples)
    done = 0
    while done < resamples:
        k = min(chunk, resamples - done)
        idx = rng.integers(0, n, size=(k, n))
        meds[done : done + k] = np.median(values[idx], axis=1)
        done += k
    alpha = (1.0 - confidence) / 2.0
    return float(np.quantile(meds, alpha)), float(np.quantile(meds, 1.0 - alpha))


def timer_quantum(values: np.ndarray) -> float:
    """The step of a quantized timer seen in ``values`` (1-D, seconds): the smallest positive
    gap between distinct values when the values are quantized (fewer distinct values than half
    their count), else 0.0.

    CUDA events tick in steps (tens of nanoseconds); a kernel of a few microseconds then gives
    many identical times, identical pairs and a median log ratio of exactly zero whose bootstrap
    CI has zero width: an A/A that claims a resolution of 0 %. The step bounds how finely the
    samples can tell two subjects apart.
    """
    # values a millionth apart are one value: sums of float32 event times differ in the last bits
    grain = 1e-6 * float(np.median(np.abs(values)))
    if grain <= 0:
        return 0.0
    distinct = np.unique(np.round(values / grain))
    if distinct.size < 2 or distinct.size * 2 > values.size:
        return 0.0
    return float(np.diff(distinct).min() * grain)


def paired_stats(
    ref_s: Sequence[float],
    cand_s: Sequence[float],
    *,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> PairedStats:
    """Summarise paired samples (SPEC.md section 5).

    Args:
        ref_s, cand_s: the pairs' times (seconds; any positive unit works), equal counts.
        resamples: bootstrap resamples (>= 100).
        confidence: CI level in (0.5, 1).
        seed: bootstrap seed (recorded).
    Returns: :class:`PairedStats`.
    Raises: ValueError for unequal counts, empty, non-finite or non-positive samples.
    """
    if resamples < 100 or not 0.5 < confidence < 1.0:
        raise ValueError("resamples must be >= 100 and confidence in (0.5, 1)")
    logs = log_ratios(ref_s, cand_s)
    low, high = bootstrap_median_ci(logs, resamples=resamples, confidence=confidence, seed=seed)
    ref = np.asarray(ref_s, dtype=np.float64)
    cand = np.asarray(cand_s, dtype=np.float64)
    quantum = timer_quantum(np.concatenate([ref, cand]))
    if quantum > 0:
        # the samples cannot resolve a ratio finer than one timer step of the median sample
        step = math.log1p(quantum / float(np.median(np.concatenate([ref, cand]))))
        centre = float(np.median(logs))
        low, high = min(low, centre - step), max(high, centre + step)
    p: float | None = None
    nonzero = logs[logs != 0.0]
    if nonzero.size >= 2:
        p = signed_rank_p(nonzero)
    return PairedStats(
        n=int(logs.size),
        median_ratio=math.exp(float(np.median(logs))),
        ci_low=math.exp(low),
        ci_high=math.exp(high),
        confidence=confidence,
        resamples=resamples,
        wilcoxon_p=p,
        log_ratio_std=float(np.std(logs, ddof=1)) if logs.size > 1 else 0.0,
        ref_median_s=float(np.median(ref)),
        cand_median_s=float(np.median(cand)),
        seed=seed,
        quantum_s=quantum,
    )


def aa_prediction_bound(log_ratios: np.ndarray, confidence: float = 0.95) -> float:
    """The two-sided ``confidence`` prediction bound for one more A/A comparison's median log
    ratio, given ``log_ratios`` of earlier ones (each from its own pair of workers), as a ratio
    distance from 1: ``exp(|mean| + t((1 + confidence) / 2, n - 1) * stdev * sqrt(1 + 1/n)) - 1``
    (the normal model's prediction interval; R4). 0.0 with fewer than 2 values (no spread to
    measure: :func:`aa_comparisons_resolution` then has only the CI reach)."""
    from scipy import stats as sps  # noqa: PLC0415 (scipy: heavy, kept off the CLI's start-up path)

    values = np.asarray(log_ratios, dtype=np.float64)
    n = int(values.size)
    if n < 2:
        return 0.0
    t = float(sps.t.ppf((1.0 + confidence) / 2.0, n - 1))
    half = abs(float(values.mean())) + t * float(values.std(ddof=1)) * math.sqrt(1.0 + 1.0 / n)
    return float(math.expm1(half))


def aa_comparisons_resolution(
    ci_lows: Sequence[float], ci_highs: Sequence[float], median_ratios: Sequence[float]
) -> tuple[float, float, float]:
    """The resolution of valid A/A comparisons (R4), each from its own pair of workers, from
    their CIs and median ratios (ratios of times): ``(resolution, reach, bound)`` where
    ``reach`` is the largest distance of a CI end from 1, ``bound`` the prediction bound of one
    more comparison's ratio (:func:`aa_prediction_bound`) and ``resolution`` the larger. The
    kernel harness's A/A (:func:`perfledger.kernels.harness.harness.resolution_from_aa`) and its
    re-derivation from a recorded table share it. Raises: ValueError for no comparison."""
    if not median_ratios:
        raise ValueError("no A/A comparison")
    reach = max(max(abs(1.0 - lo), abs(hi - 1.0)) for lo, hi in zip(ci_lows, ci_highs, strict=True))
    bound = aa_prediction_bound(np.log(np.asarray(median_ratios, dtype=np.float64)))
    return float(max(reach, bound)), float(reach), float(bound)


__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "PairedStats",
    "aa_comparisons_resolution",
    "aa_prediction_bound",
    "bootstrap_median_ci",
    "log_ratios",
    "paired_stats",
    "timer_quantum",
]
