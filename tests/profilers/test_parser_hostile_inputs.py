"""Profiler reports edited to mislead (R6): each is parsed exactly as the unedited report would be,
or refused with an EvidenceError naming the file and the line (or the kernel and metric); never
a wrong number recorded in silence, never another exception. The inputs are the real H200
exports of tests/fixtures/profilers, edited one field at a time."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.profilers.nsys import parse_nsys_stats_csv

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"
NCU = (FIXTURES / "ncu_version.txt").read_text()
NSYS = "2025.3.1.90"
BOM = "\ufeff".encode()


def _row(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="").writerow(fields)
    return out.getvalue()


def _details(edit: dict[int, str] | None = None, launches: int = 1) -> tuple[bytes, int]:
    """The details export cut to its header and each launch's ``Duration`` row (the first
    ``launches`` of them), the first such row's fields edited by ``edit`` (index -> text).
    Returns (the file, the 1-based line of the edited row)."""
    lines = (FIXTURES / "ncu_details_norules.csv").read_text().split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    picked = [line for line in lines[header + 1 :] if '"Duration"' in line][:launches]
    first = next(csv.reader([picked[0]]))
    for index, text in (edit or {}).items():
        first[index] = text
    picked[0] = _row(first)
    return "\n".join([*lines[: header + 1], *picked]).encode(), header + 2


def _ncu(data: bytes) -> object:
    return parse_ncu_csv(io.BytesIO(data), tool_version=NCU, name="edited.csv")


def _duration_ns(report: object) -> float:
    kernel = next(iter(report.kernels.values()))  # type: ignore[attr-defined]
    return kernel.metrics["GPU Speed Of Light Throughput/Duration"].mean


# ---------------------------------------------------------------- ncu


@pytest.mark.parametrize(("value", "unit"), [("1e300", "s"), ("1e308", "ms"), ("1.7e308", "us")])
def test_ncu_value_beyond_float_range_in_its_base_unit_is_refused_naming_its_line(
    value: str, unit: str
) -> None:
    # finite as printed, infinite once converted to ns: recorded as inf before
    data, line = _details({13: unit, 14: value})
    with pytest.raises(EvidenceError) as caught:
        _ncu(data)
    message = caught.value.message
    assert message.startswith(f"edited.csv: line {line} ") and "beyond float range" in message


def test_ncu_value_within_range_in_its_base_unit_is_converted() -> None:
    data, _line = _details({13: "ms", 14: "12"})
    assert _duration_ns(_ncu(data)) == 12e6


def test_ncu_sum_over_launches_beyond_float_range_is_refused() -> None:
    lines = (FIXTURES / "ncu_details_norules.csv").read_text().split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = []
    for line in lines[header + 1 :]:
        if '"Duration"' in line:
            fields = next(csv.reader([line]))
            fields[13], fields[14] = "ns", "1.5e308"  # each finite, their sum is not
            rows.append(_row(fields))
    data = "\n".join([*lines[: header + 1], *rows]).encode()
    with pytest.raises(EvidenceError) as caught:
        _ncu(data)
    assert "edited.csv" in caught.value.message and "Duration" in caught.value.message
    assert "beyond float range" in caught.value.message


def test_ncu_raw_value_beyond_float_range_in_its_base_unit_is_refused() -> None:
    lines = (FIXTURES / "ncu_raw.csv").read_text().split("\n")
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    names = next(csv.reader([lines[header]]))
    units = next(csv.reader([lines[header + 1]]))
    column = names.index("gpu__time_duration.sum")
    units[column] = "second"
    first = next(csv.reader([lines[header + 2]]))
    first[column] = "1e300"
    data = "\n".join([*lines[: header + 1], _row(units), _row(first), *lines[header + 3 :]])
    with pytest.raises(EvidenceError) as caught:
        _ncu(data.encode())
    assert "gpu__time_duration.sum" in caught.value.message
    assert "beyond float range" in caught.value.message


def test_ncu_digits_of_another_script_are_refused_as_the_raw_page_refuses_them() -> None:
    # float() reads '١٢٣' (Arabic-Indic digits) as 123; no profiler prints them
    data, line = _details({14: "١٢٣"})
    with pytest.raises(EvidenceError) as caught:
        _ncu(data)
    assert caught.value.message.startswith(f"edited.csv: line {line} ")
    data, _line = _details({0: "١"})  # an ID too
    with pytest.raises(EvidenceError, match="ID"):
        _ncu(data)


def test_ncu_export_with_a_byte_order_mark_parses_as_without() -> None:
    data, _line = _details()
    data = data[data.index(b'"ID"') :]  # no preamble: the mark is right before the header
    plain = _ncu(data)
    marked = _ncu(BOM + data)  # was refused: "no ncu CSV header found"
    assert marked.kernels.keys() == plain.kernels.keys()  # type: ignore[attr-defined]
    assert _duration_ns(marked) == _duration_ns(plain)


def test_ncu_malformed_csv_names_its_line() -> None:
    data, line = _details()
    broken = data + b'\n"1","520","app","unterminated'
    with pytest.raises(EvidenceError) as caught:
        _ncu(broken)
    assert caught.value.message.startswith(f"edited.csv: line {line + 1}: malformed CSV")


# ---------------------------------------------------------------- nsys stats


def _stats(edit: dict[int, str] | None = None, extra: str | None = None) -> bytes:
    lines = (FIXTURES / "nsys_stats_cuda_gpu_kern_sum.csv").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Time (%)"))
    first = next(csv.reader([lines[header + 1]]))
    for index, text in (edit or {}).items():
        first[index] = text
    rows = [_row(first), *lines[header + 2 :], *([extra] if extra else [])]
    return "\n".join([*lines[: header + 1], *rows]).encode()


def _nsys(data: bytes) -> object:
    return parse_nsys_stats_csv(io.BytesIO(data), tool_version=NSYS, name="stats.csv")


@pytest.mark.parametrize(
    ("edit", "what"),
    [
        ({3: "1000000.0"}, "a mean outside [min, max]"),
        ({1: "9999999"}, "a total that is not the mean times the count"),
        ({0: "176.4"}, "a share of time above 100 %"),
        ({1: "-93792", 3: "-46896.0", 4: "-46896.0", 5: "-46912", 6: "-46880"}, "negative times"),
    ],
)
def test_nsys_stats_summary_whose_columns_disagree_is_refused(
    edit: dict[int, str], what: str
) -> None:
    with pytest.raises(EvidenceError) as caught:
        _nsys(_stats(edit))
    assert caught.value.message.startswith("stats.csv: row 1: inconsistent kernel summary"), what


def test_nsys_stats_kernel_with_a_second_row_is_refused() -> None:
    lines = (FIXTURES / "nsys_stats_cuda_gpu_kern_sum.csv").read_text().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Time (%)"))
    with pytest.raises(EvidenceError, match="second row"):
        _nsys(_stats(extra=lines[header + 1]))  # its first kernel again: overwrote it before


def test_nsys_stats_with_a_byte_order_mark_parses_as_without() -> None:
    plain, marked = _nsys(_stats()), _nsys(BOM + _stats())
    assert marked.duration_summaries == plain.duration_summaries  # type: ignore[attr-defined]


# ---------------------------------------------------------------- PyTorch trace


def _trace(field: str, text: str) -> bytes:
    """The fixture trace with its first kernel event's ``field`` written as ``text`` (JSON)."""
    import json

    trace = json.loads((FIXTURES / "torch_trace.json").read_text())
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    kernel[field] = 424242.5
    return json.dumps(trace).encode().replace(b"424242.5", text.encode(), 1)


