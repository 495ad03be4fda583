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
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import (
    MetricStat,
    ProfileReport,
    base_unit,
    non_finite_statistic,
    open_binary,
    parse_number,
    to_base,
)

DETAILS = (
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
    "Metric Value",
)  # fmt: skip
RULES = (
    "Rule Name",
    "Rule Type",
    "Rule Description",
    "Estimated Speedup Type",
    "Estimated Speedup",
)
DETAILS_OLD = (
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
    "Stream", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
)  # fmt: skip
RAW_PREFIX = DETAILS[:11]
RAW_PREFIX_OLD = DETAILS_OLD[:8]
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
#: Unitless metrics whose value is text, not a number (details names and raw names).
TEXT_METRICS = frozenset({
    "Cluster Scheduling Policy", "Enabled TPC IDs", "Function Cache Configuration",
    "device__attribute_display_name", "device__attribute_confidential_computing_mode",
    "device__attribute_architecture", "device__attribute_chip", "launch__cluster_scheduling_policy",
    "launch__func_cache_config", "launch__kernel_name", "launch__tpc_enabled",
    "launch__uses_green_context", "profiler__replayer_passes_type_warning", "Kernel Name",
})  # fmt: skip
#: Values that mean "the tool has no value for this metric" (recorded as missing, not zero).
MISSING = frozenset({"no data", "n/a", "N/A"})
_SHAPE = re.compile(r"\(\d+, \d+, \d+\)", re.ASCII)
_INT = re.compile(r"\d+", re.ASCII)
_CC = re.compile(r"\d+\.\d+", re.ASCII)
_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9_.]*")
_VERSION = re.compile(r"Version (\d{4})\.(\d+)\.(\d+)(?:\.(\d+))?")
_RULE_TYPES = frozenset({"OPT", "INF", "WRN", "ERR"})
_SPEEDUP_TYPES = frozenset({"", "local", "global"})
_PERM = "ERR_NVGPUCTRPERM"


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
        raise EvidenceError(f"unknown digit grouping {grouping!r}; use 'none' or 'en_US'")
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
            "in the base unit; no profiler reports such a value"
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
            header = _one_row(stripped, label, lines.lineno)
            header_line = stripped
            break
        _preamble(stripped, limitations)
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
        from perfledger.kernels.profilers.ncu_raw import RawPage

        page = RawPage(parser.metrics, old=parser.old, label=label, report=report,
                       grouping=grouping, limitations=limitations)  # fmt: skip
        page.header_line = header_line
        page.run(lines)
    else:
        try:
            rows = csv.reader(_table_lines(lines, limitations, header_line, label), strict=True)
            parser.run(rows, report, grouping, label, lines)
        except csv.Error as exc:
            raise EvidenceError(f"{label}: line {lines.lineno}: malformed CSV ({exc})") from None
    report.limitations.extend(limitations)
    return report


