"""Issue 36's holes of the isolated kernel path on a real GPU (marked ``gpu``, skipped without
CuPy or a device), each cheat next to an honest control: a candidate returning float16 for a
float32 reference (hole 5: the tolerance follows the reference), one skipping 1 call in 10 with
its own checks patched (hole 3: the sized reveals), and one keeping its table in L2 through the
flush with a persisting carve-out (hole 4, part), and one scaling its own reported times on a
short kernel (hole 1: a saving the parent's clock cannot confirm is not a pass). Real workers,
real kernels, nothing mocked."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from persisting_subject import table_problem, table_subject  # noqa: E402

from perfledger.kernels.cuda.timing import PersistingL2  # noqa: E402
from perfledger.kernels.harness import correctness  # noqa: E402
from perfledger.kernels.harness.examples import ALPHA, scale_problem  # noqa: E402
from perfledger.kernels.harness.harness import (  # noqa: E402
    CallableSubject,
    Comparison,
    Harness,
    HarnessConfig,
)
from perfledger.kernels.harness.stopping import StoppingRule  # noqa: E402
from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec  # noqa: E402

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parent
HEADER = f"""
import sys, dataclasses
sys.path.insert(0, {str(HERE)!r})
import cupy
from perfledger.kernels.harness.examples import ALPHA, iterate_problem, iterate_subject
from perfledger.kernels.harness.examples import scale_problem, scale_subject
from perfledger.kernels.harness.harness import CallableSubject, HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule
from persisting_subject import table_problem, table_subject

N, K = 1 << 21, 1 << 13
PROBLEMS = {{"iterate": iterate_problem(N, K)}}
REFERENCE = iterate_subject(N, K)
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2, max_gpu_s=2.0))
_good = iterate_subject(N, K, name="iterate-again")
_state = {{"calls": 0}}
"""


def _compare(
    tmp_path: Path, case: str, body: str, config: IsolationConfig | None = None
) -> Comparison:
    spec = tmp_path / "spec.py"
    spec.write_text(HEADER + body)
    t0 = time.perf_counter()
    c = compare_spec(str(spec), case, config=config or IsolationConfig())
    wall_s = time.perf_counter() - t0
    # the figures, for the device run's log
    print(f"[{body.strip().splitlines()[-1]}] {wall_s:.2f} s flags {c.flags}")
    print(f"  stats {c.stats}")
    print(f"  reveals {c.settings.get('reveals')} plan {c.settings.get('reveal_plan')}")
    return c


# ----------------------------------------------- hole 5: the tolerance follows the reference


def _half(inputs: dict, outputs: dict) -> None:
    """``y = ALPHA x`` computed and returned in float16 (half the bytes written): within
    float16's tolerance (1e-2), beyond float32's (1e-4)."""
    outputs["y"] = inputs["x"].astype(cupy.float16) * cupy.float16(ALPHA)


def test_cheat_float16_output_for_a_float32_reference_fails_the_harness_check() -> None:
    n = 1 << 20
    h = Harness(scale_problem(n))
    report = h.check(CallableSubject("half", _half))
    assert not report.ok and any("output:y:dtype" in r for r in report.reasons), report.reasons
    # what the old rule said: held to float16's own tolerance, the same output passed
    x = cupy.random.default_rng(1).random(n, dtype=cupy.float32)
    outs = {"y": cupy.empty(n, cupy.float32)}
    _half({"x": x}, outs)
    exact = ALPHA * x.astype(cupy.float64)
    loose = correctness.compare(outs["y"], exact, dtype="float16")
    print(f"float16 output: relative L2 error {loose.rel_l2_error:.3g}, passes float16's "
          f"{loose.tolerance}: {loose.ok}; float32's 1e-4: refused by dtype")  # fmt: skip
    assert loose.ok and loose.rel_l2_error is not None and loose.rel_l2_error > 1e-4
    # the honest control: float32 output passes
    honest = h.check(
        CallableSubject("honest", lambda i, o: cupy.multiply(i["x"], ALPHA, out=o["y"]))
    )
    assert honest.ok, honest.reasons


def test_cheat_candidate_worker_returning_float16_is_incorrect_and_not_timed(
    tmp_path: Path,
) -> None:
    body = (
        'PROBLEMS = {"scale": scale_problem(1 << 22)}\nREFERENCE = scale_subject(1 << 22)\n'
        "def _half(inputs, outputs):\n"
        '    outputs["y"] = inputs["x"].astype(cupy.float16) * cupy.float16(ALPHA)\n'
        'CANDIDATE = CallableSubject("half", _half)\n'
    )
    c = _compare(tmp_path, "scale", body)
    assert not c.cand_correctness.ok and not c.valid and "cand_incorrect" in c.flags, c.flags
    assert any("output:y:dtype" in r for r in c.cand_correctness.reasons)
    assert c.ref_correctness.ok and c.stats is None  # not timed


# --------------------------------------------------------------------- hole 3: sized reveals


SKIP = """
CONFIG = dataclasses.replace(CONFIG, recheck_share=1e-9)  # the worker's own re-checks: ~none
def _skip(inputs, outputs):
    _state["calls"] += 1
    if _state["calls"] % 10 == 0:
        return  # no work: its buffer holds an earlier batch's answer to other inputs
    _good(inputs, outputs)
