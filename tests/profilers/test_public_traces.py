"""PyTorch profiler traces from public repositories (tests/fixtures/profilers/public, see its
SOURCES.md): a trace with GPU activity is read exactly or refused naming why, never recorded
with zero kernels quietly; a trace of another vendor's device is refused naming the marks."""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers import torch_trace
from perfledger.kernels.profilers.evidence import report_facts, report_limitations
from perfledger.kernels.profilers.torch_trace import parse_torch_trace

PUBLIC = Path(__file__).resolve().parent.parent / "fixtures" / "profilers" / "public"
V100_2021 = PUBLIC / "kineto2021_resnet50_v100.json.gz"
NO_DEVICES_2021 = PUBLIC / "kineto2021_resnet50_nodevices.json.gz"
ROCM = PUBLIC / "kineto_rocm6_mi250.json.gz"
RANGE_PROFILER = PUBLIC / "kineto_cupti_range_profiler.json.gz"


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def _parse(obj: object):
    return parse_torch_trace(io.BytesIO(json.dumps(obj).encode()), name="derived")


def _complete(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("path", [V100_2021, NO_DEVICES_2021], ids=["v100", "no-devices"])
def test_2021_kineto_trace_with_capitalised_categories_yields_its_kernels(path: Path) -> None:
    """Kineto of 2021 wrote Kernel / Runtime / Operator / Memcpy / Memset: each kernel is read
    (with its shape and stream), the other categories are counted under today's names."""
    trace = _load(path)
    events = _complete(trace)
    kernels = [e for e in events if e["cat"] == "Kernel"]
    report = parse_torch_trace(path)
    assert report.layout == "torch-chrome-trace-legacy"
    assert sum(k.launches for k in report.kernels.values()) == len(kernels) == 40
    by_name = Counter(e["name"] for e in kernels)
    assert {n: k.launches for n, k in report.kernels.items()} == dict(by_name)
    first = kernels[0]
    shape = report.kernels[first["name"]]
    assert f"({', '.join(map(str, first['args']['grid']))})" in shape.grids
    assert str(first["args"]["stream"]) in shape.streams
    for name in by_name:
        durs = sorted(round(e["dur"] * 1000) for e in kernels if e["name"] == name)
        assert report.durations(name)["total_ns"] == sum(durs)
    facts = {n: v for n, v, _, _ in report.facts}
    for old, new in torch_trace.LEGACY_CATEGORIES.items():
        if old != "Kernel":
            assert facts[f"{new}.count"] == sum(1 for e in events if e["cat"] == old), old
    assert facts["gpu0.kernel_busy"] > 0 and report.limitations == []


def test_2021_trace_records_its_device_and_kernel_facts() -> None:
    """The V100 trace names its devices (compute 7.0); its kernel facts are recorded."""
    report = parse_torch_trace(V100_2021)
    assert report.attributes["device0"] == "Tesla V100-DGXS-32GB (compute 7.0)"
    names = [f["name"] for f in report_facts(report)]
    assert "k0.duration.median_ns" in names and "gpu0.busy_fraction" in names


def test_2021_trace_without_device_properties_is_identified_by_its_cuda_calls() -> None:
    """No deviceProperties, no CUDA or CUPTI version: its cudaLaunchKernel / cudaMemcpyAsync
    runtime calls mark it as CUDA (it was refused as "not from a CUDA device")."""
    trace = _load(NO_DEVICES_2021)
    assert set(trace) == {"schemaVersion", "traceEvents"}
    assert parse_torch_trace(NO_DEVICES_2021).kernels
    runtime_free = {
        **trace,
        "traceEvents": [e for e in trace["traceEvents"] if e.get("cat") != "Runtime"],
    }
    with pytest.raises(EvidenceError, match="not from a CUDA device"):
        _parse(runtime_free)


@pytest.mark.slow
def test_legacy_trace_reads_the_same_in_small_chunks() -> None:
    """The fast (batched) and slow (event by event) paths map the old names alike."""
    raw = gzip.decompress(V100_2021.read_bytes())
    whole = parse_torch_trace(io.BytesIO(raw))
    stream = torch_trace._Stream(io.BytesIO(raw), "chunks", chunk_bytes=5)
    chunked = torch_trace._parse(stream, "chunks", None)
    assert chunked.layout == whole.layout and chunked.facts == whole.facts
    assert {k: v.launches for k, v in chunked.kernels.items()} == {
        k: v.launches for k, v in whole.kernels.items()
    }


def test_r6_rocm_trace_is_refused_naming_hip_and_the_amd_device() -> None:
    """A ROCm 6.2 trace (MI250) whose devices carry computeMajor is refused as not NVIDIA, and
    the message names the HIP runtime calls and the AMD device (not a malformed grid)."""
    trace = _load(ROCM)
    assert all("computeMajor" in d for d in trace["deviceProperties"])
    with pytest.raises(EvidenceError, match="not a trace of an NVIDIA CUDA device") as info:
        parse_torch_trace(ROCM)
    assert (
        "HIP runtime calls (hip" in info.value.message and "hipLaunchKernel" in info.value.message
    )
    assert "AMD device" in info.value.message and "grid" not in info.value.message


def test_r6_rocm_trace_with_cuda_like_fields_filled_is_still_refused() -> None:
    """Grid and block filled in on every kernel, the device renamed to an NVIDIA one: the HIP
    runtime calls alone refuse it (it used to be accepted as CUDA evidence)."""
    trace = _load(ROCM)
    for event in _complete(trace):
        if event["cat"] == "kernel":
            event["args"].update({"grid": [1, 1, 1], "block": [64, 1, 1]})
            event["args"].setdefault("stream", 0)
    for device in trace["deviceProperties"]:
        device["name"] = "NVIDIA H100 80GB HBM3"
    trace["cuda_runtime_version"] = 12040
    with pytest.raises(EvidenceError, match=r"HIP runtime calls \(hip") as info:
        _parse(trace)
    assert "AMD device" not in info.value.message


def _h200() -> dict[str, Any]:
    return _load(PUBLIC.parent / "torch_trace.json")


def _with_hip_call(trace: dict[str, Any]) -> None:
    call = next(e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime")
    trace["traceEvents"].append({**call, "name": "hipLaunchKernel"})


def _with_amd_device(trace: dict[str, Any]) -> None:
    trace["deviceProperties"][0]["name"] = "AMD Instinct MI300X"


def _with_gfx_arch(trace: dict[str, Any]) -> None:
    trace["deviceProperties"][0]["gcnArchName"] = "gfx942:sramecc+:xnack-"


def _with_roctracer_key(trace: dict[str, Any]) -> None:
    trace["roctracer_version"] = "4.1"


def _with_hip_backend(trace: dict[str, Any]) -> None:
    trace["distributedInfo"] = {"backend": "rccl", "rank": 0, "world_size": 8}


def _with_mtia_events(trace: dict[str, Any]) -> None:
    call = next(e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime")
    trace["traceEvents"].append({**call, "cat": "mtia_runtime", "name": "launch"})


@pytest.mark.parametrize(
    ("mark", "named"),
    [
        (_with_hip_call, "HIP runtime calls (hipLaunchKernel)"),
        (_with_amd_device, "an AMD device ('AMD Instinct MI300X')"),
        (_with_gfx_arch, "an AMD device ('gfx942"),
        (_with_roctracer_key, "ROCm header keys (roctracer_version)"),
        (_with_hip_backend, "distributed backend 'rccl'"),
        (_with_mtia_events, "Meta MTIA runtime events"),
    ],
)
def test_r6_each_mark_of_another_vendor_refuses_a_cuda_trace(mark: Any, named: str) -> None:
    """The real H200 trace with one foreign mark added is refused, naming that mark."""
    trace = _h200()
    mark(trace)
    with pytest.raises(EvidenceError, match="out of scope: not a trace of an NVIDIA") as info:
        _parse(trace)
    assert named in info.value.message


def test_r6_kernel_launches_without_kernel_events_are_refused() -> None:
    """A CUPTI range-profiler trace has cudaLaunchKernel calls but no kernel activity: it was
    recorded with zero kernels; now it is refused naming the launches."""
    trace = _load(RANGE_PROFILER)
    cats = Counter(e.get("cat") for e in _complete(trace))
    assert cats["kernel"] == 0 and cats["cuda_profiler_range"] > 0
    with pytest.raises(EvidenceError, match=r"launches kernels \(cudaLaunchKernel x1\)") as info:
        parse_torch_trace(RANGE_PROFILER)
    assert "ProfilerActivity.CUDA" in info.value.hint


def test_r6_unknown_kernel_category_is_named_not_zero_kernels() -> None:
    """Kernel events under a category name this parser does not know: refused, naming it."""
    trace = _h200()
    for event in trace["traceEvents"]:
        if event.get("cat") == "kernel":
            event["cat"] = "gpu_kernel_v9"
    with pytest.raises(EvidenceError, match="categories not known here: gpu_kernel_v9"):
        _parse(trace)
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")
    ]
    with pytest.raises(EvidenceError, match=r"no kernel event, and .* gpu_kernel_v9"):
        _parse(trace)


def test_unknown_category_beside_kernels_is_a_limitation_of_parser_version_2() -> None:
    """Kernels read and one event of an unknown category: recorded as a limitation (version 2
    only, so evidence recorded under version 1 re-derives as it was)."""
    trace = _h200()
    call = next(e for e in trace["traceEvents"] if e.get("cat") == "cpu_op")
    trace["traceEvents"].append({**call, "cat": "gpu_mystery"})
    report = _parse(trace)
    assert report.kernels
    assert report_limitations(report) == ["events of categories not read: gpu_mystery"]
    assert report_limitations(report, parser="1") == []


def test_mixing_the_category_names_of_two_eras_is_refused() -> None:
    """One trace with both Kernel and kernel events is no single known layout."""
    trace = _h200()
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    trace["traceEvents"].append({**kernel, "cat": "Kernel"})
    with pytest.raises(EvidenceError, match="mixes the 2021 Kineto category names"):
        _parse(trace)


def test_fixture_sources_are_named() -> None:
    """Each public fixture has its origin, license and trimming recorded in SOURCES.md."""
    sources = (PUBLIC / "SOURCES.md").read_text()
    for path in PUBLIC.iterdir():
        if path.suffix in (".gz", ".sqlite"):
            assert f"`{path.name}`" in sources, path.name


def test_user_metadata_key_containing_hip_is_no_rocm_mark() -> None:
    """Only ROCm's own key shapes mark a trace: a user's metadata key "ownership" does not."""
    trace = _h200()
    trace["ownership"] = "team-a"
    assert _parse(trace).kernels
    trace["hip_runtime_version"] = 60200
    with pytest.raises(EvidenceError, match=r"ROCm header keys \(hip_runtime_version\)"):
        _parse(trace)


def test_event_with_a_list_as_category_or_name_is_no_crash() -> None:
    """A list where a category or a runtime call's name belongs (unhashable) is no crash: an
    unknown category beside kernels (a limitation), a name that is no runtime call."""
    trace = _h200()
    call = next(e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime")
    trace["traceEvents"].insert(0, {**call, "cat": ["kernel"]})
    report = _parse(trace)
    assert report.kernels
    assert report_limitations(report) == ["events of categories not read: <list>"]
    trace["traceEvents"][0] = {**call, "name": ["hipLaunchKernel"]}
    assert _parse(trace).kernels
