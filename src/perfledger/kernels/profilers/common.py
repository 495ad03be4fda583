"""Shared pieces of the profiler parsers: the explicit unit table, strict number parsing, streaming
text input, per-kernel statistics and the parse result.

Every parser here reads its input as a stream (memory independent of the file's size) and raises
:class:`~perfledger.errors.EvidenceError` (exit 2) for anything it does not know: an unknown unit,
a number in an unexpected pattern, a truncated, binary or non-UTF-8 file. R6: evidence is refused
at ingestion, never guessed.
"""

from __future__ import annotations

import codecs
import gzip
import io
import math
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from perfledger.errors import EvidenceError

#: Unit as a tool prints it -> (base unit, factor to the base unit). Base units are those of
#: ``ncu --print-units base``: ``ns``, ``byte``, ``byte/s``, ``hz``, ``cycle``, ``%``, counts.
#: ncu's prefixes are decimal (``Kbyte`` = 1000 byte: checked against ``--print-units base`` on
#: the H200 fixtures). A unit missing from this table is refused, never guessed.
UNITS: dict[str, tuple[str, float]] = {
    "": ("", 1.0),
    # time
    "ns": ("ns", 1.0), "nsecond": ("ns", 1.0), "nsec": ("ns", 1.0),
    "us": ("ns", 1e3), "usecond": ("ns", 1e3), "usec": ("ns", 1e3),
    "ms": ("ns", 1e6), "msecond": ("ns", 1e6), "msec": ("ns", 1e6),
    "s": ("ns", 1e9), "second": ("ns", 1e9),
    # frequency
    "hz": ("hz", 1.0), "Khz": ("hz", 1e3), "Mhz": ("hz", 1e6), "Ghz": ("hz", 1e9),
    "cycle/second": ("hz", 1.0), "cycle/s": ("hz", 1.0), "cycle/nsecond": ("hz", 1e9), "cycle/usecond": ("hz", 1e6),
    "cycle/msecond": ("hz", 1e3), "cycle/ns": ("hz", 1e9), "cycle/us": ("hz", 1e6),
    # sizes and rates
    "byte": ("byte", 1.0), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6),
    "Gbyte": ("byte", 1e9), "Tbyte": ("byte", 1e12),
    "byte/s": ("byte/s", 1.0), "byte/second": ("byte/s", 1.0),
    "Kbyte/s": ("byte/s", 1e3), "Mbyte/s": ("byte/s", 1e6), "Gbyte/s": ("byte/s", 1e9),
    "Tbyte/s": ("byte/s", 1e12), "Kbyte/second": ("byte/s", 1e3),
    "Mbyte/second": ("byte/s", 1e6), "Gbyte/second": ("byte/s", 1e9),
    "Tbyte/second": ("byte/s", 1e12),
    "byte/block": ("byte/block", 1.0), "Kbyte/block": ("byte/block", 1e3),
    "Mbyte/block": ("byte/block", 1e6),
    "%/byte": ("%/byte", 1.0), "%/Kbyte": ("%/byte", 1e-3), "%/Mbyte": ("%/byte", 1e-6),
    # ratios and counts
    "%": ("%", 1.0), "%/register": ("%/register", 1.0),
    "inst/cycle": ("inst/cycle", 1.0), "register/thread": ("register/thread", 1.0),
    "SM": ("SM", 1.0), "pass": ("pass", 1.0), "cluster": ("cluster", 1.0),
}  # fmt: skip
for _count in ("cycle", "inst", "sector", "warp", "block", "thread", "request", "wavefront"):
    UNITS[_count] = (_count, 1.0)
    for _prefix, _factor in (("K", 1e3), ("M", 1e6), ("G", 1e9)):
        UNITS[_prefix + _count] = (_count, _factor)
    UNITS.setdefault(_count + "/cycle", (_count + "/cycle", 1.0))
    UNITS.setdefault(_count + "/s", (_count + "/s", 1.0))
    UNITS.setdefault(_count + "/second", (_count + "/s", 1.0))  # cycle/second stays hz