@pytest.mark.parametrize(
    ("field", "text"),
    [("dur", "1e300"), ("dur", "1.5e308"), ("ts", "1e300"), ("ts", "-1e20"), ("dur", "1e999"),
     ("dur", "1" + "0" * 400)],
)  # fmt: skip
def test_torch_trace_time_beyond_a_traces_range_is_refused_not_a_crash(
    field: str, text: str
) -> None:
    # each raised OverflowError (round(inf), int64 conversion, float() of a huge integer)
    from perfledger.kernels.profilers.torch_trace import parse_torch_trace

    with pytest.raises(EvidenceError) as caught:
        parse_torch_trace(io.BytesIO(_trace(field, text)), name="trace.json")
    assert caught.value.message.startswith("trace.json: event ")
    assert field in caught.value.message and "beyond" in caught.value.message


def test_torch_trace_time_within_range_is_read() -> None:
    from perfledger.kernels.profilers.torch_trace import parse_torch_trace

    report = parse_torch_trace(io.BytesIO(_trace("dur", "12.5")), name="trace.json")
    assert any(k.durations.counts[12500] for k in report.kernels.values())


# ---------------------------------------------------------------- nsys SQLite export


@pytest.mark.parametrize(
    ("column", "value"),
    [("end", "9223372036854775807"), ("gridX", "'x'"), ("blockY", "0"), ("deviceId", "'x'"),
     ("streamId", "-1")],
)  # fmt: skip
def test_nsys_kernel_row_not_as_nsys_writes_it_is_refused_naming_the_row(
    tmp_path: Path, column: str, value: str
) -> None:
    # SQLite keeps what a column is given: each was read (a 292-year kernel, a grid of 'x')
    import shutil
    import sqlite3

    from perfledger.kernels.profilers.nsys import parse_nsys_sqlite

    path = tmp_path / "edited.sqlite"
    shutil.copy(FIXTURES / "nsys_synthetic.sqlite", path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET {column} = {value} WHERE rowid = 1")
    conn.close()
    with pytest.raises(EvidenceError) as caught:
        parse_nsys_sqlite(path)
    assert caught.value.message.startswith(f"{path}: kernel row 1 is not as nsys writes it")
    assert len(parse_nsys_sqlite(FIXTURES / "nsys_synthetic.sqlite").kernels) == 2  # control


# ---------------------------------------------------------------- ptxas


@pytest.mark.parametrize(
    ("pattern", "replacement", "message"),
    [
        (r"Used \d+ registers", "Used 1" + "0" * 400 + " registers", "beyond float range"),
        (r"\d+ bytes stack frame", "1" + "0" * 400 + " bytes stack frame", "beyond float range"),
        (r"Used \d+ registers", "Used ١٢ registers", "unknown resource item"),
    ],
)
def test_ptxas_count_beyond_float_range_or_in_other_digits_is_refused_naming_its_line(
    pattern: str, replacement: str, message: str
) -> None:
    # float() made the 401-digit count inf and read the Arabic-Indic digits as 12
    import re

    from perfledger.kernels.profilers.compiler import parse_ptxas

    text = re.sub(pattern, replacement, (FIXTURES / "ptxas_v.txt").read_text(), count=1)
    with pytest.raises(EvidenceError) as caught:
        parse_ptxas(io.BytesIO(text.encode()), tool_version="13.0.88", name="ptxas.txt")
    assert caught.value.message.startswith("ptxas.txt: line ") and message in caught.value.message


def test_ptxas_output_with_a_byte_order_mark_parses_as_without() -> None:
    from perfledger.kernels.profilers.compiler import parse_ptxas

    text = (FIXTURES / "ptxas_v.txt").read_bytes()
    plain = parse_ptxas(io.BytesIO(text), tool_version="13.0.88")
    marked = parse_ptxas(io.BytesIO(BOM + text), tool_version="13.0.88")  # was "not a ptxas line"
    assert {k: v.metrics.keys() for k, v in marked.kernels.items()} == {
        k: v.metrics.keys() for k, v in plain.kernels.items()
    }
