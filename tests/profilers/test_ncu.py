"""Nsight Compute CSV parsing: the real H200 reports parse exactly; every unknown is refused."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import UNITS
from perfledger.kernels.profilers.ncu import (
    DETAILS,
    DETAILS_OLD,
    parse_ncu_csv,
    parse_version,
    top_metrics_per_axis,
)

SAXPY = "saxpy(int, float, const float *, float *)"
FMA = "fma_loop(int, int, float *)"


def _table(path: Path) -> list[list[str]]:
    """The CSV rows from the header on, read independently of the parser."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"'))
    return list(csv.reader(lines[start:]))


def _parse(data: bytes | str, version: str, **kw: object):
    raw = data.encode() if isinstance(data, str) else data
    return parse_ncu_csv(io.BytesIO(raw), tool_version=version, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "ncu_details_rules.csv",
        "ncu_details_norules.csv",
        "ncu_details_import.csv",
        "ncu_details_defaultunits.csv",
    ],
)
def test_details_pages_parse_exactly(fixtures: Path, ncu_version: str, name: str) -> None:
    report = parse_ncu_csv(fixtures / name, tool_version=ncu_version)
    rows = [r for r in _table(fixtures / name)[1:] if r[12]]
    expected: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r[14] in ("no data",) or r[12] in (
            "Cluster Scheduling Policy",
            "Enabled TPC IDs",
            "Function Cache Configuration",
        ):
            continue
        _base, factor = UNITS[r[13]]
        expected.setdefault((r[4], f"{r[11]}/{r[12]}"), []).append(float(r[14]) * factor)
    assert report.tool_version == "2025.3.1.0"
    assert list(report.kernels) == [SAXPY, FMA]
    assert all(k.launches == 2 for k in report.kernels.values())
    for (kernel, key), values in expected.items():
        stat = report.kernels[kernel].metrics[key]
        assert stat.count == len(values) == 2
        assert stat.mean == pytest.approx(sum(values) / len(values), rel=1e-12)
        assert (stat.minimum, stat.maximum) == (min(values), max(values))
    saxpy = report.kernels[SAXPY]
    assert saxpy.grids == {"(16384, 1, 1)"} and saxpy.blocks == {"(256, 1, 1)"}
    assert saxpy.streams == {"7"}
    assert saxpy.metrics["GPU Speed Of Light Throughput/Duration"].unit == "ns"
    assert report.attributes[f"{SAXPY}/Launch Statistics/Function Cache Configuration"] == (
        "CachePreferNone"
    )


def test_rule_rows_are_parsed(fixtures: Path, ncu_version: str) -> None:
    report = parse_ncu_csv(fixtures / "ncu_details_rules.csv", tool_version=ncu_version)
    assert report.layout == "ncu-details-rules"
    assert len(report.rules) == 11
    heads = [rule[:5] for rule in report.rules]
    assert (SAXPY, "SpeedOfLight", "SOLBottleneck", "OPT", None) in heads
    assert (SAXPY, "ComputeWorkloadAnalysis", "HighPipeUtilization", "OPT", 94.78) in heads
    plain = parse_ncu_csv(fixtures / "ncu_details_norules.csv", tool_version=ncu_version)
    assert plain.layout == "ncu-details" and plain.rules == []


def test_first_values_of_the_details_page(fixtures: Path, ncu_version: str) -> None:
    """Literal values from the first launch (ID 0) and the second (ID 2) of saxpy."""
    report = parse_ncu_csv(fixtures / "ncu_details_rules.csv", tool_version=ncu_version)
    dram = report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/DRAM Frequency"]
    assert dram.unit == "hz" and dram.minimum <= 3195427728.61 <= dram.maximum
    cycles = report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/Elapsed Cycles"]
    assert cycles.unit == "cycle" and 28556.0 in (cycles.minimum, cycles.maximum)