# re.ASCII: `\d` alone also matches other scripts' digits ('١٢٣'), which float() reads and no
# profiler prints (the raw page's pyarrow path refuses them; both paths must agree)
_PLAIN = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", re.ASCII)
#: The only digit grouping accepted: ',' thousands with '.' decimals (the en_US pattern that ncu
#: prints under such a locale). Any other pattern is refused.
_GROUPED = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", re.ASCII)
#: Grouping policies: "none" (LC_ALL=C, what `evidence ncu` captures) or "en_US".
GROUPINGS = ("none", "en_US")


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass the profiler's report unchanged, as the tool wrote it (UTF-8 text, or the tool's own export); docs/profilers.md lists each format and how to produce it"


def base_unit(unit: str, *, where: str) -> tuple[str, float]:
    """Return ``(base unit, factor)`` for a unit as printed by a profiler.

    Raises: EvidenceError naming the unit and ``where`` it was found, when it is not in
    :data:`UNITS` (R6: unknown units are refused).
    """
    try:
        return UNITS[unit]
    except KeyError:
        raise EvidenceError(
            f"unknown unit {unit!r} ({where}); units are never guessed",
            hint="only the units of perfledger.kernels.profilers.common.UNITS are accepted",
        ) from None


def parse_number(text: str, *, where: str, grouping: str = "none") -> float:
    """Parse a metric value strictly.

    Args:
        text: the value as printed.
        where: what the value is (for the error message).
        grouping: ``"none"`` (no digit grouping) or ``"en_US"`` (``1,234.5``).
    Returns: the finite float.
    Raises: EvidenceError when the text is not a number in that pattern, or is not finite.
    """
    if _PLAIN.fullmatch(text):
        value = float(text)
    elif grouping == "en_US" and _GROUPED.fullmatch(text):
        value = float(text.replace(",", ""))
    else:
        shown = text if len(text) <= 60 else text[:57] + "..."
        extra = (
            " (digit grouping is accepted only as 1,234.5 with --grouping en_US)"
            if any(c in text for c in ",. '") and any(c.isdigit() for c in text)
            else ""
        )
        raise EvidenceError(
            f"{where}: value {shown!r} does not parse as a number{extra}", hint=_HINT
        )
    if not math.isfinite(value):
        raise EvidenceError(f"{where}: value {text!r} is not finite", hint=_HINT)
    return value


def to_base(value: float, factor: float, *, where: str, text: str, unit: str) -> float:
    """``value`` (finite, in ``unit``) times ``factor``: the value in the base unit.

    Raises: EvidenceError naming ``where`` when the product is not finite: a value within
    float range in its own unit can overflow in the base unit (``1e300`` s is ``inf`` ns),
    which would otherwise be recorded as infinity, silently."""
    scaled = value * factor
    if not math.isfinite(scaled):
        raise EvidenceError(
            f"{where}: value {text[:60]!r} {unit} is beyond float range in the base unit",
            hint=_HINT,
        )
    return scaled


def non_finite_statistic(report: ProfileReport) -> str | None:
    """The first ``kernel metric`` of ``report`` whose sum, minimum or maximum over launches is
    not finite (values each finite whose sum overflows, or an overflow a parser did not check
    value by value); None when every statistic is finite."""
    for name, kernel in report.kernels.items():
        for key, stat in kernel.metrics.items():
            if stat.count and not all(
                math.isfinite(v) for v in (stat.total, stat.minimum, stat.maximum)
            ):
                return f"{name} {key} ({stat.unit})"
    return None


