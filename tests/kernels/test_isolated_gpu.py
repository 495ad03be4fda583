"""Subjects in worker processes of their own, on a real GPU (property 3 of SPEC.md section 5;
marked ``gpu``, skipped without CuPy or a GPU): adversarial candidates that patch, in their own
process, CuPy's event timing, the harness's timer, its correctness check and the statistics, or
write forged protocol lines to stdout, each next to honest controls. Nothing is mocked: real
workers (``python -m perfledger.kernels.isolation.subject_worker``) running real CUDA kernels; this
process never loads the specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

import time  # noqa: E402

import blake3  # noqa: E402
import numpy as np  # noqa: E402

from perfledger.kernels.cuda.gpu_digest import device_digest, self_test  # noqa: E402
from perfledger.kernels.harness.harness import Comparison  # noqa: E402
from perfledger.kernels.isolation.isolated import compare_spec  # noqa: E402

pytestmark = pytest.mark.gpu

#: Compute-bound (2^21 elements x 2^13 fused multiply-adds, ~0.6 ms a call on an H200) with a
#: small output (8 MiB): the per-call overhead inside the parent's clock (inputs, re-checks,
#: copying and hashing the outputs) stays below a call, so the clock check resolves a halved
#: report. (y = 0.9995^k x + ...: with k = 2^13 the output still depends on x by ~1.7 %, far
#: above the 1e-3 tolerance, so a constant output is wrong.)
HEADER = """
import os, sys, dataclasses
import cupy
import numpy as np
from perfledger.kernels.harness.examples import iterate_problem, iterate_subject
from perfledger.kernels.harness.examples import scale_problem, scale_subject
from perfledger.kernels.harness.harness import CallableSubject, HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule

N, K = 1 << 21, 1 << 13
PROBLEMS = {"iterate": iterate_problem(N, K)}
REFERENCE = iterate_subject(N, K)
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2, max_gpu_s=2.0))
_good = iterate_subject(N, K, name="iterate-again")
_state = {"calls": 0}
"""


def _compare(tmp_path: Path, candidate: str) -> Comparison:
    spec = tmp_path / "spec.py"
    spec.write_text(HEADER + candidate)
    case = "scale" if 'PROBLEMS = {"scale"' in candidate else "iterate"
    c = compare_spec(str(spec), case)
    # the figures, for the device run's log
    print(spec.read_text()[len(HEADER) :].strip().splitlines()[-1], c.flags, c.stats)
    print("  clock", c.settings["clock"], "reveals", c.settings["reveals"])
    return c


# ------------------------------------------------------------------------ the device digest


def test_device_digest_equals_the_blake3_package_and_its_cost_is_printed() -> None:
    assert self_test()
    key = bytes(range(32))
    for mib in (4, 64, 256):
        x = cupy.random.default_rng(mib).random(mib << 18, dtype=cupy.float32)
        want = blake3.blake3(x.get().tobytes(), key=key).hexdigest()
        assert device_digest(x, key) == want
        cupy.cuda.runtime.deviceSynchronize()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            device_digest(x, key)
            times.append(time.perf_counter() - t0)
        print(f"device digest of {mib} MiB: {1e3 * float(np.median(times)):.3f} ms")


# ------------------------------------------------------------------------ honest controls


def test_honest_aa_in_two_workers_is_valid_and_close_to_one(tmp_path: Path) -> None:
    c = _compare(tmp_path, "CANDIDATE = _good\n")
    assert c.valid and c.flags == ["no_ceilings"], (c.flags, c.settings["clock"])
    assert c.stats is not None and abs(c.stats.median_ratio - 1.0) < 0.02, c.stats
    assert c.settings["isolation"] == "process" and c.settings["reveals"] >= 4
    assert c.settings["digest"] == "device"  # the device BLAKE3 passed its self-test
    # revealed outputs travel through CUDA IPC memory, checked on the device by this process
    assert c.settings["isolation_settings"]["reveals_by"] == "ipc"


def test_honest_memory_bound_aa_in_two_workers_is_valid(tmp_path: Path) -> None:
    c = _compare(
        tmp_path,
        'PROBLEMS = {"scale": scale_problem(1 << 22)}\n'
        'REFERENCE = scale_subject(1 << 22)\nCANDIDATE = scale_subject(1 << 22, name="again")\n',
    )
    assert c.valid and c.flags == ["no_ceilings"], (c.flags, c.settings["clock"])
    assert c.stats is not None and abs(c.stats.median_ratio - 1.0) < 0.03, c.stats


def test_honest_true_difference_passes_unflagged(tmp_path: Path) -> None:
    # the same answer in half the steps (the affine map composed): truly ~2x faster
    c = _compare(tmp_path, 'CANDIDATE = iterate_subject(N, K, shortcut=2, name="half-steps")\n')
    assert c.valid and c.flags == ["no_ceilings"], (c.flags, c.settings["clock"])
    assert c.stats is not None and c.stats.ci_high < 0.7, c.stats


# ------------------------------------------------------------------------ cheats


def test_cheat_candidate_that_halves_cupys_event_times_is_flagged(tmp_path: Path) -> None:
    c = _compare(
        tmp_path,
        """
