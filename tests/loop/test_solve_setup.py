"""``perfledger loop setup`` on the standalone ``solve`` contract (a ``.cu`` exporting
``extern "C" void solve(...)``, ``ref.py`` with ``reference(**kwargs)`` and ``ARGS``, the dims
JSON), through the real CLI: a broken contract is refused before anything is built or measured,
with exit 2, a clear message and the ledger's branch where it was. The measured path runs on a
GPU (tests/kernels/test_subjects_gpu.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from loop_paths import ROOT

SOLVE = ROOT / "examples" / "subjects" / "solve"


def _head(ledger: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(ledger), "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("dims", "ref_text", "message"),
    [
        ('{"m": 1024}', None, "no value for the scalar parameter 'n'"),
        ('{"n": 0}', None, "shape 'n': 0 is not a positive int"),
        ('{"n": 1024}', "def reference(**kw):\n    return {}\n", "declares neither ARGS"),
        ('{"n": 1024}', "ARGS = [['x', 'in', 'float64*', ['n']], ['y', 'out', 'float32*', ['n']],"
         " ['n', 'int'], ['stream', 'stream']]\ndef reference(**kw):\n    return {}\n",
         "does not match solve's signature"),
        ('{"n": 1024}', "ARGS = 5\ndef reference(**kw):\n    return {}\n", "must be a list"),
    ],
)  # fmt: skip
def test_a_broken_solve_contract_is_refused_before_anything_runs(
    loop_cli, tmp_path: Path, dims: str, ref_text: str | None, message: str
) -> None:
    ref = SOLVE / "ref.py"
    if ref_text is not None:
        ref = tmp_path / "ref.py"
        ref.write_text(ref_text)
    before = _head(loop_cli.ledger)
    proc = loop_cli("loop", "setup", "--json", "--run", "s", "--baseline", SOLVE / "scale_v0.cu",
                    "--ref", ref, "--dims", dims, "--sm-arch", "sm_90")  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in json.loads(proc.stdout)["error"]["message"]
    assert _head(loop_cli.ledger) == before


@pytest.mark.slow
def test_a_python_solve_baseline_whose_parameters_differ_from_the_spec_is_refused(
    loop_cli, tmp_path: Path
) -> None:
    """A Python (torch / Triton) ``def solve`` follows the same contract, the stream left out."""
    baseline = tmp_path / "scale.py"
    baseline.write_text("def solve(x, y):\n    pass\n")
    before = _head(loop_cli.ledger)
    proc = loop_cli("loop", "setup", "--json", "--baseline", baseline, "--ref", SOLVE / "ref.py",
                    "--dims", '{"n": 64}')  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = json.loads(proc.stdout)["error"]["message"]
    assert "solve(x, y) in the subject, but the argument spec declares (x, y, n)" in message
    assert _head(loop_cli.ledger) == before


def test_the_triton_example_matches_the_spec_without_its_stream() -> None:
    from perfledger.kernels.loop.solve import is_python_solve_source, preflight

    text = (SOLVE / "scale_triton.py").read_text()
    assert is_python_solve_source(text)
    entry, _ = preflight(text, SOLVE / "ref.py", {"n": 64}, python=True)
    assert [p[0] for p in entry.params] == ["x", "y", "n", "stream"]
    assert not is_python_solve_source("def kernel(x):\n    pass\n")  # a workload stand-in


@pytest.mark.slow
def test_a_global_kernel_baseline_still_takes_the_launch_directive_path(
    loop_cli, tmp_path: Path
) -> None:
    """A ``__global__`` entry is the other contract: without its launch directive it is refused
    as before (the solve path is chosen only for a host ``solve``)."""
    kernel = tmp_path / "k.cu"
    kernel.write_text('extern "C" __global__ void solve(const float* x, float* y, int n) {}\n')
    ref = tmp_path / "ref.py"
    ref.write_text("def make_inputs(rng, dims): pass\ndef reference(i, d): pass\n"
                   "def outputs(dims): pass\n")  # fmt: skip
    proc = loop_cli("loop", "setup", "--json", "--baseline", kernel, "--ref", ref, "--dims",
                    '{"n": 64}')  # fmt: skip
    assert proc.returncode == 2
    assert "no launch directive" in json.loads(proc.stdout)["error"]["message"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_the_solve_examples_match_their_spec_and_compile(tmp_path: Path) -> None:
    from perfledger.kernels.subjects import solve as sv

    ref = sv.load_ref(SOLVE / "ref.py")
    for name in ("scale_v0.cu", "scale_v1.cu"):
        spec = sv.resolve_spec(ref, (SOLVE / name).read_text())
        build = sv.build_solve(SOLVE / name, arch="sm_90", cache_dir=tmp_path)
        assert build.library.is_file()
        assert "scale" in build.ptxas_log  # ptxas -v reported the kernels it compiled
    assert spec.shapes({"n": 10}) == {"x": (10,), "y": (10,)}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH")
def test_ptxas_evidence_of_the_built_library_is_kept_with_its_hash(tmp_path: Path) -> None:
    from perfledger.kernels.subjects import solve as sv
    from perfledger.kernels.subjects.solve_evidence import compiler_evidence

    build = sv.build_solve(SOLVE / "scale_v1.cu", arch="sm_90", cache_dir=tmp_path / "cache")
    found = compiler_evidence(build, tmp_path / "evidence", cuobjdump="/nonexistent/cuobjdump")
    assert found["library_blake3"] == build.library_blake3
    registers = [f for f in found["facts"]["ptxas"] if f["name"].endswith(".registers")]
    assert len(registers) == 2 and all(f["value"] > 0 for f in registers)  # the two kernels
    assert found["record"]["ptxas"][:5] == ["perfledger", "evidence", "add", "--kind", "ptxas"]
    assert "sass" not in found["facts"] and found["limitations"]  # the failed dump is said


@pytest.mark.skipif(
    shutil.which("nvcc") is None or shutil.which("cuobjdump") is None,
    reason="needs nvcc and cuobjdump on PATH",
)
def test_sass_evidence_is_the_listing_of_the_very_library_built(tmp_path: Path) -> None:
    from perfledger.kernels.subjects import solve as sv
    from perfledger.kernels.subjects.solve_evidence import compiler_evidence

    build = sv.build_solve(SOLVE / "scale_v1.cu", arch="sm_90", cache_dir=tmp_path / "cache")
    found = compiler_evidence(build, tmp_path / "evidence")
    assert found["limitations"] == [], found["limitations"]
    assert found["facts"]["sass"]
    listing = Path(found["files"]["sass"]).read_text()
    assert "scale4_kernel" in listing and "tail_kernel" in listing
    assert found["record"]["sass"][-4:] == ["--binary", str(build.library), "--tool-version",
                                             build.nvcc_version]  # fmt: skip


@pytest.mark.slow
def test_a_valid_solve_contract_on_a_machine_without_a_gpu_says_so_without_a_traceback(
    loop_cli,
) -> None:
    try:
        import cupy  # noqa: F401

        pytest.skip("CuPy is installed here: the measured path runs")
    except ImportError:
        pass
    before = _head(loop_cli.ledger)
    proc = loop_cli("loop", "setup", "--json", "--baseline", SOLVE / "scale_v0.cu", "--ref",
                    SOLVE / "ref.py", "--dims", '{"n": 1024}')  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "CuPy" in json.loads(proc.stdout)["error"]["message"]
    assert _head(loop_cli.ledger) == before
