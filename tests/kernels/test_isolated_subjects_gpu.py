"""Every subject kind in worker processes of its own (property 3 of SPEC.md section 5, issue of
PyTorch, Triton and host-launched CUDA subjects), on a real GPU (marked ``gpu``; each kind
skipped with a reason where its tools are missing): the examples' torch-vs-Triton spec and the
``solve()`` JSON spec compared through ``compare_spec`` (this process never loads the specs),
an A/A of each valid, and per kind a candidate that passes its correctness trials and then skips
its work on most calls (its output buffer still holding an earlier answer) caught by the
measuring process's reveals or the worker's re-checks. Nothing is
mocked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from perfledger.kernels.harness.harness import Comparison  # noqa: E402
from perfledger.kernels.isolation.isolated import compare_spec  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SUBJECTS = ROOT / "examples" / "subjects"


def _show(c: Comparison) -> Comparison:
    print(c.ref_correctness.subject, "vs", c.cand_correctness.subject, c.flags, c.stats)
    for t in (c.ref, c.cand):
        if t is not None and t.recheck_failures:
            print("  ", t.subject, t.recheck_failures[:4])
    print("  reveals", c.settings.get("reveals"), c.settings["isolation_settings"]["reveals_by"])
    return c


@pytest.fixture(scope="module")
def triton_ok() -> None:
    torch = pytest.importorskip("torch", reason="torch subjects need PyTorch")
    pytest.importorskip("triton", reason="Triton subjects need triton")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")


def _torch_spec(tmp_path: Path, candidate: str) -> str:
    """The example torch/Triton spec with another CANDIDATE (and a short stopping rule)."""
    text = (SUBJECTS / "torch_triton_spec.py").read_text()
    spec = tmp_path / "spec.py"
    spec.write_text(text + "\n_state = {'calls': 0}\n" + candidate)
    return str(spec)


def test_torch_and_triton_subjects_in_workers_compare_validly(triton_ok, tmp_path: Path) -> None:
    spec = _torch_spec(tmp_path, "")
    aa = _show(compare_spec(spec, "n16M", roles=("reference", "reference")))
    assert aa.valid and aa.stats is not None and abs(aa.stats.median_ratio - 1) < 0.03, aa.flags
    ab = _show(compare_spec(spec, "n16M"))  # torch.mul against the Triton kernel
    assert ab.valid and ab.stats is not None and 0.5 < ab.stats.median_ratio < 2.0, ab.flags


def test_cheat_triton_subject_that_works_on_one_call_in_four_is_flagged(
    triton_ok, tmp_path: Path
) -> None:
    spec = _torch_spec(
        tmp_path,
        """
def _lazy(inputs, outputs):
    _state["calls"] += 1  # honest through the 5 correctness trials, then lazy
    if _state["calls"] <= 5 or _state["calls"] % 4 == 1:
        triton_scale(inputs, outputs)

CANDIDATE = TorchSubject("triton, one call in four", _lazy)
""",
    )
    c = _show(compare_spec(spec, "n16M"))
    assert not c.valid, c.flags
    assert {"cross_check:candidate", "recheck:triton, one call in four"} & set(c.flags), c.flags
    assert c.ref is not None and not c.ref.recheck_failures


def test_cheat_host_work_while_the_stream_is_held_is_flagged_by_the_parents_clock(
    triton_ok, tmp_path: Path
) -> None:
    """A candidate that spends 300 us of host time in every call before it launches (work the
    host or the copy engines could do while the stream is held, in no event time) gains
    nothing: a hold lasts at most HOLD_MAX_S, and what it kept out is excess on the measuring
    process's wall clock, beyond the reference's."""
    spec = _torch_spec(
        tmp_path,
        """
import time

def _host_first(inputs, outputs):
    end = time.perf_counter() + 300e-6
    while time.perf_counter() < end:
        pass
    triton_scale(inputs, outputs)

CANDIDATE = TorchSubject("triton after 300 us on the host", _host_first)
""",
    )
    c = _show(compare_spec(spec, "n16M"))
    print("clock", c.settings.get("clock"), c.settings.get("stream_hold"))
    # the honest Triton kernel is as fast as torch.mul: with 300 us of host work a call the
    # candidate is flagged, or the host time is in its event times (a hold lasts HOLD_MAX_S)
    assert not c.valid or (c.stats is not None and c.stats.median_ratio > 1.2), c.flags


@pytest.fixture(scope="module")
def nvcc_ok() -> None:
    if shutil.which("nvcc") is None:
        pytest.skip("solve() subjects need nvcc on PATH")


def test_solve_subjects_in_workers_compare_validly(nvcc_ok) -> None:
    spec = str(SUBJECTS / "solve" / "spec.json")
    aa = _show(compare_spec(spec, "n16M", roles=("reference", "reference")))
    assert aa.valid and aa.stats is not None and abs(aa.stats.median_ratio - 1) < 0.03, aa.flags
    ab = _show(compare_spec(spec, "n16M"))
    assert ab.valid and ab.stats is not None, ab.flags
    assert ab.settings["subjects"]["candidate"]["identity"]["sources"], ab.settings["subjects"]


def test_cheat_solve_subject_that_works_on_one_call_in_four_is_flagged(
    nvcc_ok, tmp_path: Path
) -> None:
    # a Python spec around the example's solve() library: the candidate skips 3 calls in 4
    spec = tmp_path / "spec.py"
    spec.write_text(
        f"""
from perfledger.kernels.subjects import solve as sv
from perfledger.kernels.harness.harness import CallableSubject
_loaded = sv.load_solve_spec({str(SUBJECTS / "solve" / "spec.json")!r})
PROBLEMS = _loaded["problems"]
REFERENCE = _loaded["reference"]
_real, _state = _loaded["candidate"], {{"calls": 0}}

def _lazy(inputs, outputs):
    _state["calls"] += 1  # honest through the 5 correctness trials, then lazy
    if _state["calls"] <= 5 or _state["calls"] % 4 == 1:
        _real(inputs, outputs)

CANDIDATE = CallableSubject("solve, one call in four", _lazy)
"""
    )
    c = _show(compare_spec(str(spec), "n16M"))
    assert not c.valid, c.flags
    assert {"cross_check:candidate", "recheck:solve, one call in four"} & set(c.flags), c.flags