def open_binary(path: str | Path) -> BinaryIO:
    """Open a report for streaming reads, transparently un-gzipping ``.gz`` content (detected by
    its magic bytes, not its name). Raises: EvidenceError when the file cannot be opened."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - the caller closes it
    except OSError as exc:
        raise EvidenceError(
            f"cannot read the report {str(path)!r}: {exc.strerror}", hint=_HINT
        ) from None
    magic = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def text_lines(stream: BinaryIO, *, source: str, chunk_bytes: int = 1 << 20) -> Iterator[str]:
    """Yield the lines of a UTF-8 text stream (a leading byte order mark dropped), split at
    newlines only (each keeps its ``\\n``; a ``\\r`` stays in its line, as the csv module
    expects), reading ``chunk_bytes`` at a time.

    Raises: EvidenceError for a NUL byte (a binary file), invalid UTF-8, or a damaged gzip
    stream."""
    # utf-8-sig: a byte order mark at the start (an editor's save) is not content
    decoder = codecs.getincrementaldecoder("utf-8-sig")("strict")
    pending = ""
    offset = 0
    while True:
        try:
            chunk = stream.read(chunk_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise EvidenceError(
                f"{source}: the compressed stream is damaged ({exc})", hint=_HINT
            ) from None
        if b"\x00" in chunk:
            raise EvidenceError(
                f"{source}: binary content (a NUL byte) where text was expected", hint=_HINT
            )
        try:
            text = decoder.decode(chunk, final=not chunk)
        except UnicodeDecodeError as exc:
            raise EvidenceError(
                f"{source}: not UTF-8 text (byte {offset + exc.start}); is it a binary file?",
                hint=_HINT,
            ) from None
        offset += len(chunk)
        if not chunk:
            if pending:
                yield pending
            return
        parts = (pending + text).split("\n")
        pending = parts.pop()
        for part in parts:
            yield part + "\n"


@dataclass
class MetricStat:
    """Running statistics of one metric over a kernel's launches, in the base unit ``unit``."""

    unit: str
    count: int = 0
    total: float = 0.0
    minimum: float = math.inf
    maximum: float = -math.inf
    missing: int = 0

    def add(self, value: float | None) -> None:
        """Add one launch's value (``None``: the tool reported no data for it)."""
        if value is None:
            self.missing += 1
            return
        self.count += 1
        self.total += value
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)

    @property
    def mean(self) -> float | None:
        """The mean over the launches that had a value, or None when none had."""
        return self.total / self.count if self.count else None


@dataclass
class DurationStat:
    """Exact duration statistics in integer nanoseconds, in memory bounded by the number of
    *distinct* durations (a Counter), not by the number of launches."""

    counts: Counter[int] = field(default_factory=Counter)
    count: int = 0
    total_ns: int = 0

    def add(self, duration_ns: int) -> None:
        """Add one launch of ``duration_ns`` nanoseconds."""
        self.counts[duration_ns] += 1
        self.count += 1
        self.total_ns += duration_ns

    def summary(self) -> dict[str, float]:
        """Return ``count``, ``total_ns``, ``mean_ns``, ``median_ns``, ``min_ns``, ``max_ns``
        (the median of an even count is the mean of the two middle values)."""
        if not self.count:
            return {"count": 0.0, "total_ns": 0.0}
        keys = sorted(self.counts)
        lo_rank, hi_rank = (self.count - 1) // 2, self.count // 2
        seen, lo, hi = 0, None, None
        for key in keys:
            seen += self.counts[key]
            if lo is None and seen > lo_rank:
                lo = key
            if seen > hi_rank:
                hi = key
                break
        assert lo is not None and hi is not None
        return {
            "count": float(self.count),
            "total_ns": float(self.total_ns),
            "mean_ns": self.total_ns / self.count,
            "median_ns": (lo + hi) / 2,
            "min_ns": float(keys[0]),
            "max_ns": float(keys[-1]),
        }


