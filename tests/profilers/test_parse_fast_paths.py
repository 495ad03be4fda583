"""The ncu raw page's block path and the PyTorch trace's column-wise batch path give exactly the
results of their event-by-event / row-by-row paths on multi-block inputs built from the real
H200 reports (as bench/profiler_bench.py builds them, with varied values), and msgspec's lax
string-to-float conversion, which the block path relies on, accepts only plain numbers and gives
``float``'s value."""

from __future__ import annotations

import heapq
import io
import json
import re

import msgspec
import numpy as np
import profiler_golden as golden
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers import ncu, torch_trace

_PLAIN = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _ncu_raw(copies: int) -> bytes:
    """The raw page's launch rows repeated with fresh IDs and every numeric value scaled."""
    lines = (golden.FIXTURES / "ncu_raw.csv").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    out = [lines[start], lines[start + 1]]
    launch = 0
    for copy in range(copies):
        for row in lines[start + 2 :]:
            fields = row.rstrip("\n")[1:-1].split('","')
            fields[0] = str(launch)
            launch += 1
            for i in range(11, len(fields)):
                if _PLAIN.fullmatch(fields[i]) and copy % 3:
                    fields[i] = repr(float(fields[i]) * (1 + copy / 7))
            if copy == 5:
                fields[20] = "-0"  # a JSON integer -0 is -0.0, as float() reads it
            out.append('"' + '","'.join(fields) + '"\n')
    return "".join(out).encode()


def _parse_ncu(data: bytes) -> dict:
    return golden.canonical(ncu.parse_ncu_csv(io.BytesIO(data), tool_version=golden.NCU_VERSION))


def test_ncu_raw_block_path_equals_the_row_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _ncu_raw(80)  # 320 launch rows: several blocks
    fast = _parse_ncu(data)
    monkeypatch.setattr(ncu._Raw, "_decode", lambda self, lines: None)
    slow = _parse_ncu(data)
    assert fast == slow
    saxpy = next(k for k in fast["kernels"] if k["name"].startswith("saxpy"))
    assert saxpy["launches"] == 160


def _ncu_raw_mixed(copies: int) -> bytes:
    """:func:`_ncu_raw` with its value-by-value columns varied: a ``no data`` column that holds
    numbers in some launches, a text metric that holds another name or a number in some, two
    kernels interleaved (the launch rows alternate)."""
    lines = _ncu_raw(copies).decode().splitlines(keepends=True)
    out = lines[:2]
    for n, row in enumerate(lines[2:]):
        fields = row.rstrip("\n")[1:-1].split('","')
        assert fields[14] == "no data" and fields[46] == "NVIDIA H200"
        if n % 5 == 1:
            fields[14] = f"{n / 8}"
        if n % 7 == 2:
            fields[46] = f"GPU {n % 3}"
        if n % 11 == 3:
            fields[46] = str(n)
        out.append('"' + '","'.join(fields) + '"\n')
    return "".join(out).encode()


