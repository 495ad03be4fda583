"""Nsight Systems: ``nsys export --type sqlite`` files and ``nsys stats --report
cuda_gpu_kern_sum --format csv`` output, parsed strictly.

SQLite: the version and schema come from the metadata table, named ``META_DATA_EXPORT`` in current
exports and ``EXPORT_META_DATA`` in older ones (both ``name``/``value``; keys
``EXPORT_SCHEMA_VERSION`` and ``EXPORT_PRODUCT_VERSION``); an unknown schema major version is
refused. Kernel rows come from ``CUPTI_ACTIVITY_KIND_KERNEL`` (``start``/``end`` in ns) joined to
``StringIds`` on ``demangledName``. The aggregation runs inside SQLite (memory independent of the
file). A file without the kernel table is a "no kernel activity" limitation, not a crash.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from pathlib import Path
from typing import BinaryIO

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import (
    ProfileReport,
    open_binary,
    parse_number,
    text_lines,
)

META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
#: Export schema major versions whose kernel table layout is known (2.x: 2021-2022, 3.x: 2023+).
KNOWN_SCHEMA_MAJORS = ("2", "3")
KERNEL_COLUMNS = ("start", "end", "deviceId", "streamId", "demangledName", "gridX", "gridY",
                  "gridZ", "blockX", "blockY", "blockZ")  # fmt: skip
#: The header of ``nsys stats --report cuda_gpu_kern_sum --format csv`` (nsys 2023.1+).
KERN_SUM_HEADER = (
    "Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
    "StdDev (ns)", "Name",
)  # fmt: skip
_SCHEMA = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
#: Longest kernel duration read (2^61 ns, about 73 years): sums stay exact in int64.
MAX_DURATION_NS = 2**61
_SQLITE_MAGIC = b"SQLite format 3\x00"


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass an Nsight Systems export unchanged: the SQLite file of `nsys export --type sqlite REPORT.nsys-rep`, or the CSV of `nsys stats --report cuda_gpu_kern_sum --format csv REPORT.nsys-rep` (docs/profilers.md)"


def _connect(path: str | Path) -> sqlite3.Connection:
    with open_binary(path) as stream:
        head = stream.read(16)
    if head != _SQLITE_MAGIC:
        raise EvidenceError(
            f"{path}: not an SQLite database (is it `nsys export --type sqlite`?)", hint=_HINT
        )
    uri = Path(path).resolve().as_uri() + "?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise EvidenceError(f"{path}: cannot open the SQLite file ({exc})", hint=_HINT) from None


def parse_nsys_sqlite(path: str | Path) -> ProfileReport:
    """Parse an ``nsys export --type sqlite`` file.

    Args:
        path: the ``.sqlite`` file.
    Returns: a workload-layer :class:`ProfileReport` (layout ``nsys-sqlite``): per kernel name the
        exact duration statistics in ns, grid/block shapes and streams; ``facts`` hold each
        kernel's share of the summed kernel time; ``attributes`` the schema version and metadata
        table name. Without the kernel table, a "no kernel activity" limitation and no facts.
    Raises: EvidenceError for a non-SQLite or damaged file, a missing metadata table or version,
        an unknown schema version, missing kernel columns or a kernel row with end < start.
    """
    conn = _connect(path)
    try:
        return _parse_sqlite(conn, str(path))
    except (sqlite3.Error, UnicodeDecodeError, ValueError, OverflowError) as exc:
        # a damaged file: SQLite errors, or TEXT that is not UTF-8 (found by fuzzing)
        raise EvidenceError(f"{path}: the SQLite file cannot be read ({exc})", hint=_HINT) from None
    finally:
        conn.close()


def _parse_sqlite(conn: sqlite3.Connection, label: str) -> ProfileReport:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    meta_table = next((t for t in META_TABLES if t in tables), None)
    if meta_table is None:
        raise EvidenceError(
            f"{label}: no metadata table ({' or '.join(META_TABLES)}); not an nsys export?",
            hint=_HINT,
        )
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({meta_table})")}
    if not {"name", "value"} <= columns:
        raise EvidenceError(f"{label}: {meta_table} lacks its name/value columns", hint=_HINT)
    meta = dict(conn.execute(f"SELECT name, value FROM {meta_table}").fetchmany(10_000))
    schema = str(meta.get("EXPORT_SCHEMA_VERSION", ""))
    match = _SCHEMA.fullmatch(schema)
    if match is None:
        raise EvidenceError(
            f"{label}: no readable EXPORT_SCHEMA_VERSION in {meta_table}", hint=_HINT
        )
    if match.group(1) not in KNOWN_SCHEMA_MAJORS:
        raise EvidenceError(
            f"{label}: unknown nsys export schema version {schema}",
            hint=f"known schema majors: {', '.join(KNOWN_SCHEMA_MAJORS)}",
        )
    product = str(meta.get("EXPORT_PRODUCT_VERSION", ""))
    if not re.fullmatch(r"\d{4}\.\d+(\.\d+)*", product):
        raise EvidenceError(
            f"{label}: no readable EXPORT_PRODUCT_VERSION in {meta_table}", hint=_HINT
        )
    report = ProfileReport("nsys", product, "nsys-sqlite", layer="workload")
    report.attributes.update({"schema_version": schema, "metadata_table": meta_table})
    _gpus(conn, tables, report)
    for table, what in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
        _memory_ops(conn, tables, report, label, table, what)
    if KERNEL_TABLE not in tables:
        report.limitations.append(f"no kernel activity: the export has no {KERNEL_TABLE} table")
        return report
    kcols = {r[1] for r in conn.execute(f"PRAGMA table_info({KERNEL_TABLE})")}
    missing = [c for c in KERNEL_COLUMNS if c not in kcols]
    if missing or "StringIds" not in tables:
        raise EvidenceError(
            f"{label}: the kernel table lacks {missing or ['StringIds']}", hint=_HINT
        )
    bad = conn.execute(
        f"SELECT count(*) FROM {KERNEL_TABLE} WHERE end < start OR typeof(start) != 'integer' "
        "OR typeof(end) != 'integer'"
    ).fetchone()[0]
    if bad:
        raise EvidenceError(
            f"{label}: {bad} kernel rows with non-integer or reversed start/end", hint=_HINT
        )
    # a kernel's time, shape, device and stream as nsys writes them, or the row is refused:
    # SQLite keeps whatever a column is given ('x' as a grid, a duration of 292 years)
    shapes = " OR ".join(
        f"typeof({c}) != 'integer' OR {c} < {0 if c in ('deviceId', 'streamId') else 1}"
        for c in KERNEL_COLUMNS
        if c not in ("start", "end", "demangledName")
    )
    odd = conn.execute(
        f"SELECT rowid, start, end, deviceId, streamId, gridX, gridY, gridZ, blockX, blockY, "
        f"blockZ FROM {KERNEL_TABLE} WHERE end - start >= {MAX_DURATION_NS} OR {shapes} LIMIT 1"
    ).fetchone()
    if odd is not None:
        raise EvidenceError(
            f"{label}: kernel row {odd[0]} is not as nsys writes it (a duration below "
            f"{MAX_DURATION_NS} ns, positive integer grid and block sizes, non-negative "
            f"integer device and stream): start, end, device, stream, grid, block = "
            f"{', '.join(repr(v) for v in odd[1:])}"[:600],
            hint=_HINT,
        )
    orphan = conn.execute(
        f"SELECT count(*) FROM {KERNEL_TABLE} k LEFT JOIN StringIds s ON s.id = k.demangledName "
        "WHERE s.value IS NULL"
    ).fetchone()[0]
    if orphan:
        raise EvidenceError(f"{label}: {orphan} kernel rows name no StringIds entry", hint=_HINT)
    rows = conn.execute(
        f"SELECT s.value, count(*), sum(k.end - k.start), min(k.end - k.start), "
        f"max(k.end - k.start), min(k.start), max(k.end) FROM {KERNEL_TABLE} k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value ORDER BY min(k.start)"
    ).fetchall()
    if not rows:
        report.limitations.append(f"no kernel activity: {KERNEL_TABLE} is empty")
        return report
    grand = sum(r[2] for r in rows)
    span_lo, span_hi = min(r[5] for r in rows), max(r[6] for r in rows)
    for index, (name, count, total, low, high, _first, _last) in enumerate(rows):
        kernel = report.kernel(name)
        kernel.launches = count
        offsets = ((count - 1) // 2, count // 2)
        mids = [
            conn.execute(
                f"SELECT k.end - k.start FROM {KERNEL_TABLE} k JOIN StringIds s "
                "ON s.id = k.demangledName WHERE s.value = ? ORDER BY 1 LIMIT 1 OFFSET ?",
                (name, off),
            ).fetchone()[0]
            for off in offsets
        ]
        summary = {
            "count": float(count), "total_ns": float(total), "mean_ns": total / count,
            "median_ns": (mids[0] + mids[1]) / 2, "min_ns": float(low), "max_ns": float(high),
        }  # fmt: skip
        for shape in conn.execute(
            f"SELECT DISTINCT gridX, gridY, gridZ, blockX, blockY, blockZ, streamId FROM "
            f"{KERNEL_TABLE} k JOIN StringIds s ON s.id = k.demangledName WHERE s.value = ? "
            "LIMIT 100",
            (name,),
        ):
            kernel.grids.add(f"({shape[0]}, {shape[1]}, {shape[2]})")
            kernel.blocks.add(f"({shape[3]}, {shape[4]}, {shape[5]})")
            kernel.streams.add(str(shape[6]))
        report.duration_summaries[name] = summary
        report.facts.append(
            (f"k{index}.share_of_kernel_time", total / grand if grand else None, "ratio", "")
        )
    report.facts.append(("kernel_time_total", float(grand), "ns", "sum over all kernels"))
    report.facts.append(("kernel_span", float(span_hi - span_lo), "ns", "first start to last end"))
    return report


MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
GPU_TABLE = "TARGET_INFO_GPU"
#: CUPTI's memcpy kinds (``CUpti_ActivityMemcpyKind``), used where the export has no
#: ``ENUM_CUDA_MEMCPY_OPER`` table.
MEMCPY_KINDS = {
    0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP",
}  # fmt: skip


def _memory_ops(
    conn: sqlite3.Connection,
    tables: set[str],
    report: ProfileReport,
    label: str,
    table: str,
    what: str,
) -> None:
    """Memory copies (``what`` = ``memcpy``, per copy kind too) or sets beside the kernels, as
    parser-version-2 facts: ``<what>.count``, ``<what>.total`` (ns, sum of durations) and
    ``<what>.bytes``. A missing table is a limitation (nsys writes none when it traced none, or
    did not trace CUDA memory operations), never zeros."""
    if table not in tables:
        report.added_limitations.append(f"no {what} activity: the export has no {table} table")
        return
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    need = ("start", "end", "bytes") + (("copyKind",) if what == "memcpy" else ())
    missing = [c for c in need if c not in columns]
    if missing:
        raise EvidenceError(f"{label}: {table} lacks the columns {missing}", hint=_HINT)
    bad = conn.execute(
        f"SELECT count(*) FROM {table} WHERE end < start OR typeof(start) != 'integer' "
        "OR typeof(end) != 'integer' OR typeof(bytes) != 'integer' OR bytes < 0"
    ).fetchone()[0]
    if bad:
        raise EvidenceError(f"{label}: {bad} {what} rows with a non-integer or reversed start/end "
                            "or a bad byte count", hint=_HINT)  # fmt: skip
    groups: list[tuple[str, str]] = [("", "1")]
    if what == "memcpy":
        kinds = dict(MEMCPY_KINDS)
        if "ENUM_CUDA_MEMCPY_OPER" in tables:
            for kind_id, kind_name in conn.execute("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
                if isinstance(kind_id, int) and isinstance(kind_name, str):
                    kinds[kind_id] = kind_name.removeprefix("CUDA_MEMCPY_KIND_").replace("TO", "to")
        for (kind_id,) in conn.execute(f"SELECT DISTINCT copyKind FROM {table} ORDER BY 1"):
            if isinstance(kind_id, bool) or not isinstance(kind_id, int):
                raise EvidenceError(f"{label}: {table} has a copyKind {kind_id!r}", hint=_HINT)
            groups.append((f".{kinds.get(kind_id, f'kind{kind_id}')}", f"copyKind = {kind_id}"))
    for suffix, where in groups:
        count, total, size = conn.execute(
            f"SELECT count(*), coalesce(sum(end - start), 0), coalesce(sum(bytes), 0) "
            f"FROM {table} WHERE {where}"
        ).fetchone()
        name = f"{what}{suffix}"
        report.added_facts.append((f"{name}.count", float(count), "", ""))
        report.added_facts.append((f"{name}.total", float(total), "ns", "sum of durations"))
        report.added_facts.append((f"{name}.bytes", float(size), "byte", "sum"))


def _gpus(conn: sqlite3.Connection, tables: set[str], report: ProfileReport) -> None:
    """The GPUs the export describes (``TARGET_INFO_GPU``): per GPU ``gpu<id>.name`` (a text
    fact) and, where the export has them, its compute capability, SM count and memory."""
    if GPU_TABLE not in tables:
        report.added_limitations.append(f"no GPU description: the export has no {GPU_TABLE}")
        return
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({GPU_TABLE})")}
    if not {"id", "name"} <= columns:
        report.added_limitations.append(f"no GPU description: {GPU_TABLE} lacks id/name")
        return
    numeric = [
        (column, fact, unit)
        for column, fact, unit in (
            ("computeMajor", "compute_capability.major", ""),
            ("computeMinor", "compute_capability.minor", ""),
            ("smCount", "sm_count", ""),
            ("totalMemory", "total_memory", "byte"),
        )
        if column in columns
    ]
    select = ", ".join(["id", "name"] + [c for c, _, _ in numeric])
    for row in conn.execute(f"SELECT {select} FROM {GPU_TABLE} ORDER BY id LIMIT 64"):
        gpu, name = row[0], row[1]
        report.text_facts.append((f"gpu{gpu}.name", str(name)[:200], GPU_TABLE))
        for (_, fact, unit), value in zip(numeric, row[2:], strict=True):
            number = float(value) if isinstance(value, (int, float)) else None
            report.added_facts.append((f"gpu{gpu}.{fact}", number, unit, GPU_TABLE))


def parse_nsys_stats_csv(
    source: str | Path | BinaryIO, *, tool_version: str, name: str | None = None
) -> ProfileReport:
    """Parse ``nsys stats --report cuda_gpu_kern_sum --format csv`` output (streaming).

    Args:
        source: a path or binary stream; lines before the exact header (nsys's "Processing ..."
            notes) are skipped.
        tool_version: nsys's version (``nsys --version``: ``2025.3.1.0``), which the CSV lacks.
        name: the source's name in messages.
    Returns: a workload-layer report (layout ``nsys-stats-kern-sum``) with per-kernel duration
        statistics in ns and each kernel's ``Time (%)`` as a ratio fact.
    Raises: EvidenceError for an unknown header, a value that does not parse, a row with the
        wrong number of fields, or no header at all.
    """
    match = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", tool_version)
    if match is None:
        raise EvidenceError(f"no nsys version in {tool_version[:80]!r}", hint=_HINT)
    label = name or (str(source) if isinstance(source, (str, Path)) else "nsys stats csv")
    stream = open_binary(source) if isinstance(source, (str, Path)) else source
    report = ProfileReport("nsys", match.group(1), "nsys-stats-kern-sum", layer="workload")
    try:
        lines = text_lines(stream, source=label)
        first = True
        for line in lines:
            if first:  # a UTF-8 byte order mark (an editor's save) is not content
                line, first = line.removeprefix("\ufeff"), False
            row = next(csv.reader([line]), [])
            if tuple(row) == KERN_SUM_HEADER:
                break
            if row and row[0].startswith("Time"):
                raise EvidenceError(
                    f"{label}: unknown nsys stats header {line.strip()[:300]!r}", hint=_HINT
                )
        else:
            raise EvidenceError(f"{label}: no cuda_gpu_kern_sum CSV header found", hint=_HINT)
        n = 0
        for n, row in enumerate(csv.reader(lines, strict=True), start=1):
            where = f"{label}: row {n}"
            if len(row) != len(KERN_SUM_HEADER):
                raise EvidenceError(
                    f"{where}: {len(row)} fields, expected {len(KERN_SUM_HEADER)}", hint=_HINT
                )
            pct, total, count, avg, med, low, high, _std = (
                parse_number(v, where=f"{where} {h}")
                for h, v in zip(KERN_SUM_HEADER, row[:8], strict=False)
            )
            kname = row[8]
            if not kname or count != int(count) or count < 1 or not low <= med <= high:
                raise EvidenceError(
                    f"{where}: inconsistent kernel summary for {kname[:80]!r}", hint=_HINT
                )
            # the other columns agree too, or one of them is a wrong number, not a guess: no
            # negative time, the mean inside [min, max], the total the mean times the count
            # (nsys rounds the mean to 0.1 ns), a share of time in [0, 100] %
            if (
                low < 0
                or not low <= avg <= high
                or not 0.0 <= pct <= 100.0
                or abs(total - avg * count) > 0.5 * count + 1e-9 * total
            ):
                raise EvidenceError(
                    f"{where}: inconsistent kernel summary for {kname[:80]!r}: total {total:g}, "
                    f"instances {count:g}, mean {avg:g}, min {low:g}, max {high:g} ns, "
                    f"{pct:g} % of time",
                    hint=_HINT,
                )
            if kname in report.kernels:
                raise EvidenceError(f"{where}: kernel {kname[:80]!r} has a second row", hint=_HINT)
            index = len(report.kernels)
            kernel = report.kernel(kname)
            kernel.launches = int(count)
            summary = {
                "count": count, "total_ns": total, "mean_ns": avg, "median_ns": med,
                "min_ns": low, "max_ns": high,
            }  # fmt: skip
            report.duration_summaries[kname] = summary
            report.facts.append((f"k{index}.share_of_kernel_time", pct / 100.0, "ratio", ""))
        if n == 0:
            raise EvidenceError(f"{label}: the summary has no rows", hint=_HINT)
    except csv.Error as exc:
        raise EvidenceError(f"{label}: malformed CSV ({exc})", hint=_HINT) from None
    finally:
        if isinstance(source, (str, Path)):
            stream.close()
    return report