@dataclass
class KernelSummary:
    """What a report says about one kernel (by name), aggregated over its launches.

    Attributes:
        name: the kernel's name as the tool printed it.
        launches: how many launches (profiled results) the report holds.
        grids / blocks: the distinct launch shapes, ``"(x, y, z)"``.
        streams: the distinct stream ids.
        metrics: metric key -> :class:`MetricStat` in base units (ncu).
        durations: exact duration statistics (nsys, PyTorch profiler, ncu ``gpu__time_duration``).
        texts: metric key -> the text an ncu metric printed as text has at its first launch
            (``Function Cache Configuration``: ``CachePreferNone``), recorded as a text fact.
    """

    name: str
    launches: int = 0
    grids: set[str] = field(default_factory=set)
    blocks: set[str] = field(default_factory=set)
    streams: set[str] = field(default_factory=set)
    metrics: dict[str, MetricStat] = field(default_factory=dict)
    durations: DurationStat = field(default_factory=DurationStat)
    texts: dict[str, str] = field(default_factory=dict)


@dataclass
class ProfileReport:
    """The result of parsing one report.

    Attributes:
        tool: ``ncu``, ``nsys``, ``torch.profiler``, ``ptxas``, ``cuobjdump``.
        tool_version: the version the report (or the capture) states; ``"unknown"`` is never
            produced: a parser that cannot find it raises EvidenceError.
        layout: which exact layout was recognised (``ncu-details-rules``, ``nsys-sqlite``, ...).
        layer: ``kernel`` or ``workload`` (the layer the report measured, R6).
        kernels: kernel name -> :class:`KernelSummary`, in first-seen order.
        facts: extra facts ``(name, value, unit, note)`` that are not per-kernel metrics.
        limitations: what the tool could not measure (R16), e.g. ``ERR_NVGPUCTRPERM``.
        attributes: descriptive strings (device name, locale, schema version, ...).
        rules: ncu rule results ``(kernel, section, rule, type, estimated speedup %,
            speedup type, description)``, one per rule row, in report order.
        duration_summaries: per-kernel duration statistics a tool gave already aggregated
            (nsys); see :meth:`durations`.
        added_facts: facts found since parser version 2 (ncu's compute capability, nsys's
            memory copies, sets and GPUs), kept apart from ``facts`` so that evidence recorded
            under version 1 re-derives as it was (see ``evidence.report_facts``).
        text_facts: text-valued facts since parser version 2 ``(name, text, note)``, e.g. an
            ncu metric printed as text (``Function Cache Configuration``) or a GPU's name.
        added_limitations: limitations found since parser version 2 (same reason).
    """

    tool: str
    tool_version: str
    layout: str
    layer: str = "kernel"
    kernels: dict[str, KernelSummary] = field(default_factory=dict)
    facts: list[tuple[str, float | None, str, str]] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    rules: list[tuple[str, str, str, str, float | None, str, str]] = field(default_factory=list)
    duration_summaries: dict[str, dict[str, float]] = field(default_factory=dict)
    added_facts: list[tuple[str, float | None, str, str]] = field(default_factory=list)
    text_facts: list[tuple[str, str, str]] = field(default_factory=list)
    added_limitations: list[str] = field(default_factory=list)

    def durations(self, name: str) -> dict[str, float]:
        """Duration statistics of kernel ``name`` in ns (see :meth:`DurationStat.summary`):
        those a tool reported as a summary, else those computed from its launches."""
        given = self.duration_summaries.get(name)
        if given is not None:
            return given
        return self.kernels[name].durations.summary()

    def kernel(self, name: str) -> KernelSummary:
        """Return the summary of kernel ``name``, creating it on first sight."""
        found = self.kernels.get(name)
        if found is None:
            found = self.kernels[name] = KernelSummary(name)
        return found


def read_head(path: str | Path, size: int = 4096) -> bytes:
    """Return the first ``size`` bytes of ``path`` (un-gzipped), for format detection."""
    with open_binary(path) as stream:
        try:
            return stream.read(size)
        except (OSError, EOFError) as exc:
            raise EvidenceError(
                f"{path}: the compressed stream is damaged ({exc})", hint=_HINT
            ) from None


def as_text_stream(data: bytes) -> io.BytesIO:
    """Wrap bytes as a binary stream (tests and fuzzing feed mutated reports this way)."""
    return io.BytesIO(data)