def test_default_units_agree_with_base_units(fixtures: Path, ncu_version: str) -> None:
    """The same report exported with ncu's default (scaled) units and with --print-units base:
    every value agrees within the 3 significant digits ncu prints, so the unit table is right."""
    base = parse_ncu_csv(fixtures / "ncu_details_import.csv", tool_version=ncu_version)
    scaled = parse_ncu_csv(fixtures / "ncu_details_defaultunits.csv", tool_version=ncu_version)
    compared = 0
    for name, kernel in base.kernels.items():
        for key, stat in kernel.metrics.items():
            other = scaled.kernels[name].metrics[key]
            assert other.unit == stat.unit, key
            if stat.mean is not None:
                assert other.mean == pytest.approx(stat.mean, rel=6e-3, abs=6e-3), key
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("name", ["ncu_raw.csv", "ncu_raw_defaultunits.csv"])
def test_raw_page_parses_exactly(fixtures: Path, ncu_version: str, name: str) -> None:
    report = parse_ncu_csv(fixtures / name, tool_version=ncu_version)
    table = _table(fixtures / name)
    header, units, rows = table[0], table[1], table[2:]
    assert report.layout == "ncu-raw" and len(rows) == 4
    column = header.index("gpu__time_duration.sum")
    factor = UNITS[units[column]][1]
    saxpy = [float(r[column]) * factor for r in rows if r[4] == SAXPY]
    stat = report.kernels[SAXPY].metrics["gpu__time_duration.sum"]
    assert stat.unit == "ns" and stat.mean == pytest.approx(sum(saxpy) / 2, rel=1e-12)
    assert len(report.kernels[SAXPY].metrics) == 741  # 747 columns, 6 of them text
    assert report.attributes[f"{SAXPY}/device__attribute_display_name"] == "NVIDIA H200"
    missing = report.kernels[SAXPY].metrics["sass__inst_executed_register_spilling_mem_local"]
    assert missing.count == 0 and missing.missing == 2  # "no data", never zero


@pytest.mark.parametrize("name", ["ncu_summary.csv", "ncu_summary_pergpu.csv"])
def test_summary_page_parses_exactly(fixtures: Path, ncu_version: str, name: str) -> None:
    report = parse_ncu_csv(fixtures / name, tool_version=ncu_version)
    assert report.layout.startswith("ncu-summary")
    assert {k: v.launches for k, v in report.kernels.items()} == {FMA: 2, SAXPY: 2}
    duration = report.kernels[FMA].metrics["GPU Speed Of Light Throughput/Duration"]
    assert duration.unit == "ns"
    # ncu 2025.3.1 truncates one Memory Workload Analysis record per kernel (see ncu.py)
    assert report.attributes["truncated_records_skipped"] == "2"
    assert len(report.kernels[FMA].metrics) == 63


def test_top_metrics_per_axis(fixtures: Path, ncu_version: str) -> None:
    for name in ("ncu_details_rules.csv", "ncu_raw.csv", "ncu_summary.csv"):
        digest = top_metrics_per_axis(parse_ncu_csv(fixtures / name, tool_version=ncu_version))
        assert digest[SAXPY]["bound"] == "latency", name  # both SOL below 60 %
        assert digest[FMA]["bound"] == "compute", name  # SM throughput ~93 %
        for axis in ("compute", "memory", "latency"):
            assert digest[FMA][axis], (name, axis)
        latency = digest[SAXPY]["latency"]
        assert latency[0]["unit"] == "ns" and 10_000 < latency[0]["value"] < 20_000


def test_older_12_column_layout(fixtures: Path, ncu_version: str) -> None:
    """The older layout (Kernel Time, no block/grid) with its units (``nsecond``,
    ``cycle/second``), built from the real details rows."""
    rows = [r for r in _table(fixtures / "ncu_details_norules.csv")[1:]]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(DETAILS_OLD)
    renamed = {"ns": "nsecond", "hz": "cycle/second"}
    for r in rows:
        writer.writerow(
            [
                *r[:5],
                "2025-Nov-30 01:14:00",
                r[5],
                r[6],
                *r[11:13],
                renamed.get(r[13], r[13]),
                r[14],
            ]
        )
    report = _parse(out.getvalue(), "2021.3.1.0")
    assert report.layout == "ncu-details-old"
    assert report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/Duration"].unit == "ns"
    freq = report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/SM Frequency"]
    assert freq.unit == "hz" and freq.mean and freq.mean > 1e9


