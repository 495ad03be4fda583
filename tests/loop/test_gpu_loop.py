"""A real 3-iteration loop on a small CUDA kernel (examples/loop/cuda: a matrix transpose) with
real Nsight Compute metrics, through the CLI: the CuPy harness checks and times, ncu profiles
one launch per profile, methods are proposed by strict priority from the recorded input
profile and checked by the rules, one incorrect candidate is recorded as an attempt (R25).

Marked ``gpu``; skipped with a reason without CuPy, a CUDA device or ncu. With
``PERFLEDGER_LOOP_OUT`` set, the generated summary.md and the run's state are copied there.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from loop_paths import CUDA_EXAMPLE, answer

pytestmark = pytest.mark.gpu


def _gpu_reason() -> str | None:
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:  # no CuPy, no driver
        return f"no CuPy/CUDA: {exc}"
    try:
        import perfledger.kernels.harness.harness  # noqa: F401
    except ImportError as exc:
        return f"the kernel harness is not installed: {exc}"
    if shutil.which("ncu") is None:
        return "ncu is not on PATH"
    return None


def test_gpu_three_iteration_transpose_loop(loop_cli, tmp_path: Path) -> None:
    reason = _gpu_reason()
    if reason is not None:
        pytest.skip(reason)
    size = int(os.environ.get("PERFLEDGER_LOOP_SIZE", "4096"))
    dims = json.dumps({"M": size, "N": size})
    setup = answer(
        loop_cli(
            "loop", "setup", "--json", "--run", "transpose", "--baseline",
            CUDA_EXAMPLE / "transpose_v0.cu", "--ref", CUDA_EXAMPLE / "ref.py", "--dims", dims,
            "--iterations", "3", "--ncu-num", "5", "--min-effect", "0.02",
        )
    )  # fmt: skip
    assert setup["input_profile"]["metrics"] > 10, setup  # real ncu metrics were recorded
    assert not setup["input_profile"]["limitations"], setup
    kernels = {1: "transpose_v1.cu", 2: "transpose_v2.cu", 3: "transpose_v3.cu"}
    statuses = {}
    for iteration, kernel in kernels.items():
        methods, analysis = tmp_path / f"m{iteration}.json", tmp_path / f"a{iteration}.md"
        proposed = loop_cli("loop", "propose", "--run", "transpose", "--iter", str(iteration),
                            "--methods-out", methods, "--analysis-out", analysis)  # fmt: skip
        assert proposed.returncode == 0, proposed.stderr
        if iteration == 1:
            bad = answer(loop_cli("loop", "close-iter", "--json", "--run", "transpose", "--iter",
                                  "1", "--kernel", CUDA_EXAMPLE / "transpose_bad.cu", "--methods",
                                  methods, "--analysis", analysis))  # fmt: skip
            assert bad["status"] == "correctness_failed", bad
        done = answer(
            loop_cli("loop", "close-iter", "--json", "--run", "transpose", "--iter",
                     str(iteration), "--kernel", CUDA_EXAMPLE / kernel, "--methods", methods,
                     "--analysis", analysis)
        )  # fmt: skip
        statuses[iteration] = done["status"]
        assert done["verdict"]["n_pairs"] >= 5
    assert "improved" in statuses.values(), statuses
    summary = tmp_path / "summary.md"
    final = answer(loop_cli("loop", "finalize", "--json", "--run", "transpose", "--out", summary))
    state = answer(loop_cli("loop", "state", "--json", "--run", "transpose"))
    assert state["best_iteration"] >= 1 and final["headline"]["status"] == "pass"
    assert state["iterations"]["1"]["failed_attempts"] == [1]
    for key in ("1/0/input", "1/2/candidate", "2/0/input", "3/0/input"):
        assert key in state["profiles"], key
        assert state["profiles"][key]["tool"] == "ncu"
    text = summary.read_text()
    assert "## Headline" in text and "ncu" in text
    out = os.environ.get("PERFLEDGER_LOOP_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(summary, Path(out) / "summary.md")
        (Path(out) / "state.json").write_text(json.dumps(state, indent=1, sort_keys=True))
