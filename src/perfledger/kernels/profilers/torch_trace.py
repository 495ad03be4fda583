"""PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzip, parsed in a stream.

The top-level object holds ``schemaVersion``, ``deviceProperties``, the CUDA/CUPTI versions and
``traceEvents``; events of category ``kernel`` are complete events (``ph: "X"``) whose ``ts`` and
``dur`` are in microseconds (with ns decimals) and whose ``args`` hold ``device``, ``stream``,
``grid`` and ``block``. ``pid``/``tid`` may be ints or strings. The reader walks the top-level
object with the standard library's C JSON scanner one element at a time (``raw_decode``), so memory
is bounded by the largest single event (at most :data:`MAX_EVENT_CHARS`) and the per-kernel state,
not by the file. A trace without ``schemaVersion`` is refused.

Two layouts are known (R6): today's Kineto category names (``kernel``, ``cuda_runtime``,
``cpu_op``, ``gpu_memcpy``, ``gpu_memset``, ...; layout ``torch-chrome-trace``) and the
capitalised names that Kineto wrote in 2021 (``Kernel``, ``Runtime``, ``Operator``, ``Memcpy``,
``Memset``; layout ``torch-chrome-trace-legacy``), whose kernel events carry the same ``args``.

A trace is accepted only when it is positively from NVIDIA CUDA: a trace with any mark of another
vendor's runtime (HIP/ROCm runtime calls or version keys, an AMD device or ``gfx`` architecture,
an MTIA, XPU, HPU or PrivateUse1 runtime) is refused naming that mark, whatever other fields it
carries; a trace with no mark of CUDA at all (no CUDA runtime/CUPTI version, no device with a
compute capability, no ``cuda*``/``cu*`` runtime call) is refused as out of scope. A trace with
GPU activity never yields zero kernels quietly: kernel launches without kernel events, or
complete events of categories this parser does not know and no kernel, are refused naming them.
"""

from __future__ import annotations

import codecs
import heapq
import itertools
import json
import operator
import re
import zlib
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import msgspec
import numpy as np

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import ProfileReport, open_binary

#: Trace schema versions whose layout is known (Kineto writes 1).
KNOWN_SCHEMA_VERSIONS = (1,)
#: Largest single JSON element accepted (characters); a larger one is refused, not buffered.
MAX_EVENT_CHARS = 16 * 1024 * 1024
#: Kernel events may arrive out of start order by at most this many events (per device).
REORDER_WINDOW = 1 << 16
_WS = " \t\r\n"
_COUNTED = ("cuda_runtime", "cuda_driver", "cpu_op", "cuda_sync", "gpu_memcpy", "gpu_memset")
#: The category names of 2021-era Kineto (PyTorch 1.8-1.9) -> today's names.
LEGACY_CATEGORIES = {
    "Kernel": "kernel", "Runtime": "cuda_runtime", "Operator": "cpu_op", "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
}  # fmt: skip
#: Categories of complete events that carry no kernel timing, known to be safe to skip (Kineto's
#: activity types, old and new, and what the PyTorch profiler adds).
SKIPPED_CATEGORIES = frozenset({
    "user_annotation", "gpu_user_annotation", "python_function", "Python", "Trace", "overhead",
    "cpu_instant_event", "external_correlation", "collective_comm", "cuda_profiler_range",
    "glow_runtime", "async_cpu_to_gpu", "critical_path", "fwdbwd", "ac2g",
})  # fmt: skip
#: Categories whose presence marks another vendor's device runtime -> the vendor named.
FOREIGN_CATEGORIES = {
    "mtia_runtime": "Meta MTIA", "mtia_ccp_events": "Meta MTIA", "xpu_runtime": "Intel XPU",
    "hpu_op": "Intel Gaudi (HPU)", "privateuse1_runtime": "a PrivateUse1 backend",
    "privateuse1_driver": "a PrivateUse1 backend",
}  # fmt: skip
_RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
#: Most distinct runtime call names remembered (for vendor marks and launch counts).
_MAX_RUNTIME_NAMES = 4096


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass the trace torch.profiler wrote, unchanged (`prof.export_chrome_trace(PATH)`: JSON, or gzip-compressed JSON); docs/profilers.md lists the layouts perfledger reads"