class LineReader:
    """The lines of an ncu CSV export, read ``chunk_bytes`` at a time, with the bytes not yet
    read as lines available as whole-line chunks (:meth:`chunks`) for the raw page's tokeniser.

    Lines are split at ``\\n`` only (each keeps it; a ``\\r`` stays in its line, as the csv
    module expects) and decoded as strict UTF-8.
    Raises (while iterating): EvidenceError for a NUL byte (a binary file), invalid UTF-8 (naming
    the byte offset) or a damaged gzip stream."""

    def __init__(self, stream: BinaryIO, label: str, chunk_bytes: int = 1 << 20) -> None:
        self.stream = stream
        self.label = label
        self.chunk_bytes = chunk_bytes
        self.buffer = b""
        self.pos = 0  # next unread byte of buffer
        self.offset = 0  # file offset of buffer[0]
        self.eof = False
        self.lineno = 0  # lines returned so far
        self.first = True  # nothing read yet

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes from the stream (b"" at its end), checked for NUL bytes."""
        try:
            data = self.stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise EvidenceError(f"{self.label}: the compressed stream is damaged ({exc})") from None
        if b"\x00" in data:
            if self.first and data.startswith(NCU_REP_MAGIC):
                raise binary_report(self.label)
            raise EvidenceError(
                f"{self.label}: binary content (a NUL byte) where text was expected"
            )
        self.first = False
        if not data:
            self.eof = True
        return data

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        while True:
            end = self.buffer.find(b"\n", self.pos)
            if end >= 0:
                break
            if self.eof:
                if self.pos >= len(self.buffer):
                    raise StopIteration
                end = len(self.buffer) - 1
                break
            data = self.read(self.chunk_bytes)
            self.offset += self.pos
            self.buffer, self.pos = self.buffer[self.pos :] + data, 0
        raw, start = self.buffer[self.pos : end + 1], self.offset + self.pos
        self.pos = end + 1
        self.lineno += 1
        return self.decode(raw, start)

    def decode(self, raw: bytes, start: int) -> str:
        """``raw`` (found at file offset ``start``) as UTF-8 text."""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EvidenceError(
                f"{self.label}: not UTF-8 text (byte {start + exc.start}); is it a binary file?"
            ) from None

    def chunks(self, size: int) -> Iterator[bytearray]:
        """The rest of the input as chunks of whole lines of about ``size`` bytes (the last may
        lack its newline), each read into its own buffer (not changed after it is yielded);
        :attr:`offset` is each chunk's file offset while it is current."""
        pending = self.buffer[self.pos :]
        self.offset += self.pos
        self.buffer, self.pos = b"", 0
        while True:
            buffer = bytearray(len(pending) + size)
            buffer[: len(pending)] = pending
            filled = len(pending)
            while filled < len(buffer) and not self.eof:
                filled += self.read_into(buffer, filled)
            cut = buffer.rfind(b"\n", 0, filled) + 1
            if self.eof and filled == len(pending):
                if pending:
                    yield bytearray(pending)
                return
            if not cut:
                if self.eof:
                    del buffer[filled:]
                    yield buffer
                    return
                pending = bytes(buffer[:filled])
                continue
            pending = bytes(buffer[cut:filled])
            del buffer[cut:]
            yield buffer
            self.offset += cut

    def read_into(self, buffer: bytearray, start: int) -> int:
        """Read into ``buffer`` from ``start`` on; return the count (0 at the end of the
        stream). Raises EvidenceError for a NUL byte or a damaged gzip stream."""
        with memoryview(buffer) as view:
            try:
                count = self.stream.readinto(view[start:])  # type: ignore[attr-defined]
            except (OSError, EOFError, zlib.error) as exc:
                raise EvidenceError(
                    f"{self.label}: the compressed stream is damaged ({exc})"
                ) from None
        if not count:
            self.eof = True
            return 0
        if buffer.find(b"\x00", start, start + count) >= 0:
            raise EvidenceError(
                f"{self.label}: binary content (a NUL byte) where text was expected"
            )
        return count

    def decoded(self, chunks: Iterable[bytes]) -> Iterator[str]:
        """The lines of ``chunks`` (from :meth:`chunks`) as text, split at ``\\n`` only."""
        for chunk in chunks:
            parts = self.decode(chunk, self.offset).split("\n")
            last = parts.pop()
            for part in parts:
                yield part + "\n"
            if last:
                yield last


#: The first bytes of a binary Nsight Compute report (``.ncu-rep``).
NCU_REP_MAGIC = b"NVR\x00"


def binary_report(label: str) -> EvidenceError:
    """The error for a binary ``.ncu-rep`` given where a CSV export was expected, with the
    command that exports it."""
    from perfledger.kernels.profilers.capture import export_command

    return EvidenceError(
        f"{label}: a binary Nsight Compute report (.ncu-rep), not a CSV export",
        hint=f"name it *.ncu-rep (perfledger then runs ncu --import where ncu is installed), "
        f"or export it yourself: `{export_command(label)}`",
    )


#: Lines that ncu (or the profiled program) may print inside the table; never CSV rows.
TABLE_NOISE = ("==PROF==", "==WARNING==", "==ERROR==")


def note_compute_capability(report: ProfileReport, device: str, cc: str) -> None:
    """Record device ``device``'s compute capability ``cc`` (``"9.0"``, already checked) once,
    as the facts ``gpu<device>.compute_capability.major`` / ``.minor`` (parser version 2)."""
    key = f"device{device}.compute_capability"
    if key in report.attributes:
        return
    report.attributes[key] = cc
    major, minor = cc.split(".")
    note = "ncu CC column"
    report.added_facts.append((f"gpu{device}.compute_capability.major", float(major), "", note))
    report.added_facts.append((f"gpu{device}.compute_capability.minor", float(minor), "", note))


def _one_row(line: str, label: str, lineno: int) -> list[str]:
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise EvidenceError(f"{label}: line {lineno}: malformed CSV header ({exc})") from None
    return rows[0] if rows else []


def _preamble(line: str, limitations: list[str]) -> None:
    if _PERM in line:
        limitations.append(
            f"{_PERM}: no permission to read GPU performance counters (R16: not zero metrics)"
        )
    elif "not supported" in line.lower() and line.startswith("==ERROR=="):
        limitations.append(f"profiling not supported: {line[9:].strip()[:300]}")
    elif line.startswith("==ERROR=="):
        limitations.append(line[9:].strip()[:300])
    elif line.startswith("==WARNING== No kernels were profiled"):
        limitations.append("no kernels were profiled")


def _table_lines(
    lines: Iterator[str], limitations: list[str], header: str | None = None, label: str = ""
) -> Iterator[str]:
    for line in lines:
        if line.startswith(TABLE_NOISE):
            _preamble(line.rstrip("\r\n"), limitations)
            continue
        if header is not None and line.rstrip("\r\n") == header:
            raise duplicated_header(label, getattr(lines, "lineno", 0))
        yield line


