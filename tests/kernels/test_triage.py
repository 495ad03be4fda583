"""Hotspot triage on real PyTorch traces from an H200 (a small model's forward pass, eager and as
a CUDA graph), on the profiler fixtures and on a hand-written nsys export: launches linked to
their ops and ranges, the time shares, the known paths, the graph attribution and the audit's
re-derivation."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from perfledger.errors import BadRequest, EvidenceError
from perfledger.kernels.triage.launches import Launch, TraceLaunches, check_counts, read_launches
from perfledger.kernels.triage.paths import load_known_paths, parse_known_paths
from perfledger.kernels.triage.record import (
    ANSWER,
    REPORT,
    answer_facts,
    encode_answer,
    evidence_body,
    recheck,
    run_triage,
)
from perfledger.kernels.triage.tables import NEW, attribute_graph_kernels, build_triage

ROOT = Path(__file__).resolve().parents[2]
TRIAGE = ROOT / "tests" / "fixtures" / "triage"
PROFILERS = ROOT / "tests" / "fixtures" / "profilers"
GRAPH_OFF = TRIAGE / "forward_graph_off.json"
GRAPH_ON = TRIAGE / "forward_graph_on.json"
NSYS = TRIAGE / "nsys_triage.sqlite"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
PATHS = """
[[path]]
pattern = "gemm|Kernel2<cutlass"
route = "cuBLASLt algorithm choice; TF32"
notes = "fp32 SIMT GEMMs: try TF32 tensor cores first"

