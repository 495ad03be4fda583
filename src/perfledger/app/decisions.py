"""Recording a decision: the use case behind every workflow write (``perfledger target freeze``,
``verdict record``, ... and the MCP server's write tools; SPEC.md section 6).

One function, :func:`record_decision`, takes an operation's request (its msgspec struct, or the
same fields as a dict), takes what the request names at the edge (the original's snapshot for
``readiness.record``, the candidate's for ``experiment.create``: R11), runs the operation's
decider and appends its events, and returns a :class:`Recorded`. Every refusal comes from the
deciders (RuleRefused) or the request's validation (BadRequest); nothing is appended then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from perfledger.app.identity import readiness_edge
from perfledger.app.output_check import readiness_warning
from perfledger.app.snapshots import candidate_edge
from perfledger.commands.registry import operations
from perfledger.commands.workflow.review_signature import signature_hint, signed_content
from perfledger.errors import BadRequest
from perfledger.events.sshsig_blob import REVIEW_NAMESPACE, signature_key
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.ledger.sshsig import check_novalidate, sign
from perfledger.projections.verdict_explain import explain_verdict


class Recorded(msgspec.Struct, frozen=True):
    """What :func:`record_decision` did: ``op`` the operation's name; ``events`` the envelopes
    appended (first the decision's own event), or with ``dry_run`` the drafts the request would
    append now (an envelope already in the ledger where its idempotency key was used)."""

    op: str
    events: list[Any]
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        """The answer of ``--json`` and of the MCP write tools: ``{"op", "event_id", "kind",
        "lamport", "payload", "explanation"?, "events"}`` (the first event's fields beside the
        list; a verdict's explanation beside, never inside, its payload)."""
        events = [
            {"event_id": e.id, "kind": e.kind, "lamport": e.lamport,
             "payload": msgspec.to_builtins(e.payload)}
            for e in self.events
        ]  # fmt: skip
        first = events[0] if events else {}
        return {"op": self.op, **first, **explanation(first), "events": events}

    def dry_run_json(self) -> dict[str, Any]:
        """The answer of ``--dry-run``: the event(s) the request would append now, or the
        existing event an already used idempotency key would return; nothing appended
        (``{"op", "dry_run": true, "appended": false, "events": [{"kind", "payload",
        "existing_event_id"?}]}``)."""
        events = []
        for d in self.events:
            event = {"kind": d.kind, "payload": msgspec.to_builtins(d.payload)}
            if getattr(d, "id", None):  # an envelope already in the ledger (idempotency key)
                event["existing_event_id"] = d.id
            events.append(event)
        return {"op": self.op, "dry_run": True, "appended": False, "events": events}


def explanation(event: dict[str, Any]) -> dict[str, Any]:
    """For a verdict, ``{"explanation": ...}``: the one condition that decided its status, with
    the threshold used (:func:`perfledger.projections.verdict_explain.explain_verdict`); beside,
    never inside, the recorded payload. Empty for other events."""
    if event.get("kind") != "VerdictRecorded":
        return {}
    return {"explanation": explain_verdict(event["payload"])}


def outside_samples_only(body: Any) -> None:
    """R5: a pairs table given to ``samples.record`` was measured outside perfledger; only
    ``perfledger measure`` records samples as measured by perfledger (with their raw table).
    Raises: BadRequest for a body whose provenance claims otherwise."""
    provenance = body.get("provenance") if isinstance(body, dict) else None
    if isinstance(provenance, dict) and provenance.get("source") == "perfledger":
        raise BadRequest(
            "`samples record` records a pairs table from outside perfledger: its provenance "
            "cannot say `perfledger`",
            hint="measure with `perfledger measure workload|kernel`, or drop `provenance`",
        )


def good_review_signature(body: Any) -> None:
    """R12, R17: a signed ``review.record`` request's signature is a good one of the review's
    canonical content by the key it carries (``ssh-keygen -Y check-novalidate``; whose key that
    is, ``perfledger audit --allowed-signers`` checks). An unsigned or unreadable request is
    left to the decider. Raises: BadRequest naming the key when it is not."""
    signature = body.get("signature") if isinstance(body, dict) else None
    if not isinstance(signature, str):
        return
    req = operations.validate("review.record", body)
    armored = signature.encode()
    _, fingerprint, _ = signature_key(armored)
    if not check_novalidate(signed_content(req), armored, namespace=REVIEW_NAMESPACE):
        raise BadRequest(
            f"signature: not a good signature of this review's content by its key {fingerprint} "
            "(signed before a field changed, or signed other content)",
            hint=signature_hint(),
        )


def record_decision(
    ledger: Any,
    op: str,
    request: Any,
    *,
    actor: str,
    idempotency_key: str | None = None,
    dry_run: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Recorded:
    """Decide and append one request of operation ``op`` (``"target.freeze"``, ...) on the open
    ``ledger`` as ``actor``; with ``dry_run`` decide and append nothing. ``request`` is the
    operation's request struct (:mod:`perfledger.commands.workflow.requests`) or a dict of its
    fields. ``warn`` receives the warnings a person should see (``readiness.record`` whose
    outputs the subject alone would judge, R5); None: not shown.

    Raises: BadRequest (an unknown operation, an invalid request, samples whose provenance
    claims perfledger measured them, R5, a review whose signature is not good, R12/R17), RuleRefused (the rule that refuses it),
    ConcurrentAppend (another writer appended first)."""
    body = request if isinstance(request, dict) else msgspec.to_builtins(request)
    if op == "samples.record":
        outside_samples_only(body)
    if op == "review.record":
        good_review_signature(body)
    artifacts: dict[str, Any] = {}
    if op == "readiness.record":  # original.subject -> its snapshot (R11)
        if warn is not None:
            target = (
                ledger.state().targets.get(body.get("target_id"))
                if isinstance(body, dict)
                else None
            )
            primary = target.definition.primary.name if target is not None else None
            # R5: correctness judged by the subject alone (the worker protocol seeds every call)
            text = readiness_warning(body, observed_primary=primary in OBSERVED_METRICS)
            if text is not None:
                warn(f"warning: {text}")
            flag = foreign_flag_warning(body)
            if flag is not None:
                warn(f"warning: {flag}")
        body, artifacts = readiness_edge(ledger, body)
    if op == "experiment.create":  # candidate.subject -> its snapshot (R11)
        body, artifacts = candidate_edge(ledger, body)
    if dry_run:
        drafts = operations.preview(ledger, op, body, actor=actor, idempotency_key=idempotency_key)
        return Recorded(op, list(drafts), dry_run=True)
    envelopes = operations.execute(
        ledger, op, body, actor=actor, idempotency_key=idempotency_key,
        artifacts=artifacts or None,
    )  # fmt: skip
    return Recorded(op, list(envelopes))


def foreign_flag_warning(body: Any) -> str | None:
    """The warning for a readiness request that sets ``statistics.allow_explained_foreign_activity``
    (R17): from ``VerdictRecorded`` schema 11 and ``FinalAuditRecorded`` 14 the flag decides
    nothing (a value the agent who wants the result types is no evidence), and no measurement of
    the original honours it; the readiness is still recorded (its schema is unchanged). None
    otherwise."""
    statistics = body.get("statistics") if isinstance(body, dict) else None
    if not (isinstance(statistics, dict) and statistics.get("allow_explained_foreign_activity")):
        return None
    return (
        "statistics.allow_explained_foreign_activity is ignored (R17): foreign activity on more "
        "than 20 % of a formal stage's pairs is lifted only by a review of those samples by an "
        "actor other than the experiment's (`perfledger review record`), and a baseline or A/A "
        "over that share is refused whatever the readiness says; measure on a quieter host"
    )


def signed_review_request(body: dict[str, Any], key_path: str) -> dict[str, Any]:
    """``body`` (a ``review.record`` request) with ``signature``: the reviewer's SSH signature,
    made with the private key at ``key_path`` in the ``perfledger-review`` namespace, over the
    review's canonical content (R12, R17). Raises: BadRequest for an invalid request or a key
    ssh-keygen cannot sign with."""
    unsigned = {k: v for k, v in body.items() if k != "signature"}
    content = signed_content(operations.validate("review.record", unsigned))
    return {**unsigned, "signature": sign(content, key_path, namespace=REVIEW_NAMESPACE).decode()}


__all__ = [
    "Recorded",
    "explanation",
    "foreign_flag_warning",
    "good_review_signature",
    "outside_samples_only",
    "record_decision",
    "signed_review_request",
]
