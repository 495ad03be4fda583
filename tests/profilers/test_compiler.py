"""Compiler evidence: nvcc -Xptxas -v and cuobjdump --dump-sass of app.cu, built on the H200."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.compiler import parse_nvcc_version, parse_ptxas, parse_sass


def _hash(fixtures: Path) -> str:
    return "sha256:" + (fixtures / "app.sha256").read_text().split()[0]


def test_ptxas_resources(fixtures: Path, nvcc_version: str) -> None:
    report = parse_ptxas(fixtures / "ptxas_v.txt", tool_version=nvcc_version)
    assert report.tool_version == "13.0.88"
    values = {k: {m: s.mean for m, s in v.metrics.items()} for k, v in report.kernels.items()}
    assert values["_Z8fma_loopiiPf"] == {
        "stack": 0.0, "spill_stores": 0.0, "spill_loads": 0.0, "registers": 10.0,
        "barriers": 1.0, "smem": 1024.0,
    }  # fmt: skip
    assert values["_Z5saxpyifPKfPf"]["registers"] == 10.0
    assert report.attributes["_Z5saxpyifPKfPf/arch"] == "sm_90"


def test_ptxas_unknown_line_refused(fixtures: Path, nvcc_version: str) -> None:
    text = (fixtures / "ptxas_v.txt").read_text().replace("1024 bytes smem", "1024 bytes zmem")
    with pytest.raises(EvidenceError, match="unknown resource item"):
        parse_ptxas(io.BytesIO(text.encode()), tool_version=nvcc_version)
    with pytest.raises(EvidenceError, match="not a ptxas line"):
        parse_ptxas(io.BytesIO(b"hello\n"), tool_version=nvcc_version)


def test_sass_instruction_counts(fixtures: Path, nvcc_version: str) -> None:
    text = (fixtures / "cuobjdump_sass.txt").read_text()
    report = parse_sass(
        fixtures / "cuobjdump_sass.txt", tool_version=nvcc_version, binary_hash=_hash(fixtures)
    )
    assert report.attributes["binary_hash"] == _hash(fixtures)
    fma = report.kernels["_Z8fma_loopiiPf"].metrics
    body = text.split("Function : _Z8fma_loopiiPf")[1].split("Function :")[0]
    assert fma["op.FFMA"].mean == len(re.findall(r"\*/\s+FFMA ", body))
    saxpy = report.kernels["_Z5saxpyifPKfPf"].metrics
    assert saxpy["op.LDG.E.CONSTANT"].mean == 1.0  # __restrict__ const load, as compiled
    assert "op.BAR.SYNC.DEFER_BLOCKING" not in saxpy and "op.BAR.SYNC.DEFER_BLOCKING" in fma


def test_sass_facts_need_the_binary_hash(fixtures: Path, nvcc_version: str) -> None:
    with pytest.raises(EvidenceError, match="tied to the binary"):
        parse_sass(fixtures / "cuobjdump_sass.txt", tool_version=nvcc_version, binary_hash="")


def test_source_text_is_not_sass(fixtures: Path, nvcc_version: str) -> None:
    """A source file mentioning an instruction is not a listing: refused, never a fact."""
    with pytest.raises(EvidenceError, match="unknown SASS listing line"):
        parse_sass(fixtures / "app.cu", tool_version=nvcc_version, binary_hash=_hash(fixtures))


def test_nvcc_version() -> None:
    assert parse_nvcc_version("13.0.88") == "13.0.88"
    with pytest.raises(EvidenceError):
        parse_nvcc_version("cuda")
