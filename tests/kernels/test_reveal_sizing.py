"""Hole 3 of issue 36: how many calls the measuring process reveals
(:func:`perfledger.derive.isolation_checks.reveal_sample_size`, :func:`reveals_per_pair`,
:func:`escape_bound`; docs/kernel-harness.md, "Reveals"). Pure, CPU only: a subject that skips
1 % of its timed calls escapes every reveal with probability at most 0.001."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.derive.isolation_checks import (
    REVEAL_ESCAPE,
    REVEAL_SKIP_SHARE,
    escape_bound,
    reveal_sample_size,
    reveals_per_pair,
)


def test_the_sample_size_of_the_docs_is_688_and_a_shorter_run_checks_every_call() -> None:
    # ln 0.001 / ln 0.99 = 687.3: 688 checked calls
    assert math.log(0.001) / math.log(0.99) == pytest.approx(687.3, abs=0.05)
    assert reveal_sample_size(10**9) == 688
    assert 0.99**688 <= 0.001 < 0.99**687
    assert reveal_sample_size(688) == 688 and reveal_sample_size(300) == 300
    with pytest.raises(ValueError):
        reveal_sample_size(100, skip_share=0.0)


@given(
    calls=st.integers(1, 10**7),
    skip_share=st.floats(0.001, 0.5),
    escape=st.floats(1e-6, 0.5),
)
def test_the_sample_size_is_the_least_that_bounds_the_escape(
    calls: int, skip_share: float, escape: float
) -> None:
    k = reveal_sample_size(calls, skip_share, escape)
    unbounded = reveal_sample_size(10**12, skip_share, escape)
    assert k == min(calls, unbounded)
    assert (1 - skip_share) ** unbounded <= escape * (1 + 1e-9)  # enough ...
    assert unbounded == 1 or (1 - skip_share) ** (unbounded - 1) > escape * (1 - 1e-9)  # least


@given(
    calls_per_batch=st.integers(1, 64),
    planned=st.integers(1, 10**6),
    extra=st.integers(0, 10**6),
    skip_share=st.sampled_from([REVEAL_SKIP_SHARE, 0.05, 0.1]),
)
def test_reveals_per_pair_bound_the_escape_for_every_run_at_least_as_long_as_planned(
    calls_per_batch: int, planned: int, extra: int, skip_share: float
) -> None:
    r = reveals_per_pair(calls_per_batch, planned, skip_share)
    assert 1 <= r <= calls_per_batch
    for calls in (planned, planned + extra):
        assert escape_bound(calls, calls_per_batch, r, skip_share) <= REVEAL_ESCAPE * (1 + 1e-9)
    if planned <= reveal_sample_size(10**12, skip_share):
        assert r == calls_per_batch  # a run of at most 688 calls: every call revealed


@given(
    c=st.integers(1, 40),
    data=st.data(),
)
def test_the_bound_holds_for_draws_without_replacement_within_a_batch(
    c: int, data: st.DataObject
) -> None:
    # the exact probability that r draws (without replacement) among c calls miss all j
    # skipped ones is C(c - j, r) / C(c, r) <= (1 - r / c)^j, the bound escape_bound multiplies
    r = data.draw(st.integers(1, c))
    j = data.draw(st.integers(0, c))
    exact = math.comb(c - j, r) / math.comb(c, r)
    assert exact <= (1 - r / c) ** j + 1e-12


def test_skipping_one_call_in_ten_escaped_a_20_pair_run_with_one_reveal_and_no_longer() -> None:
    # the figure: one reveal per pair of 8-call batches, 20 pairs (160 calls of each
    # subject, 16 skipped, one in each of 16 batches): (7/8)^16 ~ 0.12; a sized run reveals
    # every call of a run that short
    assert escape_bound(160, 8, 1, skip_share=0.1) == pytest.approx((7 / 8) ** 16)
    assert escape_bound(160, 8, 1, skip_share=0.1) == pytest.approx(0.118, abs=0.001)
    r = reveals_per_pair(8, 160)
    assert r == 8 and escape_bound(160, 8, r) == 0.0
    # a long run of a short kernel (9,000 calls): one reveal a pair already bounds it
    assert reveals_per_pair(8, 9000) == 1 and escape_bound(9000, 8, 1) < 1e-5
