"""The loop on the standalone ``solve()`` contract, through the CLI on a GPU: ``loop setup
--baseline scale_v0.cu --ref ref.py --dims '{"n": ...}'`` (a host function launching on the
harness's stream, built by nvcc, called through ctypes), one iteration closed with the float4
candidate (two kernels per call) and a cheat that writes nothing recorded as a failed attempt.

Marked ``gpu``; skipped with a reason without CuPy, a CUDA device, nvcc or ncu.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from loop_paths import ROOT, answer

pytestmark = pytest.mark.gpu
SOLVE = ROOT / "examples" / "subjects" / "solve"


def _gpu_reason() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # no CuPy, no driver
        return f"no CuPy/CUDA: {exc}"
    for tool in ("nvcc", "ncu"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH"
    return None


def test_gpu_solve_contract_loop(loop_cli, tmp_path: Path) -> None:
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(reason)
    setup = answer(
        loop_cli("loop", "setup", "--json", "--run", "solve", "--baseline", SOLVE / "scale_v0.cu",
                 "--ref", SOLVE / "ref.py", "--dims", json.dumps({"n": 1 << 24}),
                 "--iterations", "1")
    )  # fmt: skip
    assert setup["baseline_median_ms"] > 0, setup
    methods, analysis = tmp_path / "m1.json", tmp_path / "a1.md"
    proposed = loop_cli("loop", "propose", "--run", "solve", "--iter", "1",
                        "--methods-out", methods, "--analysis-out", analysis)  # fmt: skip
    assert proposed.returncode == 0, proposed.stderr
    bad = tmp_path / "writes_nothing.cu"
    bad.write_text('#include <cuda_runtime.h>\nextern "C" void solve(const float* x, float* y, '
                   "int n, cudaStream_t stream) {}\n")  # fmt: skip
    failed = answer(loop_cli("loop", "close-iter", "--json", "--run", "solve", "--iter", "1",
                             "--kernel", bad, "--methods", methods, "--analysis", analysis))  # fmt: skip
    assert failed["status"] == "correctness_failed", failed
    done = answer(loop_cli("loop", "close-iter", "--json", "--run", "solve", "--iter", "1",
                           "--kernel", SOLVE / "scale_v1.cu", "--methods", methods,
                           "--analysis", analysis))  # fmt: skip
    assert done["verdict"]["n_pairs"] >= 5, done


def test_gpu_loop_with_a_triton_baseline_and_a_cuda_candidate(loop_cli, tmp_path: Path) -> None:
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(reason)
    pytest.importorskip("triton", reason="a Triton baseline needs triton")
    setup = answer(
        loop_cli("loop", "setup", "--json", "--run", "tri", "--baseline",
                 SOLVE / "scale_triton.py", "--ref", SOLVE / "ref.py", "--dims",
                 json.dumps({"n": 1 << 24}), "--iterations", "1")
    )  # fmt: skip
    assert setup["baseline_median_ms"] > 0, setup
    methods, analysis = tmp_path / "m1.json", tmp_path / "a1.md"
    proposed = loop_cli("loop", "propose", "--run", "tri", "--iter", "1",
                        "--methods-out", methods, "--analysis-out", analysis)  # fmt: skip
    assert proposed.returncode == 0, proposed.stderr
    done = answer(loop_cli("loop", "close-iter", "--json", "--run", "tri", "--iter", "1",
                           "--kernel", SOLVE / "scale_v1.cu", "--methods", methods,
                           "--analysis", analysis))  # fmt: skip
    assert done["verdict"]["n_pairs"] >= 5, done
