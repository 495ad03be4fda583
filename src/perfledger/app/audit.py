"""The audit use case (``perfledger audit``, the MCP server's ``cli ["audit"]``; SPEC.md
sections 1 and 6): the auditor's replay (from zero, or from the clone's audit cache) (:func:`perfledger.commands.audit.replay.audit`)
and the exit status its findings call for."""

from __future__ import annotations

from typing import Any

from perfledger.commands.audit.replay import AuditReport, audit

#: Exit status of an audit with findings (integrity, SPEC.md section 6).
FINDINGS_EXIT = 5
#: Exit status of an audit of a ledger written by a newer perfledger (SPEC.md section 6).
NEWER_LEDGER_EXIT = 7


def audit_ledger(
    ledger: Any, allowed_signers: str | None = None, *, full: bool = False
) -> AuditReport:
    """Replay the open ``ledger``: every check of ``verify``, every decision re-decided
    against the state before it, evidence re-derived from its reports, and with
    ``allowed_signers`` (the auditor's allowed-signers file) every review's signature (R12,
    R17). The events up to a head this clone's audit cache holds a clean audit of (SPEC.md
    section 2, "Audit cache") are not re-checked unless ``full`` (``audit --full``): from
    zero. Returns the report (``report.ok``, ``report.findings`` each naming its event and
    rule); raises nothing for a finding, BadRequest for a missing signers file."""
    return audit(ledger, allowed_signers, use_cache=not full)


def audit_exit_code(report: AuditReport) -> int:
    """0 for a clean ``report``; 7 when a finding says a newer perfledger wrote the ledger, else
    5 (SPEC.md section 6)."""
    if report.ok:
        return 0
    newer = any(f.rule == "newer_ledger" for f in report.findings)
    return NEWER_LEDGER_EXIT if newer else FINDINGS_EXIT


__all__ = ["audit_exit_code", "audit_ledger"]
