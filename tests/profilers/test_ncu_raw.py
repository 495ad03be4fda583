"""The ncu raw page read with pyarrow (perfledger.kernels.profilers.ncu_raw): on multi-chunk
inputs built from the real H200 raw page (as bench/profiler_bench.py builds them, with varied
values), the pyarrow tokeniser gives exactly what the csv module's path gives; mutated inputs are
refused or parsed identically by both; the tokeniser's simple-line check accepts only what
csv.reader reads the same way; pyarrow's string-to-float cast, as the parser uses it, accepts
exactly the plain numbers; and the statistics add values in file order."""

from __future__ import annotations

import csv
import io
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from profiler_golden import FIXTURES, NCU_VERSION, canonical, mutate

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers import ncu, ncu_raw
from perfledger.kernels.profilers.common import base_unit

_PLAIN = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_RAW = (FIXTURES / "ncu_raw.csv").read_text().splitlines(keepends=True)
_START = next(i for i, line in enumerate(_RAW) if line.startswith('"ID"'))


def _fields(line: str) -> list[str]:
    return line.rstrip("\n")[1:-1].split('","')


def _line(fields: list[str]) -> str:
    return '"' + '","'.join(fields) + '"\n'


def raw_page(copies: int) -> bytes:
    """The real raw page's launch rows repeated with fresh IDs and every numeric value scaled."""
    out = [_RAW[_START], _RAW[_START + 1]]
    launch = 0
    for copy in range(copies):
        for row in _RAW[_START + 2 :]:
            fields = _fields(row)
            fields[0] = str(launch)
            launch += 1
            for i in range(11, len(fields)):
                if _PLAIN.fullmatch(fields[i]) and copy % 3:
                    fields[i] = repr(float(fields[i]) * (1 + copy / 7))
            if copy == 5:
                fields[20] = "-0"
            out.append(_line(fields))
    return "".join(out).encode()


def raw_page_mixed(copies: int) -> bytes:
    """:func:`raw_page` with cells that move columns between the one-cast and the cell-by-cell
    classes: a ``no data`` column that holds numbers in some launches, a text metric that holds
    another name or a number, a numeric column with ``no data`` and signed zeros late in the
    page; two kernels interleaved."""
    lines = raw_page(copies).decode().splitlines(keepends=True)
    out = lines[:2]
    for n, row in enumerate(lines[2:]):
        fields = _fields(row)
        assert fields[14] == "no data" and fields[46] == "NVIDIA H200"
        if n % 5 == 1:
            fields[14] = f"{n / 8}"
        if n % 7 == 2:
            fields[46] = f"GPU {n % 3}"
        if n % 11 == 3:
            fields[46] = str(n)
        if n > 150 and n % 13 == 0:
            fields[30] = "no data"
        if n > 200 and n % 17 == 0:
            fields[31] = "-0.0" if n % 2 else "0"
        out.append(_line(fields))
    return "".join(out).encode()


def _parse(data: bytes, **kw: object) -> ncu.ProfileReport:
    return ncu.parse_ncu_csv(io.BytesIO(data), tool_version=NCU_VERSION, **kw)  # type: ignore[arg-type]


def _both(data: bytes, monkeypatch: pytest.MonkeyPatch, chunk: int = 16_000) -> list[object]:
    """The outcome (canonical parse and attribute order, or the refusal's message) of the
    pyarrow path and of the csv module's path, with chunks of about ``chunk`` bytes."""
    outcomes: list[object] = []
    monkeypatch.setattr(ncu_raw, "CHUNK_BYTES", chunk)
    for exact in (False, True):
        if exact:
            monkeypatch.setattr(ncu_raw, "arrow_read", lambda chunk, width: None)
        try:
            report = _parse(data)
            outcomes.append((canonical(report), list(report.attributes)))
        except EvidenceError as exc:
            outcomes.append(("refused", exc.message))
    monkeypatch.undo()
    return outcomes


@pytest.mark.slow
@pytest.mark.parametrize("make", [raw_page, raw_page_mixed])
def test_pyarrow_path_equals_the_csv_path(make: object, monkeypatch: pytest.MonkeyPatch) -> None:
    data = make(80)  # type: ignore[operator]  # 320 launch rows: about 25 chunks
    calls: list[bool] = []
    real = ncu_raw.simple_lines
    monkeypatch.setattr(
        ncu_raw,
        "simple_lines",
        lambda chunk, fields, width: calls.append(real(chunk, fields, width)) or calls[-1],
    )
    fast, exact = _both(data, monkeypatch)
    assert len(calls) > 10 and all(calls)  # every chunk took pyarrow
    assert fast == exact
    report = _parse(data)
    saxpy = next(k for k in report.kernels.values() if k.name.startswith("saxpy"))
    assert saxpy.launches == 160
    if make is raw_page_mixed:
        assert any(k.endswith("/device__attribute_display_name") for k in report.attributes)
        assert saxpy.metrics["device__attribute_display_name"].count > 0
        metric = _fields(_RAW[_START])[30]
        assert saxpy.metrics[metric].missing > 0


