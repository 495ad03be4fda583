"""Hypothesis fuzzing of every parser with mutated real reports: the only outcomes are a parse or
an EvidenceError with a message; never another exception (R6: nothing is guessed, nothing
crashes)."""

from __future__ import annotations

import gzip
import io
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.compiler import parse_ptxas, parse_sass
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.profilers.nsys import parse_nsys_sqlite, parse_nsys_stats_csv
from perfledger.kernels.profilers.torch_trace import parse_torch_trace

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"
NCU = (FIXTURES / "ncu_version.txt").read_text()
HASH = "sha256:" + (FIXTURES / "app.sha256").read_text().split()[0]

PARSERS: dict[str, tuple[str, Callable[[io.BytesIO], object]]] = {
    "ncu-details": ("ncu_details_rules.csv", lambda s: parse_ncu_csv(s, tool_version=NCU)),
    "ncu-raw": ("ncu_raw.csv", lambda s: parse_ncu_csv(s, tool_version=NCU)),
    "ncu-summary": ("ncu_summary.csv", lambda s: parse_ncu_csv(s, tool_version=NCU)),
    "torch": ("torch_trace.json", lambda s: parse_torch_trace(s)),
    # public traces (public/SOURCES.md), fuzzed as JSON: a 2021 trace, and a ROCm trace that
    # is always refused (its event reading goes on past a bad kernel to find the vendor marks)
    "torch-2021": ("public/kineto2021_resnet50_v100.json.gz", lambda s: parse_torch_trace(s)),
    "torch-rocm": ("public/kineto_rocm6_mi250.json.gz", lambda s: parse_torch_trace(s)),
    "nsys-stats": (
        "nsys_stats_cuda_gpu_kern_sum.csv",
        lambda s: parse_nsys_stats_csv(s, tool_version="2025.3.1.90"),
    ),
    "ptxas": ("ptxas_v.txt", lambda s: parse_ptxas(s, tool_version="13.0.88")),
    "sass": ("cuobjdump_sass.txt",
             lambda s: parse_sass(s, tool_version="13.0.88", binary_hash=HASH)),
}  # fmt: skip


#: Parsers whose unmutated fixture is refused (a trace of another vendor's device).
REFUSED = ("torch-rocm",)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """Up to three mutations of ``data``: byte flips, deletions, insertions of random or
    structural bytes, truncation, duplicated or swapped lines."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate", "dup", "swap"]))
        at = draw(st.integers(0, max(0, len(out) - 1)))
        if kind == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind == "delete":
            del out[at : at + draw(st.integers(1, 64))]
        elif kind == "insert":
            chunk = draw(
                st.one_of(
                    st.binary(min_size=1, max_size=16),
                    st.sampled_from(
                        [b'"', b",", b"\n", b"{", b"]", b"1e999", b"nan", b'","', b"\x00", b"\xff"]
                    ),
                )
            )
            out[at:at] = chunk
        elif kind == "truncate":
            del out[at:]
        else:
            lines = bytes(out).split(b"\n")
            i = draw(st.integers(0, max(0, len(lines) - 1)))
            j = draw(st.integers(0, max(0, len(lines) - 1)))
            if kind == "dup":
                lines.insert(i, lines[j])
            else:
                lines[i], lines[j] = lines[j], lines[i]
            out = bytearray(b"\n".join(lines))
    return bytes(out)


def _check(parse: Callable[[io.BytesIO], object], data: bytes) -> None:
    try:
        parse(io.BytesIO(data))
    except EvidenceError as exc:
        assert exc.message and exc.exit_code == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PARSERS))
def test_mutated_reports_parse_or_are_refused(name: str) -> None:
    file_name, parse = PARSERS[name]
    original = (FIXTURES / file_name).read_bytes()
    if file_name.endswith(".gz"):
        original = gzip.decompress(original)
    if name in REFUSED:
        with pytest.raises(EvidenceError):
            parse(io.BytesIO(original))
    else:
        parse(io.BytesIO(original))  # the unmutated file parses

    @settings(
        max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    @given(mutated(original))
    def run(data: bytes) -> None:
        _check(parse, data)

    run()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_mutated_nsys_sqlite_parse_or_are_refused(tmp_path_factory, data) -> None:  # type: ignore[no-untyped-def]
    original = (FIXTURES / "nsys_synthetic.sqlite").read_bytes()
    blob = data.draw(mutated(original))
    path = tmp_path_factory.mktemp("fuzz") / "x.sqlite"
    path.write_bytes(blob)
    try:
        parse_nsys_sqlite(path)
    except EvidenceError as exc:
        assert exc.message


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(st.data())
def test_mutated_public_nsys_export_parse_or_are_refused(tmp_path_factory, data) -> None:  # type: ignore[no-untyped-def]
    """The public schema-2.9 export (memory copies, GPUs) mutated: parsed or refused."""
    original = (FIXTURES / "public" / "nsys_2022_saxpy_a100.sqlite").read_bytes()
    blob = data.draw(mutated(original))
    path = tmp_path_factory.mktemp("fuzz") / "x.sqlite"
    path.write_bytes(blob)
    try:
        parse_nsys_sqlite(path)
    except EvidenceError as exc:
        assert exc.message
