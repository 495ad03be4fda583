"""PyTorch profiler traces: the real H200 trace parses exactly; refusals are clear."""

from __future__ import annotations

import gzip
import io
import json
import statistics
from pathlib import Path

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.torch_trace import parse_torch_trace


def _load(fixtures: Path) -> dict:
    return json.loads((fixtures / "torch_trace.json").read_text())


def _parse_obj(obj: object):
    return parse_torch_trace(io.BytesIO(json.dumps(obj).encode()))


def test_trace_parses_exactly(fixtures: Path) -> None:
    report = parse_torch_trace(fixtures / "torch_trace.json", torch_version="2.11.0")
    data = _load(fixtures)
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    assert report.tool_version == "2.11.0" and report.layer == "workload"
    assert report.attributes["device0"] == "NVIDIA H200 (compute 9.0)"
    assert len(report.kernels) == 4 and sum(k.launches for k in report.kernels.values()) == 12
    for name, kernel in report.kernels.items():
        durs = [round(e["dur"] * 1000) for e in kernels if e["name"] == name]
        got = report.durations(name)
        assert got["count"] == len(durs) == kernel.launches
        assert got["total_ns"] == sum(durs)
        assert got["median_ns"] == statistics.median(durs)
        assert (got["min_ns"], got["max_ns"]) == (min(durs), max(durs))
    # busy fraction: union of kernel intervals over the span of all complete events
    spans = sorted(
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in kernels
    )
    union, cur = 0, None
    for s, e in spans:
        if cur is None or s > cur[1]:
            union += (cur[1] - cur[0]) if cur else 0
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    union += cur[1] - cur[0]
    complete = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    lo = min(round(e["ts"] * 1000) for e in complete)
    hi = max(round(e["ts"] * 1000) + round(e["dur"] * 1000) for e in complete)
    facts = {n: v for n, v, _, _ in report.facts}
    assert facts["gpu0.kernel_busy"] == union
    assert facts["gpu0.busy_fraction"] == pytest.approx(union / (hi - lo))
    assert facts["cuda_runtime.count"] == sum(1 for e in complete if e.get("cat") == "cuda_runtime")


def test_gzip_and_string_pids(fixtures: Path, tmp_path: Path) -> None:
    data = _load(fixtures)
    for event in data["traceEvents"]:
        if "pid" in event:
            event["pid"] = f"pid {event['pid']}"
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    report = parse_torch_trace(path)
    assert sum(k.launches for k in report.kernels.values()) == 12
    assert report.tool_version.startswith("kineto trace schema 1, CUPTI 130001")


def test_schema_version_missing_refused(fixtures: Path) -> None:
    data = _load(fixtures)
    del data["schemaVersion"]
    with pytest.raises(EvidenceError, match="no schemaVersion"):
        _parse_obj(data)
    data["schemaVersion"] = 7
    with pytest.raises(EvidenceError, match="unknown trace schemaVersion 7"):
        _parse_obj(data)


def test_non_cuda_trace_refused_as_out_of_scope(fixtures: Path) -> None:
    data = _load(fixtures)
    for key in ("deviceProperties", "cupti_version", "cuda_runtime_version"):
        del data[key]
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") == "cpu_op"]
    with pytest.raises(EvidenceError, match="out of scope: the trace is not from a CUDA device"):
        _parse_obj(data)


def test_truncated_and_binary_refused(fixtures: Path) -> None:
    raw = (fixtures / "torch_trace.json").read_bytes()
    for cut in (10, len(raw) // 2, len(raw) - 3):
        with pytest.raises(EvidenceError, match=r"truncated|invalid JSON|expected"):
            parse_torch_trace(io.BytesIO(raw[:cut]))
    with pytest.raises(EvidenceError, match="binary"):
        parse_torch_trace(io.BytesIO(b'{"a": "\x00"}'))


def test_kernel_without_key_fields_refused(fixtures: Path) -> None:
    data = _load(fixtures)
    kernel = next(e for e in data["traceEvents"] if e.get("cat") == "kernel")
    del kernel["args"]["grid"]
    with pytest.raises(EvidenceError, match="grid"):
        _parse_obj(data)


def test_small_chunks_give_the_same_answer(fixtures: Path) -> None:
    """Element boundaries falling across read chunks change nothing (streaming)."""
    from perfledger.kernels.profilers import torch_trace

    raw = (fixtures / "torch_trace.json").read_bytes()
    whole = torch_trace.parse_torch_trace(io.BytesIO(raw))
    stream = torch_trace._Stream(io.BytesIO(raw), "chunks", chunk_bytes=7)
    chunked = torch_trace._parse(stream, "chunks", None)
    assert chunked.facts == whole.facts
    assert {k: chunked.durations(k) for k in chunked.kernels} == {
        k: whole.durations(k) for k in whole.kernels
    }
