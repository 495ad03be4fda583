"""Hole 1 of issue 36: whether the parent's clock can confirm a claimed saving
(:func:`perfledger.derive.isolation_checks.clock_confirms`; docs/kernel-harness.md, "What the
parent's clock can confirm"). Pure, CPU only; the isolated comparison applies it
(tests/kernels/test_isolated.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.derive.isolation_checks import NOT_CONFIRMABLE, clock_confirms

US = 1e-6


def test_cheat_short_kernel_reporting_six_tenths_of_its_time_is_not_confirmable() -> None:
    # the H100 case: an 18 us kernel reporting 0.6x its time passed the clock check,
    # whose limit was its 50 us floor; the claimed 7.2 us a call is within what it cannot see
    c = clock_confirms(18 * US, 0.6 * 18 * US, limit_s=50 * US)
    assert not c.confirmable and c.note is not None and c.note.startswith(NOT_CONFIRMABLE)
    assert c.saving_s == pytest.approx(7.2 * US) and c.resolution_s == 50 * US
    # and the 103 us kernel reporting 0.85x (15.5 us a call) under the same floor
    assert not clock_confirms(103 * US, 0.85 * 103 * US, limit_s=50 * US).confirmable


def test_a_saving_beyond_the_clocks_limit_is_confirmable_and_the_honest_control() -> None:
    # a 2 ms kernel made 2x faster, against a limit of 100 us a call: the clock bears it out
    c = clock_confirms(2e-3, 1e-3, limit_s=100 * US)
    assert c.confirmable and c.note is None and c.saving_s == pytest.approx(1e-3)
    # a candidate that claims no saving needs no confirmation (and is no pass either way)
    assert clock_confirms(18 * US, 20 * US, limit_s=50 * US).confirmable


def test_the_batch_clocks_tick_over_a_batch_bounds_the_resolution() -> None:
    # a coarse clock (1 ms tick) over 8 calls cannot resolve less than 125 us a call
    c = clock_confirms(1e-3, 0.9e-3, limit_s=10 * US, calls_per_batch=8, clock_tick_s=1e-3)
    assert c.resolution_s == pytest.approx(125 * US) and not c.confirmable
    assert clock_confirms(
        1e-3, 0.8e-3, limit_s=10 * US, calls_per_batch=8, clock_tick_s=1e-3
    ).confirmable


@pytest.mark.parametrize(
    "args",
    [(0.0, 1e-3, 1e-5), (1e-3, float("nan"), 1e-5), (1e-3, 1e-3, -1.0), (1e-3, 1e-3, float("inf"))],
)
def test_bad_figures_are_refused(args: tuple[float, float, float]) -> None:
    with pytest.raises(ValueError):
        clock_confirms(*args)
    with pytest.raises(ValueError):
        clock_confirms(1e-3, 1e-3, 1e-5, calls_per_batch=0)


@given(
    ref=st.floats(1e-7, 1.0),
    share=st.floats(0.01, 2.0),
    limit=st.floats(0.0, 1e-2),
)
def test_confirmable_exactly_when_the_claimed_saving_exceeds_the_limit(
    ref: float, share: float, limit: float
) -> None:
    c = clock_confirms(ref, ref * share, limit_s=limit)
    saving = ref - ref * share
    assert c.confirmable == (saving <= 0 or saving > limit)
    assert (c.note is None) == c.confirmable
