"""The one entry point that reads a profiler or compiler report of a given kind
(:func:`parse_report`), and its re-reading from recorded bytes for ``perfledger audit``
(:func:`reparse_report`, R6).

It imports every parser but the PyTorch trace's (numpy); :mod:`perfledger.kernels.profilers.evidence`
turns what they return into an ``evidence.add`` request.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import ProfileReport
from perfledger.kernels.profilers.compiler import parse_ptxas, parse_sass
from perfledger.kernels.profilers.evidence import KINDS
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.profilers.nsys import parse_nsys_sqlite, parse_nsys_stats_csv

#: A placeholder binary hash for re-parsing a SASS listing: the facts do not depend on it (the
#: hash is not part of the recorded payload).
_ANY_BINARY_HASH = "blake3:" + "0" * 64


def parse_report(kind: str, path: str | Path, **options: Any) -> ProfileReport:
    """Parse the report at ``path`` as ``kind`` (one of :data:`KINDS`).

    Options by kind: ``ncu``: ``tool_version`` (required), ``grouping``; ``nsys-stats``:
    ``tool_version``; ``torch``: ``tool_version`` (the torch version, optional); ``ptxas``:
    ``tool_version``; ``sass``: ``tool_version``, ``binary_hash``. ``nsys`` (SQLite) needs none.
    An ``.ncu-rep`` file is first exported with ``ncu --import`` (see
    :func:`perfledger.kernels.profilers.capture.export_ncu_rep`).

    Raises: EvidenceError for an unknown kind, a missing option or any parse failure.
    """
    version = options.get("tool_version")

    def need() -> str:
        if not version:
            raise EvidenceError(
                f"a {kind} report does not state its tool's version: pass --tool-version",
                hint="give the tool's own --version output or its version number",
            )
        return str(version)

    if kind == "ncu":
        return parse_ncu_csv(path, tool_version=need(), grouping=options.get("grouping", "none"))
    if kind == "nsys":
        return parse_nsys_sqlite(path)
    if kind == "nsys-stats":
        return parse_nsys_stats_csv(path, tool_version=need())
    if kind == "torch":
        from perfledger.kernels.profilers.torch_trace import parse_torch_trace  # noqa: PLC0415 (numpy via perfledger.kernels.profilers.torch_trace: only for a PyTorch trace)

        return parse_torch_trace(path, torch_version=version)
    if kind == "ptxas":
        return parse_ptxas(path, tool_version=need())
    if kind == "sass":
        return parse_sass(path, tool_version=need(), binary_hash=options.get("binary_hash", ""))
    raise EvidenceError(f"unknown report kind {kind!r}", hint="kinds: " + ", ".join(KINDS))


def reparse_report(
    kind: str, data: bytes, *, tool_version: str, grouping: str = "none"
) -> ProfileReport:
    """Parse the raw report bytes ``data`` as ``kind`` again, as it was recorded: with the
    recorded tool version and digit grouping (R6, for ``perfledger audit``).

    Raises: EvidenceError when ``data`` does not parse as a ``kind`` report.
    """

    options: dict[str, Any] = {"tool_version": tool_version or None}
    if kind == "ncu":
        options["grouping"] = grouping or "none"
    elif kind == "sass":
        options["binary_hash"] = _ANY_BINARY_HASH
    # the parsers read paths (nsys's SQLite must be a file): a private temporary file
    handle, path = tempfile.mkstemp(prefix="perfledger-report-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        return parse_report(kind, path, **options)
    finally:
        os.unlink(path)


__all__ = ["parse_report", "reparse_report"]
