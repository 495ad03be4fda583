"""Profiler and compiler evidence as ``evidence.add`` requests (R6, R16): parse a report file or
profile a command with Nsight Compute, then decide (``--dry-run``) or record the request with
the raw report attached.

The use cases of ``perfledger evidence add --kind`` and ``perfledger evidence ncu``
(:mod:`perfledger.commands.cli.evidence` parses the options and prints the answer); the parsers
live in :mod:`perfledger.kernels.profilers`. Every parse failure is an EvidenceError (exit 2)
that appends nothing.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import blake3

from perfledger.api import Ledger
from perfledger.commands.registry import operations
from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.capture import DEFAULT_SECTIONS, capture_ncu, export_ncu_rep
from perfledger.kernels.profilers.evidence import evidence_request, file_hash
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.profilers.parse import parse_report
from perfledger.ledger.base import Artifact

#: Logical artifact name -> (bytes, media type): what an evidence event attaches.
RawFiles = dict[str, tuple[bytes, str]]


def parse_report_file(
    kind: str,
    report: str,
    data: bytes,
    media: str,
    *,
    tool_version: str | None = None,
    grouping: str | None = None,
    binary: str | None = None,
    binary_hash: str | None = None,
    ncu_path: str | None = None,
) -> tuple[Any, RawFiles]:
    """Parse the report file ``report`` (its bytes ``data``, media type ``media``) as ``kind``
    (``ncu``, ``nsys``, ``nsys-stats``, ``torch``, ``ptxas``, ``sass``); an ``.ncu-rep`` is
    exported to CSV with ``ncu --import`` first (``ncu_path``: the executable).

    Returns: the parsed report and the raw files to attach (``report``, and ``export.csv`` for
        an ``.ncu-rep``).
    Raises: EvidenceError (exit 2) for a report that does not parse.
    """
    raw: RawFiles = {"report": (data, media)}
    if kind == "ncu" and report.endswith(".ncu-rep"):
        csv_bytes, version_text = export_ncu_rep(report, ncu=ncu_path)
        parsed = parse_ncu_csv(
            io.BytesIO(csv_bytes),
            tool_version=tool_version or version_text,
            name=f"{report} (ncu --import)",
        )
        return parsed, {"report": (data, "application/octet-stream"),
                        "export.csv": (csv_bytes, "text/csv")}  # fmt: skip
    options: dict[str, Any] = {"tool_version": tool_version, "grouping": grouping}
    if kind == "sass":
        options["binary_hash"] = file_hash(binary) if binary else (binary_hash or "")
    return parse_report(kind, report, **options), raw


def profile_ncu(
    command: Sequence[str],
    *,
    ncu_path: str | None = None,
    sections: Sequence[str] = (),
    extra: Sequence[str] = (),
    timeout_s: float | None = None,
) -> tuple[Any, RawFiles, list[str], int]:
    """Run ``command`` under Nsight Compute (``sections``: default
    :data:`~perfledger.kernels.profilers.capture.DEFAULT_SECTIONS`; ``timeout_s`` in seconds)
    and parse its CSV; a non-zero exit status is kept as a limitation.

    Returns: the parsed report, the raw files (``report``, ``ncu-version.txt``), the argv run and
        its exit status.
    Raises: EvidenceError (exit 2) for output that does not parse, naming the exit status.
    """
    run = capture_ncu(
        list(command),
        ncu=ncu_path,
        sections=sections or DEFAULT_SECTIONS,
        extra=extra,
        timeout_s=timeout_s,
    )
    try:
        parsed = parse_ncu_csv(
            io.BytesIO(run.output), tool_version=run.version_text, name="ncu output"
        )
    except EvidenceError as exc:
        raise EvidenceError(
            f"{exc.message} (ncu exit status {run.exit_status})", hint=exc.hint
        ) from None
    if run.exit_status != 0:
        parsed.limitations.append(f"ncu exited with status {run.exit_status}")
    raw = {
        "report": (run.output, "text/csv"),
        "ncu-version.txt": (run.version_text.encode(), "text/plain"),
    }
    return parsed, raw, run.argv, run.exit_status


def record_evidence(
    ledger: Ledger,
    report: Any,
    context: dict[str, Any],
    raw: RawFiles,
    *,
    actor: str,
    idempotency_key: str | None = None,
    source_file: str = "",
    command: list[str] | None = None,
    exit_status: int | None = None,
    dry_run: bool = False,
) -> list[Any]:
    """Build the ``evidence.add`` request of a parsed ``report`` (``context``: evidence_id,
    applicability, layer, target_id, description, shapes, graph; the report's blake3 hash
    computed here) and record it with ``raw`` attached, or with ``dry_run`` decide it only.

    Returns: the appended envelopes, or (``dry_run``) the drafts it would append.
    Raises: BadRequest (2), RuleRefused (3), ConcurrentAppend (4).
    """
    body = evidence_request(
        report,
        evidence_id=context["evidence_id"],
        report_hash="blake3:" + blake3.blake3(raw["report"][0]).hexdigest(),
        applicability=context.get("applicability") or "diagnostic",
        layer=context.get("layer"),
        source_file=source_file,
        command=command,
        exit_status=exit_status,
        target_id=context.get("target_id"),
        description=context.get("description") or "",
        shapes=context.get("shapes") or "",
        graph=context.get("graph"),
    )
    if dry_run:
        return operations.preview(
            ledger, "evidence.add", body, actor=actor, idempotency_key=idempotency_key
        )
    artifacts = {name: Artifact(data, media) for name, (data, media) in raw.items()}
    return operations.execute(
        ledger,
        "evidence.add",
        body,
        actor=actor,
        idempotency_key=idempotency_key,
        artifacts=artifacts,
    )


__all__ = ["RawFiles", "parse_report_file", "profile_ncu", "record_evidence"]
