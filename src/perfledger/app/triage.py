"""Hotspot triage (``perfledger triage REPORT``; SPEC.md section 6, R6, R7): a PyTorch profiler
trace or an nsys SQLite export in, the kernel, known-path and action tables out
(:func:`perfledger.kernels.triage.record.run_triage`); with ``evidence_id`` the triage is
appended as an ``EvidenceRecorded`` (layer ``workload``; applicability ``same_boundary`` with
``of_target``, the caller's statement that the trace is of the Target's workload, else
``diagnostic``) with the trace, the mapping trace, the known-path file and the answer attached,
so that the audit re-derives it. A bad input appends nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from perfledger.commands.registry import operations
from perfledger.errors import BadRequest
from perfledger.kernels.triage.record import (
    ANSWER,
    REPORT,
    encode_answer,
    evidence_body,
    run_triage,
)
from perfledger.ledger.base import Artifact

#: The hint of a refused combination of options.
HINT = "`perfledger triage --help` gives the options; docs/triage.md what a recorded triage holds"


class TriageRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A triage of ``report`` with the caller's ``known_paths`` file, a graph-off ``mapping``
    trace, the ``top`` hotspots and the action table's ``denominator`` (``busy``, ``span``);
    ``evidence_id``: record it (on ``target_id``; ``of_target``: the trace is of its
    workload)."""

    report: str
    known_paths: str | None = None
    mapping: str | None = None
    top: int = 20
    denominator: str = "busy"
    evidence_id: str | None = None
    target_id: str | None = None
    of_target: bool = False


class Triaged(msgspec.Struct, frozen=True, kw_only=True):
    """The triage's ``answer`` (JSON builtins) and, where recorded, ``recorded`` (``{"event_id",
    "evidence_id", "applicability", "artifacts"}``)."""

    answer: dict[str, Any]
    recorded: dict[str, Any] | None = None


def triage_report(
    request: TriageRequest, *, open_ledger: Callable[[], Any], actor: Callable[[], str]
) -> Triaged:
    """Triage ``request.report`` and, with ``request.evidence_id``, record it (the ledger opened,
    then ``actor()`` asked who records). Raises: BadRequest for ``target_id``/``of_target``
    without ``evidence_id``, ``of_target`` without ``target_id``, a bad known-path file, option
    or mapping trace; EvidenceError for a trace that is not one (R6); RuleRefused (exit 3),
    ConcurrentAppend (exit 4) when recording."""
    if (request.target_id is not None or request.of_target) and request.evidence_id is None:
        raise BadRequest(
            "--target and --of-target describe a recorded triage: add --record ID", hint=HINT
        )
    if request.of_target and request.target_id is None:
        raise BadRequest(
            "--of-target needs --target T: the Target whose workload was traced", hint=HINT
        )
    answer, inputs = run_triage(
        request.report, known_paths=request.known_paths, mapping=request.mapping,
        top=request.top, denominator=request.denominator,
    )  # fmt: skip
    if request.evidence_id is None:
        return Triaged(answer=answer)
    body = evidence_body(answer, inputs[REPORT][0], evidence_id=request.evidence_id,
                         of_target=request.of_target, target_id=request.target_id)  # fmt: skip
    artifacts = {name: Artifact(data, media) for name, (data, media) in inputs.items()}
    artifacts[ANSWER] = Artifact(encode_answer(answer), "application/json")
    ledger = open_ledger()
    try:
        envelopes = operations.execute(ledger, "evidence.add", body, actor=actor(),
                                       artifacts=artifacts)  # fmt: skip
    finally:
        ledger.close()
    recorded = {"event_id": envelopes[0].id, "evidence_id": request.evidence_id,
                "applicability": body["applicability"], "artifacts": sorted(artifacts)}  # fmt: skip
    return Triaged(answer=answer, recorded=recorded)


__all__ = ["HINT", "TriageRequest", "Triaged", "triage_report"]