# ------------------------------------------------------------------------------ refusals


def _details(fixtures: Path) -> str:
    return (fixtures / "ncu_details_norules.csv").read_text()


def test_r6_unknown_header_refused(fixtures: Path, ncu_version: str) -> None:
    text = _details(fixtures).replace('"Metric Value"', '"Metric Value","Extra"', 1)
    with pytest.raises(EvidenceError, match="unknown ncu CSV header"):
        _parse(text, ncu_version)


def test_r6_reordered_columns_refused(fixtures: Path, ncu_version: str) -> None:
    text = _details(fixtures).replace(
        '"Metric Unit","Metric Value"', '"Metric Value","Metric Unit"'
    )
    with pytest.raises(EvidenceError, match="unknown ncu CSV header"):
        _parse(text, ncu_version)


def test_r6_unknown_unit_refused(fixtures: Path, ncu_version: str) -> None:
    text = _details(fixtures).replace('"Elapsed Cycles","cycle"', '"Elapsed Cycles","furlong"', 1)
    with pytest.raises(EvidenceError, match="unknown unit 'furlong'"):
        _parse(text, ncu_version)


def test_r6_value_that_does_not_parse_refused(fixtures: Path, ncu_version: str) -> None:
    text = _details(fixtures).replace(
        '"Elapsed Cycles","cycle","28594"', '"Elapsed Cycles","cycle","28x94"'
    )
    with pytest.raises(EvidenceError, match="does not parse as a number"):
        _parse(text, ncu_version)
    for bad in ("nan", "inf", "1_000", " 12", "+5"):
        text = _details(fixtures).replace('"cycle","28594"', f'"cycle","{bad}"')
        with pytest.raises(EvidenceError):
            _parse(text, ncu_version)


