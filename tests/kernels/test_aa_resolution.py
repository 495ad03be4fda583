"""R4's resolution from A/A comparisons of the kernel harness: only valid comparisons count
(:func:`perfledger.kernels.harness.harness.resolution_from_aa`). CPU only: the comparisons are built
from their parts."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def _aa(ci: tuple[float, float], flags: list[str], median: float = 1.0) -> Any:
    from perfledger.derive.stats import PairedStats
    from perfledger.kernels.harness.harness import Comparison, CorrectnessReport

    ok = CorrectnessReport("s", True, ())
    stats = PairedStats(12, median, ci[0], ci[1], 0.95, 10_000, 0.5, 1e-3, 1e-3, 1e-3, 0)
    return Comparison(ok, ok, None, None, [], stats, "ci", flags, {})


@pytest.mark.slow
def test_r4_resolution_leaves_out_invalid_aa_comparisons_and_says_how_many() -> None:
    from perfledger.kernels.harness.harness import resolution_from_aa

    good = [_aa((0.999, 1.001), ["no_ceilings"]), _aa((0.998, 1.0015), [])]
    # a flagged run (here narrow: would have made the resolution smaller) does not count
    flagged = _aa((0.9999, 1.0001), ["pause:candidate"])
    got = resolution_from_aa([*good, flagged])
    assert got["resolution"] == pytest.approx(0.002) and got["repeats"] == 2
    assert got["excluded"] == 1
    with pytest.raises(ValueError, match=r"none of the 2 A/A comparisons is valid.*clock:ref"):
        resolution_from_aa([flagged, _aa((0.9, 1.1), ["clock:reference"])])


def _narrow(median: float, half: float = 0.0004) -> Any:
    """A valid A/A comparison whose CI is ``median`` +- ``half`` (a pair of workers' own bias,
    which its CI of blocks does not see)."""
    return _aa((median - half, median + half), [], median)


def test_r4_resolution_bounds_the_bias_of_the_next_pair_of_workers_not_only_the_ci_ends() -> None:
    from perfledger.kernels.harness.harness import resolution_from_aa

    # the A/A ratios five fresh pairs of workers gave for a memory-bound 15 us kernel on an H200
    medians = [1.0076, 0.99682, 0.99287, 0.98598, 0.99611]
    got = resolution_from_aa([_narrow(m) for m in medians])
    logs = np.log(medians)
    t_975_4 = 2.7764451051977987  # scipy.stats.t.ppf(0.975, 4)
    want = math.expm1(abs(logs.mean()) + t_975_4 * logs.std(ddof=1) * math.sqrt(1 + 1 / 5))
    assert got["bound"] == pytest.approx(want, rel=1e-9)
    assert got["reach"] == pytest.approx(1 - (0.98598 - 0.0004))
    # the largest CI end says 1.44 %; the next pair's bias can lie further out
    assert got["resolution"] == got["bound"] > got["reach"] + 0.005


def test_r4_one_valid_aa_has_no_bound_and_its_resolution_is_the_ci_reach() -> None:
    from perfledger.kernels.harness.harness import resolution_from_aa

    got = resolution_from_aa([_narrow(0.99), _aa((0.9, 1.1), ["pause:candidate"], 1.0)])
    assert got["bound"] == 0.0 and got["repeats"] == 1
    assert got["resolution"] == got["reach"] == pytest.approx(0.0104)


def _false_pass_rate(rule: str, trials: int = 4000, n: int = 5, sigma: float = 0.008) -> float:
    """How often an A/A comparison (a fresh pair of workers, bias ~ N(0, sigma) in log ratio,
    CI half-width 0.04 %) passes as an improvement (its CI's upper end below 1 - resolution)
    against the resolution of ``n`` earlier A/A comparisons: ``rule`` ``new`` (the resolution
    now) or ``reach`` (the largest CI end alone, as before)."""
    from perfledger.kernels.harness.harness import resolution_from_aa

    rng = np.random.default_rng(20261202)
    passes = 0
    for _ in range(trials):
        biases = np.exp(rng.normal(0.0, sigma, n + 1))
        figures = resolution_from_aa([_narrow(float(b)) for b in biases[:n]])
        resolution = figures["resolution"] if rule == "new" else figures["reach"]
        passes += bool(biases[n] + 0.0004 < 1.0 - resolution)
    return passes / trials


@pytest.mark.slow
def test_r4_an_aa_of_a_fresh_pair_passes_against_the_resolution_at_most_about_once_in_40() -> None:
    # the largest of five earlier biases is exceeded on the favourable side about once in 12
    assert _false_pass_rate("reach") > 0.06
    # the prediction bound: 2.5 % one-sided where biases are normal
    assert _false_pass_rate("new") < 0.035


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.9, 1.1), min_size=1, max_size=9))
def test_r4_resolution_is_never_below_the_ci_reach_or_the_bound(medians: list[float]) -> None:
    from perfledger.kernels.harness.harness import resolution_from_aa

    got = resolution_from_aa([_narrow(m) for m in medians])
    assert got["resolution"] == max(got["reach"], got["bound"]) >= 0.0
    if len(medians) < 2:
        assert got["bound"] == 0.0


def test_r4_recording_a_kernel_case_with_one_valid_aa_comparison_is_refused() -> None:
    from perfledger.app.aa import kernel_aa_pairs_check
    from perfledger.errors import RuleRefused
    from perfledger.kernels.harness.harness import resolution_from_aa

    short = resolution_from_aa([_narrow(0.99), _aa((0.9, 1.1), ["pause:candidate"], 1.0)])
    enough = resolution_from_aa([_narrow(0.99), _narrow(1.004)])
    with pytest.raises(RuleRefused) as refused:
        kernel_aa_pairs_check({"a": enough, "b": short}, record=True)
    assert refused.value.rule == "R4" and "['b']" in str(refused.value)
    assert "invalid: {'b': 1}" in str(refused.value) and "--runs 5" in refused.value.hint
    # measured without --record: the short case is only noted
    notes = kernel_aa_pairs_check({"a": enough, "b": short}, record=False)
    assert len(notes) == 1 and notes[0].startswith("case b: one valid A/A comparison")
    assert kernel_aa_pairs_check({"a": enough}, record=True) == []
