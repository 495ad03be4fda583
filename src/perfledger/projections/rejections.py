"""Rejected directions (SPEC.md R15, R18): the ``perfledger rejected`` read model.

Each rejection with the scope it closed (``implementation`` < ``integration`` < ``mechanism``), the
scope the experiment had preregistered (R9), why, and the evidence it cited. A closed scope says
what the next experiment may not retry: a closed implementation leaves the mechanism open, a closed
mechanism closes the direction.

Pure: reads a :class:`~perfledger.projections.workflow.WorkflowState`, never a store.
"""

from __future__ import annotations

import msgspec

from perfledger.projections.workflow import WorkflowState


class RejectedRow(msgspec.Struct, kw_only=True):
    """One rejected direction.

    Attributes:
        experiment_id, target_id, title: the rejected experiment.
        replaced_region, candidate_hash: what it tried to replace, and with what.
        closes: the scope the rejection closed (R15).
        preregistered: the scope the experiment preregistered a failure would reject (R9).
        preregistered_discriminating: the discriminating evidence it said a mechanism needs.
        still_open: what the rejection leaves open (``mechanism`` unless it was closed).
        reason: why it was rejected.
        samples_ids, evidence_ids, discriminating_evidence_ids: what it cited.
        local_proxy: the rejection rests on a local proxy (can never close a mechanism).
        last_verdict: status of the experiment's latest verdict, None without one.
    """

    experiment_id: str
    target_id: str
    title: str
    replaced_region: str
    candidate_hash: str
    closes: str
    preregistered: str
    preregistered_discriminating: str | None
    still_open: list[str]
    reason: str
    samples_ids: list[str]
    evidence_ids: list[str]
    discriminating_evidence_ids: list[str]
    local_proxy: bool
    last_verdict: str | None


_WIDER = {
    "implementation": ["integration", "mechanism"],
    "integration": ["mechanism"],
    "mechanism": [],
}


def rejected(state: WorkflowState, target_id: str | None = None) -> list[RejectedRow]:
    """Return every rejected direction in the order rejected (optionally of one Target)."""
    rows = []
    for experiment_id, rejection in state.rejections.items():
        if target_id is not None and rejection.target_id != target_id:
            continue
        experiment = state.experiments.get(experiment_id)
        if experiment is None:
            continue  # a rejection the fold could not place: audit reports it
        created = experiment.created
        verdicts = [state.verdicts[s] for s in experiment.verdicts if s in state.verdicts]
        rows.append(
            RejectedRow(
                experiment_id=experiment_id,
                target_id=rejection.target_id,
                title=created.title,
                replaced_region=created.claim.scope.replaced_region,
                candidate_hash=created.candidate.content_hash,
                closes=rejection.closes,
                preregistered=created.preregistration.rejects,
                preregistered_discriminating=created.preregistration.discriminating_evidence,
                still_open=list(_WIDER[rejection.closes]),
                reason=rejection.reason,
                samples_ids=list(rejection.samples_ids),
                evidence_ids=list(rejection.evidence_ids),
                discriminating_evidence_ids=list(rejection.discriminating_evidence_ids),
                local_proxy=rejection.local_proxy,
                last_verdict=verdicts[-1].status if verdicts else None,
            )
        )
    return rows