CANDIDATE = CallableSubject("skips-1-in-10", _skip)
"""


def test_cheat_candidate_skipping_one_call_in_ten_is_caught_by_the_sized_reveals(
    tmp_path: Path,
) -> None:
    c = _compare(tmp_path, "iterate", SKIP)
    plan = c.settings["reveal_plan"]
    calls = c.settings["isolation_settings"]["calls_per_batch"]
    # a run this short (0.6 ms calls, 0.2 s of GPU time) reveals every call
    assert plan["reveals_per_pair"] == calls and plan["escape_bound"] == 0.0, plan
    assert not c.valid and "cross_check:candidate" in c.flags, c.flags
    assert c.cand is not None and any("against the reference" in r for r in c.cand.recheck_failures)


def test_honest_candidate_with_sized_reveals_is_valid_and_what_they_cost(tmp_path: Path) -> None:
    sized = _compare(tmp_path, "iterate", "CANDIDATE = _good\n")
    assert sized.valid and sized.flags == ["no_ceilings"], sized.flags
    assert sized.settings["reveal_plan"]["escape_bound"] <= 0.001
    # the control of the cost: one reveal a pair (an escape bound of 0.9 asks for no more)
    (tmp_path / "one").mkdir()
    one = _compare(tmp_path / "one", "iterate", "CANDIDATE = _good\n",
                   IsolationConfig(reveal_escape=0.9))  # fmt: skip
    assert one.valid and one.settings["reveal_plan"]["reveals_per_pair"] == 1


# ------------------------------------------------------------------ hole 4 (part): persisting L2


def _table_elements() -> int:
    """A table of at most 16 MiB and half the device's persisting L2 maximum."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    most = int(props.get("persistingL2CacheMaxSize", 0)) // 2
    window = int(props.get("accessPolicyMaxWindowSize", 1 << 30))
    return max(1 << 16, min(16 << 20, most, window) // 4 // 4096 * 4096)


def test_cheat_persisting_l2_window_is_cleared_before_each_flush_in_process() -> None:
    n = _table_elements()
    problem = table_problem(n)
    config = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.1, max_gpu_s=0.5))
    guard = PersistingL2()
    assert guard.available
    try:
        honest = Harness(problem, config).measure(table_subject(n, False))
        undefended = Harness(problem, config)
        undefended.flusher.persisting.clear = lambda: 0  # the defence off: the hole itself
        open_ = undefended.measure(table_subject(n, True, "persisting, not cleared"))
        guard.clear()
        cleared = Harness(problem, config)
        guarded = cleared.measure(table_subject(n, True, "persisting, cleared"))
    finally:
        guard.clear()
    assert honest.timing and open_.timing and guarded.timing
    t_honest, t_open, t_guarded = (
        m.timing.median_s for m in (honest, open_, guarded) if m.timing is not None
    )
    print(f"table of {4 * n >> 20} MiB: honest {1e6 * t_honest:.2f} us, persisting window "
          f"not cleared {1e6 * t_open:.2f} us ({t_open / t_honest:.3f}x), cleared "
          f"{1e6 * t_guarded:.2f} us ({t_guarded / t_honest:.3f}x); "
          f"found {guarded.settings['persisting_l2']}")  # fmt: skip
    assert guarded.settings["persisting_l2"]["found"] >= 1
    assert guard.carve_out_bytes() == 0
    assert t_guarded >= 0.95 * t_honest  # cold again: no faster than the honest subject


