"""The harness's protocol on every subject kind, on a real GPU (marked ``gpu``; each kind skipped
with a reason where its tools are missing): host-launched ``solve()`` libraries built by nvcc
and called through ctypes, PyTorch callables, Triton kernels through the PyTorch path, and a
CUTLASS GEMM against cuBLAS. Per kind: a correct subject passes, cheats are caught
(``test_cheat_*``), a true difference is detected and an A/A is not. Nothing is mocked.
"""

from __future__ import annotations

import runpy
import shutil
from pathlib import Path
from typing import Any

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from perfledger.kernels.harness.examples import scale_problem, scale_subject  # noqa: E402
from perfledger.kernels.harness.harness import (  # noqa: E402
    CallableSubject,
    Comparison,
    Harness,
    HarnessConfig,
    Problem,
)
from perfledger.kernels.harness.stopping import StoppingRule  # noqa: E402
from perfledger.kernels.subjects import solve as sv  # noqa: E402

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SOLVE = ROOT / "examples" / "subjects" / "solve"
CUTLASS = ROOT / "examples" / "subjects" / "cutlass_gemm"
FAST = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2, max_gpu_s=2.0))
#: 2^24 float32: 128 MiB moved per call (~40 us on an H200).
N = 1 << 24
#: 2^26 float32 (~150 us a call): work left on a side stream outlasts the pending-work limit.
BIG = 1 << 26
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")


def _fooled(c: Comparison) -> bool:
    """A comparison that records a clearly faster, valid candidate."""
    return c.valid and c.stats is not None and c.stats.ci_high < 0.95


def _detected_slower(c: Comparison) -> None:
    assert c.valid, c.flags
    assert c.stats is not None and c.stats.direction() == "slower", c.stats
    assert c.stats.ci_low > 1.01, c.stats


def _aa_not_detected(c: Comparison) -> None:
    assert c.valid, c.flags
    assert c.stats is not None and c.stats.status(min_effect=0.01) != "pass", c.stats
    assert c.stats.ci_low < 1.005 and c.stats.ci_high > 0.995, c.stats


# ------------------------------------------------------------------------------ solve()

_SCALE_KERNEL = """
#include <cuda_runtime.h>
__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = 2.0f * x[i];
}
static int blocks_for(int n) { int b = (n + 255) / 256; return b > 132 * 16 ? 132 * 16 : b; }
"""
#: Cheats of the solve() contract: the body of solve(const float* x, float* y, int n, stream).
_SOLVE_CHEATS = {
    # launches nothing: the output keeps whatever it held (poison, or another call's answer)
    "writes_nothing": "",
    # remembers the input address and skips the work when it sees it again
    "memoizes_by_address": """
        static const float* seen = nullptr;
        if (x == seen) return;
        seen = x;
        scale_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n);""",
    # works on a stream of its own, never joined with the harness's
    "side_stream": """
        static cudaStream_t own = nullptr;
        if (own == nullptr) cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking);
        scale_kernel<<<blocks_for(n), 256, 0, own>>>(x, y, n);""",
    # launches on the legacy default stream, which a non-blocking stream does not wait for
    "default_stream": "scale_kernel<<<blocks_for(n), 256, 0, 0>>>(x, y, n);",
    # half the elements only
    "half_the_output": "scale_kernel<<<blocks_for(n / 2), 256, 0, stream>>>(x, y, n / 2);",
    # honest, with 25 % more work: the first quarter computed twice (the same answer)
    "slower": """
        scale_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n);
        scale_kernel<<<blocks_for(n / 4), 256, 0, stream>>>(x, y, n / 4);""",
}


