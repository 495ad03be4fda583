"""The pieces of an Nsight Compute CSV export that every layout's reader shares: the header
columns, the line reader, the noise lines ncu prints inside a table, and the parsing of one
metric value. :mod:`perfledger.kernels.profilers.ncu` (details, summary) and
:mod:`perfledger.kernels.profilers.ncu_raw` (the raw page) both read through them.
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.capture import export_command
from perfledger.kernels.profilers.common import ProfileReport, base_unit, parse_number, to_base

DETAILS = (
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit",
    "Metric Value",
)  # fmt: skip
DETAILS_OLD = (
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
    "Stream", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
)  # fmt: skip
RAW_PREFIX = DETAILS[:11]
RAW_PREFIX_OLD = DETAILS_OLD[:8]
RAW_PREFIX = DETAILS[:11]
RAW_PREFIX_OLD = DETAILS_OLD[:8]
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
_PERM = "ERR_NVGPUCTRPERM"


NCU_REP_MAGIC = b"NVR\x00"


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass an Nsight Compute CSV export unchanged (`ncu --csv --print-units base --page details` or `--page raw`), or let `perfledger evidence ncu -- CMD` capture one (docs/profilers.md)"


def binary_report(label: str) -> EvidenceError:
    """The error for a binary ``.ncu-rep`` given where a CSV export was expected, with the
    command that exports it."""

    return EvidenceError(
        f"{label}: a binary Nsight Compute report (.ncu-rep), not a CSV export",
        hint=f"name it *.ncu-rep (perfledger then runs ncu --import where ncu is installed), "
        f"or export it yourself: `{export_command(label)}`",
    )


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
            raise EvidenceError(
                f"{self.label}: the compressed stream is damaged ({exc})", hint=_HINT
            ) from None
        if b"\x00" in data:
            if self.first and data.startswith(NCU_REP_MAGIC):
                raise binary_report(self.label)
            raise EvidenceError(
                f"{self.label}: binary content (a NUL byte) where text was expected", hint=_HINT
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
                f"{self.label}: not UTF-8 text (byte {start + exc.start}); is it a binary file?",
                hint=_HINT,
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
                    f"{self.label}: the compressed stream is damaged ({exc})", hint=_HINT
                ) from None
        if not count:
            self.eof = True
            return 0
        if buffer.find(b"\x00", start, start + count) >= 0:
            raise EvidenceError(
                f"{self.label}: binary content (a NUL byte) where text was expected", hint=_HINT
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


def one_row(line: str, label: str, lineno: int) -> list[str]:
    try:
        rows = list(csv.reader([line], strict=True))
    except csv.Error as exc:
        raise EvidenceError(
            f"{label}: line {lineno}: malformed CSV header ({exc})", hint=_HINT
        ) from None
    return rows[0] if rows else []


def preamble(line: str, limitations: list[str]) -> None:
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


def table_lines(
    lines: Iterator[str], limitations: list[str], header: str | None = None, label: str = ""
) -> Iterator[str]:
    for line in lines:
        if line.startswith(TABLE_NOISE):
            preamble(line.rstrip("\r\n"), limitations)
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


def metric_value(
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
