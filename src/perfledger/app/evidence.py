"""Profiler and compiler evidence as ``evidence.add`` requests (R6, R16): parse a report file or
profile a command with Nsight Compute, then decide (``--dry-run``) or record the request with
the raw report attached.

The use cases of ``perfledger evidence add --kind`` (:func:`add_report`) and ``perfledger
evidence ncu`` (:func:`add_ncu_profile`); :mod:`perfledger.commands.cli.evidence` parses the
options and prints the answer, and the parsers live in :mod:`perfledger.kernels.profilers`.
Every parse failure is an EvidenceError (exit 2) that appends nothing.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import blake3
import msgspec

from perfledger.api import Ledger
from perfledger.app.decisions import Recorded
from perfledger.commands.registry import operations
from perfledger.errors import BadRequest, EvidenceError
from perfledger.kernels.profilers.capture import DEFAULT_SECTIONS, capture_ncu, export_ncu_rep
from perfledger.kernels.profilers.evidence import evidence_request, file_hash
from perfledger.kernels.profilers.ncu import parse_ncu_csv
from perfledger.kernels.profilers.parse import parse_report
from perfledger.ledger.base import Artifact

#: Logical artifact name -> (bytes, media type): what an evidence event attaches.
RawFiles = dict[str, tuple[bytes, str]]
#: Report kind -> the media type of its raw file.
MEDIA = {
    "ncu": "text/csv",
    "nsys": "application/vnd.sqlite3",
    "nsys-stats": "text/csv",
    "torch": "application/json",
    "ptxas": "text/plain",
    "sass": "text/plain",
}
#: Request fields that a parsed report's evidence takes besides the report (its context).
CONTEXT_FIELDS = ("evidence_id", "layer", "applicability", "target_id", "description", "shapes",
                  "graph")  # fmt: skip
#: The hint of a malformed evidence request.
EVIDENCE_HINT = (
    "`perfledger evidence add --help` gives the forms; docs/profilers.md the report kinds"
)


def evidence_context(body: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The context of a parsed report's evidence (R6): the request's ``body`` (only
    :data:`CONTEXT_FIELDS`), each field of ``overrides`` that is not None over it.
    Raises: BadRequest (exit 2) for another field, or without an evidence id."""
    unknown = sorted(set(body) - set(CONTEXT_FIELDS))
    if unknown:
        raise BadRequest(
            f"with --kind, the request may hold only {', '.join(CONTEXT_FIELDS)}; got {unknown}",
            hint=EVIDENCE_HINT,
        )
    context = {**body, **{k: v for k, v in overrides.items() if v is not None}}
    if not context.get("evidence_id"):
        raise BadRequest("an evidence id is required: --evidence-id ID", hint=EVIDENCE_HINT)
    return context


def read_report(path: str) -> bytes:
    """The bytes of the report file ``path``. Raises: EvidenceError (exit 2)."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise EvidenceError(f"cannot read {path!r}: {exc.strerror}", hint=EVIDENCE_HINT) from None


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


class AddReport(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to record a profiler or compiler report as evidence (R6, R16).

    Attributes:
        kind: ``ncu``, ``nsys``, ``nsys-stats``, ``torch``, ``ptxas`` or ``sass``.
        report: the report file (an ``.ncu-rep`` is exported with ``ncu --import`` first).
        context: the request's context fields (:data:`CONTEXT_FIELDS`).
        overrides: context fields given apart (the CLI's flags; None: not given).
        tool_version: the tool's version text (None: from the report where it says).
        grouping: ncu digit grouping, ``none`` or ``en_US``.
        binary, binary_hash: sass: the dumped binary (hashed here), or its ``ALGO:HEX``.
        ncu_path: the ncu executable (for an ``.ncu-rep``).
        actor, idempotency_key: who records; a retry-safe key.
        dry_run: decide only, append nothing.
    """

    kind: str
    report: str
    context: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    tool_version: str | None = None
    grouping: str | None = None
    binary: str | None = None
    binary_hash: str | None = None
    ncu_path: str | None = None
    actor: str
    idempotency_key: str | None = None
    dry_run: bool = False


class NcuProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to profile ``command`` with Nsight Compute and record the result (R6, R16):
    ``sections`` (none: the default ones), ``extra`` ncu arguments, ``timeout_s`` (seconds),
    and ``context``/``overrides``, ``actor``, ``idempotency_key`` as :class:`AddReport`'s."""

    command: list[str]
    context: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    ncu_path: str | None = None
    sections: list[str] = []
    extra: list[str] = []
    timeout_s: float | None = None
    actor: str
    idempotency_key: str | None = None


class EvidenceAdded(msgspec.Struct, kw_only=True):
    """The parsed ``report`` and the ``events`` appended (or, on a dry run, the drafts)."""

    report: Any
    events: list[Any]
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` answer: :meth:`perfledger.app.decisions.Recorded.to_json` of the
        events, or on a dry run :meth:`~perfledger.app.decisions.Recorded.dry_run_json`."""
        recorded = Recorded("evidence.add", self.events, dry_run=self.dry_run)
        return recorded.dry_run_json() if self.dry_run else recorded.to_json()


def _added(
    open_ledger: Callable[[], Any],
    request: AddReport | NcuProfile,
    context: dict[str, Any],
    parsed: Any,
    raw: RawFiles,
    **kw: Any,
) -> EvidenceAdded:
    """Record ``parsed`` with its ``raw`` files as ``request``'s actor under its idempotency
    key (``kw``: :func:`record_evidence`'s other arguments), on a ledger opened only now."""
    ledger = open_ledger()
    try:
        events = record_evidence(
            ledger, parsed, context, raw, actor=request.actor,
            idempotency_key=request.idempotency_key, **kw,
        )  # fmt: skip
    finally:
        ledger.close()
    return EvidenceAdded(report=parsed, events=events, dry_run=kw.get("dry_run", False))


def add_report(request: AddReport, *, open_ledger: Callable[[], Any]) -> EvidenceAdded:
    """Parse ``request.report`` and record it (or decide it, ``dry_run``) with the raw report
    attached; the ledger is opened only once the report parsed (closed before returning).
    Raises: BadRequest (exit 2: the context); EvidenceError (exit 2: an unreadable report, one
    that does not parse); RuleRefused (exit 3); ConcurrentAppend (exit 4)."""
    context = evidence_context(request.context, request.overrides)
    parsed, raw = parse_report_file(
        request.kind, request.report, read_report(request.report), MEDIA[request.kind],
        tool_version=request.tool_version, grouping=request.grouping, binary=request.binary,
        binary_hash=request.binary_hash, ncu_path=request.ncu_path,
    )  # fmt: skip
    return _added(open_ledger, request, context, parsed, raw,
                  source_file=request.report, dry_run=request.dry_run)  # fmt: skip


def add_ncu_profile(request: NcuProfile, *, open_ledger: Callable[[], Any]) -> EvidenceAdded:
    """Profile ``request.command`` with Nsight Compute and record the facts, ncu's version,
    the command and its exit status (:func:`profile_ncu`, :func:`record_evidence`).
    Raises: BadRequest (exit 2: the context); EvidenceError (exit 2: ncu's output does not
    parse); RuleRefused (exit 3); ConcurrentAppend (exit 4)."""
    context = evidence_context(request.context, request.overrides)
    parsed, raw, argv, status = profile_ncu(
        request.command,
        ncu_path=request.ncu_path,
        sections=request.sections,
        extra=request.extra,
        timeout_s=request.timeout_s,
    )
    return _added(open_ledger, request, context, parsed, raw, command=argv, exit_status=status)


__all__ = [
    "CONTEXT_FIELDS",
    "MEDIA",
    "AddReport",
    "EvidenceAdded",
    "NcuProfile",
    "RawFiles",
    "add_ncu_profile",
    "add_report",
    "evidence_context",
    "parse_report_file",
    "profile_ncu",
    "read_report",
    "record_evidence",
]