@pytest.mark.slow
def test_statistics_are_the_row_by_row_statistics() -> None:
    """count, total (added one by one in file order), min, max (Python's: the first of equal
    values), missing, as MetricStat.add gives them launch by launch."""
    data = raw_page_mixed(40)
    report = _parse(data)
    rows = list(csv.reader(io.StringIO(data.decode())))
    header, units = rows[0], rows[1]
    expected: dict[tuple[str, str], ncu.MetricStat] = {}
    for row in rows[2:]:
        for i in range(11, len(header)):
            text = row[i]
            base, factor = base_unit(units[i], where="")
            if text == "no data":
                value = None
            elif _PLAIN.fullmatch(text):
                value = float(text) * factor
            else:
                continue  # a text value
            stat = expected.setdefault((row[4], header[i]), ncu.MetricStat(base))
            stat.add(value)
    compared = 0
    for (kernel, metric), stat in expected.items():
        got = report.kernels[kernel].metrics[metric]
        assert [got.count, got.missing, got.unit] == [stat.count, stat.missing, stat.unit]
        assert [got.total.hex(), str(got.minimum), str(got.maximum)] == [
            stat.total.hex(), str(stat.minimum), str(stat.maximum)]  # fmt: skip
        compared += 1
    assert compared > 1400


def test_reduce_over_rows_adds_in_row_order() -> None:
    """What _Kernel.add_numbers relies on: numpy reduces a C-ordered array over axis 0 row after
    row (pairwise summation only runs along the contiguous axis)."""
    rng = np.random.default_rng(7)
    values = rng.standard_normal((999, 40)) * 10.0 ** rng.integers(-12, 17, (999, 40))
    expected = [0.0] * 40
    for row in values.tolist():
        for j, v in enumerate(row):
            expected[j] += v
    assert np.add.reduce(values, axis=0).tolist() == expected
    assert np.add.reduce(np.asfortranarray(values), axis=0).tolist() != expected  # pairwise


@pytest.mark.slow
def test_bad_launch_columns_in_a_later_chunk_name_their_row() -> None:
    data = raw_page(80).decode().splitlines(keepends=True)
    fields = _fields(data[260])  # launch row 259
    fields[7] = "(256, 1)"
    data[260] = _line(fields)
    with pytest.raises(EvidenceError, match=r"launch row 259: Block Size '\(256, 1\)'"):
        _parse("".join(data).encode())
    fields[7], fields[0] = "(256, 1, 1)", "3"  # an ID seen before
    data[260] = _line(fields)
    with pytest.raises(EvidenceError, match=r"launch row 259: launch ID 3 appears twice"):
        _parse("".join(data).encode())
    fields[0], fields[4] = "259", ""
    data[260] = _line(fields)
    with pytest.raises(EvidenceError, match=r"launch row 259: empty Kernel Name"):
        _parse("".join(data).encode())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("12x", "'12x' does not parse"),
        ("+5", "'\\+5' does not parse"),
        (" 5", "' 5' does not parse"),
        ("inf", "'inf' does not parse"),
        ("1e999", "'1e999' is not finite"),
        ("1,234", "'1,234' does not parse as a number \\(digit grouping"),
        ("", "'' does not parse"),
    ],
)
def test_bad_value_in_a_later_chunk_names_its_row_and_metric(bad: str, message: str) -> None:
    data = raw_page(80).decode().splitlines(keepends=True)
    fields = _fields(data[300])  # launch row 299
    metric = _fields(data[0])[12]
    fields[12] = bad
    data[300] = _line(fields)
    with pytest.raises(
        EvidenceError, match=rf"launch row 299 {re.escape(metric)}: value {message}"
    ):
        _parse("".join(data).encode())


