"""Champions and their lineage (SPEC.md R13): the ``perfledger champion show|lineage`` read models.

The current champion of each Target (``original`` when none was chosen or after
``restore_original``) and the chain of champion decisions, each with the evidence behind it: the
experiment and its candidate, the target-stage samples and their verdict (estimate and CI of the
primary, guardrails), the evidence its claim cited, and the final audits of that champion.

Pure: reads a :class:`~perfledger.projections.workflow.WorkflowState`, never a store.
"""

from __future__ import annotations

import msgspec

from perfledger.events.workflow import ORIGINAL
from perfledger.projections.workflow import WorkflowState


class CurrentChampion(msgspec.Struct, kw_only=True):
    """A Target's current champion.

    Attributes:
        target_id, target_status: the Target and whether it is ``current`` or ``superseded``.
        champion: the experiment id, or ``original``.
        candidate_hash: the champion's content hash (the original's for ``original``).
        since_event: the event that chose it (None when never chosen).
        final_audit_status: the latest final audit's status, None before any.
        open_conflicts: ids of unresolved champion conflicts (they block decisions).
    """

    target_id: str
    target_status: str
    champion: str
    candidate_hash: str | None
    since_event: str | None
    final_audit_status: str | None
    open_conflicts: list[str]


class FinalAuditRef(msgspec.Struct, kw_only=True):
    """A final audit of a champion: its samples, status and primary estimate/CI (ratios)."""

    samples_id: str
    status: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None


class LineageStep(msgspec.Struct, kw_only=True):
    """One champion decision with the evidence behind it.

    Attributes:
        index: position in the Target's lineage (0 = first decision).
        decision: ``select``, ``restore_original`` or ``conflict_resolution``.
        champion: the experiment chosen, or ``original``.
        event_id: the deciding event.
        title, candidate_hash: the experiment's title and candidate (None for ``original``).
        samples_id: the target-stage samples behind the choice.
        n_pairs: valid pairs in those samples' verdict.
        verdict_status, estimate, ci_low, ci_high: the verdict (improvement ratios vs. its
            reference) behind the choice.
        reference: what the samples compared against (``original`` or an experiment id).
        guardrails: metric -> guardrail status in that verdict.
        claim_evidence: evidence ids the experiment's claim cited.
        final_audits: the final audits of this champion, in order.
    """

    index: int
    decision: str
    champion: str
    event_id: str
    title: str | None = None
    candidate_hash: str | None = None
    samples_id: str | None = None
    n_pairs: int | None = None
    verdict_status: str | None = None
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reference: str | None = None
    guardrails: dict[str, str] = msgspec.field(default_factory=dict)
    claim_evidence: list[str] = msgspec.field(default_factory=list)
    final_audits: list[FinalAuditRef] = msgspec.field(default_factory=list)


def current_champions(state: WorkflowState) -> list[CurrentChampion]:
    """Return the current champion of every Target, in freezing order."""
    out = []
    for target_id, target in state.targets.items():
        original = target.readiness.original.content_hash if target.readiness else None
        conflicts = [
            c.conflict_id
            for c in state.conflicts.values()
            if c.target_id == target_id and c.kind == "champion" and c.resolved_by is None
        ]
        out.append(
            CurrentChampion(
                target_id=target_id,
                target_status=target.status,
                champion=target.champion or ORIGINAL,
                candidate_hash=target.champion_hash if target.champion else original,
                since_event=target.lineage[-1].event_id if target.lineage else None,
                final_audit_status=target.final_audit_status,
                open_conflicts=conflicts,
            )
        )
    return out


def lineage(state: WorkflowState, target_id: str) -> list[LineageStep]:
    """Return the champion decisions of ``target_id`` with the evidence behind each.

    Raises: KeyError when the Target is unknown.
    """
    target = state.targets[target_id]
    steps = []
    for index, entry in enumerate(target.lineage):
        step = LineageStep(
            index=index, decision=entry.decision, champion=entry.champion, event_id=entry.event_id
        )
        experiment = state.experiments.get(entry.champion)
        if experiment is not None:
            created = experiment.created
            step.title = created.title
            step.candidate_hash = created.candidate.content_hash
            step.claim_evidence = sorted({e.evidence_id for e in created.claim.evidence})
            step.final_audits = [
                FinalAuditRef(
                    samples_id=audit.samples_id,
                    status=audit.status,
                    estimate=audit.primary.estimate,
                    ci_low=audit.primary.ci_low,
                    ci_high=audit.primary.ci_high,
                )
                for audit in state.final_audits.values()
                if audit.champion == entry.champion and audit.target_id == target_id
            ]
        step.samples_id = entry.samples_id
        verdict = state.verdicts.get(entry.samples_id or "")
        if verdict is not None:
            step.verdict_status = verdict.status
            step.estimate = verdict.primary.estimate
            step.ci_low = verdict.primary.ci_low
            step.ci_high = verdict.primary.ci_high
            step.n_pairs = verdict.primary.n_pairs
            step.guardrails = {g.metric: g.status for g in verdict.guardrails}
        samples = state.samples.get(entry.samples_id or "")
        if samples is not None:
            ref = samples.reference
            step.reference = ref.experiment_id if ref.kind == "champion" else ORIGINAL
        steps.append(step)
    return steps
