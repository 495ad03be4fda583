"""Compiler evidence: ``nvcc -Xptxas -v`` resource reports and ``cuobjdump --dump-sass`` listings.

Both are read line by line; every line must match one of the known patterns, anything else is
refused (R6). SASS facts say which instructions the *compiled* code of a function contains and are
tied to the binary's hash (the caller supplies the binary or its hash): a string found in source
is never taken as proof of a compiled optimization (the seeds' rule), so perfledger records only
what the listing of that binary shows.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path
from typing import BinaryIO

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import MetricStat, ProfileReport, open_binary, text_lines

_NVCC_VERSION = re.compile(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", re.ASCII)
_PTXAS = re.compile(r"ptxas (info|warning|error)\s*: (.*)", re.ASCII)
_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+[a-z]?)'", re.ASCII)
_FUNC_PROPS = re.compile(r"Function properties for (\S+)", re.ASCII)
_PROPS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", re.ASCII
)
_GMEM = re.compile(r"(\d+) bytes gmem(?:, (\d+) bytes cmem\[(\d+)\])?", re.ASCII)
_COMPILE_TIME = re.compile(r"Compile time = [\d.]+ ms", re.ASCII)
_USED_ITEMS = (
    (re.compile(r"Used (\d+) registers", re.ASCII), "registers", "register/thread"),
    (re.compile(r"used (\d+) barriers", re.ASCII), "barriers", ""),
    (re.compile(r"(\d+) bytes smem", re.ASCII), "smem", "byte"),
    (re.compile(r"(\d+) bytes lmem", re.ASCII), "lmem", "byte"),
    (re.compile(r"(\d+) bytes cmem\[(\d+)\]", re.ASCII), "cmem", "byte"),
    (re.compile(r"(\d+) textures", re.ASCII), "textures", ""),
    (re.compile(r"(\d+) samplers", re.ASCII), "samplers", ""),
    (re.compile(r"(\d+) surfaces", re.ASCII), "surfaces", ""),
)


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass the unchanged output of `nvcc -Xptxas -v` (its resource report) or of `cuobjdump --dump-sass BINARY` (docs/profilers.md)"


def parse_nvcc_version(text: str) -> str:
    """Return the toolkit version (``13.0.88``) from ``nvcc --version`` output or a bare version.

    Raises: EvidenceError when none is found."""
    match = _NVCC_VERSION.search(text)
    if match:
        return match.group(2)
    bare = re.fullmatch(r"\s*(\d+\.\d+(?:\.\d+)?)\s*", text)
    if bare:
        return bare.group(1)
    raise EvidenceError(
        f"no nvcc version in {text.strip()[:80]!r}",
        hint="give what `nvcc --version` prints, or the version such as 13.0.88",
    )


def _source(source: str | Path | BinaryIO, label: str | None, default: str) -> tuple[BinaryIO, str]:
    name = label or (str(source) if isinstance(source, (str, Path)) else default)
    return (open_binary(source) if isinstance(source, (str, Path)) else source), name


def parse_ptxas(
    source: str | Path | BinaryIO, *, tool_version: str, name: str | None = None
) -> ProfileReport:
    """Parse ``nvcc -Xptxas -v`` output (ptxas's ``info`` lines).

    Args:
        source: a path or binary stream of the compiler's stderr.
        tool_version: ``nvcc --version`` output or the toolkit version.
        name: the source's name in messages.
    Returns: a kernel-layer report (layout ``ptxas-v``): per entry function (as a kernel) the
        metrics ``registers`` (register/thread), ``barriers``, ``smem``/``lmem``/``cmem``/
        ``stack``/``spill_stores``/``spill_loads`` (byte); ``attributes`` the target arch of each.
    Raises: EvidenceError for an unknown line, properties before any function, or no function.
    """
    version = parse_nvcc_version(tool_version)
    stream, label = _source(source, name, "ptxas output")
    report = ProfileReport("ptxas", version, "ptxas-v")
    current: str | None = None
    props_for: str | None = None
    try:
        for lineno, raw in enumerate(text_lines(stream, source=label), start=1):
            line = raw.strip()
            where = f"{label}: line {lineno}"
            if not line:
                continue
            if props_for is not None:
                match = _PROPS.fullmatch(line)
                if match is None:
                    raise EvidenceError(
                        f"{where}: expected the function properties, got {line!r}", hint=_HINT
                    )
                if props_for == current:
                    for key, value in zip(
                        ("stack", "spill_stores", "spill_loads"), match.groups(), strict=False
                    ):
                        _put(report, current, key, float(value), "byte", where)
                props_for = None
                continue
            match = _PTXAS.fullmatch(line)
            if match is None:
                raise EvidenceError(f"{where}: not a ptxas line: {line[:120]!r}", hint=_HINT)
            level, text = match.groups()
            if level != "info":
                report.limitations.append(f"ptxas {level}: {text[:300]}")
                continue
            if m := _COMPILING.fullmatch(text):
                current = m.group(1)
                report.kernel(current).launches = 0
                report.attributes[f"{current}/arch"] = m.group(2)
            elif m := _FUNC_PROPS.fullmatch(text):
                props_for = m.group(1)
            elif text.startswith("Used "):
                if current is None:
                    raise EvidenceError(
                        f"{where}: resource usage before any entry function", hint=_HINT
                    )
                for item in (part.strip() for part in text.split(",")):
                    for pattern, key, unit in _USED_ITEMS:
                        if m := pattern.fullmatch(item):
                            suffix = f"[{m.group(2)}]" if key == "cmem" else ""
                            _put(report, current, key + suffix, float(m.group(1)), unit, where)
                            break
                    else:
                        raise EvidenceError(f"{where}: unknown resource item {item!r}", hint=_HINT)
            elif _GMEM.fullmatch(text) or _COMPILE_TIME.fullmatch(text):
                continue
            else:
                raise EvidenceError(f"{where}: unknown ptxas info line {text[:120]!r}", hint=_HINT)
    finally:
        if isinstance(source, (str, Path)):
            stream.close()
    if props_for is not None:
        raise EvidenceError(
            f"{label}: the file ends inside a function's properties (truncated?)", hint=_HINT
        )
    if not report.kernels:
        raise EvidenceError(
            f"{label}: no 'Compiling entry function' line: not ptxas -v output?", hint=_HINT
        )
    return report


def _put(
    report: ProfileReport, kernel: str, key: str, value: float, unit: str, where: str = ""
) -> None:

    if not math.isfinite(value):  # float() of a 400-digit count is inf
        raise EvidenceError(f"{where or kernel}: {key} {value} is beyond float range", hint=_HINT)

    stat = report.kernel(kernel).metrics.setdefault(key, MetricStat(unit))
    stat.count, stat.total, stat.minimum, stat.maximum = 1, value, value, value


_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x[0-9a-f]{16} \*/", re.ASCII)
_ENCODING = re.compile(r"/\* 0x[0-9a-f]{16} \*/", re.ASCII)
_HEADER_KV = re.compile(
    r"(arch|code version|host|compile_size|ptxasOptions|identifier)\s*=.*", re.ASCII
)
_OPCODE = re.compile(r"(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.ASCII)


def parse_sass(
    source: str | Path | BinaryIO,
    *,
    tool_version: str,
    binary_hash: str,
    name: str | None = None,
) -> ProfileReport:
    """Parse a ``cuobjdump --dump-sass`` listing.

    Args:
        source: a path or binary stream of the listing.
        tool_version: the CUDA toolkit version (``nvcc --version`` output or ``13.0.88``).
        binary_hash: the hash of the binary that was dumped (``blake3:...``/``sha256:...``): the
            facts hold for that binary only.
        name: the source's name in messages.
    Returns: a kernel-layer report (layout ``cuobjdump-sass``): per function (as a kernel) one
        metric per instruction mnemonic (``op.FFMA``, ``op.LDG.E.CONSTANT``) counting its
        occurrences (unit ``inst``) in the compiled code, and ``attributes`` the arch of each.
    Raises: EvidenceError for an unknown line, an instruction outside a function, no function,
        or an empty binary hash.
    """
    if not re.fullmatch(r"[a-z0-9]+:[0-9a-f]{16,128}", binary_hash or ""):
        raise EvidenceError(
            "SASS facts must be tied to the binary's hash ('blake3:HEX' or 'sha256:HEX')",
            hint="pass --binary FILE (hashed here) or --binary-hash ALGO:HEX",
        )
    version = parse_nvcc_version(tool_version)
    stream, label = _source(source, name, "SASS listing")
    report = ProfileReport("cuobjdump", version, "cuobjdump-sass")
    report.attributes["binary_hash"] = binary_hash
    arch = ""
    function: str | None = None
    counts: Counter[str] = Counter()
    try:
        for lineno, raw in enumerate(text_lines(stream, source=label), start=1):
            line = raw.strip()
            where = f"{label}: line {lineno}"
            if not line or line in ("compressed", "..........") or set(line) == {"="}:
                continue
            if m := _INSTRUCTION.fullmatch(line):
                if function is None:
                    raise EvidenceError(f"{where}: an instruction outside any function", hint=_HINT)
                op = _OPCODE.match(m.group(2))
                if op is None:
                    raise EvidenceError(
                        f"{where}: unknown instruction text {m.group(2)[:80]!r}", hint=_HINT
                    )
                counts[op.group(1)] += 1
            elif _ENCODING.fullmatch(line):
                continue
            elif line.startswith("Function : "):
                _flush(report, function, counts)
                function = line[len("Function : ") :].strip()
                if not function:
                    raise EvidenceError(f"{where}: a function without a name", hint=_HINT)
                report.kernel(function)
                report.attributes[f"{function}/arch"] = arch
            elif line in ("Fatbin elf code:", "Fatbin ptx code:"):
                _flush(report, function, counts)
                function = None
            elif m2 := re.fullmatch(r"(?:code for|\.target)\s+(sm_\d+[a-z]?)", line):
                arch = m2.group(1)
            elif line.startswith(".headerflags") or _HEADER_KV.fullmatch(line):
                continue
            else:
                raise EvidenceError(
                    f"{where}: unknown SASS listing line {line[:120]!r}", hint=_HINT
                )
    finally:
        if isinstance(source, (str, Path)):
            stream.close()
    _flush(report, function, counts)
    if not report.kernels:
        raise EvidenceError(
            f"{label}: no 'Function :' in the listing: not cuobjdump --dump-sass?", hint=_HINT
        )
    return report


def _flush(report: ProfileReport, function: str | None, counts: Counter[str]) -> None:
    if function is not None:
        for op, count in sorted(counts.items()):
            _put(report, function, f"op.{op}", float(count), "inst")
    counts.clear()