def test_grouped_numbers_only_with_en_us_grouping() -> None:
    data = raw_page(20).decode().splitlines(keepends=True)
    for k in range(2, len(data), 3):
        fields = _fields(data[k])
        fields[12] = "1,234.5"
        data[k] = _line(fields)
    grouped = "".join(data).encode()
    with pytest.raises(EvidenceError, match=r"launch row 1 .*grouping"):
        _parse(grouped)
    report = _parse(grouped, grouping="en_US")
    metric = _fields(data[0])[12]
    assert max(k.metrics[metric].maximum for k in report.kernels.values()) == 1234.5
    for bad in ("1,23", "12,345,6", "1.234,5"):
        data[2] = _line([*_fields(data[2])[:12], bad, *_fields(data[2])[13:]])
        with pytest.raises(EvidenceError, match=r"launch row 1 .*does not parse"):
            _parse("".join(data).encode(), grouping="en_US")


def test_negative_zero_is_read_as_float_reads_it() -> None:
    report = _parse(raw_page(8))
    metric = _fields(_RAW[_START])[20]
    assert any(str(k.metrics[metric].minimum) == "-0.0" for k in report.kernels.values())


@pytest.mark.slow
def test_structure_that_only_the_csv_module_reads_the_same_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An escaped quote, an embedded newline, an unquoted field, a ``==PROF==`` line and a
    CRLF line end mid-page are read by the csv module's path (same results as without them);
    text after a closing quote (which pyarrow would append to the value) is refused."""
    lines = raw_page(20).decode().splitlines(keepends=True)
    plain = _parse("".join(lines).encode())
    variants = []
    changed = list(lines)
    changed[40] = changed[40].replace('"NVIDIA H200"', '"NVIDIA ""H200"""')
    variants.append(changed)
    changed = list(lines)
    changed[41] = (
        changed[41].replace('","384","', '",384,"', 1).replace('"NVIDIA H200"', '"NVIDIA\nH200"')
    )
    assert '",384,"' in changed[41]
    variants.append(changed)
    changed = list(lines)
    changed.insert(42, "==PROF== Disconnected from process 1\n")
    changed[43] = changed[43].replace("\n", "\r\n")
    variants.append(changed)
    for variant in variants:
        report = _parse("".join(variant).encode())
        assert [k.launches for k in report.kernels.values()] == [
            k.launches for k in plain.kernels.values()
        ]
        assert (
            canonical(report)["kernels"][0]["metrics"][:3]
            == (canonical(plain)["kernels"][0]["metrics"][:3])
        )
    stray = list(lines)
    stray[50] = stray[50].replace('"384"', '"38"4', 1)
    assert stray[50] != lines[50]
    with pytest.raises(EvidenceError, match=r"launch row 49: malformed CSV"):
        _parse("".join(stray).encode())
    fast, exact = _both("".join(stray).encode(), monkeypatch)
    assert fast == exact


