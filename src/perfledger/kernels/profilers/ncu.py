"""Nsight Compute (``ncu``) CSV reports, parsed strictly and in a stream.

Accepted layouts, each recognised by its exact header (anything else is refused):

- ``details`` (``--page details --csv``, ncu 2022.2+): 15 columns ``ID`` .. ``Metric Value``;
  with rule results (``ncu-details-rules``) five more columns ``Rule Name`` .. ``Estimated
  Speedup``; ncu then ends metric rows with one empty field (16 fields) and writes rule rows with
  all 20. Captured on an H200 with ncu 2025.3.1 (tests/fixtures/profilers).
- ``raw`` (``--page raw --csv``): the 11 launch columns then one column per metric, a units row,
  then one row per profiled launch; read by :mod:`~perfledger.kernels.profilers.ncu_raw`
  (pyarrow's CSV reader and compute kernels, in chunks; the same strictness).
- ``summary`` (``--print-summary per-kernel|per-gpu --csv``): 15 columns with ``Invocations``,
  ``Minimum``, ``Maximum``, ``Average``. ncu 2025.3.1 truncates one record of the Memory Workload
  Analysis section after its ``Section Name`` and continues the next record on the same line
  (seen in the H200 fixture); such a record is recognised exactly (its next five fields repeat its
  own first five) and skipped, and the count of skipped records is recorded.
- ``details-old`` (ncu 2019.x-2022.1): 12 columns with ``Kernel Time`` and without block, grid,
  device and CC; and ``raw-old``, the raw page with the same 8 launch columns.

Any preamble (``==PROF==``/``==WARNING==`` lines and the profiled program's own output) before the
header is skipped. ``==ERROR==`` lines are kept as limitations; ``ERR_NVGPUCTRPERM`` and "profiling
is not supported" become limitations (R16), never zero metrics. Values are parsed strictly
(:func:`~perfledger.kernels.profilers.common.parse_number`); ``no data`` / ``n/a`` are recorded
as missing; a value with a unit that does not parse is refused; a unitless text value is accepted
only for the metrics in :data:`TEXT_METRICS`.

:func:`top_metrics_per_axis` is the compute / memory / latency digest of the Speed-of-Light
metrics for the kernel-iteration loop (R19's axes).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import (
    MetricStat,
    ProfileReport,
    non_finite_statistic,
    open_binary,
    parse_number,
)
from perfledger.kernels.profilers.ncu_csv import (
    DETAILS,
    DETAILS_OLD,
    RAW_PREFIX,
    RAW_PREFIX_OLD,
    LineReader,
    metric_value,
    note_compute_capability,
    one_row,
    preamble,
    table_lines,
)

RULES = (
    "Rule Name",
    "Rule Type",
    "Rule Description",
    "Estimated Speedup Type",
    "Estimated Speedup",
)
SUMMARY_KERNEL = (
    "Process ID", "Process Name", "Host Name", "Kernel Name", "Block Size", "Grid Size", "Device",
    "CC", "Invocations", "Section Name", "Metric Name", "Metric Unit", "Minimum", "Maximum",
    "Average",
)  # fmt: skip
SUMMARY_GPU = (
    "Process ID", "Process Name", "Host Name", "Device", "CC", "Kernel Name", "Block Size",
    "Grid Size", "Invocations", "Section Name", "Metric Name", "Metric Unit", "Minimum", "Maximum",
    "Average",
)  # fmt: skip

#: ncu versions whose CSV layouts this parser knows (year.major); others are refused (R6).
KNOWN_VERSIONS = tuple(
    f"{y}.{m}" for y in range(2019, 2026) for m in range(1, 6)
)  # 2019.1 .. 2025.5
_SHAPE = re.compile(r"\(\d+, \d+, \d+\)", re.ASCII)
_INT = re.compile(r"\d+", re.ASCII)
_CC = re.compile(r"\d+\.\d+", re.ASCII)
_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")
_VERSION = re.compile(r"Version (\d{4})\.(\d+)\.(\d+)(?:\.(\d+))?")
_RULE_TYPES = frozenset({"OPT", "INF", "WRN", "ERR"})
_SPEEDUP_TYPES = frozenset({"", "local", "global"})


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass an Nsight Compute CSV export unchanged (`ncu --csv --print-units base --page details` or `--page raw`, or `--print-summary per-kernel --csv`), or let `perfledger evidence ncu -- CMD` capture one (docs/profilers.md)"


def parse_version(text: str) -> str:
    """Return the version (``2025.3.1.0``) from ``ncu --version`` output or a bare version.

    Raises: EvidenceError when no version is found or its year.major is not in
    :data:`KNOWN_VERSIONS`.
    """
    match = _VERSION.search(text) or _VERSION.search("Version " + text.strip())
    if match is None:
        raise EvidenceError(
            f"no ncu version in {text.strip()[:80]!r}",
            hint="give the exact version that `ncu --version` prints, e.g. 2025.3.1.0",
        )
    version = ".".join(g for g in match.groups() if g is not None)
    if f"{match.group(1)}.{match.group(2)}" not in KNOWN_VERSIONS:
        raise EvidenceError(
            f"unknown ncu version {version}: its CSV layouts are not known to perfledger",
            hint=f"known: {KNOWN_VERSIONS[0]} .. {KNOWN_VERSIONS[-1]}",
        )
    return version


def parse_ncu_csv(
    source: str | Path | BinaryIO,
    *,
    tool_version: str,
    grouping: str = "none",
    name: str | None = None,
) -> ProfileReport:
    """Parse an ncu CSV export (any accepted layout), streaming.

    Args:
        source: a path or a binary stream (gzip is un-packed transparently for paths).
        tool_version: ncu's version (``ncu --version`` output or ``2025.3.1.0``); a CSV does not
            state it, so the caller must.
        grouping: ``"none"`` (``LC_ALL=C``: no digit grouping) or ``"en_US"`` (``1,234.5``);
            it is recorded in ``attributes["grouping"]``.
        name: the source's name in messages (default: the path).
    Returns: a :class:`ProfileReport` with per-kernel metric statistics in base units, rule
        results and limitations.
    Raises: EvidenceError for an unknown version, header, unit or value pattern, a truncated,
        binary or malformed file.
    """
    version = parse_version(tool_version)
    if grouping not in ("none", "en_US"):
        raise EvidenceError(
            f"unknown digit grouping {grouping!r}; use 'none' or 'en_US'", hint=_HINT
        )
    label = name or (str(source) if isinstance(source, (str, Path)) else "ncu report")
    stream = open_binary(source) if isinstance(source, (str, Path)) else source
    try:
        report = _parse(LineReader(stream, label), version, grouping, label)
    finally:
        if isinstance(source, (str, Path)):
            stream.close()
    overflow = non_finite_statistic(report)
    if overflow is not None:
        raise EvidenceError(
            f"{label}: {overflow}: a value or the sum over launches is beyond float range "
            "in the base unit; no profiler reports such a value",
            hint=_HINT,
        )
    return report


def _parse(lines: LineReader, version: str, grouping: str, label: str) -> ProfileReport:
    limitations: list[str] = []
    header: list[str] | None = None
    header_line = ""
    for line in lines:
        stripped = line.rstrip("\r\n")
        if lines.lineno == 1:  # a UTF-8 byte order mark (an editor's save) is not content
            stripped = stripped.removeprefix("\ufeff")
        if stripped.startswith(('"ID",', '"Process ID",')):
            header = one_row(stripped, label, lines.lineno)
            header_line = stripped
            break
        preamble(stripped, limitations)
    if header is None:
        if limitations:
            report = ProfileReport("ncu", version, "ncu-none")
            report.limitations.extend(limitations)
            report.attributes["grouping"] = grouping
            return report
        raise EvidenceError(
            f"{label}: no ncu CSV header found (is it `ncu --csv` output?)",
            hint="export with `ncu --csv --page details|raw` or `--print-summary per-kernel`",
        )
    parser = _layout(header, label)
    report = ProfileReport("ncu", version, parser.layout)
    report.attributes["grouping"] = grouping
    if isinstance(parser, _Raw):
        from perfledger.kernels.profilers.ncu_raw import RawPage  # noqa: PLC0415 (numpy via perfledger.kernels.profilers.ncu_raw)

        page = RawPage(parser.metrics, old=parser.old, label=label, report=report,
                       grouping=grouping, limitations=limitations)  # fmt: skip
        page.header_line = header_line
        page.run(lines)
    else:
        try:
            rows = csv.reader(table_lines(lines, limitations, header_line, label), strict=True)
            parser.run(rows, report, grouping, label, lines)
        except csv.Error as exc:
            raise EvidenceError(
                f"{label}: line {lines.lineno}: malformed CSV ({exc})", hint=_HINT
            ) from None
    report.limitations.extend(limitations)
    return report


class _Layout:
    layout = ""

    def run(
        self,
        rows: Iterable[list[str]],
        report: ProfileReport,
        grouping: str,
        label: str,
        lines: LineReader,
    ) -> None:
        raise NotImplementedError


def _layout(header: list[str], label: str) -> _Layout:
    head = tuple(header)
    if head == DETAILS:
        return _Details(rules=False)
    if head == DETAILS + RULES:
        return _Details(rules=True)
    if head == DETAILS_OLD:
        return _Details(rules=False, old=True)
    if head in (SUMMARY_KERNEL, SUMMARY_GPU):
        return _Summary(per_gpu=head == SUMMARY_GPU)
    for prefix, old in ((RAW_PREFIX, False), (RAW_PREFIX_OLD, True)):
        metrics = head[len(prefix) :]
        if head[: len(prefix)] == prefix and metrics and all(_METRIC.fullmatch(m) for m in metrics):
            return _Raw(head[len(prefix) :], old=old, label=label)
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise EvidenceError(
            f"{label}: the ncu CSV header names a column twice: {', '.join(twice)[:300]}",
            hint="a header from a hand-edited or merged export; export the report again",
        )
    nvtx = [c for c in header if "Push/Pop_Range" in c or "Start/Stop_Range" in c]
    if nvtx:
        raise EvidenceError(
            f"{label}: the export has NVTX range columns ({nvtx[0][:80]}, ...), a layout "
            "perfledger does not read",
            hint="perfledger reads the layouts without NVTX columns: profile or export the "
            "report without ncu's --nvtx option",
        )
    shown = ",".join(header[:16]) + (",..." if len(header) > 16 else "")
    raise EvidenceError(
        f"{label}: unknown ncu CSV header ({len(header)} columns): {shown[:400]}",
        hint="accepted: --page details (with or without rules), --page raw, --print-summary, "
        "and the older 12-column layout with 'Kernel Time'; columns must be in ncu's order",
    )


def _check(pattern: re.Pattern[str], text: str, what: str, where: str) -> str:
    if pattern.fullmatch(text) is None:
        raise EvidenceError(f"{where}: {what} {text[:80]!r} is not in ncu's format", hint=_HINT)
    return text


class _Details(_Layout):
    def __init__(self, *, rules: bool, old: bool = False) -> None:
        self.rules = rules
        self.old = old
        self.layout = (
            "ncu-details-old" if old else ("ncu-details-rules" if rules else "ncu-details")
        )

    def run(
        self,
        rows: Iterable[list[str]],
        report: ProfileReport,
        grouping: str,
        label: str,
        lines: LineReader,
    ) -> None:
        width = len(DETAILS_OLD) if self.old else len(DETAILS)
        seen_ids: set[int] = set()
        current: int | None = None
        n = 0
        for n, row in enumerate(rows, start=1):
            if not row:  # a blank line (before naming it: a page of them stays cheap)
                continue
            where = f"{label}: line {lines.lineno} (record {n})"  # the record's last line
            is_rule = self.rules and len(row) == width + len(RULES) and row[width - 3] == ""
            if not (
                len(row) == width
                or (self.rules and len(row) == width + 1 and row[-1] == "")
                or is_rule
            ):
                raise EvidenceError(
                    f"{where}: {len(row)} fields where {width} were expected "
                    "(a truncated or malformed file?)",
                    hint=_HINT,
                )
            launch = int(_check(_INT, row[0], "ID", where))
            _check(_INT, row[1], "Process ID", where)
            kernel_name = row[4]
            if not kernel_name:
                raise EvidenceError(f"{where}: empty Kernel Name", hint=_HINT)
            if self.old:
                stream, block, grid = row[7], "", ""
                section, metric, unit, text = row[8], row[9], row[10], row[11]
            else:
                stream = row[6]
                block = _check(_SHAPE, row[7], "Block Size", where)
                grid = _check(_SHAPE, row[8], "Grid Size", where)
                _check(_INT, row[9], "Device", where)
                _check(_CC, row[10], "CC", where)
                section, metric, unit, text = row[11], row[12], row[13], row[14]
                report.attributes.setdefault("compute_capability", row[10])
                note_compute_capability(report, row[9], row[10])
            _check(_INT, stream, "Stream", where)
            kernel = report.kernel(kernel_name)
            if launch != current:
                if launch in seen_ids:
                    raise EvidenceError(
                        f"{where}: the rows of launch ID {launch} are not together", hint=_HINT
                    )
                seen_ids.add(launch)
                current = launch
                kernel.launches += 1
                if block:
                    kernel.blocks.add(block)
                    kernel.grids.add(grid)
                kernel.streams.add(stream)
            if is_rule:
                self._rule(row, width, kernel_name, section, report, where)
                continue
            if not metric:
                raise EvidenceError(f"{where}: empty Metric Name", hint=_HINT)
            key = f"{section}/{metric}"
            value, base, text_value = metric_value(metric, unit, text, grouping, where + f" {key}")
            if text_value is not None:
                report.attributes.setdefault(f"{kernel_name}/{key}", text_value)
                kernel.texts.setdefault(key, text_value)
                continue
            stat = kernel.metrics.get(key)
            if stat is None:
                stat = kernel.metrics[key] = MetricStat(base)
            elif stat.unit != base:
                raise EvidenceError(
                    f"{where}: {key} changes unit from {stat.unit} to {base}", hint=_HINT
                )
            stat.add(value)
        if n == 0:
            raise EvidenceError(
                f"{label}: the header has no rows after it (truncated?)", hint=_HINT
            )

    def _rule(
        self,
        row: list[str],
        width: int,
        kernel_name: str,
        section: str,
        report: ProfileReport,
        where: str,
    ) -> None:
        name, kind, description, speedup_type, speedup = row[width:]
        if not name or kind not in _RULE_TYPES:
            raise EvidenceError(
                f"{where}: rule row with name {name!r} and type {kind!r}", hint=_HINT
            )
        if speedup_type not in _SPEEDUP_TYPES:
            raise EvidenceError(
                f"{where}: unknown Estimated Speedup Type {speedup_type!r}", hint=_HINT
            )
        value = parse_number(speedup, where=where + " Estimated Speedup") if speedup else None
        report.rules.append((kernel_name, section, name, kind, value, speedup_type, description))


class _Raw(_Layout):
    """The raw page (``--page raw``): read by
    :class:`~perfledger.kernels.profilers.ncu_raw.RawPage` (pyarrow, imported only here)."""

    def __init__(self, metrics: tuple[str, ...], *, old: bool, label: str) -> None:
        self.metrics = metrics
        self.old = old
        self.layout = "ncu-raw-old" if old else "ncu-raw"
        if len(set(metrics)) != len(metrics):
            twice = sorted({m for m in metrics if metrics.count(m) > 1})
            raise EvidenceError(
                f"{label}: the ncu CSV header names a column twice: {', '.join(twice)[:300]} "
                "(a raw page metric column appears twice)",
                hint=_HINT,
            )


class _Summary(_Layout):
    def __init__(self, *, per_gpu: bool) -> None:
        self.per_gpu = per_gpu
        self.layout = "ncu-summary-per-gpu" if per_gpu else "ncu-summary-per-kernel"

    def run(
        self,
        rows: Iterable[list[str]],
        report: ProfileReport,
        grouping: str,
        label: str,
        lines: LineReader,
    ) -> None:
        width = len(SUMMARY_KERNEL)
        buffer: list[str] = []
        at = 0  # fields of ``buffer`` consumed: a cursor, so that a line of a million fields
        # costs linear time (deleting from the front per record took 33 s for 1 MiB of commas)
        records = skipped = stray = 0
        for row in rows:
            del buffer[:at]
            at = 0
            buffer.extend(row)
            while len(buffer) - at >= width:
                if (
                    buffer[at + 10 : at + 15] == buffer[at : at + 5]
                ):  # ncu 2025.3.1's truncated record (see above)
                    at += 10
                    skipped += 1
                    stray += 1
                    continue
                if stray and buffer[at] == "":  # ... whose one empty field ends a later line
                    at += 1
                    stray -= 1
                    continue
                record = buffer[at : at + width]
                at += width
                records += 1
                where = f"{label}: line {lines.lineno} (summary record {records})"
                self._record(record, report, grouping, where)
        del buffer[:at]
        if stray and buffer == [""]:
            buffer.clear()
        if buffer or stray:
            raise EvidenceError(
                f"{label}: {len(buffer)} fields left after the last whole record "
                "(a truncated or malformed file?)",
                hint=_HINT,
            )
        if records == 0:
            raise EvidenceError(f"{label}: the summary has no records (truncated?)", hint=_HINT)
        report.attributes["truncated_records_skipped"] = str(skipped)

    def _record(self, r: list[str], report: ProfileReport, grouping: str, where: str) -> None:
        if self.per_gpu:
            pid, _pname, _host, device, cc, kname, block, grid = r[:8]
        else:
            pid, _pname, _host, kname, block, grid, device, cc = r[:8]
        invocations, section, metric, unit, low, high, mean = r[8:]
        _check(_INT, pid, "Process ID", where)
        _check(_INT, device, "Device", where)
        _check(_CC, cc, "CC", where)
        _check(_SHAPE, block, "Block Size", where)
        _check(_SHAPE, grid, "Grid Size", where)
        count = int(_check(_INT, invocations, "Invocations", where))
        if not kname or not metric:
            raise EvidenceError(f"{where}: empty Kernel Name or Metric Name", hint=_HINT)
        key = f"{section}/{metric}"
        values = [
            metric_value(metric, unit, text, grouping, f"{where} {key}")
            for text in (low, high, mean)
        ]
        kernel = report.kernel(kname)
        if kernel.launches not in (0, count):
            raise EvidenceError(
                f"{where}: {kname} has {count} invocations, before {kernel.launches}", hint=_HINT
            )
        kernel.launches = count
        kernel.blocks.add(block)
        kernel.grids.add(grid)
        report.attributes.setdefault("compute_capability", cc)
        note_compute_capability(report, device, cc)
        if any(v[2] is not None for v in values):
            report.attributes.setdefault(f"{kname}/{key}", mean)
            kernel.texts.setdefault(key, mean)
            return
        base = values[0][1]
        stat = kernel.metrics.get(key)
        if stat is not None:
            raise EvidenceError(f"{where}: {key} appears twice for {kname}", hint=_HINT)
        stat = kernel.metrics[key] = MetricStat(base)
        lo, hi, avg = (v[0] for v in values)
        if lo is None or hi is None or avg is None:
            stat.missing = count
            return
        if not lo <= avg <= hi:
            raise EvidenceError(f"{where}: {key} average {avg} is outside [{lo}, {hi}]", hint=_HINT)
        stat.count, stat.total, stat.minimum, stat.maximum = count, avg * count, lo, hi


# ------------------------------------------------------------------------------ the digest

#: Speed-of-Light and supporting metrics per axis, by the keys the layouts produce: details /
#: summary ``Section/Metric`` names and raw metric names. The first found of each row is taken.
AXES: dict[str, tuple[tuple[str, ...], ...]] = {
    "compute": (
        ("GPU Speed Of Light Throughput/Compute (SM) Throughput",
         "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("Compute Workload Analysis/SM Busy",
         "sm__instruction_throughput.avg.pct_of_peak_sustained_active"),
        ("Compute Workload Analysis/Executed Ipc Active", "sm__inst_executed.avg.per_cycle_active"),
        ("Compute Workload Analysis/Issue Slots Busy",
         "sm__inst_issued.avg.pct_of_peak_sustained_active"),
    ),
    "memory": (
        ("GPU Speed Of Light Throughput/Memory Throughput",
         "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("GPU Speed Of Light Throughput/DRAM Throughput",
         "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
        ("GPU Speed Of Light Throughput/L1/TEX Cache Throughput",
         "l1tex__throughput.avg.pct_of_peak_sustained_active"),
        ("GPU Speed Of Light Throughput/L2 Cache Throughput",
         "lts__throughput.avg.pct_of_peak_sustained_elapsed"),
        ("Memory Workload Analysis/Memory Throughput", "dram__bytes.sum.per_second"),
        ("Memory Workload Analysis/L2 Hit Rate", "lts__t_sector_hit_rate.pct"),
    ),
    "latency": (
        ("GPU Speed Of Light Throughput/Duration", "gpu__time_duration.sum"),
        ("Occupancy/Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active"),
        ("Occupancy/Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct"),
        ("Launch Statistics/Registers Per Thread", "launch__registers_per_thread"),
        ("Launch Statistics/Waves Per SM", "launch__waves_per_multiprocessor"),
    ),
}  # fmt: skip
#: Below this share of peak on both compute and memory, ncu's SOLBottleneck rule calls a kernel
#: latency-bound ("below 60.0% of peak typically indicate latency issues", ncu 2025.3.1 text).
LATENCY_THRESHOLD_PCT = 60.0


def top_metrics_per_axis(report: ProfileReport) -> dict[str, dict[str, object]]:
    """The compute / memory / latency digest of an ncu report, per kernel, for the iteration
    loop (R19 selects one method per axis).

    Args:
        report: a parsed ncu report (details, raw or summary layout).
    Returns: ``{kernel name: {"compute": [...], "memory": [...], "latency": [...],
        "bound": "compute" | "memory" | "latency" | "unknown", "sol_pct": {"compute": x,
        "memory": y}}}`` where each axis list holds ``{"metric", "value", "unit"}`` (mean over
        launches, base units) for the Speed-of-Light metrics of :data:`AXES` that the report has.
        ``bound`` follows ncu's SOLBottleneck rule: latency when both SOL percentages are below
        :data:`LATENCY_THRESHOLD_PCT`, else the larger one's axis; ``unknown`` without SOL.
    Raises: EvidenceError when ``report`` is not an ncu report.
    """
    if report.tool != "ncu":
        raise EvidenceError(
            f"top_metrics_per_axis needs an ncu report, not {report.tool}", hint=_HINT
        )
    digest: dict[str, dict[str, object]] = {}
    for name, kernel in report.kernels.items():
        entry: dict[str, object] = {}
        for axis, rows in AXES.items():
            found = []
            for keys in rows:
                for key in keys:
                    stat = kernel.metrics.get(key)
                    if stat is not None and stat.mean is not None:
                        found.append({"metric": key, "value": stat.mean, "unit": stat.unit})
                        break
            entry[axis] = found
        sol = {}
        for axis in ("compute", "memory"):
            first = entry[axis][0] if entry[axis] else None  # type: ignore[index]
            if first is not None and first["unit"] == "%" and first["metric"] in AXES[axis][0]:
                sol[axis] = first["value"]
        if len(sol) == 2:
            if max(sol.values()) < LATENCY_THRESHOLD_PCT:
                bound = "latency"
            else:
                bound = "compute" if sol["compute"] >= sol["memory"] else "memory"
        else:
            bound = "unknown"
        entry["bound"] = bound
        entry["sol_pct"] = sol
        digest[name] = entry
    return digest