def duplicated_header(label: str, lineno: int) -> EvidenceError:
    """The error for the CSV header found again inside the table (two exports concatenated,
    or a report appended to another): named as such, not as a malformed row."""
    where = f"line {lineno}: " if lineno else ""
    return EvidenceError(
        f"{label}: {where}the CSV header appears a second time (two ncu exports "
        "concatenated into one file?)",
        hint="give each ncu export its own file",
    )


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


def _value(
    metric: str, unit: str, text: str, grouping: str, where: str
) -> tuple[float | None, str, str | None]:
    """Return (value in base unit or None, base unit, text value or None)."""
    base, factor = base_unit(unit, where=where)
    if text in MISSING:
        return None, base, None
    if text and text[0] != "+" and "_" not in text:
        try:
            value = float(text)
        except ValueError:
            pass
        else:
            if value - value == 0.0 and text.isascii() and text.strip() == text:
                return to_base(value, factor, where=where, text=text, unit=unit), base, None
    if unit == "" and metric in TEXT_METRICS:
        return None, base, text
    value = parse_number(text, where=where, grouping=grouping)
    return to_base(value, factor, where=where, text=text, unit=unit), base, None


def _check(pattern: re.Pattern[str], text: str, what: str, where: str) -> str:
    if pattern.fullmatch(text) is None:
        raise EvidenceError(f"{where}: {what} {text[:80]!r} is not in ncu's format")
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
            where = f"{label}: line {lines.lineno} (record {n})"  # the record's last line
            if not row:
                continue
            is_rule = self.rules and len(row) == width + len(RULES) and row[width - 3] == ""
            if not (
                len(row) == width
                or (self.rules and len(row) == width + 1 and row[-1] == "")
                or is_rule
            ):
                raise EvidenceError(
                    f"{where}: {len(row)} fields where {width} were expected "
                    "(a truncated or malformed file?)"
                )
            launch = int(_check(_INT, row[0], "ID", where))
            _check(_INT, row[1], "Process ID", where)
            kernel_name = row[4]
            if not kernel_name:
                raise EvidenceError(f"{where}: empty Kernel Name")
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
                    raise EvidenceError(f"{where}: the rows of launch ID {launch} are not together")
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
                raise EvidenceError(f"{where}: empty Metric Name")
            key = f"{section}/{metric}"
            value, base, text_value = _value(metric, unit, text, grouping, where + f" {key}")
            if text_value is not None:
                report.attributes.setdefault(f"{kernel_name}/{key}", text_value)
                kernel.texts.setdefault(key, text_value)
                continue
            stat = kernel.metrics.get(key)
            if stat is None:
                stat = kernel.metrics[key] = MetricStat(base)
            elif stat.unit != base:
                raise EvidenceError(f"{where}: {key} changes unit from {stat.unit} to {base}")
            stat.add(value)
        if n == 0:
            raise EvidenceError(f"{label}: the header has no rows after it (truncated?)")

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
            raise EvidenceError(f"{where}: rule row with name {name!r} and type {kind!r}")
        if speedup_type not in _SPEEDUP_TYPES:
            raise EvidenceError(f"{where}: unknown Estimated Speedup Type {speedup_type!r}")
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
                "(a raw page metric column appears twice)"
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
        records = skipped = stray = 0
        for row in rows:
            buffer.extend(row)
            while len(buffer) >= width:
                if buffer[10:15] == buffer[0:5]:  # ncu 2025.3.1's truncated record (see above)
                    del buffer[:10]
                    skipped += 1
                    stray += 1
                    continue
                if stray and buffer[0] == "":  # ... whose one empty field ends a later line
                    del buffer[0]
                    stray -= 1
                    continue
                record, buffer = buffer[:width], buffer[width:]
                records += 1
                where = f"{label}: line {lines.lineno} (summary record {records})"
                self._record(record, report, grouping, where)
        if stray and buffer == [""]:
            buffer.clear()
        if buffer or stray:
            raise EvidenceError(
                f"{label}: {len(buffer)} fields left after the last whole record "
                "(a truncated or malformed file?)"
            )
        if records == 0:
            raise EvidenceError(f"{label}: the summary has no records (truncated?)")
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
            raise EvidenceError(f"{where}: empty Kernel Name or Metric Name")
        key = f"{section}/{metric}"
        values = [
            _value(metric, unit, text, grouping, f"{where} {key}") for text in (low, high, mean)
        ]
        kernel = report.kernel(kname)
        if kernel.launches not in (0, count):
            raise EvidenceError(
                f"{where}: {kname} has {count} invocations, before {kernel.launches}"
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
            raise EvidenceError(f"{where}: {key} appears twice for {kname}")
        stat = kernel.metrics[key] = MetricStat(base)
        lo, hi, avg = (v[0] for v in values)
        if lo is None or hi is None or avg is None:
            stat.missing = count
            return
        if not lo <= avg <= hi:
            raise EvidenceError(f"{where}: {key} average {avg} is outside [{lo}, {hi}]")
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
        raise EvidenceError(f"top_metrics_per_axis needs an ncu report, not {report.tool}")
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