def test_truncated_and_binary_pages_are_refused() -> None:
    data = raw_page(20)
    with pytest.raises(EvidenceError, match=r"truncated|malformed"):
        _parse(data[: len(data) - 700])
    cut = data.index(b"\n", data.index(b"\n") + 1) + 1  # header and units only
    with pytest.raises(EvidenceError, match="no launch rows"):
        _parse(data[:cut])
    with pytest.raises(EvidenceError, match="binary"):
        _parse(data[:5000] + b"\x00" + data[5000:])
    with pytest.raises(EvidenceError, match=r"launch row .* not UTF-8"):
        _parse(data.replace(b"NVIDIA H200", b"NVIDIA \xff200", 3))


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(rnd=st.randoms(use_true_random=False))
def test_mutated_pages_are_refused_or_read_as_the_csv_path_reads_them(
    rnd: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mutations of a multi-chunk page (bytes flipped, deleted, inserted, lines duplicated or
    swapped): the pyarrow path refuses exactly when the csv module's path does, and parses
    identically otherwise."""
    data = mutate(raw_page(6), rnd)  # type: ignore[arg-type]
    fast, exact = _both(data, monkeypatch, chunk=6_000)
    assert fast[0] == exact[0]
    if fast[0] != "refused":
        assert fast == exact


_FIELD = st.text(alphabet='ab,"\n\r 1.+', max_size=5)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.lists(_FIELD, min_size=3, max_size=3), min_size=1, max_size=4),
    st.sampled_from(["\n", "\r\n"]),
    st.lists(
        st.tuples(st.integers(0, 200), st.sampled_from(['"', ",", "x", "\n", " "])), max_size=2
    ),
)
def test_simple_line_check_agrees_with_the_csv_module(
    rows: list[list[str]], end: str, edits: list[tuple[int, str]]
) -> None:
    """Whatever arrow_fields accepts (with the caller's checks on the fields: none holds a quote
    or starts with a comma) is read by csv.reader(strict=True) into the same fields; and fully
    quoted rows whose fields are simple are accepted."""
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator=end).writerows(rows)
    text = out.getvalue()
    for at, char in edits:
        at = min(at, len(text))
        text = text[:at] + char + text[at:]
    fields = ncu_raw.arrow_fields(text.encode(), 3)
    if fields is None:
        simple = not edits and all('"' not in f and not f.startswith(",") for r in rows for f in r)
        simple = simple and all("\n" not in f and "\r" not in f for r in rows for f in r)
        assert not simple, rows
        return
    values = fields.cast(pa.string())
    if (
        pc.any(pc.match_substring(values, '"')).as_py()
        or pc.any(pc.starts_with(values, ",")).as_py()
    ):
        return  # the caller reads it with the csv module
    expected = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    count = len(values) // 3
    got = [[values[c * count + r].as_py() for c in range(3)] for r in range(count)]
    assert got == expected


@pytest.mark.slow
@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789.-+eE_ nafiINFty,x\u0661", max_size=12),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.integers(-(10**30), 10**30).map(str),
    )
)
def test_pyarrow_cast_accepts_exactly_the_plain_numbers(text: str) -> None:
    """_plain_numbers (pyarrow's cast, then the finiteness and '+' checks) takes a cell iff it
    is a plain finite number by the pattern common.parse_number applies, with float()'s value."""
    got = ncu_raw._plain_numbers(pa.array([text], pa.string()), plus=True)
    plain = _PLAIN.fullmatch(text) is not None and text.isascii()
    if plain:
        value = float(text)
        if not math.isfinite(value):
            assert got is None
            return
        assert got is not None, text
        assert got[0].hex() == value.hex(), text
    else:
        assert got is None, text


@pytest.mark.slow
def test_gzip_page_reads_as_the_plain_page(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A gzip-compressed page (read through GzipFile.readinto) in several chunks."""
    import gzip

    data = raw_page_mixed(40)
    (tmp_path / "raw.csv").write_bytes(data)
    (tmp_path / "raw.csv.gz").write_bytes(gzip.compress(data))
    monkeypatch.setattr(ncu_raw, "CHUNK_BYTES", 10_000)
    plain = ncu.parse_ncu_csv(tmp_path / "raw.csv", tool_version=NCU_VERSION)
    packed = ncu.parse_ncu_csv(tmp_path / "raw.csv.gz", tool_version=NCU_VERSION)
    assert canonical(packed) == canonical(plain)
    (tmp_path / "cut.csv.gz").write_bytes(gzip.compress(data)[:-300])
    with pytest.raises(EvidenceError, match=r"compressed stream is damaged|truncated|malformed"):
        ncu.parse_ncu_csv(tmp_path / "cut.csv.gz", tool_version=NCU_VERSION)


@pytest.mark.slow
def test_older_raw_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw page of ncu 2019.x-2022.1 (8 launch columns with Kernel Time, no block, grid,
    device or CC), built from the real page: the same statistics, streams from column 7."""
    new = raw_page(30).decode().splitlines(keepends=True)
    old = []
    for n, line in enumerate(new):
        f = _fields(line)
        launch = ([*f[:5], "Kernel Time", "Context", "Stream"] if n == 0 else
                  ["", "", "", "", "", "", "", ""] if n == 1 else
                  [*f[:5], "2025-Nov-30 01:14:00", f[5], f[6]])  # fmt: skip
        old.append(_line(launch + f[11:]))
    data = "".join(old).encode()
    report = ncu.parse_ncu_csv(io.BytesIO(data), tool_version="2021.3.1.0")
    plain = _parse(raw_page(30))
    assert report.layout == "ncu-raw-old"
    for name, kernel in plain.kernels.items():
        other = report.kernels[name]
        assert other.launches == kernel.launches and other.streams == kernel.streams == {"7"}
        assert (
            other.blocks == set()
            and canonical(report)["kernels"][0]["metrics"]
            == (canonical(plain)["kernels"][0]["metrics"])
        )
    fast, exact = _both(data, monkeypatch)
    assert fast == exact and fast[0] != "refused"
    old[40] = old[40].replace('","7","', '","7x","', 1)
    with pytest.raises(EvidenceError, match=r"launch row 39: Stream '7x'"):
        ncu.parse_ncu_csv(io.BytesIO("".join(old).encode()), tool_version="2021.3.1.0")