def _cheat(inputs, outputs):
    if not _state["calls"]:
        from perfledger.kernels.cuda import timing
        real = cupy.cuda.get_elapsed_time
        cupy.cuda.get_elapsed_time = lambda a, b: real(a, b) / 2
        try:
            real_event = cupy.cuda.Event.elapsed_time
            cupy.cuda.Event.elapsed_time = lambda self, other: real_event(self, other) / 2
        except (TypeError, AttributeError):
            pass  # an extension type: the timer is patched below all the same
        real_time = timing.EventTimer.time
        def half(self, *args, **kwargs):
            s = real_time(self, *args, **kwargs)
            return dataclasses.replace(s, gpu_s=s.gpu_s / 2, span_s=s.span_s / 2)
        timing.EventTimer.time = half
    _state["calls"] += 1
    _good(inputs, outputs)

CANDIDATE = CallableSubject("halves-the-clock", _cheat)
""",
    )
    assert not c.valid and "clock:candidate" in c.flags, (c.flags, c.settings["clock"])
    assert c.stats is not None and c.stats.median_ratio < 0.6  # what its reports claimed
    assert c.cand is not None and any("clock:candidate" in r for r in c.cand.recheck_failures)


def test_cheat_candidate_that_patches_its_checks_and_statistics_and_computes_garbage(
    tmp_path: Path,
) -> None:
    c = _compare(
        tmp_path,
        """
def _cheat(inputs, outputs):
    if not _state["calls"]:
        from perfledger.kernels.harness import correctness
        from perfledger.kernels.harness import harness
        from perfledger.derive import stats
        ok = correctness.Check(True, 0.0, 1.0, None)
        correctness.compare = lambda *args, **kwargs: ok
        harness.Harness._check_outputs = lambda self, outs, refs: ([], {})
        harness.Harness._written = lambda self, inputs, copies: []
        real = stats.paired_stats
        stats.paired_stats = lambda a, b, **kw: real(b, b, **kw)
    _state["calls"] += 1
    outputs["y"].fill(0.0)  # no work: a garbage answer

CANDIDATE = CallableSubject("patches-its-checks", _cheat)
""",
    )
    assert c.cand_correctness.ok  # its own process's checks were made to pass ...
    assert not c.valid and "cross_check:candidate" in c.flags, c.flags  # ... not the parent's
    assert c.cand is not None and any("against the reference" in r for r in c.cand.recheck_failures)
    # nor is the reference flagged, although its excess per call grows with its own long
    # calls against a candidate 200x "faster" (only the candidate's larger excess is checked)
    assert c.ref is not None and not c.ref.recheck_failures


def test_cheat_candidate_that_writes_forged_protocol_lines_to_stdout_changes_nothing(
    tmp_path: Path,
) -> None:
    c = _compare(
        tmp_path,
        """
_FORGED = '{"times_s": [1e-9], "wall_s": [1e-9], "span_s": [1e-9], "digests": ["0"]}'

def _cheat(inputs, outputs):
    _state["calls"] += 1
    if _state["calls"] % 50 == 1:  # now and then: printing inside a call costs time
        os.write(1, (_FORGED + "\\n").encode())
        print(_FORGED, flush=True)
        sys.__stdout__.write(_FORGED + "\\n")
        sys.__stdout__.flush()
    _good(inputs, outputs)

CANDIDATE = CallableSubject("forges-lines", _cheat)
""",
    )
    # the lines went to the worker's stderr: the comparison is the honest one
    assert c.valid and c.flags == ["no_ceilings"], (c.flags, c.settings["clock"])
    assert c.stats is not None and abs(c.stats.median_ratio - 1.0) < 0.05, c.stats


def test_cheat_candidate_that_reveals_another_calls_output_is_flagged(tmp_path: Path) -> None:
    # every call computed honestly, but the reveal buffer gets the first call's (correct)
    # output whatever call is drawn: not the bytes committed for the drawn call
    c = _compare(
        tmp_path,
        """
def _cheat(inputs, outputs):
    if not _state["calls"]:
        from perfledger.kernels.isolation import reveal_ipc
        real, first = reveal_ipc.ExportedBuffer.fill, {}
        def fill(self, arrays):
            first.setdefault("outs", {k: v.copy() for k, v in arrays.items()})
            real(self, first["outs"])
        reveal_ipc.ExportedBuffer.fill = fill
    _state["calls"] += 1
    _good(inputs, outputs)

CANDIDATE = CallableSubject("reveals-another-call", _cheat)
""",
    )
    assert c.settings["isolation_settings"]["reveals_by"] == "ipc"
    assert not c.valid and "digest:candidate" in c.flags, c.flags
    assert c.ref is not None and not c.ref.recheck_failures