def test_r6_truncated_file_refused(fixtures: Path, ncu_version: str) -> None:
    data = (fixtures / "ncu_details_norules.csv").read_bytes()
    for cut in (len(data) - 7, len(data) // 2 + 3):
        with pytest.raises(EvidenceError, match=r"truncated|malformed"):
            _parse(data[:cut], ncu_version)
    header_only = data[: data.index(b'"Metric Value"') + len(b'"Metric Value"\n')]
    with pytest.raises(EvidenceError, match="no rows"):
        _parse(header_only, ncu_version)


def test_r6_binary_file_refused(fixtures: Path, ncu_version: str) -> None:
    with pytest.raises(EvidenceError, match=r"binary|UTF-8"):
        parse_ncu_csv(fixtures / "rep.ncu-rep", tool_version=ncu_version)
    with pytest.raises(EvidenceError, match="binary"):
        _parse(b"\x00\x01\x02" * 100, ncu_version)


def test_locale_grouping_only_in_the_expected_pattern(fixtures: Path, ncu_version: str) -> None:
    grouped = _details(fixtures).replace('"cycle","28594"', '"cycle","28,594"')
    with pytest.raises(EvidenceError, match="grouping"):
        _parse(grouped, ncu_version)  # LC_ALL=C output never groups digits
    report = _parse(grouped, ncu_version, grouping="en_US")
    assert report.attributes["grouping"] == "en_US"
    assert 28594.0 in {
        report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/Elapsed Cycles"].minimum,
        report.kernels[SAXPY].metrics["GPU Speed Of Light Throughput/Elapsed Cycles"].maximum,
    }
    for bad in ("28.594,5", "2,85,94", "28594,", "28 594"):
        text = _details(fixtures).replace('"cycle","28594"', f'"cycle","{bad}"')
        with pytest.raises(EvidenceError, match="does not parse"):
            _parse(text, ncu_version, grouping="en_US")


def test_r6_unknown_version_refused(fixtures: Path) -> None:
    with pytest.raises(EvidenceError, match=r"unknown ncu version 2031\.1\.0"):
        parse_ncu_csv(fixtures / "ncu_raw.csv", tool_version="2031.1.0")
    with pytest.raises(EvidenceError, match="no ncu version"):
        parse_ncu_csv(fixtures / "ncu_raw.csv", tool_version="latest")
    assert parse_version("Version 2025.3.1.0 (build 36398880)") == "2025.3.1.0"


def test_r16_err_nvgpuctrperm_is_a_limitation_not_zeros(ncu_version: str) -> None:
    text = (
        "==PROF== Connected to process 4242 (/tmp/app)\n"
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
        "Performance Counters on the target device 0.\n"
        "app done: no error\n==PROF== Disconnected from process 4242\n"
        "==WARNING== No kernels were profiled.\n"
    )
    report = _parse(text, ncu_version)
    assert report.kernels == {} and report.facts == []
    assert any("ERR_NVGPUCTRPERM" in item for item in report.limitations)
    assert "no kernels were profiled" in report.limitations


def test_profiling_not_supported_is_a_limitation(ncu_version: str) -> None:
    report = _parse("==ERROR== Profiling is not supported on this device\n", ncu_version)
    assert report.limitations and "not supported" in report.limitations[0]


def test_not_ncu_output_refused(ncu_version: str) -> None:
    with pytest.raises(EvidenceError, match="no ncu CSV header"):
        _parse("hello\nworld\n", ncu_version)


def test_details_header_constant_matches_the_fixture(fixtures: Path) -> None:
    assert tuple(_table(fixtures / "ncu_details_norules.csv")[0]) == DETAILS


# ------------------------------------------------------------- parser version 2 additions


def _facts(report, **kw: object) -> dict[str, dict]:
    from perfledger.kernels.profilers.evidence import report_facts

    return {f["name"]: f for f in report_facts(report, **kw)}  # type: ignore[arg-type]


def test_every_rule_row_is_a_fact(fixtures: Path, ncu_version: str) -> None:
    """Each of the 11 rule rows (two launches per kernel, a rule may repeat) is its own fact with
    its type, speedup type and description; version 1 kept only the largest speedup per rule."""
    path = fixtures / "ncu_details_rules.csv"
    rows = [r for r in _table(path)[1:] if len(r) == 20 and r[12] == ""]
    assert len(rows) == 11
    facts = _facts(parse_ncu_csv(path, tool_version=ncu_version))
    rule_facts = {n: f for n, f in facts.items() if ".rule." in n}
    assert len(rule_facts) == 11
    first = facts["k0.rule.ComputeWorkloadAnalysis.HighPipeUtilization.0"]
    second = facts["k0.rule.ComputeWorkloadAnalysis.HighPipeUtilization.1"]
    assert (first["value"], second["value"], first["unit"]) == (94.78, 94.82, "%")
    saxpy_row = next(r for r in rows if r[4] == SAXPY and r[15] == "HighPipeUtilization")
    assert first["note"] == f"ncu rule OPT: estimated speedup (local): {saxpy_row[17]}"
    old = _facts(parse_ncu_csv(path, tool_version=ncu_version), parser="1")
    assert old["k0.rule.ComputeWorkloadAnalysis.HighPipeUtilization"]["value"] == 94.82
    assert sum(".rule." in n for n in old) == 6


@pytest.mark.parametrize("name", ["ncu_details_rules.csv", "ncu_raw.csv"])
def test_text_valued_metrics_are_text_facts(fixtures: Path, ncu_version: str, name: str) -> None:
    """Metrics ncu prints as text are facts with unit 'text', a null value and the text as
    note (version 1 left them out of the event)."""
    facts = _facts(parse_ncu_csv(fixtures / name, tool_version=ncu_version))
    key = (
        "k0.Launch Statistics/Function Cache Configuration"
        if name.startswith("ncu_details")
        else "k0.launch__func_cache_config"
    )
    assert facts[key] == {
        "name": key, "value": None, "unit": "text", "note": "CachePreferNone (first launch)",
    }  # fmt: skip
    if name == "ncu_raw.csv":
        assert facts["k0.device__attribute_display_name"]["note"].startswith("NVIDIA H200")
    assert not any(f["unit"] == "text" for f in _facts(
        parse_ncu_csv(fixtures / name, tool_version=ncu_version), parser="1").values())  # fmt: skip


@pytest.mark.parametrize(
    "name", ["ncu_details_rules.csv", "ncu_raw.csv", "ncu_summary.csv", "ncu_summary_pergpu.csv"]
)
def test_compute_capability_column_is_recorded(fixtures: Path, ncu_version: str, name: str) -> None:
    """The CC column (9.0 on the H200) becomes gpu<device>.compute_capability.major/minor."""
    facts = _facts(parse_ncu_csv(fixtures / name, tool_version=ncu_version))
    assert facts["gpu0.compute_capability.major"]["value"] == 9.0
    assert facts["gpu0.compute_capability.minor"]["value"] == 0.0
    assert facts["gpu0.compute_capability.major"]["unit"] == "1"


@pytest.mark.parametrize(
    "name", ["ncu_details_rules.csv", "ncu_details_import.csv", "ncu_raw.csv", "ncu_summary.csv"]
)
def test_a_second_header_is_named_as_such(fixtures: Path, ncu_version: str, name: str) -> None:
    """Two exports concatenated into one file: the second header is named, not reported as a
    malformed record."""
    table = (fixtures / name).read_text()
    start = table.index('"ID",') if '"ID",' in table else table.index('"Process ID",')
    with pytest.raises(EvidenceError, match="the CSV header appears a second time"):
        _parse(table + table[start:], ncu_version)


def test_binary_ncu_rep_given_as_csv_gets_the_export_command(
    fixtures: Path, ncu_version: str
) -> None:
    """An .ncu-rep under another name is recognised by its magic bytes, with the command that
    exports it in the hint."""
    with pytest.raises(EvidenceError, match="a binary Nsight Compute report") as info:
        parse_ncu_csv(fixtures / "rep.ncu-rep", tool_version=ncu_version)
    assert "ncu --import" in info.value.hint and "--csv" in info.value.hint


def test_ncu_rep_without_ncu_gets_the_export_command(fixtures: Path, tmp_path: Path) -> None:
    """Exporting an .ncu-rep where ncu is not installed: refused with the exact command to run
    where it is."""
    from perfledger.kernels.profilers.capture import export_ncu_rep

    with pytest.raises(EvidenceError, match="needs Nsight Compute") as info:
        export_ncu_rep(fixtures / "rep.ncu-rep", ncu=str(tmp_path / "no-ncu-here"))
    assert (
        f"LC_ALL=C ncu --import {fixtures / 'rep.ncu-rep'} --csv --print-units base "
        f"--page details > {fixtures / 'rep.csv'}"
    ) in info.value.hint


@pytest.mark.parametrize("name", ["ncu_details_rules.csv", "ncu_raw.csv", "ncu_summary.csv"])
def test_a_header_naming_a_column_twice_is_named_as_such(
    fixtures: Path, ncu_version: str, name: str
) -> None:
    """A header with a column repeated (Metric Value doubled, a raw metric doubled): the
    repeated column is named, not just "unknown header"."""
    text = (fixtures / name).read_text()
    start = text.index('"ID",') if '"ID",' in text else text.index('"Process ID",')
    end = text.index("\n", start)
    header = next(csv.reader([text[start:end]]))
    doubled = [*header, header[-1]]
    line = ",".join(f'"{c}"' for c in doubled)
    with pytest.raises(EvidenceError, match="names a column twice") as info:
        _parse(text[:start] + line + text[end:], ncu_version)
    assert header[-1] in info.value.message


def test_nvtx_range_columns_are_named_in_the_refusal(fixtures: Path, ncu_version: str) -> None:
    """An export with ncu's NVTX range columns between Host Name and Kernel Name (a layout seen
    in public repositories): refused naming those columns, not as a bare unknown header."""
    text = (fixtures / "ncu_details_norules.csv").read_text()
    nvtx = '"thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",'
    text = text.replace('"Host Name","Kernel Name"', '"Host Name",' + nvtx + '"Kernel Name"', 1)
    with pytest.raises(EvidenceError, match="NVTX range columns"):
        _parse(text, ncu_version)
