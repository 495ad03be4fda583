"""Pure parts of the measurement protocol, tested without a GPU: paired statistics, the stopping
rule, tolerances, poisoning and hashing (SPEC.md section 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.derive.stats import bootstrap_median_ci, log_ratios, paired_stats, timer_quantum
from perfledger.kernels.harness import correctness
from perfledger.kernels.harness.stopping import Stopper, StoppingRule, relative_noise


def test_paired_stats_finds_a_known_ratio() -> None:
    rng = np.random.default_rng(1)
    ref = 1e-3 * (1 + 0.01 * rng.standard_normal(400))
    cand = ref * 1.03 * (1 + 0.002 * rng.standard_normal(400))
    s = paired_stats(ref, cand, resamples=2000, seed=7)
    assert s.n == 400 and s.ci_low < s.median_ratio < s.ci_high
    assert s.ci_low > 1.025 and s.ci_high < 1.035
    assert s.direction() == "slower" and s.wilcoxon_p is not None and s.wilcoxon_p < 1e-6
    assert s.status(min_effect=0.01) == "fail"  # no gain: 3 % slower
    faster = paired_stats(cand, ref, resamples=2000, seed=7)
    assert faster.direction() == "faster" and faster.status(min_effect=0.01) == "pass"
    assert faster.status(min_effect=0.05) == "fail"


def test_paired_stats_is_seeded_and_aa_is_not_a_difference() -> None:
    rng = np.random.default_rng(2)
    ref = 1 + 0.01 * rng.standard_normal(200)
    cand = 1 + 0.01 * rng.standard_normal(200)
    a = paired_stats(ref, cand, resamples=1000, seed=3)
    assert a == paired_stats(ref, cand, resamples=1000, seed=3)
    assert a.direction() == "same" and a.status(min_effect=0.01) != "pass"


def test_pyperf_pitfall_unequal_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="equal counts"):
        log_ratios([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        log_ratios([1.0, math.nan], [1.0, 2.0])
    with pytest.raises(ValueError):
        log_ratios([1.0, 0.0], [1.0, 2.0])


def test_identical_samples_give_a_degenerate_inconclusive_ci() -> None:
    s = paired_stats([1.0] * 20, [1.0] * 20, resamples=500)
    assert s.ci_low == s.ci_high == 1.0 and s.wilcoxon_p is None
    assert s.status(min_effect=0.0) == "inconclusive"


@given(st.lists(st.floats(min_value=0.5, max_value=2.0), min_size=3, max_size=40))
@settings(max_examples=30, deadline=None)
def test_ci_contains_the_median_ratio(ratios: list[float]) -> None:
    ref = [1.0] * len(ratios)
    s = paired_stats(ref, ratios, resamples=200, seed=1)
    assert s.ci_low <= s.median_ratio * (1 + 1e-12) and s.median_ratio <= s.ci_high * (1 + 1e-12)


def test_stopping_needs_min_samples_and_gpu_time() -> None:
    rule = StoppingRule()
    stopper = Stopper(rule)
    assert stopper.check([1.0] * 9, gpu_s=10.0) is None  # 9 < 10 samples
    assert stopper.check([1.0] * 50, gpu_s=0.1) is None  # 0.1 s < 0.5 s
    assert stopper.check([1.0] * 50, gpu_s=0.6) == "target_rsd"
    assert Stopper(rule).check([1.0] * 3, gpu_s=15.0) == "max_gpu_s"


def test_stopping_on_settled_noise() -> None:
    rng = np.random.default_rng(0)
    values = list(1 + 0.05 * rng.standard_normal(5000))  # 5 % noise never reaches 0.5 %
    stopper = Stopper(StoppingRule())
    reasons = [stopper.check(values[: 1000 + 16 * i], gpu_s=1.0) for i in range(10)]
    assert "noise_settled" in reasons and "target_rsd" not in reasons
    assert relative_noise(values) == pytest.approx(0.05, rel=0.1)
    assert relative_noise([0.01, -0.01, 0.0], logs=True) == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("dtype", "tol"), [("float32", 1e-4), ("float16", 1e-2), ("float64", 1e-10), ("int32", 0.0)]
)
def test_tolerance_by_dtype(dtype: str, tol: float) -> None:
    assert correctness.tolerance_for(np.dtype(dtype)) == tol


def test_compare_nan_never_passes_and_tolerance_applies() -> None:
    ref = np.linspace(1, 2, 1000)  # the float64 exact answer of a float32 output
    out = ref.astype(np.float32)
    assert correctness.compare(out, ref, dtype="float32").ok
    bad = out.copy()
    bad[3] = np.nan
    c = correctness.compare(bad, ref, dtype="float32")
    assert not c.ok and c.reason == "non_finite" and c.non_finite == 1
    off = out * np.float32(1.001)
    assert correctness.compare(off, ref, dtype="float32").reason == "tolerance"
    assert correctness.compare(off, ref, dtype="float32", tolerance=1e-2).ok
    assert correctness.compare(out[:10], ref, dtype="float32").reason == "shape"
    assert not correctness.compare(np.array([1, 2], np.int32), np.array([1, 3], np.int32)).ok


# ------------------------------------------- hole 5: the tolerance follows the reference


def test_cheat_float16_output_for_a_float32_reference_fails_by_dtype() -> None:
    # a subject that computes and returns float16 (half the bytes) where the reference's output
    # is float32: within float16's tolerance (1e-2), 5x beyond float32's (1e-4). The tolerance
    # used to follow the output's dtype, so it passed; now the dtype itself is wrong.
    ref = np.random.default_rng(0).standard_normal(4096)  # float64 exact answer
    cheat = ref.astype(np.float16)
    assert correctness.compare(cheat, ref, tolerance=1e-2, dtype="float16").ok  # its own rule
    c = correctness.compare(cheat, ref, dtype="float32")
    assert not c.ok and c.reason == "dtype" and c.tolerance == 1e-4, c
    assert c.detail is not None and "float16" in c.detail and "float32" in c.detail
    # against a reference output of float32 itself (the parent's cross-check), the same
    c = correctness.compare(cheat, ref.astype(np.float32))
    assert not c.ok and c.reason == "dtype"
    # an honest control: float32 output of the same values passes float32's tolerance
    honest = correctness.compare(ref.astype(np.float32), ref, dtype="float32")
    assert honest.ok and honest.tolerance == 1e-4


@pytest.mark.parametrize(
    ("out", "reason"),
    [
        (np.zeros(8, np.dtype(">f4")), "dtype"),  # byte-swapped: another output
        (np.zeros(8, np.float64), "dtype"),  # more precision is another dtype too
        (np.zeros((2, 4), np.float32), "shape"),
        (np.zeros(8, np.int32), "dtype"),
    ],
)
def test_cheat_output_of_another_dtype_or_shape_is_wrong_whatever_its_values(
    out: np.ndarray, reason: str
) -> None:
    ref = np.zeros(8, np.float32)
    c = correctness.compare(out, ref)
    assert not c.ok and c.reason == reason and c.detail, c
    assert correctness.compare(np.zeros(8, np.float32), ref).ok  # the control


def test_compare_by_a_targets_accuracy_rule() -> None:
    ref = np.array([1.0, 2.0, 3.0], np.float32)
    assert correctness.compare(ref.copy(), ref, rule={"compare": "exact"}).ok
    near = ref + np.float32(1e-6)
    c = correctness.compare(near, ref, rule={"compare": "exact"})
    assert not c.ok and c.reason == "tolerance" and "3 of 3" in (c.detail or "")
    rule = {"compare": "allclose", "rtol": 1e-5, "atol": 0.0}
    assert correctness.compare(near, ref, rule=rule).ok
    assert not correctness.compare(ref * np.float32(1.001), ref, rule=rule).ok
    nan = np.array([np.nan], np.float32)
    assert not correctness.compare(nan, nan.copy(), rule={"compare": "exact"}).ok  # NaN != NaN
    assert not correctness.compare(nan, nan.copy(), rule=rule).ok
    # a rule never loosens the dtype: float16 values within rtol are still another output
    assert correctness.compare(near.astype(np.float16), ref, rule=rule).reason == "dtype"
    with pytest.raises(ValueError, match="accuracy rule"):
        correctness.compare(ref, ref, rule={"compare": "self_reported"})


def test_poison_and_hash() -> None:
    f = np.zeros(8, np.float16)
    correctness.poison(f)
    assert np.all(np.isnan(f))
    i = np.zeros(4, np.int32)
    correctness.poison(i)
    assert np.all(i == np.iinfo(np.int32).max)
    a = np.arange(10, dtype=np.float32)
    h = correctness.array_hash(a)
    assert h == correctness.array_hash(a.copy())
    a[0] = 1
    assert h != correctness.array_hash(a)
    assert correctness.array_hash(np.zeros(4, np.float32)) != correctness.array_hash(
        np.zeros(2, np.float64)
    )


def test_abba_blocks_cancel_a_constant_order_effect() -> None:
    from perfledger.kernels.harness.harness import abba_blocks

    # pairs alternate AB / BA; whoever runs second is 1 % slower (an order effect), A == B
    a = [1.00 if k % 2 == 0 else 1.01 for k in range(20)]
    b = [1.01 if k % 2 == 0 else 1.00 for k in range(20)]
    per_pair = np.log(np.asarray(b) / np.asarray(a))
    assert np.all(np.abs(per_pair) > 0.009)  # each pair alone is off by the order effect
    a_blocks, b_blocks = abba_blocks(a, b)
    assert a_blocks.size == 10 and np.allclose(a_blocks, b_blocks)
    assert abba_blocks([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])[0].size == 1  # odd pair left out


# ---------------------------------------------------------------- a quantized timer (tiny kernels)

_STEP_S = 32e-9  # a CUDA event's tick on recent GPUs


def _ticks(rng: np.random.Generator, mean_s: float, n: int) -> np.ndarray:
    """``n`` times around ``mean_s`` with a little noise, rounded to the event timer's step."""
    return np.round(rng.normal(mean_s, 40e-9, n) / _STEP_S) * _STEP_S


