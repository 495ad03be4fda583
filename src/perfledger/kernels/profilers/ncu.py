"""Nsight Compute (``ncu``) CSV reports, parsed strictly and in a stream.

Accepted layouts, each recognised by its exact header (anything else is refused):

- ``details`` (``--page details --csv``, ncu 2022.2+): 15 columns ``ID`` .. ``Metric Value``;
  with rule results (``ncu-details-rules``) five more columns ``Rule Name`` .. ``Estimated
  Speedup``; ncu then ends metric rows with one empty field (16 fields) and writes rule rows with
  all 20. Captured on an H200 with ncu 2025.3.1 (tests/fixtures/profilers).
- ``raw`` (``--page raw --csv``): the 11 launch columns then one column per metric, a units row,
  then one row per profiled launch.
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
import functools
import itertools
import operator
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import msgspec
import numpy as np

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import (
    MetricStat,
    ProfileReport,
    base_unit,
    open_binary,
    parse_number,
    text_lines,
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
_SHAPE = re.compile(r"\(\d+, \d+, \d+\)")
_INT = re.compile(r"\d+")
_CC = re.compile(r"\d+\.\d+")
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
        return _parse(text_lines(stream, source=label), version, grouping, label)
    finally:
        if isinstance(source, (str, Path)):
            stream.close()


def _parse(lines: Iterator[str], version: str, grouping: str, label: str) -> ProfileReport:
    limitations: list[str] = []
    header: list[str] | None = None
    lineno = 0
    for line in lines:
        lineno += 1
        stripped = line.rstrip("\r\n")
        if stripped.startswith(('"ID",', '"Process ID",')):
            header = _one_row(stripped, label, lineno)
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
    table = _table_lines(lines, limitations)
    rows = (
        _quoted_lines(table, len(header))
        if isinstance(parser, _Raw)
        else csv.reader(table, strict=True)
    )
    report = ProfileReport("ncu", version, parser.layout)
    report.attributes["grouping"] = grouping
    try:
        parser.run(rows, report, grouping, label, lineno)
    except csv.Error as exc:
        raise EvidenceError(f"{label}: malformed CSV ({exc})") from None
    report.limitations.extend(limitations)
    return report


def _quoted_lines(lines: Iterator[str], width: int) -> Iterator[str | list[str]]:
    """The records of ncu's fully quoted rows (``"a","b",...``): a *simple* line (one that
    starts with '"', ends with '"' and a newline, holds ``2 * width`` quotes and ``width - 1``
    separators '","', so that its fields hold no '"') is yielded as the text between its outer
    quotes (a ``str``; its fields are ``text.split('","')``); any other line (an escaped quote, an
    embedded comma-quote or newline, a short or long row) is read by the csv module from that
    line on, record by record, and yielded as a list of fields. Either way the fields are exactly
    what csv.reader would give."""
    quotes, separators = 2 * width, width - 1
    for line in lines:
        if line.startswith('"') and line.count('"') == quotes:
            end = -2 if line.endswith('"\n') else (-3 if line.endswith('"\r\n') else 0)
            if end and line.count('","') == separators:
                yield line[1:end]
                continue
        record = next(csv.reader(itertools.chain([line], lines), strict=True), None)
        if record is not None:
            yield record


def _quoted_rows(lines: Iterator[str], width: int) -> Iterator[list[str]]:
    """The records of :func:`_quoted_lines` as lists of fields."""
    for item in _quoted_lines(lines, width):
        yield item.split('","') if isinstance(item, str) else item


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


def _table_lines(lines: Iterator[str], limitations: list[str]) -> Iterator[str]:
    for line in lines:
        if line.startswith(("==PROF==", "==WARNING==", "==ERROR==")):
            _preamble(line.rstrip("\r\n"), limitations)
            continue
        yield line


class _Layout:
    layout = ""

    def run(
        self, rows: Iterable[list[str]], report: ProfileReport, grouping: str, label: str, line: int
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
                return value * factor, base, None
    if unit == "" and metric in TEXT_METRICS:
        return None, base, text
    return parse_number(text, where=where, grouping=grouping) * factor, base, None


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
        self, rows: Iterable[list[str]], report: ProfileReport, grouping: str, label: str, line: int
    ) -> None:
        width = len(DETAILS_OLD) if self.old else len(DETAILS)
        seen_ids: set[int] = set()
        current: int | None = None
        n = 0
        for n, row in enumerate(rows, start=1):
            where = f"{label}: record {n}"
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
        name, kind, _description, speedup_type, speedup = row[width:]
        if not name or kind not in _RULE_TYPES:
            raise EvidenceError(f"{where}: rule row with name {name!r} and type {kind!r}")
        if speedup_type not in _SPEEDUP_TYPES:
            raise EvidenceError(f"{where}: unknown Estimated Speedup Type {speedup_type!r}")
        value = parse_number(speedup, where=where + " Estimated Speedup") if speedup else None
        report.rules.append((kernel_name, section, name, kind, value))


class _RawKernel:
    """Running statistics of one kernel's numeric raw-page columns, as numpy arrays.

    Rows are added in file order and each statistic is updated row by row (``total`` by
    sequential addition, ``minimum``/``maximum`` by ``np.minimum``/``np.maximum`` with the running
    value first), whether one row or a block of rows is added: a block's ``np.*.accumulate`` over
    axis 0 performs exactly the same operations in the same order, so results are bit-identical
    however the file is cut into blocks."""

    def __init__(self, width: int) -> None:
        self.count = np.zeros(width, dtype=np.int64)
        self.total = np.zeros(width)
        self.minimum = np.full(width, np.inf)
        self.maximum = np.full(width, -np.inf)
        self.missing = np.zeros(width, dtype=np.int64)

    def add_row(self, values: np.ndarray) -> None:
        self.count += 1
        self.total += values
        np.minimum(self.minimum, values, out=self.minimum)
        np.maximum(self.maximum, values, out=self.maximum)

    def add_block(self, values: np.ndarray) -> None:
        """Add the rows of the 2-D ``values`` (rows x columns), in order."""
        if len(values) == 1:
            self.add_row(values[0])
            return
        self.count += len(values)
        for name, op in (("total", np.add), ("minimum", np.minimum), ("maximum", np.maximum)):
            stacked = np.concatenate((getattr(self, name)[None, :], values))
            setattr(self, name, op.accumulate(stacked, axis=0)[-1].copy())

    def add_one(self, index: int, value: float | None) -> None:
        if value is None:
            self.missing[index] += 1
            return
        self.count[index] += 1
        self.total[index] += value
        self.minimum[index] = min(self.minimum[index], value)
        self.maximum[index] = max(self.maximum[index], value)


_FLOATS = msgspec.json.Decoder(list[float])
_NEG0 = ",-0,"


def _fast_values(texts: tuple[str, ...]) -> np.ndarray | None:
    """The numbers of a row's numeric fields, or None when any is not a plain finite number.

    The fields joined by ',' are decoded as one JSON array by msgspec (C): JSON's number grammar
    is a subset of :data:`_PLAIN_ROW`'s (no '+', nan, inf, grouping or underscores); whitespace,
    which JSON would skip, is excluded first, and a field holding ',' shows as a count mismatch.
    JSON's integer ``-0`` decodes as ``0.0`` where ``float("-0")`` is ``-0.0``, so such a row is
    left to the value-by-value path too. Anything else returns None and the row is read value by
    value (with the precise error)."""
    if not texts:
        return None
    joined = ",".join(texts)
    if (
        " " in joined
        or "\t" in joined
        or "\n" in joined
        or "\r" in joined
        or _NEG0 in ("," + joined + ",")
    ):
        return None
    try:
        numbers = _FLOATS.decode(("[" + joined + "]").encode())
    except msgspec.DecodeError:
        return None
    if len(numbers) != len(texts):
        return None
    values = np.fromiter(numbers, dtype=np.float64, count=len(numbers))
    return values if np.isfinite(values).all() else None


#: A plain number (no grouping, sign '+', spaces, underscores, nan or inf); the first launch row
#: sorts columns into numeric (read row by row) and the others (read value by value).
_PLAIN_ROW = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
#: Launch rows decoded per block on the fast path.
BLOCK_ROWS = 128
#: Distinct values of a text column whose interpretation is remembered (bounded memory).
_CACHE_LIMIT = 1024
_FIELD = [operator.itemgetter(i) for i in range(16)]


class _Raw(_Layout):
    """The raw page, read in blocks of :data:`BLOCK_ROWS` launch rows.

    The first launch row sorts the metric columns: those whose value is a plain number are
    *numeric*, the others (text, ``no data``) are read value by value. A block of simple lines
    (see :func:`_quoted_lines`) is decoded by one msgspec call as a JSON array of fixed-length
    tuples whose numeric columns are typed ``float`` in msgspec's lax mode, which converts a
    string to a float only when it is a JSON number (a subset of :data:`_PLAIN_ROW`: no '+',
    leading zeros, '1.', '.5', spaces or underscores; its 'nan'/'inf' spellings are caught by the
    finiteness check). Any block that does not decode, has a non-finite value, a backslash (a
    JSON escape) or a JSON ``-0`` (which msgspec makes ``0.0``, not ``-0.0``) is re-read row by row
    on the exact path; a row whose numbers do not pass is re-read value by value, which raises the
    precise error or records a ``no data`` as missing. Rows are checked and counted in file order
    on every path, so errors name the same first bad row, and the per-kernel statistics are
    updated row by row in order (:class:`_RawKernel`). A decoded block's launch columns and
    value-by-value columns are checked for the whole block, then accounted column by column
    (:meth:`_block_columns`); a block with any doubt is accounted row by row instead."""

    def __init__(self, metrics: tuple[str, ...], *, old: bool, label: str) -> None:
        self.metrics = metrics
        self.old = old
        self.layout = "ncu-raw-old" if old else "ncu-raw"
        if len(set(metrics)) != len(metrics):
            raise EvidenceError(f"{label}: a raw page metric column appears twice")

    def run(
        self, rows: Iterable[list[str]], report: ProfileReport, grouping: str, label: str, line: int
    ) -> None:
        """Read the units row and the launch rows from ``rows``: lines of the table (the
        ``str`` items of :func:`_quoted_lines`) or records (lists of fields)."""
        self.prefix = prefix = len(RAW_PREFIX_OLD if self.old else RAW_PREFIX)
        self.width = width = prefix + len(self.metrics)
        self.report, self.grouping, self.label = report, grouping, label
        items = iter(rows)
        pending: list[str] = []
        first = next(items, None)
        units = first.split('","') if isinstance(first, str) else first
        if units is None or len(units) != width or any(units[:prefix]):
            raise EvidenceError(f"{label}: the raw page's units row is missing or malformed")
        self.units = units
        self.bases = [
            base_unit(u, where=f"{label}: unit of {m}")
            for m, u in zip(self.metrics, units[prefix:], strict=True)
        ]
        self.fast: list[int] | None = None  # metric indexes read row by row
        self.aggs: dict[str, _RawKernel] = {}
        self.singles: dict[tuple[str, int], MetricStat] = {}
        self.caches: dict[int, dict[str, tuple[float | None, str, str | None]]] = {}
        self.seen: set[int] = set()
        self.n = 0
        for item in items:
            if isinstance(item, str):
                pending.append(item)
                if len(pending) >= BLOCK_ROWS:
                    self._block(pending)
                    pending = []
                continue
            if pending:
                self._block(pending)
                pending = []
            self._row(item)
        if pending:
            self._block(pending)
        if self.n == 0:
            raise EvidenceError(f"{label}: the raw page has no launch rows (truncated?)")
        fast = self.fast or []
        position = {i: j for j, i in enumerate(fast)}
        for name, kernel in report.kernels.items():
            agg = self.aggs[name]
            for i, metric in enumerate(self.metrics):
                if i in position:
                    j = position[i]
                    stat = MetricStat(self.bases[i][0])
                    stat.count, stat.missing = int(agg.count[j]), int(agg.missing[j])
                    if stat.count:
                        stat.total = float(agg.total[j])
                        stat.minimum = float(agg.minimum[j])
                        stat.maximum = float(agg.maximum[j])
                    kernel.metrics[metric] = stat
                elif (name, i) in self.singles:
                    kernel.metrics[metric] = self.singles[(name, i)]

    def _classify(self, fields: list[str]) -> None:
        """Sort the metric columns by the first launch row; build the block decoder."""
        prefix = self.prefix
        metric_fields = fields[prefix:]
        self.fast = fast = [i for i, t in enumerate(metric_fields) if _PLAIN_ROW.fullmatch(t)]
        fast_set = set(fast)
        self.slow = [i for i in range(len(metric_fields)) if i not in fast_set]
        self.factors = np.array([self.bases[i][1] for i in fast])
        self.pick = operator.itemgetter(*fast) if len(fast) > 1 else None
        types = [str] * prefix + [float if i in fast_set else str for i in range(len(self.metrics))]
        self.decoder = msgspec.json.Decoder(list[tuple[tuple(types)]], strict=False)  # type: ignore[misc]
        runs: list[list[int]] = []
        for i in fast:
            if runs and runs[-1][1] == prefix + i:
                runs[-1][1] += 1
            else:
                runs.append([prefix + i, prefix + i + 1])
        self.slices = [slice(a, b) for a, b in runs]

    def _launch(self, row: list[str] | tuple[str, ...], where: str) -> tuple[str, _RawKernel]:
        """Check a launch row's launch columns and count the launch; return the kernel's name
        and statistics."""
        report = self.report
        launch = int(_check(_INT, row[0], "ID", where))
        if launch in self.seen:
            raise EvidenceError(f"{where}: launch ID {launch} appears twice")
        self.seen.add(launch)
        name = row[4]
        if not name:
            raise EvidenceError(f"{where}: empty Kernel Name")
        kernel = report.kernel(name)
        kernel.launches += 1
        if self.old:
            if row[7] not in kernel.streams:
                kernel.streams.add(_check(_INT, row[7], "Stream", where))
        else:
            if row[7] not in kernel.blocks:
                kernel.blocks.add(_check(_SHAPE, row[7], "Block Size", where))
            if row[8] not in kernel.grids:
                kernel.grids.add(_check(_SHAPE, row[8], "Grid Size", where))
            if row[6] not in kernel.streams:
                kernel.streams.add(_check(_INT, row[6], "Stream", where))
            _check(_CC, row[10], "CC", where)
            report.attributes.setdefault("compute_capability", row[10])
        agg = self.aggs.get(name)
        if agg is None:
            agg = self.aggs[name] = _RawKernel(len(self.fast or ()))
        return name, agg

    def _slow_values(self, name: str, row: list[str] | tuple[str, ...], where: str) -> None:
        """Read the value-by-value columns of one launch row."""
        prefix, metrics = self.prefix, self.metrics
        for i in self.slow:
            text = row[prefix + i]
            cache = self.caches.get(i)
            if cache is None:
                cache = self.caches[i] = {}
            result = cache.get(text)
            if result is None:
                result = _value(
                    metrics[i], self.units[prefix + i], text, self.grouping,
                    f"{where} {metrics[i]}",
                )  # fmt: skip
                if len(cache) < _CACHE_LIMIT:
                    cache[text] = result
            value, base, text_value = result
            if text_value is not None:
                self.report.attributes.setdefault(f"{name}/{metrics[i]}", text_value)
                continue
            stat = self.singles.get((name, i))
            if stat is None:
                stat = self.singles[(name, i)] = MetricStat(base)
            stat.add(value)

    def _row(self, row: list[str]) -> None:
        """One launch row (a record of fields), on the exact path."""
        self.n += 1
        where = f"{self.label}: launch row {self.n}"
        if len(row) != self.width:
            raise EvidenceError(
                f"{where}: {len(row)} fields where {self.width} were expected "
                "(a truncated or malformed file?)"
            )
        if self.fast is None:
            self._classify(row)
        name, agg = self._launch(row, where)
        fields = row[self.prefix :]
        fast = self.fast or []
        texts = self.pick(fields) if self.pick is not None else tuple(fields[i] for i in fast)
        values = _fast_values(texts)
        if values is not None:
            agg.add_row(values * self.factors)
        else:
            for j, i in enumerate(fast):
                value, _base, text = _value(
                    self.metrics[i], self.units[self.prefix + i], fields[i], self.grouping,
                    f"{where} {self.metrics[i]}",
                )  # fmt: skip
                if text is not None:
                    raise EvidenceError(
                        f"{where} {self.metrics[i]}: value {text[:60]!r} does not parse as a number"
                    )
                agg.add_one(j, value)
        self._slow_values(name, row, where)

    def _block(self, lines: list[str]) -> None:
        """Launch rows given as simple lines (the text between a line's outer quotes)."""
        if self.fast is None:
            self._row(lines[0].split('","'))
            lines = lines[1:]
            if not lines:
                return
        decoded = self._decode(lines)
        if decoded is None:
            for line in lines:
                self._row(line.split('","'))
            return
        rows, values = decoded
        if self._block_columns(rows, values):
            return
        groups: dict[str, list[int]] = {}
        aggs: dict[str, _RawKernel] = {}
        label = self.label
        for k, row in enumerate(rows):
            self.n += 1
            where = f"{label}: launch row {self.n}"
            name, agg = self._launch(row, where)
            group = groups.get(name)
            if group is None:
                group = groups[name] = []
                aggs[name] = agg
            group.append(k)
            if self.slow:
                self._slow_values(name, row, where)
        for name, indexes in groups.items():
            block = values if len(groups) == 1 else values[indexes]
            aggs[name].add_block(block)

    def _block_columns(self, rows: list[tuple[str | float, ...]], values: np.ndarray) -> bool:
        """Account a decoded block column by column: the same checks, launches, shapes,
        streams, statistics and text attributes as :meth:`_launch` and :meth:`_slow_values` row
        by row, checked for the whole block before anything is changed. Returns False (having
        changed nothing) when any row needs the row-by-row path: a launch column out of
        ncu's format, a repeated launch ID, an empty kernel name or a value that
        :func:`_value` refuses; that path then raises the error of the first bad row."""
        report, prefix = self.report, self.prefix
        ids = list(map(_FIELD[0], rows))
        if not all(map(str.isdecimal, ids)):
            return False
        launches = list(map(int, ids))
        if len(set(launches)) != len(launches) or not self.seen.isdisjoint(launches):
            return False
        names = list(map(_FIELD[4], rows))
        if "" in names:
            return False
        columns = (7,) if self.old else (6, 7, 8, 10)
        shapes = set(zip(names, *(map(_FIELD[c], rows) for c in columns), strict=True))
        for _name, *fields in shapes:
            if self.old:
                checks = ((_INT, fields[0]),)
            else:
                checks = ((_INT, fields[0]), (_SHAPE, fields[1]), (_SHAPE, fields[2]),
                          (_CC, fields[3]))  # fmt: skip
            if any(pattern.fullmatch(text) is None for pattern, text in checks):
                return False
        slow: list[tuple[int, list[tuple[float | None, str, str | None]]]] = []
        for i in self.slow:
            cache = self.caches.setdefault(i, {})
            results = []
            for text in map(operator.itemgetter(prefix + i), rows):
                result = cache.get(text)
                if result is None:
                    try:
                        result = _value(self.metrics[i], self.units[prefix + i], text,
                                        self.grouping, "")  # fmt: skip
                    except EvidenceError:
                        return False
                    if len(cache) < _CACHE_LIMIT:
                        cache[text] = result
                results.append(result)
            slow.append((i, results))
        # checked: account the block
        self.seen.update(launches)
        self.n += len(rows)
        groups: dict[str, list[int]] = {}
        for k, name in enumerate(names):
            group = groups.get(name)
            if group is None:
                group = groups[name] = []
            group.append(k)
        for name, indexes in groups.items():
            kernel = report.kernel(name)
            kernel.launches += len(indexes)
            agg = self.aggs.get(name)
            if agg is None:
                agg = self.aggs[name] = _RawKernel(len(self.fast or ()))
            agg.add_block(values if len(groups) == 1 else values[indexes])
        for name, *fields in shapes:
            kernel = report.kernels[name]
            kernel.streams.add(fields[0])
            if not self.old:
                kernel.blocks.add(fields[1])
                kernel.grids.add(fields[2])
        if not self.old:
            report.attributes.setdefault("compute_capability", str(rows[0][10]))
        texts: dict[str, tuple[int, int, str]] = {}  # new text attribute -> (row, column, text)
        for j, (i, results) in enumerate(slow):
            for name, indexes in groups.items():
                picked = [results[k] for k in indexes]
                if any(r[2] is not None for r in picked):
                    for k, r in zip(indexes, picked, strict=True):
                        if r[2] is None:
                            self._single(name, i, r[1]).add(r[0])
                            continue
                        key = f"{name}/{self.metrics[i]}"
                        if key not in report.attributes and key not in texts:
                            texts[key] = (k, j, r[2])
                    continue
                stat = self._single(name, i, picked[0][1])
                numbers = [r[0] for r in picked if r[0] is not None]
                stat.missing += len(picked) - len(numbers)
                if numbers:  # MetricStat.add's operations, in order
                    stat.count += len(numbers)
                    stat.total = functools.reduce(operator.add, numbers, stat.total)
                    stat.minimum = min(stat.minimum, *numbers)
                    stat.maximum = max(stat.maximum, *numbers)
        # text attributes in the row path's order: by row, then by column
        for key, (_k, _j, text) in sorted(texts.items(), key=lambda item: item[1][:2]):
            report.attributes[key] = text
        return True

    def _single(self, name: str, i: int, base: str) -> MetricStat:
        """The statistics of a value-by-value column ``i`` of kernel ``name``."""
        stat = self.singles.get((name, i))
        if stat is None:
            stat = self.singles[(name, i)] = MetricStat(base)
        return stat

    def _decode(self, lines: list[str]) -> tuple[list[tuple[str | float, ...]], np.ndarray] | None:
        """Decode a block of simple lines in one msgspec call; return the rows (tuples) and the
        numeric columns (rows x numeric columns, in base units), or None when any row needs the
        exact path."""
        text = '[["' + '"],["'.join(lines) + '"]]'
        if "\\" in text or '"-0"' in text:
            return None
        try:
            rows = self.decoder.decode(text.encode())
        except msgspec.DecodeError:
            return None
        count = len(rows) * len(self.fast or ())
        slices = self.slices
        values = np.fromiter(
            itertools.chain.from_iterable(row[s] for row in rows for s in slices),
            dtype=np.float64,
            count=count,
        ).reshape(len(rows), len(self.fast or ()))
        if not np.isfinite(values).all():
            return None
        values *= self.factors
        return rows, values


class _Summary(_Layout):
    def __init__(self, *, per_gpu: bool) -> None:
        self.per_gpu = per_gpu
        self.layout = "ncu-summary-per-gpu" if per_gpu else "ncu-summary-per-kernel"

    def run(
        self, rows: Iterable[list[str]], report: ProfileReport, grouping: str, label: str, line: int
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
                self._record(record, report, grouping, f"{label}: summary record {records}")
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
        if any(v[2] is not None for v in values):
            report.attributes.setdefault(f"{kname}/{key}", mean)
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
