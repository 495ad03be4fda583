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
from perfledger.projections.workflow import CHAMPION_CONFLICTS, TargetView, WorkflowState


class FinalAuditStanding(msgspec.Struct, kw_only=True):
    """Where the current champion stands with its final audit (R13, R18).

    Attributes:
        status: ``pass``, ``fail`` or ``inconclusive`` (the current champion's own latest final
            audit); ``none`` (no final audit of any champion of this Target); ``stale`` (the
            latest final audit is of an earlier champion: the current one has none).
        samples_id: the final-audit samples that status comes from (None for ``none``).
        champion: the champion those samples audited (an experiment id, or None).
        audited_status: the status that audit derived (for ``stale``: the earlier champion's).
    """

    status: str
    samples_id: str | None = None
    champion: str | None = None
    audited_status: str | None = None

    def text(self) -> str:
        """One phrase for people: ``pass``, ``none``, ``stale (pass of e1, samples e1-final)``,
        ``inconclusive (the champion is not confirmed ...)``."""
        if self.status == "stale":
            return (
                f"stale ({self.audited_status} of earlier champion {self.champion}, samples "
                f"{self.samples_id}; the current champion has none)"
            )
        if self.status == "inconclusive":  # R14: a champion's one final audit is final
            return "inconclusive (the champion is not confirmed; its one final audit stands)"
        return self.status


def final_audit_standing(state: WorkflowState, target: TargetView) -> FinalAuditStanding:
    """The current champion's final-audit standing (:class:`FinalAuditStanding`): a final audit
    counts only for the champion it audited (R13)."""
    if target.final_audit is not None and target.final_audit_status is not None:
        audit = state.final_audits.get(target.final_audit)
        return FinalAuditStanding(
            status=target.final_audit_status,
            samples_id=target.final_audit,
            champion=audit.champion if audit is not None else target.champion,
            audited_status=target.final_audit_status,
        )
    latest = state.final_audits.get(target.latest_final_audit or "")
    if latest is None:
        return FinalAuditStanding(status="none")
    return FinalAuditStanding(
        status="stale",
        samples_id=latest.samples_id,
        champion=latest.champion,
        audited_status=latest.status,
    )


class CurrentChampion(msgspec.Struct, kw_only=True):
    """A Target's current champion.

    Attributes:
        target_id, target_status: the Target and whether it is ``current`` or ``superseded``.
        champion: the experiment id, or ``original``.
        candidate_hash: the champion's content hash (the original's for ``original``).
        since_event: the event that chose it (None when never chosen).
        final_audit_status: the current champion's final-audit standing: ``pass``, ``fail``,
            ``inconclusive``, ``none`` or ``stale`` (:class:`FinalAuditStanding`, R13).
        final_audit: the standing in full (which samples, which champion they audited).
        open_conflicts: ids of unresolved champion conflicts (they block decisions).
    """

    target_id: str
    target_status: str
    champion: str
    candidate_hash: str | None
    since_event: str | None
    final_audit_status: str
    open_conflicts: list[str]
    final_audit: FinalAuditStanding | None = None


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
        decision: ``select``, ``restore_original``, ``conflict_resolution`` or ``demotion``
            (R13: a failed final audit demoted ``demoted``; ``champion`` is current again and
            ``samples_id`` names the failed audit's samples).
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
    demoted: str | None = None


def current_champions(state: WorkflowState) -> list[CurrentChampion]:
    """Return the current champion of every Target, in freezing order."""
    out = []
    for target_id, target in state.targets.items():
        original = target.readiness.original.content_hash if target.readiness else None
        conflicts = [
            c.conflict_id
            for c in state.conflicts.values()
            if c.target_id == target_id and c.kind in CHAMPION_CONFLICTS and c.resolved_by is None
        ]
        standing = final_audit_standing(state, target)
        out.append(
            CurrentChampion(
                target_id=target_id,
                target_status=target.status,
                champion=target.champion or ORIGINAL,
                candidate_hash=target.champion_hash if target.champion else original,
                since_event=target.lineage[-1].event_id if target.lineage else None,
                final_audit_status=standing.status,
                open_conflicts=conflicts,
                final_audit=standing,
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
        failed = state.final_audits.get(entry.samples_id or "")
        if entry.decision == "demotion" and failed is not None:
            step.demoted = failed.champion
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