def test_quantized_aa_samples_do_not_claim_a_zero_width_ci() -> None:
    rng = np.random.default_rng(7)
    ref, cand = _ticks(rng, 3.9e-6, 1000), _ticks(rng, 3.9e-6, 1000)
    s = paired_stats(ref, cand, resamples=500, seed=1)
    assert math.isclose(s.quantum_s, _STEP_S, rel_tol=1e-3)
    # one timer step of a ~3.9 us sample either side: at least 0.8 % wide in all
    assert s.ci_high / s.ci_low - 1 >= 2 * _STEP_S / 3.9e-6 * 0.99
    assert s.direction() == "same"
    assert s.status(0.005) != "pass"


def test_quantized_samples_still_show_a_true_difference() -> None:
    rng = np.random.default_rng(8)
    s = paired_stats(_ticks(rng, 3.9e-6, 1000), _ticks(rng, 4.5e-6, 1000), resamples=500, seed=1)
    assert s.direction() == "slower" and s.ci_low > 1.1


def test_continuous_samples_are_not_widened() -> None:
    rng = np.random.default_rng(9)
    ref, cand = rng.normal(150e-6, 1e-6, 400), rng.normal(150e-6, 1e-6, 400)
    s = paired_stats(ref, cand, resamples=500, seed=3)
    assert s.quantum_s == 0.0
    logs = np.log(cand / ref)
    low, high = bootstrap_median_ci(logs, resamples=500, confidence=0.95, seed=3)
    assert (s.ci_low, s.ci_high) == (math.exp(low), math.exp(high))


def test_timer_step_is_found_in_sums_of_float32_event_times() -> None:
    rng = np.random.default_rng(10)
    ticks = rng.integers(120, 126, size=(2000, 2))
    # CUDA reports elapsed milliseconds as float32; two calls are summed in float64
    calls_s = (ticks * np.float32(_STEP_S * 1e3)).astype(np.float32).astype(np.float64) / 1e3
    sums = calls_s.sum(axis=1)
    assert math.isclose(timer_quantum(sums), _STEP_S, rel_tol=1e-3)
