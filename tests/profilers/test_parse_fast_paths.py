"""The PyTorch trace's column-wise batch path gives exactly the results of its event-by-event
path on multi-batch inputs built from the real H200 trace (as bench/profiler_bench.py builds it,
with varied values). The ncu raw page's equivalent checks are in test_ncu_raw.py."""

from __future__ import annotations

import heapq
import io
import json

import numpy as np
import profiler_golden as golden
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers import torch_trace


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


@pytest.mark.slow
def test_torch_batch_path_equals_the_event_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _trace(400)  # several 1 MiB batches, two devices
    assert len(data) > 3 * torch_trace.BATCH_CHARS
    fast = _parse_trace(data)
    monkeypatch.setattr(torch_trace, "_batch_columns", lambda *args: False)
    slow = _parse_trace(data)
    assert fast == slow
    assert sum(k["launches"] for k in fast["kernels"]) == 400 * 12


@pytest.mark.slow
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


@pytest.mark.slow
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