def test_cheat_candidate_setting_a_persisting_carve_out_is_flagged_and_control_is_not(
    tmp_path: Path,
) -> None:
    n = _table_elements()
    head = f'PROBLEMS = {{"table": table_problem({n})}}\nREFERENCE = table_subject({n}, False)\n'
    c = _compare(tmp_path, "table", head + f"CANDIDATE = table_subject({n}, True)\n")
    assert not c.valid and "persisting_l2:candidate" in c.flags, c.flags
    assert c.cand is not None and any("carve-out" in r for r in c.cand.recheck_failures)
    assert "persisting_l2:reference" not in c.flags
    assert (c.settings["persisting_l2"]["candidate"] or {}).get("bytes", 0) > 0 or (
        c.settings["persisting_l2"]["candidate"] or {}
    ).get("found", 0) > 0
    (tmp_path / "honest").mkdir()
    honest = _compare(
        tmp_path / "honest", "table", head + f'CANDIDATE = table_subject({n}, False, "again")\n'
    )
    assert not any(f.startswith("persisting_l2") for f in honest.flags), honest.flags
    assert honest.valid, honest.flags


# ------------------------------------------------ hole 1: what the parent's clock can confirm

#: A candidate that scales its worker's own event times by a factor (issue 36's H100 attack:
#: 0.6x of an 18 us kernel was recorded valid at ratio 0.600 before the rule).
SCALED = """
def _scaled(inputs, outputs):
    if not _state["calls"]:
        from perfledger.kernels.cuda import timing
        real_time = timing.EventTimer.time
        def scaled(self, *args, **kwargs):
            s = real_time(self, *args, **kwargs)
            return dataclasses.replace(s, gpu_s=s.gpu_s * FACTOR, span_s=s.span_s * FACTOR)
        timing.EventTimer.time = scaled
    _state["calls"] += 1
    _real(inputs, outputs)
CANDIDATE = CallableSubject("reports-a-share", _scaled)
"""


@pytest.mark.parametrize(("n", "factor"), [(1 << 22, 0.6), (1 << 24, 0.85)])
def test_cheat_candidate_scaling_its_own_times_on_a_short_kernel_is_not_a_pass(
    tmp_path: Path, n: int, factor: float
) -> None:
    # short scale kernels (tens of us to about 100 us a call): the under-report per call is
    # below the clock check's 50 us floor, so only the confirmation rule can refuse it
    body = (
        f'PROBLEMS = {{"scale": scale_problem({n})}}\nREFERENCE = scale_subject({n})\n'
        f'_real = scale_subject({n}, name="again")\nFACTOR = {factor}\n' + SCALED
    )
    c = _compare(tmp_path, "scale", body)
    print(f"  confirmation {c.settings['clock'].get('confirmation')}")
    assert c.stats is not None and c.stats.direction() == "faster", c.stats  # its claim
    assert not c.valid, (c.flags, c.settings["clock"])
    assert "clock_unconfirmed:candidate" in c.flags or "clock:candidate" in c.flags, c.flags


def test_honest_saving_beyond_the_clocks_limit_is_confirmed_on_the_device(tmp_path: Path) -> None:
    # the control: the same answer in half the steps (~0.3 ms saved a call, far above 50 us)
    c = _compare(
        tmp_path, "iterate", 'CANDIDATE = iterate_subject(N, K, shortcut=2, name="half-steps")\n'
    )
    confirmation = c.settings["clock"]["confirmation"]
    assert c.valid and confirmation is not None and confirmation["confirmable"], c.flags