@pytest.mark.parametrize("make", [_ncu_raw, _ncu_raw_mixed])
def test_ncu_raw_column_path_equals_the_row_path(
    make: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decoded block accounted column by column (_Raw._block_columns) gives what the
    launch-row-by-row accounting gives, attributes in the same order included."""
    data = make(80)  # type: ignore[operator]
    reports = [ncu.parse_ncu_csv(io.BytesIO(data), tool_version=golden.NCU_VERSION)]
    monkeypatch.setattr(ncu._Raw, "_block_columns", lambda self, rows, values: False)
    reports.append(ncu.parse_ncu_csv(io.BytesIO(data), tool_version=golden.NCU_VERSION))
    monkeypatch.setattr(ncu._Raw, "_decode", lambda self, lines: None)
    reports.append(ncu.parse_ncu_csv(io.BytesIO(data), tool_version=golden.NCU_VERSION))
    canonical = [golden.canonical(r) for r in reports]
    assert canonical[0] == canonical[1] == canonical[2]
    orders = [list(r.attributes.items()) for r in reports]
    assert orders[0] == orders[1] == orders[2]
    if make is _ncu_raw_mixed:
        assert any(k.endswith("/device__attribute_display_name") for k, _ in orders[0])
        stats = [k.metrics for k in reports[0].kernels.values()]
        assert any(m["device__attribute_display_name"].count for m in stats)


def test_ncu_raw_bad_launch_column_in_a_later_block_names_its_row() -> None:
    data = _ncu_raw(80).decode().splitlines(keepends=True)
    fields = data[260].rstrip("\n")[1:-1].split('","')  # launch row 259
    fields[7] = "(256, 1)"
    data[260] = '"' + '","'.join(fields) + '"\n'
    with pytest.raises(EvidenceError, match=r"launch row 259: Block Size '\(256, 1\)'"):
        ncu.parse_ncu_csv(io.BytesIO("".join(data).encode()), tool_version=golden.NCU_VERSION)
    fields[7], fields[0] = "(256, 1, 1)", "3"  # an ID seen before
    data[260] = '"' + '","'.join(fields) + '"\n'
    with pytest.raises(EvidenceError, match=r"launch row 259: launch ID 3 appears twice"):
        ncu.parse_ncu_csv(io.BytesIO("".join(data).encode()), tool_version=golden.NCU_VERSION)


def test_ncu_raw_negative_zero_is_read_as_float_reads_it() -> None:
    report = ncu.parse_ncu_csv(io.BytesIO(_ncu_raw(8)), tool_version=golden.NCU_VERSION)
    header = (golden.FIXTURES / "ncu_raw.csv").read_text().split('"ID"', 1)[1].split("\n")[0]
    metric = ('"ID"' + header).split('","')[20].strip('"')
    values = [k.metrics[metric] for k in report.kernels.values()]
    assert any(str(s.minimum) == "-0.0" for s in values)


def test_ncu_raw_bad_value_in_a_later_block_names_its_row() -> None:
    data = _ncu_raw(80).decode().splitlines(keepends=True)
    fields = data[300].rstrip("\n")[1:-1].split('","')  # launch row 299 (after header, units)
    fields[12] = "12x"
    data[300] = '"' + '","'.join(fields) + '"\n'
    with pytest.raises(EvidenceError, match=r"launch row 299 .*'12x' does not parse"):
        ncu.parse_ncu_csv(io.BytesIO("".join(data).encode()), tool_version=golden.NCU_VERSION)


def _trace(copies: int, devices: int = 2) -> bytes:
    data = json.loads((golden.FIXTURES / "torch_trace.json").read_text())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    lo = min(e["ts"] for e in events)
    width = max(e["ts"] + e["dur"] for e in events) - lo + 10.0
    out = []
    for copy in range(copies):
        for event in events:
            event = json.loads(json.dumps(event))
            event["ts"] = round(event["ts"] + copy * width, 3)
            event["dur"] = round(event["dur"] * (1 + (copy % 5) / 3), 3)
            if event.get("cat") == "kernel":
                event["args"]["device"] = copy % devices
                event["args"]["grid"][0] += copy % 4
            out.append(event)
    data["traceEvents"] = data["traceEvents"][:5] + out
    return json.dumps(data).encode()


def _parse_trace(data: bytes) -> dict:
    return golden.canonical(torch_trace.parse_torch_trace(io.BytesIO(data)))


def test_torch_batch_path_equals_the_event_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _trace(400)  # several 1 MiB batches, two devices
    assert len(data) > 3 * torch_trace.BATCH_CHARS
    fast = _parse_trace(data)
    monkeypatch.setattr(torch_trace, "_batch_columns", lambda *args: False)
    slow = _parse_trace(data)
    assert fast == slow
    assert sum(k["launches"] for k in fast["kernels"]) == 400 * 12


def test_torch_bad_kernel_in_a_later_batch_is_refused() -> None:
    data = json.loads(_trace(400))
    kernels = [e for e in data["traceEvents"] if e.get("cat") == "kernel"]
    kernels[-100]["args"]["block"] = [1, -1, 1]
    with pytest.raises(EvidenceError, match="block"):
        torch_trace.parse_torch_trace(io.BytesIO(json.dumps(data).encode()))
    kernels[-100]["args"]["block"] = [1, 1, 1]
    kernels[-90]["name"] = ""
    with pytest.raises(EvidenceError, match="without its name"):
        torch_trace.parse_torch_trace(io.BytesIO(json.dumps(data).encode()))


_LAX = msgspec.json.Decoder(tuple[float], strict=False)


@settings(max_examples=1500, deadline=None)
@given(
    st.one_of(
        st.text(alphabet="0123456789.-+eE_ nafiINF,x", max_size=12),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.integers(-(10**30), 10**30).map(str),
    )
)
def test_msgspec_lax_float_accepts_only_plain_numbers(text: str) -> None:
    """What the ncu block path relies on: a finite lax decode implies the strict pattern, and
    the value is float()'s (the sign of an integer -0 aside, which the block path excludes)."""
    try:
        (value,) = _LAX.decode(json.dumps([text]).encode())
    except msgspec.DecodeError:
        return
    if value != value or value in (float("inf"), float("-inf")):
        return  # the block path refuses non-finite values (then the exact path decides)
    assert _PLAIN.fullmatch(text), text
    if re.fullmatch(r"-0+", text):
        return
    assert value.hex() == float(text).hex(), text


class _HeapBusy:
    """The busy-interval union as it was computed event by event (a heap of the latest
    REORDER_WINDOW intervals, merged in start order), the reference for torch_trace._Busy."""

    def __init__(self, window: int) -> None:
        self.heap: list[tuple[int, int]] = []
        self.window = window
        self.start: int | None = None
        self.end = self.busy = 0

    def add(self, start: int, end: int) -> None:
        heapq.heappush(self.heap, (start, end))
        if len(self.heap) > self.window:
            self._merge(*heapq.heappop(self.heap))

    def _merge(self, start: int, end: int) -> None:
        if self.start is None:
            self.start, self.end = start, end
        elif start < self.start:
            raise EvidenceError("out of order")
        elif start > self.end:
            self.busy += self.end - self.start
            self.start, self.end = start, end
        else:
            self.end = max(self.end, end)

    def total(self) -> int:
        while self.heap:
            self._merge(*heapq.heappop(self.heap))
        return 0 if self.start is None else self.busy + self.end - self.start


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=120),
    st.lists(st.integers(1, 40), max_size=8),
    st.integers(0, 3),
)
def test_torch_busy_union_blocks_equal_the_heap(
    steps: list[tuple[int, int]], cuts: list[int], mode: int
) -> None:
    """_Busy fed in blocks (numpy merge of in-order blocks, heap otherwise) or one interval at a
    time gives the reference heap's union, or refuses where it refuses."""
    window = 16
    monkey = pytest.MonkeyPatch()
    monkey.setattr(torch_trace, "REORDER_WINDOW", window)
    try:
        clock, intervals = 0, []
        for jump, length in steps:  # mostly ordered starts; mode 1 adds late ones
            clock += jump
            late = mode == 1 and jump % 7 == 0
            start = clock - (jump * 40 if late else 0)
            intervals.append((start, start + length))
        if mode == 2:
            intervals.sort()
        reference = _HeapBusy(window)
        try:
            for start, end in intervals:
                reference.add(start, end)
            expected: int | str = reference.total()
        except EvidenceError:
            expected = "refused"
        busy = torch_trace._Busy("t")
        try:
            if mode == 3:
                for start, end in intervals:
                    busy.add(start, end)
            else:
                at = 0
                for size in [*cuts, len(intervals)]:
                    block = intervals[at : at + size]
                    at += size
                    busy.add_many(
                        np.array([s for s, _ in block], dtype=np.int64),
                        np.array([e for _, e in block], dtype=np.int64),
                    )
            got: int | str = busy.total()
        except EvidenceError:
            got = "refused"
        assert got == expected
    finally:
        monkey.undo()
