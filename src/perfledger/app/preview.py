"""What ``measure`` shows when it returns: the verdict the recorded samples would get, derived by
the very decider that ``verdict record`` (or ``final-audit record``) runs, on the current head,
without appending anything (R12: verdicts are derived, never asserted; the agent still records
the verdict explicitly).

:func:`verdict_preview` returns the explanation (JSON) and the lines for people: the status and
the condition that decided it, the estimate and CI against the threshold, each case's per-call
figures in the primary's unit (reference -> candidate with CIs, improvement with its CI), the
guardrails and the notes, and the command that records it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.commands.registry import operations
from perfledger.errors import PerfledgerError
from perfledger.projections.verdict_explain import explain_verdict, verdict_lines

#: Who the preview's dry decision is made as (nothing is appended, nothing carries it).
PREVIEW_ACTOR = "perfledger-preview"


def verdict_request(stage: str, target_id: str, samples_id: str) -> tuple[str, dict[str, Any]]:
    """The operation and request that derive the verdict of ``samples_id`` at ``stage``: a final
    audit for ``final_audit`` samples (R13), a verdict otherwise (R12)."""
    if stage == "final_audit":
        return "final-audit.record", {"target_id": target_id, "samples_id": samples_id}
    return "verdict.record", {"samples_id": samples_id}


def verdict_preview(
    ledger: Any, stage: str, target_id: str, samples_id: str
) -> tuple[dict[str, Any] | None, list[str]]:
    """Decide, dry, the verdict of the samples ``samples_id`` just recorded in ``ledger``.

    Returns: ``(explanation, lines)``: the explanation of
    :func:`perfledger.projections.verdict_explain.explain_verdict` plus ``"record"`` (the
    command that records it), or None when the rules refuse it now (the lines then say why,
    e.g. an owed reconciliation, R14); never raises for a refusal.
    """

    op, body = verdict_request(stage, target_id, samples_id)
    command = f"perfledger {op.replace('.', ' ')} --samples {samples_id}" + (
        f" --target {target_id}" if op == "final-audit.record" else ""
    )
    try:
        drafts = operations.preview(ledger, op, body, actor=PREVIEW_ACTOR)
    except PerfledgerError as exc:
        return None, [f"verdict not derivable now: {exc.message}"]
    payload = msgspec.to_builtins(drafts[0].payload)
    what = "final audit" if op == "final-audit.record" else "verdict"
    lines = [f"the {what} these samples derive (not recorded; `{command}` records it):"]
    lines += [f"  {line}" for line in verdict_lines(payload)]
    return {**explain_verdict(payload), "record": command}, lines


__all__ = ["PREVIEW_ACTOR", "verdict_preview", "verdict_request"]
