"""The verdict statistics (R12) computed fast are bit-for-bit what numpy's reference
computation gives: recorded verdicts are re-derived on every audit, so a faster median may not
change a single bit of a CI or an estimate."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.projections.verdicts import Interval, _round, stratified_bootstrap
from perfledger.projections.verdicts import median as _median

_values = st.lists(
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False),
    min_size=1,
    max_size=25,
)


def _reference_bootstrap(
    by_case: dict[str, list[float]], *, resamples: int, confidence: float, seed: int
) -> Interval:
    """The bootstrap as first written: numpy.median of every resample."""
    rng = np.random.Generator(np.random.PCG64(seed))
    arrays = [np.asarray(by_case[c], dtype=np.float64) for c in sorted(by_case)]
    pooled = np.concatenate(arrays)
    parts = [v[rng.integers(0, v.size, size=(resamples, v.size))] for v in arrays]
    stats = np.median(np.concatenate(parts, axis=1), axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return Interval(_round(float(np.median(pooled))), _round(float(low)), _round(float(high)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(values=_values)
def test_median_is_numpys(values: list[float]) -> None:
    assert _median(values) == float(np.median(np.asarray(values, dtype=np.float64)))


@settings(max_examples=60, deadline=None)
@given(
    cases=st.dictionaries(st.sampled_from(["a", "b", "c"]), _values, min_size=1, max_size=3),
    seed=st.integers(0, 2**63 - 1),
)
def test_r12_bootstrap_is_numpys_bit_for_bit(cases: dict[str, list[float]], seed: int) -> None:
    fast = stratified_bootstrap(cases, resamples=2_000, confidence=0.95, seed=seed)
    reference = _reference_bootstrap(cases, resamples=2_000, confidence=0.95, seed=seed)
    assert fast == reference