class _Stream:
    """Characters of a UTF-8 byte stream, with a decode position and refills on demand."""

    def __init__(self, stream: BinaryIO, label: str, chunk_bytes: int = 1 << 20) -> None:
        self.stream = stream
        self.label = label
        self.chunk_bytes = chunk_bytes
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.scanner = json.JSONDecoder()

    def more(self) -> bool:
        if self.eof:
            return False
        try:
            chunk = self.stream.read(self.chunk_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise EvidenceError(
                f"{self.label}: the compressed stream is damaged ({exc})", hint=_HINT
            ) from None
        if b"\x00" in chunk:
            raise EvidenceError(
                f"{self.label}: binary content (a NUL byte) in a JSON trace", hint=_HINT
            )
        try:
            text = self.decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError:
            raise EvidenceError(
                f"{self.label}: not UTF-8 text; is it a binary file?", hint=_HINT
            ) from None
        if not chunk:
            self.eof = True
        if self.pos > (1 << 20):
            self.buf, self.pos = self.buf[self.pos :], 0
        self.buf += text
        return bool(chunk)

    def peek(self) -> str:
        """The next non-whitespace character ('' at the end)."""
        while True:
            buf, pos = self.buf, self.pos
            while pos < len(buf) and buf[pos] in _WS:
                pos += 1
            self.pos = pos
            if pos < len(buf):
                return buf[pos]
            if not self.more():
                return ""

    def expect(self, chars: str, what: str) -> str:
        got = self.peek()
        if got == "" or got not in chars:
            raise EvidenceError(
                f"{self.label}: expected {what} at character {self.pos}, found "
                f"{got or 'the end of the file'!r} (a truncated or malformed trace?)",
                hint=_HINT,
            )
        self.pos += 1
        return got

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                value, end = self.scanner.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof or len(self.buf) - self.pos > MAX_EVENT_CHARS:
                    raise EvidenceError(
                        f"{self.label}: invalid JSON near character {self.pos} ({exc.msg})"
                        if self.eof
                        else f"{self.label}: one JSON element is larger than {MAX_EVENT_CHARS}",
                        hint=_HINT,
                    ) from None
                self.more()
                continue
            except RecursionError:
                raise EvidenceError(f"{self.label}: JSON nested too deeply", hint=_HINT) from None
            if end >= len(self.buf) and not self.eof:  # a number may continue in the next chunk
                self.more()
                continue
            self.pos = end
            return value


#: Largest |time| in ns a trace may hold (about 73 years): starts, ends and sums stay exact in
#: int64; a ts or dur beyond it is refused, not an OverflowError (the fast path's bound too).
_MAX_NS = 2.0**61


def _number(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise EvidenceError(f"{where}: {what} {value!r} is not a number", hint=_HINT)
    try:
        return float(value)
    except OverflowError:  # an integer beyond float range
        raise EvidenceError(
            f"{where}: {what} {str(value)[:40]}... is beyond float range", hint=_HINT
        ) from None


def _shape(value: Any, what: str, where: str) -> str:
    if (
        not isinstance(value, list)
        or len(value) != 3
        or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)
    ):
        raise EvidenceError(
            f"{where}: {what} {value!r} is not three non-negative integers", hint=_HINT
        )
    return f"({value[0]}, {value[1]}, {value[2]})"


class _Seen:
    """What the vendor and zero-kernel checks read: the count of complete events per category
    (as written) and per runtime call name (categories ``cuda_runtime``/``cuda_driver``, old or
    new names; at most :data:`_MAX_RUNTIME_NAMES` distinct names)."""

    def __init__(self) -> None:
        self.categories: Counter[Any] = Counter()
        self.runtime: Counter[str] = Counter()

    def runtime_names(self, names: Any) -> None:
        """Count runtime call names (non-strings are skipped)."""
        runtime = self.runtime
        for name, count in Counter(names).items():  # counted in C, merged per distinct name
            if isinstance(name, str) and (name in runtime or len(runtime) < _MAX_RUNTIME_NAMES):
                runtime[name] += count


class _Busy:
    """Union of kernel intervals of one device in ns, from nearly ordered starts.

    Intervals wait in a window of the :data:`REORDER_WINDOW` latest ones (a min-heap on
    ``(start, end)``, kept as two sorted int64 arrays) before they are merged, in start order,
    into the running union; one that leaves the window before an earlier-starting merged run is
    refused. Intervals are taken in arrival order, in blocks (:meth:`add_many`): a block that
    starts no earlier than the window's last interval and is itself in order leaves the heap in
    first-in first-out order, so it is merged with numpy (a running maximum of ends); any other
    block is pushed and popped one interval at a time (:mod:`heapq`), the same operations as
    :meth:`add` on each, so the union and the refusal are the same either way."""

    def __init__(self, label: str) -> None:
        self.starts = np.empty(0, dtype=np.int64)  # the window, sorted by (start, end)
        self.ends = np.empty(0, dtype=np.int64)
        self.queued: tuple[list[int], list[int]] = ([], [])  # single adds not yet in the window
        self.start: int | None = None
        self.end = 0
        self.busy = 0
        self.label = label

    def add(self, start: int, end: int) -> None:
        """Add one interval ``[start, end)`` (ns)."""
        self.queued[0].append(start)
        self.queued[1].append(end)
        if len(self.queued[0]) >= 4096:
            self._flush()

    def _flush(self) -> None:
        starts, ends = self.queued
        if starts:
            self.queued = ([], [])
            self.add_many(np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))

    def add_many(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Add intervals ``[starts[i], ends[i])`` (int64 ns), in arrival order."""
        if self.queued[0]:
            self._flush()
        if not len(starts):
            return
        window_s, window_e = self.starts, self.ends
        ordered = bool(
            (
                (starts[1:] > starts[:-1]) | ((starts[1:] == starts[:-1]) & (ends[1:] >= ends[:-1]))
            ).all()
        ) and (
            not len(window_s)
            or (int(starts[0]), int(ends[0])) >= (int(window_s[-1]), int(window_e[-1]))
        )
        if ordered:
            all_s = np.concatenate((window_s, starts))
            all_e = np.concatenate((window_e, ends))
            leave = len(all_s) - REORDER_WINDOW
            if leave > 0:
                self._merge_sorted(all_s[:leave], all_e[:leave])
                all_s, all_e = all_s[leave:], all_e[leave:]
            self.starts, self.ends = all_s, all_e
            return
        heap = list(zip(window_s.tolist(), window_e.tolist(), strict=True))  # sorted: a heap
        for item in zip(starts.tolist(), ends.tolist(), strict=True):
            heapq.heappush(heap, item)
            if len(heap) > REORDER_WINDOW:
                self._merge(*heapq.heappop(heap))
        heap.sort()
        self.starts = np.array([s for s, _ in heap], dtype=np.int64)
        self.ends = np.array([e for _, e in heap], dtype=np.int64)

    def _merge_sorted(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """:meth:`_merge` of each interval in turn, for intervals sorted by start that start no
        earlier than the running union's run (so none is refused)."""
        if self.start is None:
            self._merge(int(starts[0]), int(ends[0]))
            starts, ends = starts[1:], ends[1:]
            if not len(starts):
                return
        reach = np.maximum.accumulate(np.concatenate(([self.end], ends)))
        before = reach[:-1]  # the union's end before each interval
        breaks = np.flatnonzero(starts > before)
        if len(breaks):
            run_starts = [self.start, *starts[breaks].tolist()]
            closed_ends = before[breaks].tolist()
            self.busy += sum(closed_ends) - sum(run_starts[:-1])
            self.start = run_starts[-1]
        self.end = int(reach[-1])

    def _merge(self, start: int, end: int) -> None:
        if self.start is None:
            self.start, self.end = start, end
            return
        if start < self.start:
            raise EvidenceError(
                f"{self.label}: kernel events are out of order by more than {REORDER_WINDOW} "
                "events; the busy fraction cannot be computed in bounded memory",
                hint=_HINT,
            )
        if start > self.end:
            self.busy += self.end - self.start
            self.start, self.end = start, end
        else:
            self.start = start if start < self.start else self.start
            self.end = max(self.end, end)

    def total(self) -> int:
        """The union's length in ns (all intervals merged)."""
        self._flush()
        if len(self.starts):
            self._merge_sorted(self.starts, self.ends)
            self.starts = self.ends = np.empty(0, dtype=np.int64)
        if self.start is None:
            return 0
        return self.busy + self.end - self.start


def parse_torch_trace(
    source: str | Path | BinaryIO, *, torch_version: str | None = None, name: str | None = None
) -> ProfileReport:
    """Parse a PyTorch profiler Chrome trace (``export_chrome_trace``), streaming.

    Args:
        source: a path (plain or gzip) or a binary stream.
        torch_version: the PyTorch version that wrote it, when known (the trace does not state
            it); recorded as the tool version, else the trace's schema and CUPTI versions are.
        name: the source's name in messages.
    Returns: a workload-layer report (layout ``torch-chrome-trace``): per kernel name the exact
        duration statistics (ns), grids, blocks and streams; facts: per device the GPU kernel
        busy fraction (union of kernel intervals over the span of all complete events) and the
        span in ns, and the counts / total durations of the CUDA runtime, CPU op and sync
        categories.
    Raises: EvidenceError for invalid or truncated JSON, a missing or unknown ``schemaVersion``,
        a trace not from a CUDA device, a kernel event without its key fields, a duplicate
        top-level key.
    """
    label = name or (str(source) if isinstance(source, (str, Path)) else "PyTorch trace")
    stream = open_binary(source) if isinstance(source, (str, Path)) else source
    try:
        return _parse(_Stream(stream, label), label, torch_version)
    finally:
        if isinstance(source, (str, Path)):
            stream.close()


def _parse(js: _Stream, label: str, torch_version: str | None) -> ProfileReport:
    report = ProfileReport("torch.profiler", "pending", "torch-chrome-trace", layer="workload")
    header: dict[str, Any] = {}
    busy: dict[int, _Busy] = {}
    counted = {cat: [0, 0] for cat in _COUNTED}
    span = [None, None]  # type: list[int | None]
    events = 0
    seen = _Seen()
    failure: EvidenceError | None = None
    js.expect("{", "the trace's opening '{'")
    if js.peek() == "}":
        js.pos += 1
    else:
        while True:
            key = js.value()
            if not isinstance(key, str):
                raise EvidenceError(f"{label}: a top-level key is not a string", hint=_HINT)
            if key in header:
                raise EvidenceError(f"{label}: top-level key {key!r} appears twice", hint=_HINT)
            js.expect(":", "':'")
            if key == "traceEvents":
                header[key] = True
                js.expect("[", "the traceEvents array")
                try:
                    events = _events(js, report, busy, counted, span, label, seen)
                except EvidenceError as exc:
                    # an event this parser cannot read: before naming it, read on (only the
                    # marks of the vendor) so that a trace of another vendor's device is refused
                    # as such, not for a field it lacks
                    failure = exc
                    _salvage(js, seen, exc)
            else:
                header[key] = js.value()
            if js.expect(",}", "',' or '}'") == "}":
                break
    if js.peek() != "":
        raise EvidenceError(f"{label}: content after the trace's closing '}}'", hint=_HINT)
    if failure is not None:
        _refuse_foreign(header, seen, label)
        raise failure
    _finish(report, header, busy, counted, span, label, events, torch_version, seen)
    return report


def _events(
    js: _Stream,
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    seen: _Seen,
) -> int:
    """Read the traceEvents array after its ``[``; return how many elements it held."""
    events = 0
    if js.peek() == "]":
        js.pos += 1
        return 0
    slow_left = 0  # after a failed fast batch, this many elements go slowly
    while True:
        done = 0
        if slow_left == 0:
            done = _fast_batch(js, report, busy, counted, span, label, events + 1, seen)
            slow_left = 0 if done else SLOW_AFTER_MISS
        if done:
            events += done
        else:
            slow_left -= 1
            events += 1
            _event(js.value(), report, busy, counted, span, label, events, seen)
        if js.expect(",]", "',' or ']' in traceEvents") == "]":
            return events


def _salvage(js: _Stream, seen: _Seen, failure: EvidenceError) -> None:
    """After ``failure`` inside traceEvents, read the rest of the array noting only categories
    and runtime call names. Raises ``failure`` when the rest is not valid JSON either."""
    try:
        while True:
            char = js.peek()
            if char == ",":
                js.pos += 1
                continue
            if char == "]":
                js.pos += 1
                return
            if char == "":
                raise failure
            event = js.value()
            if isinstance(event, dict) and event.get("ph") == "X":
                _note(seen, event.get("cat"), event.get("name"))
    except EvidenceError:
        raise failure from None


def _note(seen: _Seen, cat: Any, name: Any) -> None:
    """Count one complete event's category (and its name, for a runtime call)."""
    if not isinstance(cat, str) and cat is not None:  # a list or object: unhashable, not a name
        cat = f"<{type(cat).__name__}>"
    seen.categories[cat] += 1
    if isinstance(name, str) and LEGACY_CATEGORIES.get(cat, cat) in _RUNTIME_CATEGORIES:
        seen.runtime_names((name,))


def _event(
    event: Any,
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    index: int,
    seen: _Seen,
) -> None:
    if not isinstance(event, dict):
        raise EvidenceError(f"{label}: trace event {index} is not an object", hint=_HINT)
    if event.get("ph") != "X":
        return
    cat = event.get("cat")
    _note(seen, cat, event.get("name"))
    cat = LEGACY_CATEGORIES.get(cat, cat) if isinstance(cat, str) else cat
    where = f"{label}: event {index}"
    _record(
        cat,
        event.get("name"),
        _number(event.get("ts"), "ts", where),
        _number(event.get("dur"), "dur", where),
        event.get("args") if cat == "kernel" else None,
        report, busy, counted, span, where,
    )  # fmt: skip


def _record(
    cat: Any,
    name: Any,
    ts_us: float,
    dur_us: float,
    args: Any,
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    where: str,
) -> None:
    """Account one complete event (``ts``/``dur`` in microseconds) in ns."""
    for what, value in (("ts", ts_us), ("dur", dur_us)):
        if not abs(value * 1000) < _MAX_NS:  # inf too
            raise EvidenceError(
                f"{where}: {what} {value!r} us is beyond the range of a trace (2^61 ns)", hint=_HINT
            )
    start = round(ts_us * 1000)
    dur = round(dur_us * 1000)
    if dur < 0:
        raise EvidenceError(f"{where}: negative dur", hint=_HINT)
    lo, hi = span
    span[0] = start if lo is None or start < lo else lo
    span[1] = start + dur if hi is None or start + dur > hi else hi
    if cat == "kernel":
        if not isinstance(args, dict) or not isinstance(name, str) or not name:
            raise EvidenceError(f"{where}: a kernel event without its name or args", hint=_HINT)
        device, stream = args.get("device"), args.get("stream")
        if isinstance(device, bool) or not isinstance(device, int):
            raise EvidenceError(
                f"{where}: kernel args.device {device!r} is not an integer", hint=_HINT
            )
        if isinstance(stream, bool) or not isinstance(stream, int):
            raise EvidenceError(
                f"{where}: kernel args.stream {stream!r} is not an integer", hint=_HINT
            )
        kernel = report.kernel(name)
        kernel.launches += 1
        kernel.durations.add(dur)
        kernel.grids.add(_shape(args.get("grid"), "grid", where))
        kernel.blocks.add(_shape(args.get("block"), "block", where))
        kernel.streams.add(str(stream))
        tracker = busy.get(device)
        if tracker is None:
            tracker = busy[device] = _Busy(where.split(": event")[0])
        tracker.add(start, start + dur)
    elif isinstance(cat, str) and cat in counted:  # a list as category is no category
        counted[cat][0] += 1
        counted[cat][1] += dur


class _Event(msgspec.Struct, gc=False):
    """The fields of a trace event that perfledger reads (others are skipped unparsed)."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    ts: float | None = None
    dur: float | None = None
    args: msgspec.Raw = msgspec.Raw()


_BATCH = msgspec.json.Decoder(list[_Event])
#: Characters of events decoded per batch on the fast path.
BATCH_CHARS = 1 << 20
#: Elements read one by one after a fast batch failed, before the fast path is tried again.
SLOW_AFTER_MISS = 256


def _fast_batch(
    js: _Stream,
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    index: int,
    seen: _Seen,
) -> int:
    """Decode as many whole events as the buffer holds, in one typed msgspec call, starting at
    ``js.pos`` (the start of an element). Returns how many were read (0: use the slow path).

    A batch ends at a ``}`` followed by ``,``; a split inside a string or a nested object cannot
    decode as a list of events, so a successful decode ends exactly at element boundaries.
    Anything the typed decoder refuses is left to the slow path and its precise message."""
    js.peek()
    while len(js.buf) - js.pos < BATCH_CHARS and js.more():
        pass
    buf, pos = js.buf, js.pos
    end = len(buf)
    for _attempt in range(4):
        close = buf.rfind("}", pos, end)
        if close < 0:
            return 0
        after = close + 1
        while after < len(buf) and buf[after] in _WS:
            after += 1
        end = close
        if after >= len(buf) or buf[after] != ",":
            continue
        try:
            events = _BATCH.decode(("[" + buf[pos : close + 1] + "]").encode())
        except (msgspec.DecodeError, RecursionError):
            continue
        if not _batch_columns(events, report, busy, counted, span, label, index, seen):
            _batch_events(events, report, busy, counted, span, label, index, seen)
        js.pos = close + 1
        return len(events)
    return 0


def _batch_events(
    events: list[_Event],
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    index: int,
    seen: _Seen,
) -> None:
    """Account decoded events one by one (``index``: the first one's number), raising the
    precise error of the first bad one."""
    lo, hi = span
    for offset, ev in enumerate(events):
        if ev.ph != "X":
            continue
        _note(seen, ev.cat, ev.name)
        ts_us, dur_us = ev.ts, ev.dur
        cat = LEGACY_CATEGORIES.get(ev.cat, ev.cat) if ev.cat is not None else None
        if ts_us is None or dur_us is None:
            raise EvidenceError(f"{label}: event {index + offset}: no ts or dur", hint=_HINT)
        if cat == "kernel" or dur_us < 0:
            where = f"{label}: event {index + offset}"
            try:
                args = msgspec.json.decode(ev.args) if ev.args else None
            except msgspec.DecodeError as exc:
                raise EvidenceError(f"{where}: kernel args: {exc}", hint=_HINT) from None
            span[0], span[1] = lo, hi
            _record(cat, ev.name, ts_us, dur_us, args, report, busy, counted, span, where)
            lo, hi = span
            continue
        # the common case, inlined: the span and the counted categories (see _record)
        start = round(ts_us * 1000)
        end = start + round(dur_us * 1000)
        if lo is None or start < lo:
            lo = start
        if hi is None or end > hi:
            hi = end
        tally = counted.get(cat) if cat is not None else None
        if tally is not None:
            tally[0] += 1
            tally[1] += end - start
    span[0], span[1] = lo, hi


_NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class _KernelArgs(msgspec.Struct, gc=False):
    """The ``args`` fields of a kernel event that perfledger reads, typed as :func:`_record`
    checks them (integers, not booleans or floats; shapes of three non-negative integers)."""

    device: int
    stream: int
    grid: tuple[_NonNegative, _NonNegative, _NonNegative]
    block: tuple[_NonNegative, _NonNegative, _NonNegative]


_KERNEL_ARGS = msgspec.json.Decoder(list[_KernelArgs])
_PH = operator.attrgetter("ph")
_CAT = operator.attrgetter("cat")
_TS = operator.attrgetter("ts")
_DUR = operator.attrgetter("dur")


def _batch_columns(
    events: list[_Event],
    report: ProfileReport,
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    index: int,
    seen: _Seen,
) -> bool:
    """Account decoded events column-wise with numpy; return False (having changed nothing)
    when any complete event lacks ``ts``/``dur``, has a negative rounded ``dur`` or times too
    large for exact int64 sums, or when a kernel event's args do not decode as
    :class:`_KernelArgs`: then :func:`_batch_events` reads the batch one by one.

    Same arithmetic as :func:`_record`: ``np.rint`` of the same float64 product rounds half to
    even like ``round``; sums and extremes are of exact integers."""
    phases = list(map(_PH, events))
    complete = phases.count("X")
    if not complete:
        return True
    positions: list[int] | range
    if complete == len(events):  # the usual batch: complete events only
        positions, picked = range(len(events)), events
    else:
        flags = np.fromiter(map(_COMPLETE.get, phases, _FALSE), dtype=bool, count=len(phases))
        positions = np.flatnonzero(flags).tolist()
        picked = list(map(events.__getitem__, positions))
    with np.errstate(over="ignore", invalid="ignore"):  # beyond the bound: read one by one
        ts = np.array(list(map(_TS, picked)), dtype=np.float64) * 1000.0  # None -> nan
        dur = np.array(list(map(_DUR, picked)), dtype=np.float64) * 1000.0
    # exact in int64: each start and end, and the batch's sum of durations; nan (a missing ts
    # or dur) fails these comparisons too
    if not (np.abs(ts) < _MAX_NS).all() or not (np.abs(dur) < _MAX_NS / len(picked)).all():
        return False
    start = np.rint(ts).astype(np.int64)
    dur_ns = np.rint(dur).astype(np.int64)
    if (dur_ns < 0).any():
        return False
    cats = list(map(_CAT, picked))
    codes = np.fromiter(map(_CODES.get, cats, _ZERO), dtype=np.int64, count=len(cats))
    kernel_at = np.flatnonzero(codes == _KERNEL_CODE).tolist()
    kernels = list(map(picked.__getitem__, kernel_at))
    kernel_args: list[_KernelArgs] = []
    if kernels:
        try:
            kernel_args = _KERNEL_ARGS.decode(b"[" + b",".join(map(_ARGS, kernels)) + b"]")
        except msgspec.DecodeError:
            return False
    seen.categories.update(cats)
    runtime_at = np.flatnonzero((codes == _RUNTIME_CODE) | (codes == _DRIVER_CODE)).tolist()
    if runtime_at:
        seen.runtime_names(map(_NAME, map(picked.__getitem__, runtime_at)))
    end = start + dur_ns
    lo, hi = int(start.min()), int(end.max())
    span[0] = lo if span[0] is None or lo < span[0] else span[0]
    span[1] = hi if span[1] is None or hi > span[1] else span[1]
    for code, tally in enumerate(counted.values(), start=1):
        chosen = codes == code
        if chosen.any():
            tally[0] += int(chosen.sum())
            tally[1] += int(dur_ns[chosen].sum())
    if kernels:
        _batch_kernels(kernels, kernel_args, start, dur_ns, kernel_at, positions, report, busy,
                       label, index)  # fmt: skip
    return True


def _batch_kernels(
    kernels: list[_Event],
    kernel_args: list[_KernelArgs],
    start: np.ndarray,
    dur_ns: np.ndarray,
    kernel_at: list[int],
    positions: list[int] | range,
    report: ProfileReport,
    busy: dict[int, _Busy],
    label: str,
    index: int,
) -> None:
    """Account a batch's kernel events (already checked except their names) in aggregate:
    the same launches, duration counts, shapes, streams and busy intervals as
    :func:`_record` event by event, with kernels created in first-seen order."""
    names = list(map(_NAME, kernels))
    for j, name in enumerate(names):
        if not isinstance(name, str) or not name:
            where = f"{label}: event {index + positions[kernel_at[j]]}"
            raise EvidenceError(f"{where}: a kernel event without its name or args", hint=_HINT)
    lengths = dur_ns[kernel_at].tolist()
    for name, launches in Counter(names).items():
        report.kernel(name).launches += launches
    for (name, length), count in Counter(zip(names, lengths, strict=True)).items():
        stat = report.kernels[name].durations
        stat.counts[length] += count
        stat.count += count
        stat.total_ns += length * count
    shapes = set(zip(names, map(_GRID, kernel_args), map(_BLOCK, kernel_args),
                     map(_STREAM, kernel_args), strict=True))  # fmt: skip
    for name, grid, block, stream in shapes:
        kernel = report.kernels[name]
        kernel.grids.add(_shape_text(grid))
        kernel.blocks.add(_shape_text(block))
        kernel.streams.add(str(stream))
    devices = list(map(_DEVICE, kernel_args))
    begins = start[kernel_at]
    ends = begins + dur_ns[kernel_at]
    distinct = dict.fromkeys(devices)
    device_of = np.array(devices) if len(distinct) > 1 else None
    for device in distinct:
        tracker = busy.get(device)
        if tracker is None:
            tracker = busy[device] = _Busy(label)
        if device_of is None:
            tracker.add_many(begins, ends)
        else:
            chosen = device_of == device
            tracker.add_many(begins[chosen], ends[chosen])


_COMPLETE = {"X": True}
_FALSE = itertools.repeat(False)
_ZERO = itertools.repeat(0)
#: Category -> code for the counted categories (1..) and kernels; 0 for any other.
_CODES = {cat: code for code, cat in enumerate(_COUNTED, start=1)}
_KERNEL_CODE = len(_COUNTED) + 1
_CODES["kernel"] = _KERNEL_CODE
for _old, _new in LEGACY_CATEGORIES.items():
    _CODES[_old] = _CODES[_new]
_RUNTIME_CODE = _CODES["cuda_runtime"]
_DRIVER_CODE = _CODES["cuda_driver"]
_NAME = operator.attrgetter("name")
_ARGS = operator.attrgetter("args")
_GRID = operator.attrgetter("grid")
_BLOCK = operator.attrgetter("block")
_STREAM = operator.attrgetter("stream")
_DEVICE = operator.attrgetter("device")


_SHAPES: dict[tuple[int, int, int], str] = {}


def _shape_text(shape: tuple[int, int, int]) -> str:
    """``"(x, y, z)"`` of a decoded shape (remembered for the first 4096 distinct shapes)."""
    text = _SHAPES.get(shape)
    if text is None:
        text = f"({shape[0]}, {shape[1]}, {shape[2]})"
        if len(_SHAPES) < 4096:
            _SHAPES[shape] = text
    return text


_CUDA_CALL = re.compile(r"cuda[A-Z]|cu[A-Z]")
_LAUNCH_CALL = re.compile(r"Launch")
_HIP_CALL = re.compile(r"(hip|hsa_|roctx)[A-Za-z_]")
_AMD_NAME = re.compile(r"\b(AMD|Radeon|Instinct)\b|\bgfx[0-9]", re.IGNORECASE)
#: ROCm's header keys (``roctracer_version``, ``hip_runtime_version``, ...); anchored so that a
#: user's metadata key merely containing "hip" ("ownership") is not taken for one.
_ROCM_KEY = re.compile(r"roctracer|rocprofiler|\brocm|^hip(_|[A-Z])", re.IGNORECASE)


def _refuse_foreign(header: dict[str, Any], seen: _Seen, label: str) -> None:
    """Raise EvidenceError naming every mark of a non-NVIDIA device runtime in the trace (its
    runtime calls, header keys, device names or architectures, distributed backend, categories).
    R6: evidence of another vendor's device is identified positively and refused, whatever
    CUDA-like fields (``computeMajor``, grids) it also carries."""
    marks: list[str] = []
    hip = sorted(name for name in seen.runtime if _HIP_CALL.match(name))
    if hip:
        marks.append(f"HIP runtime calls ({', '.join(hip[:4])})")
    keys = sorted(k for k in header if _ROCM_KEY.search(k))
    if keys:
        marks.append(f"ROCm header keys ({', '.join(keys[:4])})")
    devices = header.get("deviceProperties")
    for device in devices if isinstance(devices, list) else []:
        texts = (
            [v for v in device.values() if isinstance(v, str)] if isinstance(device, dict) else []
        )
        amd = [t for t in texts if _AMD_NAME.search(t)]
        if amd:
            marks.append(f"an AMD device ({amd[0][:80]!r})")
            break
    info = header.get("distributedInfo")
    backend = info.get("backend") if isinstance(info, dict) else None
    if isinstance(backend, str) and re.search(r"hip|rccl|xccl|hccl", backend, re.IGNORECASE):
        marks.append(f"distributed backend {backend!r}")
    foreign = sorted({FOREIGN_CATEGORIES[c] for c in seen.categories if c in FOREIGN_CATEGORIES})
    marks += [f"{vendor} runtime events" for vendor in foreign]
    if marks:
        raise EvidenceError(
            f"{label}: out of scope: not a trace of an NVIDIA CUDA device: {'; '.join(marks)}",
            hint="perfledger reads PyTorch traces of CUDA workloads on NVIDIA GPUs only; "
            "a ROCm/HIP trace is refused whatever CUDA-like fields it carries",
        )


def _finish(
    report: ProfileReport,
    header: dict[str, Any],
    busy: dict[int, _Busy],
    counted: dict[str, list[int]],
    span: list[int | None],
    label: str,
    events: int,
    torch_version: str | None,
    seen: _Seen,
) -> None:
    schema = header.get("schemaVersion")
    if "schemaVersion" not in header:
        raise EvidenceError(
            f"{label}: no schemaVersion: not a PyTorch profiler (Kineto) trace", hint=_HINT
        )
    if schema not in KNOWN_SCHEMA_VERSIONS or isinstance(schema, bool):
        raise EvidenceError(f"{label}: unknown trace schemaVersion {schema!r}", hint=_HINT)
    if "traceEvents" not in header:
        raise EvidenceError(f"{label}: no traceEvents array", hint=_HINT)
    devices = header.get("deviceProperties", [])
    if not isinstance(devices, list) or any(not isinstance(d, dict) for d in devices):
        raise EvidenceError(f"{label}: deviceProperties is not a list of objects", hint=_HINT)
    _refuse_foreign(header, seen, label)
    cuda = [d for d in devices if "computeMajor" in d and "computeMinor" in d]
    cupti = header.get("cupti_version")
    runtime = header.get("cuda_runtime_version")
    cuda_calls = sorted(name for name in seen.runtime if _CUDA_CALL.match(name))
    if not cuda and cupti is None and runtime is None and not cuda_calls:
        raise EvidenceError(
            f"{label}: out of scope: the trace is not from a CUDA device (no device with a "
            "compute capability, no CUDA runtime or CUPTI version, no CUDA runtime call)",
            hint="perfledger reads PyTorch traces of CUDA workloads only",
        )
    legacy = sorted(c for c in LEGACY_CATEGORIES if seen.categories[c])
    modern = sorted(c for c in LEGACY_CATEGORIES.values() if seen.categories[c])
    if legacy and modern:
        raise EvidenceError(
            f"{label}: the trace mixes the 2021 Kineto category names ({', '.join(legacy)}) "
            f"with today's ({', '.join(modern)}): not one known layout",
            hint=_HINT,
        )
    if legacy:
        report.layout = "torch-chrome-trace-legacy"
    known = {*_COUNTED, "kernel", *LEGACY_CATEGORIES, *SKIPPED_CATEGORIES}
    unknown = sorted(str(c) for c in seen.categories if c not in known)
    if not report.kernels:
        launches = {n: c for n, c in seen.runtime.items() if _LAUNCH_CALL.search(n)}
        if launches:
            shown = ", ".join(f"{n} x{c}" for n, c in sorted(launches.items())[:5])
            raise EvidenceError(
                f"{label}: the trace launches kernels ({shown}) but holds no kernel event"
                + (f"; categories not known here: {', '.join(unknown[:10])}" if unknown else ""),
                hint="record the trace with ProfilerActivity.CUDA; a CUPTI range-profiler "
                "trace (cuda_profiler_range) holds no kernel timings",
            )
        if unknown:
            raise EvidenceError(
                f"{label}: no kernel event, and complete events of categories not known to "
                f"perfledger: {', '.join(unknown[:10])} (a trace layout it does not read)",
                hint=_HINT,
            )
    elif unknown:
        report.added_limitations.append(
            f"events of categories not read: {', '.join(unknown[:10])}"[:200]
        )
    report.tool_version = (
        torch_version
        if torch_version
        else f"kineto trace schema {schema}, CUPTI {cupti}, CUDA runtime {runtime}"
    )
    report.attributes.update(
        {
            "schema_version": str(schema),
            "cupti_version": str(cupti),
            "cuda_runtime_version": str(runtime),
            "cuda_driver_version": str(header.get("cuda_driver_version")),
            "events": str(events),
        }
    )
    for d in cuda:
        report.attributes[f"device{d.get('id')}"] = (
            f"{d.get('name')} (compute {d.get('computeMajor')}.{d.get('computeMinor')})"
        )
    window = (span[1] - span[0]) if span[0] is not None and span[1] is not None else 0
    report.facts.append(("trace_span", float(window), "ns", "first start to last end, all events"))
    for device, tracker in sorted(busy.items()):
        kernel_busy = tracker.total()
        report.facts.append((f"gpu{device}.kernel_busy", float(kernel_busy), "ns", "union"))
        fraction = kernel_busy / window if window else None
        report.facts.append((f"gpu{device}.busy_fraction", fraction, "ratio", "kernels / span"))
    for cat, (count, total) in counted.items():
        report.facts.append((f"{cat}.count", float(count), "", ""))
        report.facts.append((f"{cat}.total", float(total), "ns", "sum of durations"))
    if not report.kernels:
        report.limitations.append("no CUDA kernel events in the trace")
