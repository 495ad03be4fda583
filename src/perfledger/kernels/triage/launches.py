"""Every kernel launch of a trace, with what launched it.

The strict parsers (:func:`~perfledger.kernels.profilers.torch_trace.parse_torch_trace`,
:func:`~perfledger.kernels.profilers.nsys.parse_nsys_sqlite`) run first: they refuse what they do
not know (R6) and give the per-kernel statistics, the GPU busy time and the span. A second read
then links each kernel to its launch:

- PyTorch traces: a kernel's ``args.correlation`` names its CUDA runtime/driver call (the
  ``ac2g`` flow events carry the same id: a kernel without ``correlation`` is linked through its
  flow's end point); its ``args["External id"]`` names the CPU op (``cpu_op``) that launched it,
  else the innermost ``cpu_op`` enclosing the runtime call on its thread is taken;
  ``user_annotation`` ranges (``record_function``) enclosing the call are its ranges.
- nsys exports: ``correlationId`` joins ``CUPTI_ACTIVITY_KIND_KERNEL`` to
  ``CUPTI_ACTIVITY_KIND_RUNTIME`` (within one process); its ranges are the NVTX start/end ranges
  of its process, then the push/pop ranges of the calling thread (``NVTX_EVENTS``), that enclose
  the call.

A kernel is a CUDA-graph kernel when its launch call is ``cudaGraphLaunch*`` (or, in nsys, its
``graphNodeId`` is set): the graph hides which op each node came from (see
:func:`perfledger.kernels.triage.tables.attribute_graph_kernels`).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import ProfileReport, open_binary, read_head
from perfledger.kernels.profilers.nsys import KERNEL_TABLE, parse_nsys_sqlite

#: Category aliases of 2021-era Kineto traces (``Kernel``, ``Runtime``, ``Operator``).
_CATEGORY = {
    "kernel": "kernel", "Kernel": "kernel",
    "cuda_runtime": "launch", "Runtime": "launch", "cuda_driver": "launch",
    "cpu_op": "op", "Operator": "op",
    "user_annotation": "range",
}  # fmt: skip
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Runtime tables of nsys exports that hold the launch calls.
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
#: NVTX event types of ranges a program emits: push/pop (nested per thread) and start/end (per
#: process, may cross threads and need not nest). 70/71 are ranges imported from NVTXT files.
NVTX_PUSH_POP, NVTX_START_END = 59, 60


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass a trace of the workload that holds its kernel launches, unchanged (torch.profiler's JSON trace or an nsys SQLite export; docs/triage.md)"


@dataclass(frozen=True)
class Launch:
    """One kernel execution and what launched it.

    Attributes:
        name: the kernel's demangled name.
        start_ns / duration_ns: when it ran on the GPU (ns, the trace's clock).
        device / stream: where it ran.
        grid / block: launch shape ``"(x, y, z)"`` ("" when the trace lacks it).
        launcher: the runtime/driver call that launched it (``cudaLaunchKernel``,
            ``cudaGraphLaunch``, ...), "" when the trace does not link it.
        op: the CPU op (PyTorch ``cpu_op``) that launched it, "" when unknown.
        ranges: enclosing user / NVTX ranges, outermost first.
        graph: launched as a node of a CUDA graph.
        graph_launch: an id of the graph launch (its correlation id) for graph kernels, else -1.
    """

    name: str
    start_ns: int
    duration_ns: int
    device: int
    stream: int
    grid: str = ""
    block: str = ""
    launcher: str = ""
    op: str = ""
    ranges: tuple[str, ...] = ()
    graph: bool = False
    graph_launch: int = -1


@dataclass
class TraceLaunches:
    """The launches of one trace and its time denominators.

    Attributes:
        path: the file read.
        kind: ``torch`` (PyTorch profiler trace) or ``nsys`` (SQLite export).
        report: the strict parser's result (per-kernel statistics, tool and version).
        launches: every kernel launch, in start order.
        busy_ns: GPU busy time: the union of kernel intervals, summed over devices (ns).
        span_ns: the trace span (ns): first start to last end of all timed events.
        span_note: what the span covers.
        limitations: what could not be linked or measured.
    """

    path: str
    kind: str
    report: ProfileReport
    launches: list[Launch] = field(default_factory=list)
    busy_ns: int = 0
    span_ns: int = 0
    span_note: str = ""
    limitations: list[str] = field(default_factory=list)


def read_launches(path: str | Path) -> TraceLaunches:
    """Read a PyTorch profiler trace (JSON, plain or gzip) or an ``nsys export --type sqlite``
    file, detected by content.

    Returns: the :class:`TraceLaunches`.
    Raises: EvidenceError for a file that is neither, or that its parser refuses (R6), or whose
        kernels cannot be linked consistently with the parser's count.
    """
    head = read_head(path, 64)
    if head.startswith(_SQLITE_MAGIC):
        result = _read_nsys(path)
    elif head.lstrip()[:1] == b"{":
        result = _read_torch(path)
    else:
        raise EvidenceError(
            f"{path}: not a trace perfledger triages (a PyTorch profiler JSON trace or an "
            "`nsys export --type sqlite` file)",
            hint="export nsys reports with `nsys export --type sqlite REPORT.nsys-rep`",
        )
    check_counts(result)
    if not result.launches:
        raise EvidenceError(
            f"{path}: the trace holds no kernel launches: nothing to triage", hint=_HINT
        )
    return result


def check_counts(result: TraceLaunches) -> None:
    """Check the launches read against the strict parser's per-kernel counts (R6: never
    silently wrong): a kernel read with another count than the parser's, or one the parser
    does not know, is refused; an entry only the parser reports becomes a limitation.

    Raises: EvidenceError naming the first kernel that differs.
    """
    path = result.path
    counted = Counter(launch.name for launch in result.launches)
    parsed = {name: k.launches for name, k in result.report.kernels.items()}
    differ = sorted(n for n, c in counted.items() if parsed.get(n) != c)
    if differ:  # a kernel the parser counts differently: the layout is not what triage knows
        raise EvidenceError(
            f"{path}: {len(differ)} kernel(s) were read with other launch counts than the "
            f"parser's (first: {differ[0][:120]!r}); the trace's layout is not one triage knows",
            hint=_HINT,
        )
    others = sorted(set(parsed) - set(counted))
    if others:  # e.g. activity the parser reports beside kernels
        result.limitations.append(
            f"{len(others)} entr(ies) the parser reports are not kernel launches triage reads "
            f"(first: {others[0][:120]!r}); they are not in the tables"
        )


# ----------------------------------------------------------------------------- PyTorch traces


class _Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: Any = None
    ts: float | None = None
    dur: float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    id: int | str | None = None
    args: dict[str, Any] | None = None


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event]  # the trace's own key


def _ns(value: float | None) -> int:
    return round((value or 0.0) * 1000)


def _enclose(
    spans: dict[Any, list[tuple[int, int, str]]], queries: list[tuple[Any, int]]
) -> list[list[str]]:
    """For each query ``(thread key, time ns)``, the names of the spans of that thread that
    enclose the time, outermost first. One sweep per thread with a stack (spans of one thread
    nest, so the stack holds exactly the open ones; a span that does not nest is filtered)."""
    out: list[list[str]] = [[] for _ in queries]
    by_key: dict[Any, list[tuple[int, int]]] = {}
    for index, (key, at) in enumerate(queries):
        if key in spans:
            by_key.setdefault(key, []).append((at, index))
    for key, asked in by_key.items():
        asked.sort()
        items = spans[key]  # sorted by start
        stack: list[tuple[int, int, str]] = []
        next_span = 0
        for at, index in asked:
            while next_span < len(items) and items[next_span][0] <= at:
                while stack and stack[-1][1] < items[next_span][0]:
                    stack.pop()
                stack.append(items[next_span])
                next_span += 1
            while stack and stack[-1][1] < at:
                stack.pop()
            out[index] = [name for start, end, name in stack if start <= at <= end]
    return out


def _read_torch(path: str | Path) -> TraceLaunches:
    from perfledger.kernels.profilers.torch_trace import parse_torch_trace  # noqa: PLC0415 (numpy via perfledger.kernels.profilers.torch_trace)

    report = parse_torch_trace(path)
    with open_binary(path) as stream:
        data = stream.read()
    try:
        trace = msgspec.json.decode(data, type=_Trace)
    except msgspec.DecodeError as exc:
        raise EvidenceError(
            f"{path}: the trace's events do not read as expected ({exc})", hint=_HINT
        ) from None
    result = TraceLaunches(str(path), "torch", report,
                           span_note="first start to last end of every complete event")  # fmt: skip
    lo: int | None = None
    hi: int | None = None
    calls: dict[Any, _Event] = {}
    by_position: dict[tuple[Any, Any, int], _Event] = {}
    ops_by_id: dict[Any, str] = {}
    spans: dict[tuple[Any, Any], list[tuple[int, int, str]]] = {}
    ranges: dict[tuple[Any, Any], list[tuple[int, int, str]]] = {}
    flow_start: dict[Any, tuple[Any, Any, int]] = {}
    flow_end: dict[tuple[Any, Any, int], Any] = {}
    kernels: list[_Event] = []
    for ev in trace.traceEvents:
        role = _CATEGORY.get(ev.cat or "")
        if ev.cat == "ac2g" and ev.id is not None:
            where = (ev.pid, ev.tid, _ns(ev.ts))
            if ev.ph == "s":
                flow_start[ev.id] = where
            elif ev.ph == "f":
                flow_end[where] = ev.id
            continue
        if ev.ph == "X" and ev.ts is not None:
            start = _ns(ev.ts)
            lo = start if lo is None or start < lo else lo
            end = start + _ns(ev.dur)
            hi = end if hi is None or end > hi else hi
        if ev.ph != "X" or role is None:
            continue
        args = ev.args or {}
        if role == "kernel":
            kernels.append(ev)
        elif role == "launch":
            if "correlation" in args:
                calls[args["correlation"]] = ev
            by_position[(ev.pid, ev.tid, _ns(ev.ts))] = ev
        else:
            start = _ns(ev.ts)
            item = (start, start + _ns(ev.dur), str(ev.name))
            (spans if role == "op" else ranges).setdefault((ev.pid, ev.tid), []).append(item)
            if role == "op" and args.get("External id") is not None:
                ops_by_id[args["External id"]] = str(ev.name)
    for table in (spans, ranges):
        for items in table.values():
            items.sort()
    linked: list[_Event | None] = []
    for ev in kernels:
        args = ev.args or {}
        call = calls.get(args.get("correlation")) if "correlation" in args else None
        if call is None:  # no correlation: follow the ac2g flow that ends at this kernel
            flow = flow_end.get((ev.pid, ev.tid, _ns(ev.ts)))
            origin = flow_start.get(flow) if flow is not None else None
            call = by_position.get(origin) if origin is not None else None
        linked.append(call)
    at = [((c.pid, c.tid), _ns(c.ts)) if c is not None else (None, 0) for c in linked]
    op_stacks, range_stacks = _enclose(spans, at), _enclose(ranges, at)
    unlinked = 0
    for ev, call, ops, enclosing in zip(kernels, linked, op_stacks, range_stacks, strict=True):
        args = ev.args or {}
        launcher = str(call.name) if call is not None else ""
        graph = launcher.startswith("cudaGraphLaunch")
        op = ops[-1] if ops else ""
        external = args.get("External id")
        if external is not None and external in ops_by_id and not graph:
            op = ops_by_id[external]  # the op Kineto itself linked the kernel to
        if call is None and not op:
            unlinked += 1
        grid, block = args.get("grid"), args.get("block")
        result.launches.append(
            Launch(
                name=str(ev.name), start_ns=_ns(ev.ts), duration_ns=_ns(ev.dur),
                device=int(args.get("device", 0)), stream=int(args.get("stream", 0)),
                grid=_shape(grid), block=_shape(block), launcher=launcher, op=op,
                ranges=tuple(enclosing), graph=graph,
                graph_launch=int(args.get("correlation", -1)) if graph else -1,
            )
        )  # fmt: skip
    if unlinked:
        result.limitations.append(
            f"{unlinked} kernel launch(es) link to no runtime call or CPU op in the trace"
        )
    result.launches.sort(key=lambda launch: (launch.start_ns, launch.device, launch.stream))
    intervals: dict[int, list[tuple[int, int]]] = {}
    for launch in result.launches:
        intervals.setdefault(launch.device, []).append(
            (launch.start_ns, launch.start_ns + launch.duration_ns)
        )
    result.busy_ns = sum(_union(items) for items in intervals.values())
    result.span_ns = (hi - lo) if lo is not None and hi is not None else 0
    return result


def _shape(value: Any) -> str:
    if isinstance(value, list) and len(value) == 3:
        return f"({value[0]}, {value[1]}, {value[2]})"
    return ""


# ----------------------------------------------------------------------------- nsys exports


def _read_nsys(path: str | Path) -> TraceLaunches:

    report = parse_nsys_sqlite(path)
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    conn = sqlite3.connect(uri, uri=True)
    try:
        return _nsys_launches(conn, str(path), report, KERNEL_TABLE)
    except (sqlite3.Error, UnicodeDecodeError, ValueError) as exc:
        raise EvidenceError(f"{path}: the SQLite file cannot be read ({exc})", hint=_HINT) from None
    finally:
        conn.close()


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _nsys_launches(
    conn: sqlite3.Connection, label: str, report: ProfileReport, kernel_table: str
) -> TraceLaunches:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    result = TraceLaunches(label, "nsys", report,
                           span_note="first start to last end of kernels, runtime calls, "
                           "memory copies/sets and NVTX ranges")  # fmt: skip
    if kernel_table not in tables:
        return result
    kcols = _columns(conn, kernel_table)
    optional = [c if c in kcols else "NULL" for c in ("correlationId", "globalPid", "graphNodeId")]
    rows = conn.execute(
        f"SELECT k.start, k.end, k.deviceId, k.streamId, s.value, k.gridX, k.gridY, k.gridZ, "
        f"k.blockX, k.blockY, k.blockZ, {', '.join('k.' + c if c != 'NULL' else c for c in optional)}"
        f" FROM {kernel_table} k JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start"
    ).fetchall()
    calls: dict[tuple[int | None, int], tuple[str, int, int]] = {}
    have_runtime = RUNTIME_TABLE in tables and {"start", "globalTid", "correlationId",
                                                "nameId"} <= _columns(conn, RUNTIME_TABLE)  # fmt: skip
    if have_runtime:
        for start, tid, corr, name in conn.execute(
            f"SELECT r.start, r.globalTid, r.correlationId, s.value FROM {RUNTIME_TABLE} r "
            "JOIN StringIds s ON s.id = r.nameId WHERE r.correlationId IS NOT NULL"
        ):
            calls[(_process(tid), corr)] = (str(name), start, tid)
    else:
        result.limitations.append(
            f"no {RUNTIME_TABLE} table: kernels are not linked to their launch calls"
        )
    nvtx: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    if NVTX_TABLE in tables:
        ncols = _columns(conn, NVTX_TABLE)
        text = "COALESCE(n.text, s.value, '')" if "textId" in ncols else "COALESCE(n.text, '')"
        join = "LEFT JOIN StringIds s ON s.id = n.textId" if "textId" in ncols else ""
        for start, end, tid, kind, name in conn.execute(
            f"SELECT n.start, n.end, n.globalTid, n.eventType, {text} FROM {NVTX_TABLE} n {join} "
            f"WHERE n.end IS NOT NULL AND n.globalTid IS NOT NULL "
            f"AND n.eventType IN ({NVTX_PUSH_POP}, {NVTX_START_END})"
        ):
            # push/pop ranges belong to their thread; start/end ranges to their process
            key = ("thread", tid) if kind == NVTX_PUSH_POP else ("process", _process(tid))
            nvtx.setdefault(key, []).append((start, end, str(name)))
        for items in nvtx.values():
            items.sort()
    by_corr: dict[int, list[tuple[str, int, int]]] = {}
    for (_proc, corr), call in calls.items():
        by_corr.setdefault(corr, []).append(call)
    linked: list[tuple[str, int, int] | None] = []
    for row in rows:
        corr, pid = row[11], row[12]
        call = calls.get((_process(pid), corr)) if corr is not None else None
        if call is None and corr is not None and pid is None and len(by_corr.get(corr, ())) == 1:
            call = by_corr[corr][0]  # no globalPid column: unambiguous in a one-process export
        linked.append(call)
    processes = _enclose(nvtx, [(("process", _process(c[2])), c[1]) if c else (None, 0)
                                for c in linked])  # fmt: skip
    threads = _enclose(nvtx, [(("thread", c[2]), c[1]) if c else (None, 0) for c in linked])
    enclosed = [p + t for p, t in zip(processes, threads, strict=True)]
    unlinked = 0
    intervals: dict[int, list[tuple[int, int]]] = {}
    for row, call, enclosing in zip(rows, linked, enclosed, strict=True):
        (start, end, device, stream, name, gx, gy, gz, bx, by, bz, corr, _pid, node) = row
        launcher = call[0] if call is not None else ""
        if call is None and have_runtime:
            unlinked += 1
        graph = node is not None or launcher.startswith("cudaGraphLaunch")
        result.launches.append(
            Launch(
                name=str(name), start_ns=start, duration_ns=end - start, device=device,
                stream=stream, grid=f"({gx}, {gy}, {gz})", block=f"({bx}, {by}, {bz})",
                launcher=launcher, op="", ranges=tuple(enclosing), graph=graph,
                graph_launch=(corr if corr is not None else -1) if graph else -1,
            )
        )  # fmt: skip
        intervals.setdefault(device, []).append((start, end))
    if unlinked:
        result.limitations.append(
            f"{unlinked} kernel launch(es) link to no runtime call in {RUNTIME_TABLE}"
        )
    result.busy_ns = sum(_union(items) for items in intervals.values())
    lo, hi = None, None
    for table in (kernel_table, RUNTIME_TABLE, NVTX_TABLE, "CUPTI_ACTIVITY_KIND_MEMCPY",
                  "CUPTI_ACTIVITY_KIND_MEMSET"):  # fmt: skip
        if table in tables and {"start", "end"} <= _columns(conn, table):
            first, last = conn.execute(
                f"SELECT min(start), max(end) FROM {table} WHERE end IS NOT NULL"
            ).fetchone()
            if first is not None:
                lo = first if lo is None else min(lo, first)
                hi = last if hi is None else max(hi, last)
    result.span_ns = (hi - lo) if lo is not None and hi is not None else 0
    return result


def _process(global_id: int | None) -> int | None:
    """The process part of an nsys ``globalTid``/``globalPid`` (the bits above the low 24 that
    hold the thread id)."""
    return None if global_id is None else int(global_id) >> 24


def _union(items: list[tuple[int, int]]) -> int:
    """Length of the union of ``[start, end)`` intervals (ns)."""
    total, run_start, run_end = 0, None, 0
    for start, end in sorted(items):
        if run_start is None or start > run_end:
            if run_start is not None:
                total += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    if run_start is not None:
        total += run_end - run_start
    return total
