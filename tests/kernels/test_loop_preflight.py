"""Preflight of the baseline/reference/dims contract, and the import
direction of the loop's modules (SPEC.md section 1)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from perfledger.errors import BadRequest
from perfledger.kernels.loop import preflight as pf

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "examples" / "loop" / "cuda" / "transpose_v0.cu"


def test_cuda_entry_and_parameters_are_parsed() -> None:
    entry = pf.parse_cuda_entry(KERNEL.read_text())
    assert entry.name == "transpose"
    assert [(n, i) for n, _, i in entry.params] == [
        ("x", False),
        ("y", False),
        ("M", True),
        ("N", True),
    ]
    launch = pf.parse_launch(KERNEL.read_text())
    assert pf.eval_launch(launch["block"], {"M": 64, "N": 96}) == (32, 8)


def test_every_integer_parameter_needs_a_dim() -> None:
    entry = pf.parse_cuda_entry(KERNEL.read_text())
    with pytest.raises(BadRequest, match="N of transpose have no value"):
        pf.check_dims(entry, {"M": 64})
    with pytest.raises(BadRequest, match="positive integer"):
        pf.check_dims(entry, {"M": 64, "N": 0})


def test_mangled_entry_is_refused() -> None:
    with pytest.raises(BadRequest, match='extern "C"'):
        pf.parse_cuda_entry("__global__ void k(float* x) {}")


@pytest.mark.parametrize("expression", ["__import__('os')", "(N).bit_length()", "[M]", "N ** 99"])
def test_launch_expressions_are_arithmetic_only(expression: str) -> None:
    with pytest.raises(BadRequest):
        pf.eval_launch(expression, {"M": 4, "N": 4})


def test_python_stand_in_entry() -> None:
    entry = pf.parse_python_entry("def kernel(x, M: int, N: int):\n    return x\n", "kernel")
    assert [(n, i) for n, _, i in entry.params] == [("x", False), ("M", True), ("N", True)]
    with pytest.raises(BadRequest, match="no function"):
        pf.parse_python_entry("x = 1\n", "kernel")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_import_directions() -> None:
    src = ROOT / "src" / "perfledger"
    for path in [src / "projections" / "loop.py", src / "projections" / "loop_summary.py"]:
        bad = {
            m
            for m in _imports(path)
            if m.startswith(("perfledger.ledger", "perfledger.commands", "perfledger.kernels"))
        }
        assert not bad, (path, bad)
    for path in [src / "events" / "loop.py", src / "events" / "catalog.py"]:
        bad = {
            m
            for m in _imports(path)
            if m.startswith("perfledger.")
            and not m.startswith(("perfledger.events", "perfledger.errors"))
        }
        assert not bad, (path, bad)
