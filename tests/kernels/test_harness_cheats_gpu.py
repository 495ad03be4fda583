"""Adversarial subjects against the kernel harness's second protocol, on a real GPU (marked
``gpu``; skipped with a reason without CuPy or a GPU), each next to an honest control:

- a subject cannot tell a checked call from an unchecked one (every timed call's outputs are
  poisoned before its start event, and whether a call is re-checked is drawn from the hidden
  seed after the call);
- a subject cannot profit from remembering earlier inputs or outputs (every pair of calls gets a
  fresh input set);
- plausibility by the unit that does the work (a CUDA-core kernel is checked against the
  CUDA-core ceiling, not the tensor-core one).

Where the first protocol was fooled by a cheat, the test shows that too (``protocol=1``), so
each cheat is known to be one. Nothing is mocked: real CUDA kernels on the device.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from perfledger.errors import MeasurementError  # noqa: E402
from perfledger.kernels.cuda.ceilings import Ceilings, check_plausible  # noqa: E402
from perfledger.kernels.harness.examples import iterate_problem, iterate_subject  # noqa: E402
from perfledger.kernels.harness.harness import (  # noqa: E402
    CallableSubject,
    Comparison,
    Harness,
    HarnessConfig,
)
from perfledger.kernels.harness.stopping import StoppingRule  # noqa: E402

pytestmark = pytest.mark.gpu

#: Compute-bound: 8 M elements x 2048 fused multiply-adds, ~0.5 ms per call on an H200, so
#: that skipping or replaying work is a large gain a cheat would want.
N, K = 1 << 23, 2048
FAST = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2, max_gpu_s=2.0))
FIRST = replace(FAST, protocol=1)


def _compare(config: HarnessConfig, cand: Any) -> Comparison:
    # no ceilings: these tests isolate properties 1 and 2 (plausibility has tests of its own)
    return Harness(iterate_problem(N, K), config).compare(iterate_subject(N, K), cand)


def _fooled(c: Comparison) -> bool:
    """A comparison that records a clearly faster, valid candidate."""
    return c.valid and c.stats is not None and c.stats.ci_high < 0.9


def _caught(c: Comparison) -> bool:
    """Invalid (a re-check failed) or no faster than the honest reference."""
    return not c.valid or (c.stats is not None and c.stats.median_ratio > 0.97)


def _honest() -> Any:
    return iterate_subject(N, K)


# ------------------------------------------------------------- 1. checked calls look like others


def test_cheat_that_computes_only_when_its_output_is_poisoned() -> None:
    # The first protocol poisoned only the calls it re-checked: a subject that looks at its
    # output first could skip the work whenever the buffer still held an earlier answer.
    good = _honest()

    def sniffer(inputs, outputs):  # type: ignore[no-untyped-def]
        if bool(cupy.isnan(outputs["y"][0])):
            good(inputs, outputs)

    cheat = CallableSubject("poison-sniffer", sniffer)
    assert _fooled(_compare(FIRST, cheat))  # the cheat is one
    # fresh inputs: an unpoisoned buffer holds the answer to other inputs, so skipping leaves
    # a wrong answer (flagged by the re-checks); with every call poisoned it always computes
    c = _compare(FAST, cheat)
    assert _caught(c) and not c.valid, (c.flags, c.stats)
    poisoned = _compare(replace(FAST, poison_every_call=True), cheat)
    assert poisoned.valid and poisoned.stats is not None, poisoned.flags
    assert poisoned.stats.median_ratio > 0.97, poisoned.stats  # ... and gains nothing


def test_cheat_lazy_on_a_random_fifth_of_calls_is_flagged() -> None:
    good = _honest()
    rng = np.random.default_rng(1)
    state = {"calls": 0}

    def lazy(inputs, outputs):  # type: ignore[no-untyped-def]
        state["calls"] += 1
        if state["calls"] <= 5 or rng.random() >= 0.2:  # honest in the correctness trials
            good(inputs, outputs)

    c = _compare(FAST, CallableSubject("lazy-fifth", lazy))
    assert not c.valid and "recheck:lazy-fifth" in c.flags, c.flags
    assert c.cand is not None and c.cand.checked_calls
    assert any("output:y" in r for r in c.cand.recheck_failures), c.cand.recheck_failures


def test_cheat_that_writes_nothing_after_the_correctness_trials_is_flagged() -> None:
    good = _honest()
    state = {"calls": 0}

    def stops(inputs, outputs):  # type: ignore[no-untyped-def]
        state["calls"] += 1
        if state["calls"] <= 5:
            good(inputs, outputs)

    c = _compare(FAST, CallableSubject("stops-after-trials", stops))
    assert not c.valid and "recheck:stops-after-trials" in c.flags, c.flags


def test_honest_subjects_are_rechecked_and_stay_valid() -> None:
    c = _compare(FAST, iterate_subject(N, K, name="iterate-again"))
    assert c.valid, c.flags
    assert c.ref is not None and c.cand is not None
    assert c.ref.checked_calls and c.cand.checked_calls and not c.cand.recheck_failures
    share = len(c.cand.checked_calls) / len(c.cand.samples_s)
    assert 0.03 < share < 0.25, share  # ~ recheck_share = 0.1 of the calls, drawn at random
    assert len(set(c.ref.input_sets)) == len(c.ref.input_sets)  # a fresh input set every pair
    assert c.stats is not None and abs(c.stats.median_ratio - 1.0) < 0.01, c.stats


# ------------------------------------------------------------- 2. remembering does not pay


def _memo(key_of: Any, name: str) -> CallableSubject:
    good = _honest()
    cache: OrderedDict[Any, Any] = OrderedDict()
    state = {"calls": 0}

    def memo(inputs, outputs):  # type: ignore[no-untyped-def]
        state["calls"] += 1
        if state["calls"] <= 5:  # honest in the correctness trials (fresh buffers reuse addresses)
            good(inputs, outputs)
            return
        key = key_of(inputs["x"])
        if key in cache:
            outputs["y"][...] = cache[key]  # a copy: far cheaper than 2048 FMAs per element
            return
        good(inputs, outputs)
        cache[key] = outputs["y"].copy()
        if len(cache) > 8:
            cache.popitem(last=False)

    return CallableSubject(name, memo)


def test_cheat_memoizing_outputs_by_input_address() -> None:
    assert _fooled(_compare(FIRST, _memo(lambda x: int(x.data.ptr), "memo-by-address")))
    c = _compare(FAST, _memo(lambda x: int(x.data.ptr), "memo-by-address"))
    # fresh content every pair: a reused address holds other inputs (a wrong answer, flagged)
    assert _caught(c), (c.flags, c.stats)


def test_cheat_memoizing_outputs_by_input_content() -> None:
    def fingerprint(x: Any) -> bytes:
        return bytes(x[:64].get().tobytes())

    assert _fooled(_compare(FIRST, _memo(fingerprint, "memo-by-content")))
    c = _compare(FAST, _memo(fingerprint, "memo-by-content"))
    assert c.valid, c.flags  # never wrong ...
    assert c.stats is not None and c.stats.median_ratio > 0.97, c.stats  # ... and never faster


# ------------------------------------------------------------- 4. plausibility by unit


@pytest.fixture(scope="module")
def ceilings() -> Ceilings:
    from perfledger.kernels.cuda.ceilings import measure_ceilings

    c = measure_ceilings("test")
    print("ceilings by unit (TFLOP/s):", {k: v / 1e12 for k, v in c.unit_flops_per_s.items()})
    return c


def test_ceilings_are_measured_per_unit(ceilings: Ceilings) -> None:
    units = ceilings.unit_flops_per_s
    assert {"cuda_fp32", "cuda_fp64", "tensor_fp16"} <= set(units)
    # an H200: ~67 TFLOP/s fp32 on CUDA cores, far below its fp16 tensor-core rate
    assert 3e13 < units["cuda_fp32"] < 8e13 and units["cuda_fp64"] < units["cuda_fp32"]
    assert units["tensor_fp16"] > 5 * units["cuda_fp32"]


def test_honest_cuda_core_kernel_is_plausible_under_its_unit(ceilings: Ceilings) -> None:
    h = Harness(iterate_problem(N, K), FAST, ceilings=ceilings)
    m = h.measure(iterate_subject(N, K))
    assert m.ok and m.timing is not None, m.flags
    share = m.timing.figures["flops_share"]
    assert share is not None and 0.3 < share <= 1.05, m.timing.figures
    assert m.timing.figures["flops_ceiling"] == ceilings.unit_flops_per_s["cuda_fp32"]


@pytest.mark.parametrize("shortcut", [8, K])
def test_cheat_doing_fewer_flops_than_declared_is_refused(
    ceilings: Ceilings, shortcut: int
) -> None:
    # composing steps (f^s is affine too) gives the right answer with k/s FMAs per element
    cheat = iterate_subject(N, K, shortcut=shortcut)
    problem = iterate_problem(N, K)
    h = Harness(problem, FAST, ceilings=ceilings)
    with pytest.raises(MeasurementError, match="cuda_fp32 ceiling"):
        h.measure(cheat)
    if shortcut == 8:
        # checked against the fastest unit (the first protocol's check), it passed unseen
        t = Harness(problem, FAST).measure(cheat).timing
        assert t is not None
        figures = check_plausible(
            median_s=t.median_s,
            bytes_per_call=problem.bytes_per_call,
            flops_per_call=problem.flops_per_call,
            ceilings=ceilings,
        )
        assert figures["flops_share"] is not None and figures["flops_share"] < 1.0


# ------------------------------------------------------------- the one-pass re-check


def test_one_pass_check_agrees_with_the_general_check() -> None:
    from perfledger.kernels.harness.correctness import compare

    ref = cupy.asarray(np.random.default_rng(2).standard_normal(1 << 20))
    near = (ref * (1 + 1e-6)).astype(cupy.float32)
    far = (ref * 1.01).astype(cupy.float32)
    holed = near.copy()
    holed[123] = cupy.nan
    for out, ok, reason in (
        (near, True, None),
        (far, False, "tolerance"),
        (holed, False, "non_finite"),
    ):
        fused = compare(out, ref, dtype="float32")
        general = compare(out.get(), ref.get(), dtype="float32")  # NumPy: the general path
        assert (fused.ok, fused.reason) == (general.ok, general.reason) == (ok, reason)
        if general.rel_l2_error is not None:
            assert fused.rel_l2_error == pytest.approx(general.rel_l2_error, rel=1e-9)
    assert compare(holed, ref, dtype="float32").non_finite == 1
