"""The bootstrap made faster for the audit (its resampled rows sorted in place) gives, bit for
bit, what the implementation before it gave: the audit re-derives every recorded verdict and
compares its bytes (R12), so a faster derivation may not change one bit on any input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.projections.verdicts import Interval, _round, stratified_bootstrap


def _previous_bootstrap(
    by_case: dict[str, list[float]], *, resamples: int, confidence: float, seed: int
) -> Interval:
    """``stratified_bootstrap`` as it was before (commit c1c924e): ``np.sort`` of a copy."""
    rng = np.random.Generator(np.random.PCG64(seed))
    cases = sorted(by_case)
    arrays = [np.asarray(by_case[c], dtype=np.float64) for c in cases]
    pooled = np.concatenate(arrays)
    total = pooled.size
    stats = np.empty(resamples, dtype=np.float64)
    chunk = max(1, min(resamples, 4_000_000 // max(total, 1)))
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        parts = [
            values[rng.integers(0, values.size, size=(stop - start, values.size))]
            for values in arrays
        ]
        rows = np.sort(np.concatenate(parts, axis=1), axis=1)
        mid = total // 2
        stats[start:stop] = rows[:, mid] if total % 2 else (rows[:, mid - 1] + rows[:, mid]) / 2
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(_round(float(np.median(pooled))), _round(float(low)), _round(float(high)))


# ratios as verdicts see them: gains and losses, exact ties, zeros, tiny and large magnitudes
_ratio = st.one_of(
    st.floats(min_value=-2.0, max_value=2.0, allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 0.05, -0.05, 0.03, 1e-300, -1e-300, 1e300]),
)
_cases = st.dictionaries(
    st.sampled_from(["small", "large", "xl", "c"]),
    st.lists(_ratio, min_size=1, max_size=40),
    min_size=1,
    max_size=4,
)


def _bits(interval: Interval) -> tuple[bytes, ...]:
    return tuple(np.float64(v).tobytes() for v in (interval.estimate, interval.low, interval.high))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    cases=_cases,
    seed=st.integers(0, 2**63 - 1),
    resamples=st.sampled_from([1, 2, 7, 200, 2_000]),
    confidence=st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_r12_bootstrap_sorted_in_place_is_the_previous_bit_for_bit(
    cases: dict[str, list[float]], seed: int, resamples: int, confidence: float
) -> None:
    args = {"resamples": resamples, "confidence": confidence, "seed": seed}
    new, old = stratified_bootstrap(cases, **args), _previous_bootstrap(cases, **args)
    assert _bits(new) == _bits(old)


def test_r12_bootstrap_in_chunks_is_the_previous_bit_for_bit() -> None:
    # 900 values: 4,000,000 // 900 = 4,444 rows a chunk, so 10,000 resamples take 3 chunks
    rng = np.random.default_rng(7)
    cases = {"a": list(rng.normal(0.03, 0.01, 500)), "b": list(rng.normal(0.05, 0.02, 400))}
    args = {"resamples": 10_000, "confidence": 0.95, "seed": 2**62 + 9}
    assert _bits(stratified_bootstrap(cases, **args)) == _bits(_previous_bootstrap(cases, **args))