[[path]]
pattern = "*layer_norm*"
syntax = "glob"
route = "fused LayerNorm"
"""


def _kernel(answer: dict, prefix: str) -> dict:
    return next(row for row in answer["kernels"] if row["name"].startswith(prefix))


def test_eager_kernels_are_linked_to_the_aten_ops_that_launched_them() -> None:
    trace = read_launches(GRAPH_OFF)
    answer = build_triage(trace, [])
    ops = {row["name"][:40]: {b["by"] for b in row["launched_by"]} for row in answer["kernels"]}
    assert ops[GELU[:40]] == {"aten::gelu"}
    layer_norm = _kernel(answer, "void at::native::(anonymous namespace)::vectorized_layer_norm")
    assert {b["by"] for b in layer_norm["launched_by"]} == {"aten::native_layer_norm"}
    # the cutlass kernel is launched through the driver API (cuLaunchKernel); Kineto's External
    # id still names its op
    cutlass = _kernel(answer, "void cutlass::Kernel2")
    assert {b["by"] for b in cutlass["launched_by"]} == {"aten::addmm"}
    assert all(launch.launcher for launch in trace.launches)
    assert answer["graph"]["graph_kernels"] == 0 and not answer["limitations"]


def test_totals_are_the_parsers_and_shares_of_one_stream_add_to_one() -> None:
    trace = read_launches(GRAPH_OFF)
    answer = build_triage(trace, [], top=3)
    for row in answer["kernels"]:
        assert row["total_ns"] == trace.report.durations(row["name"])["total_ns"]
        assert row["total_ns"] == sum(la.duration_ns for la in trace.launches
                                      if la.name == row["name"])  # fmt: skip
    # one stream, no overlap: the busy union is the sum of kernel times
    assert sum(row["share_of_gpu_busy"] for row in answer["kernels"]) == pytest.approx(1.0)
    totals = [row["total_ns"] for row in answer["kernels"]]
    assert totals == sorted(totals, reverse=True)
    span = answer["denominators"]["trace_span_ns"]
    assert span > answer["denominators"]["gpu_busy_ns"]  # the GPU idles most of this trace
    top = answer["actions"][0]
    assert top["f"] == top["f_gpu_busy"] and top["f_trace_span"] < top["f_gpu_busy"]
    assert len(answer["actions"]) == 3 and all(a["action"] == NEW for a in answer["actions"])
    by_span = build_triage(trace, [], top=3, denominator="span")
    assert by_span["actions"][0]["f"] == top["f_trace_span"]
    assert "upper bound" in answer["denominators"]["f_means"]


def test_graph_kernels_without_a_mapping_are_listed_as_not_attributed() -> None:
    answer = build_triage(read_launches(GRAPH_ON), [])
    graph = answer["graph"]
    assert (graph["graph_launches"], graph["graph_kernels"], graph["attributed"]) == (2, 16, 0)
    assert sum(row["instances"] for row in graph["unattributed"]) == 16
    assert {row["reason"] for row in graph["unattributed"]} == {
        "no --mapping graph-off trace was given"
    }
    for row in answer["kernels"]:
        assert row["launched_by"] == [
            {"by": "cudaGraphLaunch (CUDA graph, not attributed)", "instances": 2}
        ]


def test_graph_kernels_are_attributed_to_the_ops_of_the_graph_off_trace() -> None:
    on, off = read_launches(GRAPH_ON), read_launches(GRAPH_OFF)
    answer = build_triage(on, [], mapping=off)
    assert answer["graph"]["attributed"] == 16 and answer["graph"]["unattributed"] == []
    eager = build_triage(off, [])
    eager_ops = {row["name"]: {b["by"] for b in row["launched_by"]} for row in eager["kernels"]}
    for row in answer["kernels"]:
        mapped = {b["by"].removesuffix(" (CUDA graph, mapped)") for b in row["launched_by"]}
        assert mapped == eager_ops[row["name"]]


def test_a_kernel_missing_from_the_graph_off_trace_is_not_attributed(tmp_path: Path) -> None:
    """A variant of the real graph-off trace with its GELU kernels removed."""
    data = json.loads(GRAPH_OFF.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"]
                           if not (e.get("cat") == "kernel" and e["name"].startswith(GELU))]  # fmt: skip
    variant = tmp_path / "no_gelu.json"
    variant.write_text(json.dumps(data))
    answer = build_triage(read_launches(GRAPH_ON), [], mapping=read_launches(variant))
    assert answer["graph"]["attributed"] == 14
    [row] = answer["graph"]["unattributed"]
    assert row["name"].startswith(GELU) and row["instances"] == 2
    assert row["reason"] == "its name is absent from the graph-off trace"


def _launches(names: list[str], *, graph: bool) -> TraceLaunches:
    trace = TraceLaunches("t", "torch", report=None)  # type: ignore[arg-type]
    trace.launches = [
        Launch(name, i * 10, 5, 0, 7, launcher="cudaGraphLaunch" if graph else "cudaLaunchKernel",
               op="" if graph else f"op{i}", graph=graph, graph_launch=1 if graph else -1)
        for i, name in enumerate(names)
    ]  # fmt: skip
    return trace


def test_a_graph_kernel_out_of_the_graph_off_order_is_not_attributed() -> None:
    on = _launches(["a", "b", "a"], graph=True)
    attributed, unattributed = attribute_graph_kernels(on, _launches(["b", "a"], graph=False))
    assert attributed == {1: "op0", 2: "op1"}
    assert unattributed == {0: "its order differs from the graph-off trace"}


def test_a_mapping_trace_with_graph_kernels_is_refused() -> None:
    with pytest.raises(BadRequest, match="must be a trace of the same workload run without"):
        build_triage(read_launches(GRAPH_OFF), [], mapping=read_launches(GRAPH_ON))


def test_nsys_kernels_are_linked_to_runtime_calls_and_nvtx_ranges() -> None:
    trace = read_launches(NSYS)
    answer = build_triage(trace, [])
    flash = _kernel(answer, "flash_fwd_kernel")
    assert flash["launched_by"] == [
        {"by": "step 0 > forward > attention > cudaLaunchKernel_v7000", "instances": 2}
    ]
    gemm = _kernel(answer, "gemm_kernel")
    assert gemm["launched_by"] == [
        {"by": "step 0 > forward > mlp > cudaLaunchKernel_v7000", "instances": 2},
        {"by": "cudaGraphLaunch_v10000 (CUDA graph, not attributed)", "instances": 1},
    ]
    assert gemm["graph_instances"] == 1 and gemm["grids"] == ["(128, 1, 1)"]
    # busy: 81 + 20 + 5 + 21 + 20 + 20 us of kernels, none overlapping; span: the NVTX
    # start/end range "step 0" (t0 - 1 us to t0 + 300 us) covers every other event
    assert answer["denominators"]["gpu_busy_ns"] == 167_000
    assert answer["denominators"]["trace_span_ns"] == 301_000
    assert flash["share_of_gpu_busy"] == pytest.approx(81_000 / 167_000)


def test_nsys_graph_kernels_are_attributed_through_a_graph_off_export(tmp_path: Path) -> None:
    """A graph-off variant of the hand-written export: the graph launch becomes a plain launch
    and the kernels lose their graphNodeId."""
    off = tmp_path / "graph_off.sqlite"
    shutil.copy(NSYS, off)
    with sqlite3.connect(off) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = NULL")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 10")
    answer = build_triage(read_launches(NSYS), [], mapping=read_launches(off))
    assert answer["graph"]["attributed"] == 2
    gemm = _kernel(answer, "gemm_kernel")
    assert {"by": "step 0 > forward > mlp > cudaLaunchKernel_v7000 (CUDA graph, mapped)",
            "instances": 1} in gemm["launched_by"]  # fmt: skip


def test_an_export_without_runtime_calls_says_its_kernels_are_not_linked() -> None:
    answer = build_triage(read_launches(PROFILERS / "nsys_synthetic.sqlite"), [])
    assert answer["limitations"] == [
        "no CUPTI_ACTIVITY_KIND_RUNTIME table: kernels are not linked to their launch calls"
    ]
    assert {b["by"] for row in answer["kernels"] for b in row["launched_by"]} == {"unknown"}


def test_the_profiler_fixture_trace_links_every_kernel() -> None:
    answer = build_triage(read_launches(PROFILERS / "torch_trace.json"), [])
    assert {b["by"] for row in answer["kernels"] for b in row["launched_by"]} == {
        "aten::mm", "aten::clamp_min", "aten::sum"}  # fmt: skip


def test_known_paths_match_by_regex_and_glob_in_file_order() -> None:
    paths = parse_known_paths(PATHS, source="paths.toml")
    answer = build_triage(read_launches(GRAPH_OFF), paths, top=8)
    by_name = {row["name"]: row for row in answer["known_paths"]["hotspots"]}
    assert by_name[_kernel(answer, "void sgemm_largek")["name"]]["path"] == 0
    assert by_name[_kernel(answer, "void at::native::(anonymous")["name"]]["path"] == 1
    assert by_name[_kernel(answer, GELU)["name"]]["matched"] is False
    actions = {row["name"]: row["action"] for row in answer["actions"]}
    assert actions[_kernel(answer, GELU)["name"]] == NEW
    assert actions[_kernel(answer, "void cutlass::Kernel2")["name"]] == (
        "cuBLASLt algorithm choice; TF32"
    )
    assert answer["known_paths"]["paths"][1]["hotspots"] == [
        _kernel(answer, "void at::native::(anonymous")["key"]]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[path]\npattern = 'x'", "not valid TOML"),
        ("[[path]]\npattern = 'gemm'\n", "Object missing required field `route` - at `$.path[0]`"),
        ("[[path]]\npattern = 'a'\nroute = 'b'\n[[path]]\npattern = ''\nroute = 'c'\n",
         "at `$.path[1].pattern`"),
        ("[[path]]\npattern = 'a'\nroute = 'b'\nrout = 'c'\n", "unknown field `rout`"),
        ("[[path]]\npattern = 'a'\nroute = 'b'\nsyntax = 'sql'\n", "`$.path[0].syntax`"),
        ("[[path]]\npattern = '*gemm*'\nroute = 'b'\n", "path[0].pattern '*gemm*' is not a valid"),
        ("title = 'x'\n", "paths.toml"),
    ],
)  # fmt: skip
def test_a_malformed_known_path_file_is_refused_naming_the_field(text: str, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_known_paths(text, source="paths.toml")
    assert caught.value.message.startswith("paths.toml: ")
    assert message in caught.value.message


def test_a_known_path_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    binary = tmp_path / "paths.toml"
    binary.write_bytes(b"\xff\xfe[[path]]")
    with pytest.raises(BadRequest, match="not UTF-8"):
        load_known_paths(binary)
    with pytest.raises(BadRequest, match="cannot read the known-path file"):
        load_known_paths(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"kernel,time\nk,1\n", "not a trace perfledger triages"),
        (b'{"traceEvents": []}', "no schemaVersion"),
        (b'{"schemaVersion": 1, "traceEvents": [', "invalid JSON"),
    ],
)
def test_a_file_that_is_not_a_trace_is_refused(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "report.json"
    path.write_bytes(content)
    with pytest.raises(EvidenceError, match=message):
        read_launches(path)


def test_a_trace_without_kernels_is_refused(tmp_path: Path) -> None:
    """Kernel events removed: the launches remain, so the strict parser refuses the trace
    (never zero kernels quietly)."""
    data = json.loads(GRAPH_OFF.read_text())
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "kernel"]
    path = tmp_path / "launches_only.json"
    path.write_text(json.dumps(data))
    with pytest.raises(EvidenceError, match=r"launches kernels .* but holds no kernel event"):
        read_launches(path)


def _recorded(tmp_path: Path) -> tuple[dict, dict[str, bytes], list[tuple]]:
    paths = tmp_path / "paths.toml"
    paths.write_text(PATHS)
    answer, inputs = run_triage(GRAPH_ON, known_paths=paths, mapping=GRAPH_OFF, top=4)
    body = evidence_body(answer, inputs[REPORT][0], evidence_id="tri", of_target=False,
                         target_id=None)  # fmt: skip
    blobs = {name: data for name, (data, _media) in inputs.items()}
    blobs[ANSWER] = encode_answer(answer)
    facts = [(f["name"], f["value"], f["unit"], f["note"]) for f in body["facts"]]
    return body, blobs, facts


def test_a_recorded_triage_is_re_derived_from_its_attached_inputs(tmp_path: Path) -> None:
    body, blobs, facts = _recorded(tmp_path)
    assert body["applicability"] == "diagnostic" and body["layer"] == "workload"
    assert set(blobs) == {"report", "mapping", "known-paths.toml", "triage.json"}
    assert recheck(facts, body["report_hash"], set(blobs), blobs.__getitem__) is None
    k0 = next(f for f in body["facts"] if f["name"] == "k0.f")
    assert k0["unit"] == "ratio" and k0["note"].startswith("share of busy; cuBLASLt")


def test_an_edited_fact_or_answer_is_found_by_the_re_derivation(tmp_path: Path) -> None:
    body, blobs, facts = _recorded(tmp_path)
    edited = [(n, 0.9 if n == "k0.f" else v, u, note) for n, v, u, note in facts]
    assert "facts differ" in recheck(edited, body["report_hash"], set(blobs), blobs.__getitem__)
    answer = json.loads(blobs[ANSWER])
    answer["actions"][0]["action"] = NEW
    forged = {**blobs, ANSWER: encode_answer(answer)}
    assert "is not what its attached inputs yield" in recheck(
        facts, body["report_hash"], set(forged), forged.__getitem__)  # fmt: skip
    swapped = {**blobs, REPORT: GRAPH_OFF.read_bytes()}
    assert "report_hash" in recheck(facts, body["report_hash"], set(swapped),
                                    swapped.__getitem__)  # fmt: skip
    without = {k: v for k, v in blobs.items() if k != "mapping"}
    assert "not attached" in recheck(facts, body["report_hash"], set(without),
                                     without.__getitem__)  # fmt: skip


def test_of_target_evidence_needs_a_target() -> None:
    answer, inputs = run_triage(GRAPH_OFF)
    with pytest.raises(BadRequest, match="--of-target needs --target"):
        evidence_body(answer, inputs[REPORT][0], evidence_id="x", of_target=True, target_id=None)
    body = evidence_body(answer, inputs[REPORT][0], evidence_id="x", of_target=True,
                         target_id="t1")  # fmt: skip
    assert body["applicability"] == "same_boundary" and body["target_id"] == "t1"
    assert [f["name"] for f in answer_facts(answer)][:2] == ["gpu_busy", "trace_span"]


def test_kernels_without_correlation_args_are_linked_through_their_flows(tmp_path: Path) -> None:
    """A variant of the real eager trace whose kernels lack ``correlation`` and ``External id``
    (as older Kineto traces do): the ``ac2g`` flows still name the launch call, and the
    innermost ``cpu_op`` enclosing that call is the op."""
    data = json.loads(GRAPH_OFF.read_text())
    for event in data["traceEvents"]:
        if event.get("cat") == "kernel":
            event["args"].pop("correlation")
            event["args"].pop("External id")
    variant = tmp_path / "flows_only.json"
    variant.write_text(json.dumps(data))
    expected = build_triage(read_launches(GRAPH_OFF), [])["kernels"]
    assert build_triage(read_launches(variant), [])["kernels"] == expected
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") != "ac2g"]
    variant.write_text(json.dumps(data))
    unlinked = build_triage(read_launches(variant), [])
    assert unlinked["limitations"] == [
        "16 kernel launch(es) link to no runtime call or CPU op in the trace"
    ]


def test_a_gzip_trace_triages_as_the_plain_one(tmp_path: Path) -> None:
    packed = tmp_path / "forward_graph_off.json.gz"
    packed.write_bytes(gzip.compress(GRAPH_OFF.read_bytes()))
    plain = build_triage(read_launches(GRAPH_OFF), [])
    assert build_triage(read_launches(packed), [])["kernels"] == plain["kernels"]


def test_more_hotspots_than_evidence_can_hold_are_refused_before_recording() -> None:
    answer, inputs = run_triage(GRAPH_OFF)
    answer["actions"] = answer["actions"] * 200  # 1,600 rows
    with pytest.raises(BadRequest, match="at most 1000 hotspots can be recorded"):
        evidence_body(answer, inputs[REPORT][0], evidence_id="x", of_target=False, target_id=None)


@pytest.mark.parametrize("trace", [GRAPH_OFF, GRAPH_ON, PROFILERS / "torch_trace.json"])
def test_busy_time_and_span_agree_with_the_trace_parsers_facts(trace: Path) -> None:
    launches = read_launches(trace)
    facts = {name: value for name, value, _unit, _note in launches.report.facts}
    assert launches.busy_ns == facts["gpu0.kernel_busy"] > 0
    assert launches.span_ns == facts["trace_span"] > launches.busy_ns


PUBLIC = TRIAGE / "public"


def _gunzip(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name.removesuffix(".gz")
    out.write_bytes(gzip.decompress((PUBLIC / name).read_bytes()))
    return out


def test_a_public_nsys_export_agrees_with_its_own_gpu_trace(tmp_path: Path) -> None:
    """CloverLeaf on Perlmutter (pipit's fixtures): the kernel count and total kernel time of
    the triage equal those of pipit's independent CSV trace of the same run."""
    import csv
    import io

    trace = read_launches(_gunzip("perlmutter-cloverleaf-cuda.sqlite.gz", tmp_path))
    answer = build_triage(trace, [], top=5)
    rows = csv.DictReader(io.StringIO(gzip.decompress(
        (PUBLIC / "cloverleaf_gpu_trace.csv.gz").read_bytes()).decode()))  # fmt: skip
    kernels = [r for r in rows if r["type"] == "kernel" and r["Event Type"] == "Enter"]
    total = sum(int(r["_matching_timestamp"]) - int(r["Timestamp (ns)"]) for r in kernels)
    assert answer["source"]["launches"] == len(kernels) == 1312
    assert sum(row["total_ns"] for row in answer["kernels"]) == total == 294_404_540
    assert answer["denominators"]["gpu_busy_ns"] == total  # one stream: no overlap
    assert answer["source"]["tool_version"] == "2024.5.1.113"
    assert {b["by"] for row in answer["kernels"] for b in row["launched_by"]} == {
        "cudaLaunchKernel_v7000"}  # fmt: skip
    assert answer["kernels"][0]["name"].startswith("void clover::par_ranged2d_kernel<PdV_kernel")


def test_a_public_nsys_export_of_schema_two_links_kernels_to_nvtx_ranges(tmp_path: Path) -> None:
    """The MPI + CUDA saxpy on Perlmutter (pipit's fixtures; an older export with
    ``EXPORT_META_DATA``): every launch inside its NVTX range "saxpy"."""
    answer = build_triage(read_launches(_gunzip("saxpy-mpi-cuda_nsys_perlmutter0.sqlite.gz",
                                                tmp_path)), [])  # fmt: skip
    [row] = answer["kernels"]
    assert row["name"] == "saxpy(double *, double *, double *, double, int)"
    assert row["launched_by"] == [{"by": "saxpy > cudaLaunchKernel_v7000", "instances": 5}]
    assert row["share_of_gpu_busy"] == 1.0 and answer["source"]["tool_version"] == "2022.2.1.31"


def test_launch_counts_that_differ_from_the_parsers_are_refused() -> None:
    trace = read_launches(GRAPH_OFF)
    check_counts(trace)  # the real trace: the same counts
    first = trace.launches[0]
    trace.launches.append(first)  # one launch the parser did not count
    with pytest.raises(EvidenceError, match="1 kernel\\(s\\) were read with other launch counts"):
        check_counts(trace)
    trace.launches = [la for la in trace.launches if la.name != first.name]
    check_counts(trace)  # only the parser reports it now: a limitation, not a silent drop
    assert trace.limitations[-1].startswith("1 entr(ies) the parser reports are not kernel")


def test_record_function_ranges_and_overlapping_streams_of_a_real_trace() -> None:
    """A real H200 trace: a forward under record_function ranges, then two matmuls on two
    streams that overlap on the GPU."""
    answer = build_triage(read_launches(TRIAGE / "forward_ranges_streams.json"), [])
    by = {row["name"][:30]: [b["by"] for b in row["launched_by"]] for row in answer["kernels"]}
    assert by["sm80_xmma_gemm_f32f32_f32f32_f"] == ["forward > mlp.fc1 > aten::addmm"]
    assert by["void at::native::vectorized_el"] == ["forward > mlp.fc1 > aten::gelu"]
    assert by["void sgemm_largek_lds64<true, "] == ["forward > mlp.fc2 > aten::addmm"]
    top = answer["kernels"][0]
    assert top["launched_by"] == [{"by": "two_streams > aten::mm", "instances": 2}]
    busy = answer["denominators"]["gpu_busy_ns"]
    summed = sum(row["total_ns"] for row in answer["kernels"])
    # the two streams' kernels overlap: busy time (union) is below the summed kernel time and
    # the busy shares add up to more than 1, as docs/triage.md says
    assert busy < summed
    assert sum(row["share_of_gpu_busy"] for row in answer["kernels"]) > 1.0
