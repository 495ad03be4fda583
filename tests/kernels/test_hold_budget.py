"""The hold budget (:class:`perfledger.kernels.timing.HoldBudget`): the host time stream holds
may keep out of the event time is bounded, per call on average and saved up for one call, so a
subject cannot work on the host or the copy engines for free. Pure Python: no GPU needed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.kernels.timing import HOLD_CAP_S, HOLD_PER_CALL_S, HoldBudget


def test_a_fresh_budget_grants_its_cap_to_the_first_call() -> None:
    assert HoldBudget().grant() == pytest.approx(HOLD_CAP_S)


def test_a_budget_spent_in_one_call_grants_only_the_refill_to_the_next() -> None:
    budget = HoldBudget(per_call_s=25e-6, cap_s=400e-6)
    budget.grant()
    budget.spend(1.0)  # a call that kept the host far beyond its allowance
    assert budget.grant() == pytest.approx(25e-6)


def test_a_budget_refills_to_its_cap_and_no_further() -> None:
    budget = HoldBudget(per_call_s=25e-6, cap_s=100e-6)
    budget.spend(1.0)
    grants = [budget.grant() for _ in range(10)]
    assert grants[:4] == pytest.approx([25e-6, 50e-6, 75e-6, 100e-6])
    assert max(grants) == pytest.approx(100e-6)


@pytest.mark.parametrize(("per_call_s", "cap_s"), [(-1e-6, 1e-4), (2e-4, 1e-4)])
def test_a_negative_refill_or_a_cap_below_it_is_refused(per_call_s: float, cap_s: float) -> None:
    with pytest.raises(ValueError, match="hold budget"):
        HoldBudget(per_call_s, cap_s)


@given(st.lists(st.floats(min_value=0.0, max_value=5e-3), min_size=1, max_size=400))
def test_host_time_kept_out_over_any_calls_is_at_most_cap_plus_refills(hosts: list[float]) -> None:
    budget = HoldBudget()
    kept_out = 0.0
    for host_s in hosts:
        allowed = budget.grant()
        assert allowed <= HOLD_CAP_S + 1e-12
        kept_out += min(host_s, allowed)  # beyond the allowance the hold has ended
        budget.spend(host_s)
    assert kept_out <= HOLD_CAP_S + len(hosts) * HOLD_PER_CALL_S + 1e-9


@given(st.integers(min_value=1, max_value=200))
def test_calls_that_use_no_host_time_keep_the_full_cap_available(n: int) -> None:
    budget = HoldBudget()
    for _ in range(n):
        budget.grant()
        budget.spend(0.0)
    assert budget.grant() == pytest.approx(HOLD_CAP_S)
