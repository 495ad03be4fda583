"""The signed-rank p-value without ``scipy.stats`` (derive/signed_rank.py) agrees bit for
bit with ``scipy.stats.wilcoxon`` in each of SciPy's three branches (exact distribution, exact
permutation test with ties, normal approximation), since audit re-derives recorded p-values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import wilcoxon

from perfledger.derive.signed_rank import signed_rank_p


def _scipy_p(values: list[float]) -> float | None:
    nonzero = [v for v in values if v != 0.0]
    if len(nonzero) < 2:
        return None
    return float(wilcoxon(nonzero).pvalue)


def _same(ours: float | None, theirs: float | None) -> bool:
    if ours is None or theirs is None:
        return ours is theirs
    return ours == theirs or (math.isnan(ours) and math.isnan(theirs))


# untied: magnitudes unique (hypothesis favours values such as 1.0 and -1.0, whose ties sent
# SciPy down its costly permutation branch, which the test below covers on purpose)
@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=64), min_size=0, max_size=70,
                unique_by=abs))  # fmt: skip
def test_signed_rank_p_equals_scipy_on_untied_values(values: list[float]) -> None:
    assert _same(signed_rank_p(values), _scipy_p(values)), values


def _nonzero(values: list[float]) -> int:
    return sum(v != 0.0 for v in values)


_TIED = st.lists(st.integers(-6, 6).map(lambda k: k / 4), min_size=0, max_size=70)


# SciPy's exact permutation test (ties, n <= 13) costs it 2**n: at 11 to 13 non-zero values
# (0.1 to 1 s a call) it was most of this test's time. The fast tier draws every other length;
# the slow test below draws 11 and 12 (a few examples: each costs SciPy up to half a second),
# and the boundary test pins n = 13 and 14 with ties on every run
@settings(max_examples=40, deadline=None)
@given(_TIED.filter(lambda values: not 11 <= _nonzero(values) <= 13))
def test_signed_rank_p_equals_scipy_on_tied_values_and_zeros(values: list[float]) -> None:
    assert _same(signed_rank_p(values), _scipy_p(values)), values


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(
    st.integers(11, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.sampled_from([k / 4 for k in range(-6, 7) if k]), min_size=n, max_size=n),
            st.integers(0, 5),
        )
    )
)
def test_signed_rank_p_equals_scipy_on_tied_values_at_scipys_costliest_lengths(
    drawn: tuple[list[float], int],
) -> None:
    nonzero, zeros = drawn
    values = [*nonzero, *[0.0] * zeros]
    assert _same(signed_rank_p(values), _scipy_p(values)), values


@pytest.mark.parametrize("n", [2, 5, 13, 14, 49, 50, 51, 200])
def test_signed_rank_p_equals_scipy_at_each_branch_boundary(n: int) -> None:
    rng = np.random.default_rng(n)
    untied = list(rng.normal(0.01, 0.02, n))
    tied = [round(v, 2) for v in untied]
    for values in (untied, tied):
        assert _same(signed_rank_p(values), _scipy_p(values)), values


def test_signed_rank_p_refuses_a_value_that_is_not_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        signed_rank_p([0.1, math.inf, -0.2])