def _solve_source(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.cu"
    path.write_text(
        _SCALE_KERNEL
        + 'extern "C" void solve(const float* x, float* y, int n, cudaStream_t stream) {'
        + _SOLVE_CHEATS[name]
        + "\n}\n"
    )
    return path


@pytest.fixture(scope="module")
def solve_contract() -> tuple[sv.RefModule, sv.ArgSpec]:
    ref = sv.load_ref(SOLVE / "ref.py")
    return ref, sv.resolve_spec(ref, (SOLVE / "scale_v0.cu").read_text())


def _solve(contract: Any, path: Path, n: int = N) -> sv.SolveSubject:
    return sv.solve_subject(path, contract[1], {"n": n})


def _solve_harness(contract: Any, n: int = N) -> Harness:
    return Harness(sv.solve_problem(contract[0], {"n": n}, contract[1]), FAST)


@needs_nvcc
def test_solve_subject_is_correct_timed_and_identified_by_its_library(solve_contract) -> None:
    subject = _solve(solve_contract, SOLVE / "scale_v1.cu")
    m = _solve_harness(solve_contract).measure(subject)
    assert m.ok, (m.correctness.reasons, m.flags)
    assert m.timing is not None and len(m.timing.samples_s) >= 10
    bandwidth = m.timing.figures["bytes_per_s"]  # ref.py declares bytes_per_call
    assert bandwidth is not None and 1e12 < bandwidth < 6e12  # an H200 moves ~4 TB/s
    assert subject.identity()["library_blake3"] == sv.file_hash(subject.build.library)


@needs_nvcc
def test_solve_subject_and_cupy_kernel_compare_on_the_same_buffers(solve_contract) -> None:
    """A solve() library and a CuPy RawKernel of the same problem in one paired comparison."""
    c = _solve_harness(solve_contract).compare(
        scale_subject(N), _solve(solve_contract, SOLVE / "scale_v0.cu")
    )
    assert c.valid and c.stats is not None, c.flags
    assert 0.5 < c.stats.median_ratio < 2.0


@needs_nvcc
def test_cheat_solve_that_writes_nothing(solve_contract, tmp_path: Path) -> None:
    report = _solve_harness(solve_contract).check(
        _solve(solve_contract, _solve_source(tmp_path, "writes_nothing"))
    )
    assert not report.ok and any(r.startswith("output:y") for r in report.reasons), report.reasons


@needs_nvcc
def test_cheat_solve_that_writes_half_its_output(solve_contract, tmp_path: Path) -> None:
    report = _solve_harness(solve_contract).check(
        _solve(solve_contract, _solve_source(tmp_path, "half_the_output"))
    )
    assert not report.ok and any(r.startswith("output:y") for r in report.reasons), report.reasons


@needs_nvcc
def test_cheat_solve_that_memoizes_by_input_address(solve_contract, tmp_path: Path) -> None:
    cheat = _solve(solve_contract, _solve_source(tmp_path, "memoizes_by_address"))
    c = _solve_harness(solve_contract).compare(_solve(solve_contract, SOLVE / "scale_v0.cu"), cheat)
    assert not _fooled(c), (c.flags, c.stats)


@needs_nvcc
@pytest.mark.parametrize("cheat_name", ["side_stream", "default_stream"])
def test_cheat_solve_on_a_stream_other_than_the_one_given(
    solve_contract, tmp_path: Path, cheat_name: str
) -> None:
    cheat = _solve(solve_contract, _solve_source(tmp_path, cheat_name), n=BIG)
    report = _solve_harness(solve_contract, n=BIG).check(cheat)
    assert not report.ok
    assert any(r == "pending_side_work" or r.startswith("output:y") for r in report.reasons)


@needs_nvcc
def test_solve_true_difference_is_detected_and_aa_is_not(solve_contract, tmp_path: Path) -> None:
    harness = _solve_harness(solve_contract)
    base = _solve(solve_contract, SOLVE / "scale_v0.cu")
    _detected_slower(
        harness.compare(base, _solve(solve_contract, _solve_source(tmp_path, "slower")))
    )
    _aa_not_detected(harness.aa(base))


@needs_nvcc
def test_json_solve_spec_loads_and_compares(tmp_path: Path) -> None:
    """The example JSON spec of ``measure kernel --spec``: built, compared, identities kept."""
    from perfledger.commands.cli.measure import load_spec

    spec = load_spec(str(SOLVE / "spec.json"))
    ((case, problem),) = spec["problems"].items()
    c = Harness(problem, FAST).compare(spec["reference"], spec["candidate"])
    assert case == "n16M" and c.valid, c.flags
    assert spec["candidate"].identity()["sources"] == {
        "scale_v1.cu": sv.file_hash(SOLVE / "scale_v1.cu")
    }


# ------------------------------------------------------------------------------ PyTorch


@pytest.fixture(scope="module")
def torch() -> Any:
    torch = pytest.importorskip("torch", reason="torch subjects need PyTorch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    return torch


def _torch_scale(torch: Any, extra: bool = False) -> Any:
    from perfledger.kernels.subjects.torch_subject import TorchSubject

    def run(i: dict[str, Any], o: dict[str, Any]) -> None:
        torch.mul(i["x"], 2.0, out=o["y"])
        if extra:  # honest, 25 % more work: the first quarter again (the same answer)
            q = i["x"].numel() // 4
            torch.mul(i["x"][:q], 2.0, out=o["y"][:q])

    return TorchSubject("torch.mul+25%" if extra else "torch.mul", run)


def test_torch_subject_is_correct_and_compares_with_a_cupy_kernel(torch) -> None:
    harness = Harness(scale_problem(N), FAST)
    m = harness.measure(_torch_scale(torch))
    assert m.ok, (m.correctness.reasons, m.flags)
    c = harness.compare(scale_subject(N), _torch_scale(torch))  # CuPy vs torch, no copies
    assert c.valid and c.stats is not None and 0.5 < c.stats.median_ratio < 2.0, c.flags


def test_torch_problem_inputs_and_reference_made_with_torch(torch) -> None:
    from perfledger.kernels.subjects.torch_subject import torch_problem, torch_uniform

    problem = torch_problem(
        "torch-scale",
        make_inputs=lambda seed: {"x": torch_uniform((N,), seed)},
        reference=lambda inputs: {"y": 2.0 * inputs["x"]},
        outputs={"y": ((N,), "float32")},
        bytes_per_call=8 * N,
    )
    m = Harness(problem, FAST).measure(_torch_scale(torch))
    assert m.ok and m.settings["inputs"] == "fresh", (m.correctness.reasons, m.flags, m.settings)


def test_cheat_torch_subject_on_a_side_stream(torch) -> None:
    from perfledger.kernels.subjects.torch_subject import TorchSubject

    side = torch.cuda.Stream()

    def run(i: dict[str, Any], o: dict[str, Any]) -> None:
        with torch.cuda.stream(side):  # never joined with the harness's stream
            torch.mul(i["x"], 2.0, out=o["y"])

    report = Harness(scale_problem(BIG), FAST).check(TorchSubject("side-stream", run))
    assert not report.ok
    assert any(r == "pending_side_work" or r.startswith("output:y") for r in report.reasons)


def test_cheat_torch_subject_that_remembers_its_first_answer(torch) -> None:
    from perfledger.kernels.subjects.torch_subject import TorchSubject

    memo: dict[str, Any] = {}

    def run(i: dict[str, Any], o: dict[str, Any]) -> None:
        if "y" not in memo:
            memo["y"] = 2.0 * i["x"]
        o["y"].copy_(memo["y"])

    report = Harness(scale_problem(N), FAST).check(TorchSubject("first-answer", run))
    assert not report.ok and report.trials[0].ok, report.reasons


def test_torch_true_difference_is_detected_and_aa_is_not(torch) -> None:
    harness = Harness(scale_problem(N), FAST)
    _detected_slower(harness.compare(_torch_scale(torch), _torch_scale(torch, extra=True)))
    _aa_not_detected(harness.aa(_torch_scale(torch)))


# ------------------------------------------------------------------------------ Triton


@pytest.fixture(scope="module")
def triton_spec(torch) -> dict[str, Any]:
    pytest.importorskip("triton", reason="Triton subjects need triton")
    return runpy.run_path(str(ROOT / "examples" / "subjects" / "torch_triton_spec.py"))


def _triton_subject(
    spec: dict[str, Any], name: str, share: float = 1.0, repeat: float = 0.0
) -> Any:
    """The example's Triton kernel over ``share`` of the elements, then again over the first
    ``repeat`` of them (honest extra work)."""
    import triton

    from perfledger.kernels.subjects.torch_subject import TorchSubject

    kernel, block = spec["scale_kernel"], spec["BLOCK"]

    def run(i: dict[str, Any], o: dict[str, Any]) -> None:
        n = int(i["x"].numel() * share)
        kernel[(triton.cdiv(n, block),)](i["x"], o["y"], n, BLOCK=block)
        if repeat:
            m = int(i["x"].numel() * repeat)
            kernel[(triton.cdiv(m, block),)](i["x"], o["y"], m, BLOCK=block)

    return TorchSubject(name, run)


def test_triton_subject_is_correct_and_compares_with_torch(triton_spec) -> None:
    (problem,) = triton_spec["PROBLEMS"].values()
    harness = Harness(problem, FAST)
    m = harness.measure(triton_spec["CANDIDATE"])
    assert m.ok, (m.correctness.reasons, m.flags)
    c = harness.compare(triton_spec["REFERENCE"], triton_spec["CANDIDATE"])
    assert c.valid and c.stats is not None and 0.5 < c.stats.median_ratio < 2.0, c.flags


def test_cheat_triton_kernel_over_part_of_the_output(triton_spec) -> None:
    (problem,) = triton_spec["PROBLEMS"].values()
    report = Harness(problem, FAST).check(_triton_subject(triton_spec, "90%", share=0.9))
    assert not report.ok and any(r.startswith("output:y") for r in report.reasons), report.reasons


def test_triton_true_difference_is_detected_and_aa_is_not(triton_spec) -> None:
    (problem,) = triton_spec["PROBLEMS"].values()
    harness = Harness(problem, FAST)
    base = _triton_subject(triton_spec, "triton")
    _detected_slower(harness.compare(base, _triton_subject(triton_spec, "triton+25%", repeat=0.25)))
    _aa_not_detected(harness.aa(base))


# ------------------------------------------------------------------------------ CUTLASS


@needs_nvcc
def test_cutlass_gemm_is_correct_and_compares_with_cublas() -> None:
    if not sv.cutlass_include_dirs():
        pytest.skip("the nvidia-cutlass package (CUTLASS's headers) is not installed")
    spec = runpy.run_path(str(CUTLASS / "vs_cublas_spec.py"))
    (problem,) = spec["PROBLEMS"].values()
    assert isinstance(problem, Problem) and isinstance(spec["REFERENCE"], CallableSubject)
    c = Harness(problem, FAST).compare(spec["REFERENCE"], spec["CANDIDATE"])
    assert c.ref_correctness.ok and c.cand_correctness.ok, (
        c.ref_correctness.reasons,
        c.cand_correctness.reasons,
    )
    assert c.valid and c.stats is not None, c.flags
    # a SIMT CUTLASS GEMM against cuBLAS SGEMM: the same order of magnitude
    assert 0.2 < c.stats.median_ratio < 5.0, c.stats


@needs_nvcc
def test_a_triton_solve_and_a_cuda_solve_compare_on_one_contract(solve_contract, torch) -> None:
    """``scale_triton.py``'s ``def solve(x, y, n)`` and ``scale_v0.cu``'s ``solve`` on the same
    ``ref.py``: both correct, one valid comparison."""
    pytest.importorskip("triton", reason="Triton subjects need triton")
    from perfledger.kernels.subjects.torch_subject import python_solve_subject

    triton_solve = python_solve_subject(SOLVE / "scale_triton.py", solve_contract[1], {"n": N})
    c = _solve_harness(solve_contract).compare(
        _solve(solve_contract, SOLVE / "scale_v0.cu"), triton_solve
    )
    assert c.valid and c.stats is not None and 0.5 < c.stats.median_ratio < 2.0, c.flags


def test_torch_sees_the_harness_buffers_without_a_copy(torch) -> None:
    from perfledger.kernels.subjects.torch_subject import as_cupy, as_torch

    array = cupy.arange(16, dtype=cupy.float32)
    tensor = as_torch(array)
    assert tensor.data_ptr() == array.data.ptr and tensor.is_cuda
    tensor.mul_(2.0)  # written through the alias
    torch.cuda.synchronize()
    assert float(array[3]) == 6.0
    assert as_cupy(tensor).data.ptr == array.data.ptr


@needs_nvcc
@pytest.mark.parametrize(
    "ref_text",
    [
        "def reference(x, y, n):\n    y[...] = 2.0 * x\n",
        "import torch\nARRAYS = 'torch'\ndef reference(x, y, n):\n    torch.mul(x, 2.0, out=y)\n",
        "ARRAYS = 'numpy'\ndef reference(x, n):\n    return 2.0 * x\n",
    ],
    ids=["cupy-writes-its-output", "torch-writes-its-output", "numpy-returns"],
)
def test_ref_py_references_in_each_array_library(
    solve_contract, tmp_path: Path, ref_text: str
) -> None:
    if "torch" in ref_text:
        pytest.importorskip("torch", reason="a torch reference needs torch")
    path = tmp_path / "ref.py"
    path.write_text(f"ARGS = {solve_contract[1].to_json()!r}\n" + ref_text)
    problem = sv.solve_problem(path, {"n": 1 << 20}, solve_contract[1])
    report = Harness(problem, FAST).check(_solve(solve_contract, SOLVE / "scale_v0.cu", n=1 << 20))
    assert report.ok, report.reasons


@needs_nvcc
def test_measure_kernel_records_a_json_solve_spec_with_its_libraries_identity(
    tmp_path: Path,
) -> None:
    """``perfledger measure aa|kernel --spec examples/subjects/solve/spec.json`` through the CLI
    on a real ledger: the samples are recorded and the artifact names each built library."""
    import json

    from test_measure_cli import _cli, _experiment, _setup

    from perfledger.api import Ledger

    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, primary="kernel_time_us", primary_unit="us", cases=("n16M",))
    spec = str(SOLVE / "spec.json")
    _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--spec", spec, "--runs", "3",
         "--record", "--json", "--quiet")  # fmt: skip
    _experiment(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "screen", "--spec", spec, "--json", "--quiet")  # fmt: skip
    data = json.loads(out.stdout)
    assert data["kind"] == "SamplesRecorded" and data["pairs_recorded"] >= 2, data
    with Ledger.open(ledger_path) as ledger:
        raw = json.loads(ledger.artifact(data["event_id"], "samples.json"))
    for role, source in (("reference", "scale_v0.cu"), ("candidate", "scale_v1.cu")):
        identity = raw[f"{role}_identity"]
        assert identity["sources"] == {source: sv.file_hash(SOLVE / source)}
        assert len(identity["library_blake3"]) == 64 and "-shared" in identity["nvcc_argv"]
