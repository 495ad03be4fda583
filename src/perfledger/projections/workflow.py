"""The workflow projection: targets, readiness, baselines, experiments, samples, verdicts,
champions, local results, rejections, reconciliations and conflicts (SPEC.md sections 3-4).

:class:`WorkflowState` extends the ledger-level :class:`~perfledger.projections.ledger_state.
LedgerState` (its fields and its :func:`~perfledger.projections.ledger_state.evolve` are kept), so
``perfledger state`` and ``verify``'s ``state_hash`` cover both. Like that projection, :func:`evolve`
updates the state it is given and returns it (linear use).

The fold never refuses: rules are enforced by the deciders before an append
(:mod:`perfledger.commands`). An event that the fold cannot place (a reference to an unknown id,
written around the deciders, say) is noted in ``anomalies`` and otherwise ignored; concurrent
decisions that the rules forbid together (two champions chosen from the same previous one on two
machines, the same id frozen twice) become entries of ``conflicts`` (SPEC.md section 2), which
block further decisions of that kind until a ``ConflictResolved``.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from perfledger.events.kinds import RecordedEvent
from perfledger.events.workflow import (
    ORIGINAL,
    R13_FAILED_AUDIT_DEMOTES,
    R13_ONE_FINAL_AUDIT,
    R14_CODE_RESULTS_CHAMPION,
    R14_UNACCOUNTED_VERDICT,
    R14_UNJUDGED_BLOCKS_CHAMPION,
    ActivityExplained,
    BaselineRecorded,
    CandidateRejected,
    ChampionSelected,
    ConflictResolved,
    DerivedVerdict,
    EvidenceRecorded,
    ExperimentCreated,
    FinalAuditRecorded,
    FormalRunStarted,
    HandoffRecorded,
    HostAdviceRecorded,
    LocalResultRecorded,
    MetricAuditRecorded,
    ReadinessRecorded,
    ReconciliationRecorded,
    Reference,
    ResolutionEstimated,
    SamplesRecorded,
    TargetDefinition,
    TargetFrozen,
    TargetSuperseded,
    UpstreamCheckRecorded,
    VerdictRecorded,
)
from perfledger.projections import ledger_state
from perfledger.projections import loop as loop_projection
from perfledger.projections import reviews as review_projection
from perfledger.projections.ledger_state import LedgerState

#: Bumped whenever the meaning of the workflow state changes (part of the cache key).
#: 2: samples kept without their pairs (SamplesView).
#: 3: supersession and reconciliation conflicts (from sync), Target status ``contested``.
#: 4: a final audit belongs to the champion it audited (R13); screens and ``ActivityExplained``
#: owe or clear obligations (R14, R17).
#: 5: started formal runs (R14) and champions demoted by a failed final audit (R13).
#: 6: ``unaccounted_champion`` conflicts and the worse of a champion's final audits (R14).
#: 7: the resolution in force when a formal run started, kept for its verdict (R4).
PROJECTION_VERSION = 7

ExperimentStage = Literal["created", "screen", "target", "final_audit"]
ExperimentStatus = Literal[
    "open", "screen_failed", "passed", "failed", "inconclusive", "champion", "rejected"
]


class ChampionEntry(msgspec.Struct, kw_only=True):
    """One step of a Target's champion lineage: the experiment (``original`` after a restore),
    the target-stage samples that supported it, the event that chose it."""

    champion: str
    samples_id: str | None
    event_id: str
    decision: str


class PendingReconciliation(msgspec.Struct, kw_only=True):
    """A target result outside its claim's predicted interval, not yet reconciled (R14).

    Attributes:
        experiment_id, samples_id: the contradicted experiment and the samples of the result.
        predicted_low, predicted_high: the claim's predicted improvement (ratios).
        ci_low, ci_high: the measured CI of the improvement (ratios).
    """

    experiment_id: str
    samples_id: str
    predicted_low: float
    predicted_high: float
    ci_low: float | None
    ci_high: float | None


class TargetView(msgspec.Struct, kw_only=True):
    """A Target and what hangs off it.

    Attributes:
        definition: the frozen definition (R1).
        status: ``current``, ``superseded``, or ``contested`` (one of two concurrent
            supersessions of the same Target, until a ``ConflictResolved`` keeps one);
            superseded_by / supersedes: the ids around it.
        readiness: the latest readiness (R2); metric_audits: metric -> latest audit (R3).
        diagnostic_only: a metric audit found a mismatch (R3) or the Target is diagnostic (R2).
        baseline, resolution: R4 (``baseline``: the latest measured one, declared_baseline).
        champion: the current champion's experiment id, None for the original (R13).
        champion_hash: the current champion's content hash, None for the original.
        lineage: every champion decision, in order.
        experiments: ids of the Target's experiments, in creation order.
        pending: experiment id -> unreconciled contradiction (R14).
        final_audit, final_audit_status: samples id and status of the latest final audit of the
            *current* champion; None when the current champion has none (R13: a final audit
            belongs to the champion it audited, a newer champion has none until its own).
        latest_final_audit: samples id of the latest final audit of any champion of this
            Target (an earlier champion's is stale for the current one).
    """

    definition: TargetDefinition
    frozen_event: str
    status: Literal["current", "superseded", "contested"] = "current"
    superseded_by: str | None = None
    supersedes: str | None = None
    readiness: ReadinessRecorded | None = None
    metric_audits: dict[str, MetricAuditRecorded] = msgspec.field(default_factory=dict)
    diagnostic_only: bool = False
    baseline: BaselineRecorded | None = None
    resolution: ResolutionEstimated | None = None
    champion: str | None = None
    champion_hash: str | None = None
    lineage: list[ChampionEntry] = msgspec.field(default_factory=list)
    experiments: list[str] = msgspec.field(default_factory=list)
    pending: dict[str, PendingReconciliation] = msgspec.field(default_factory=dict)
    final_audit: str | None = None
    final_audit_status: str | None = None
    latest_final_audit: str | None = None
    #: experiments whose champion a failed final audit demoted (R13, from
    #: :data:`~perfledger.events.workflow.R13_FAILED_AUDIT_DEMOTES`): never champion again;
    #: unset (not encoded, so older states hash as before) until the first demotion
    demoted: list[str] | msgspec.UnsetType = msgspec.UNSET
    #: the latest resolution that decides, once a declared one was recorded (R4, from
    #: :data:`~perfledger.events.workflow.R4_MEASURED_RESOLUTION`: a typed resolution is
    #: recorded as declared and decides nothing); unset (not encoded, so older states hash as
    #: before) until the first declared one, :attr:`resolution` deciding until then
    decided_resolution: ResolutionEstimated | msgspec.UnsetType | None = msgspec.UNSET
    #: the latest declared (typed) baseline (R4, from
    #: :data:`~perfledger.events.workflow.R4_MEASURED_BASELINE`): recorded and shown, deciding
    #: nothing; :attr:`baseline` is the latest measured one (or one recorded before the rule).
    #: Unset (not encoded, so older states hash as before) until the first declared one
    declared_baseline: BaselineRecorded | msgspec.UnsetType = msgspec.UNSET

    @property
    def measured_resolution(self) -> ResolutionEstimated | None:
        """The resolution in force for every decision (R4): the latest one that is not
        declared (None when only declared ones are recorded)."""
        if self.decided_resolution is msgspec.UNSET:
            return self.resolution
        return self.decided_resolution

    @property
    def resolution_in_force(self) -> ResolutionEstimated | None:
        """The resolution verdicts are derived with: the measured one, else a declared one
        (whose verdicts cannot pass, R4), else None."""
        return self.measured_resolution or self.resolution


class ExperimentView(msgspec.Struct, kw_only=True):
    """An experiment: its creation (claim, preregistration), stage and status, its samples by
    stage (ids in order), its verdicts (samples ids), its rejection, if any, and the schema
    version its creation was recorded under (``rules_schema``, R14)."""

    created: ExperimentCreated
    event_id: str
    stage: ExperimentStage = "created"
    status: ExperimentStatus = "open"
    samples: dict[str, list[str]] = msgspec.field(default_factory=dict)
    verdicts: list[str] = msgspec.field(default_factory=list)
    rejection: CandidateRejected | None = None
    reconciliations: int = 0
    #: The schema version its ExperimentCreated was recorded under: from
    #: :data:`~perfledger.events.workflow.R14_STATED_INTERVAL` on, a failed screen of a claim
    #: predicting at least the minimum effect owes a reconciliation (R14).
    rules_schema: int = 1


class Conflict(msgspec.Struct, kw_only=True):
    """Concurrent decisions the rules forbid together (SPEC.md section 2).

    Attributes:
        conflict_id: the first 16 hex characters of the later event's id.
        target_id: the Target concerned.
        kind: ``champion`` (two selections from the same previous champion),
            ``owed_champion`` (a champion selected, from ``ChampionSelected`` schema 3, while
            a result of its Target owed a reconciliation on another machine, R14: the
            selection is not applied; options are the champion in place and the one selected),
            ``supersession`` (two supersessions of one Target: options are the two new Target
            ids), ``reconciliation`` (an experiment created on a Target whose contradicted
            result was pending reconciliation on another machine, R14: options are the
            experiment id and ``withdraw``) or ``duplicate_id``.
        options: what the two decisions chose (experiment ids, Target ids, ``original``,
            ``withdraw``).
        event_ids: the conflicting events.
        resolved_by: the ``ConflictResolved`` event id, None while the conflict blocks.
        kept: what the resolution kept.
    """

    conflict_id: str
    target_id: str
    kind: str
    options: list[str]
    event_ids: list[str]
    resolved_by: str | None = None
    kept: str | None = None


class SamplesView(msgspec.Struct, kw_only=True):
    """A ``SamplesRecorded`` as the state keeps it: everything the rules read, without the
    pairs. The pairs stay in the event (``event_id``), read back by id only where a verdict is
    derived (R12), so that the state does not grow with every sample value.

    Attributes:
        event_id: the SamplesRecorded event holding the pairs.
        n_pairs: how many pairs it recorded.
        (the other fields are those of :class:`~perfledger.events.workflow.SamplesRecorded`)
    """

    event_id: str
    samples_id: str
    target_id: str
    experiment_id: str
    stage: str
    reference: Reference
    candidate_hash: str
    test_set_hash: str
    environment_id: str
    units: dict[str, str]
    n_pairs: int
    ref_failures: int
    cand_failures: int
    unexplained_activity: int
    #: test case -> measured ratio beyond the Target's plausible bound (R12, samples of schema
    #: 8 on); unset (not encoded, so older states hash as before) when none is
    implausible: dict[str, float] | msgspec.UnsetType = msgspec.UNSET


class WorkflowState(LedgerState, kw_only=True):
    """The folded state of a ledger: the ledger-level fields of :class:`LedgerState` plus the
    workflow (every map keyed by the caller-chosen id)."""

    targets: dict[str, TargetView] = msgspec.field(default_factory=dict)
    experiments: dict[str, ExperimentView] = msgspec.field(default_factory=dict)
    samples: dict[str, SamplesView] = msgspec.field(default_factory=dict)
    verdicts: dict[str, VerdictRecorded] = msgspec.field(default_factory=dict)
    evidence: dict[str, EvidenceRecorded] = msgspec.field(default_factory=dict)
    upstream_checks: dict[str, UpstreamCheckRecorded] = msgspec.field(default_factory=dict)
    local_results: dict[str, LocalResultRecorded] = msgspec.field(default_factory=dict)
    rejections: dict[str, CandidateRejected] = msgspec.field(default_factory=dict)
    reconciliations: list[ReconciliationRecorded] = msgspec.field(default_factory=list)
    final_audits: dict[str, FinalAuditRecorded] = msgspec.field(default_factory=dict)
    host_advice: dict[str, HostAdviceRecorded] = msgspec.field(default_factory=dict)
    handoffs: list[HandoffRecorded] = msgspec.field(default_factory=list)
    conflicts: dict[str, Conflict] = msgspec.field(default_factory=dict)
    anomalies: list[str] = msgspec.field(default_factory=list)
    #: samples id -> explanations of foreign activity in its windows, in order (R17).
    explanations: dict[str, list[ActivityExplained]] = msgspec.field(default_factory=dict)
    #: The kernel-iteration loop's runs (R19-R25), see :mod:`perfledger.projections.loop`.
    loop: loop_projection.LoopState = msgspec.field(default_factory=loop_projection.LoopState)
    #: Review records and unresolved dissent, see :mod:`perfledger.projections.reviews`.
    reviews: review_projection.ReviewState = msgspec.field(
        default_factory=review_projection.ReviewState
    )
    #: samples id -> the formal run started to record it (R14, ``FormalRunStarted``); unset
    #: (not encoded, so ledgers without one hash as before) until the first run starts.
    formal_runs: dict[str, FormalRunStarted] | msgspec.UnsetType = msgspec.UNSET
    #: samples id -> the resolution in force when its formal run started, kept for a run
    #: still unjudged when a later resolution is recorded on its Target (R4, from
    #: :data:`~perfledger.events.workflow.R4_RESOLUTION_AT_RUN_VERDICT`: a stage is judged
    #: with the resolution committed before it was measured). Unset (not encoded, so older
    #: states hash as before) until a resolution follows an unjudged run.
    run_resolutions: dict[str, ResolutionEstimated] | msgspec.UnsetType = msgspec.UNSET


def initial_state() -> WorkflowState:
    """Return the state of an empty ledger."""
    return WorkflowState()


def open_conflicts(
    state: WorkflowState, target_id: str, kind: str | tuple[str, ...]
) -> list[Conflict]:
    """Return the unresolved conflicts of ``kind`` (one, or any of several) on ``target_id``
    (they block decisions)."""
    kinds = (kind,) if isinstance(kind, str) else kind
    return [
        c
        for c in state.conflicts.values()
        if c.target_id == target_id and c.kind in kinds and c.resolved_by is None
    ]


def formal_runs(state: WorkflowState) -> dict[str, FormalRunStarted]:
    """The started formal runs by samples id (R14), empty when none started."""
    runs = state.formal_runs
    return {} if isinstance(runs, msgspec.UnsetType) else runs


def run_resolution(state: WorkflowState, samples_id: str) -> ResolutionEstimated | None:
    """The resolution in force when the formal run of ``samples_id`` started, where a later
    one was recorded before its verdict or final audit (R4), else None (the one in force
    now is that one)."""
    kept = state.run_resolutions
    return None if isinstance(kept, msgspec.UnsetType) else kept.get(samples_id)


def _keep_run_resolutions(state: WorkflowState, target: TargetView) -> None:
    """R4: before a new resolution on ``target`` takes force, keep the one in force for each
    of its formal runs not yet judged (their stage was committed under it)."""
    in_force = target.resolution_in_force
    if in_force is None:
        return
    target_id = target.definition.target_id
    pending = [
        sid
        for sid, run in formal_runs(state).items()
        if run.target_id == target_id and not is_judged(state, sid)
    ]
    if not pending:
        return
    kept = {} if isinstance(state.run_resolutions, msgspec.UnsetType) else state.run_resolutions
    state.run_resolutions = kept
    for sid in pending:
        kept.setdefault(sid, in_force)


def demoted(target: TargetView) -> list[str]:
    """The experiments of ``target`` whose champion a failed final audit demoted (R13)."""
    return [] if isinstance(target.demoted, msgspec.UnsetType) else target.demoted


def is_judged(state: WorkflowState, samples_id: str) -> bool:
    """Whether formal samples (or a started run) ``samples_id`` have their verdict or final
    audit (R14)."""
    return samples_id in state.verdicts or samples_id in state.final_audits


def unfinished_runs(state: WorkflowState, experiment_id: str | None = None) -> list[str]:
    """Samples ids of started formal runs that recorded no samples and have no verdict yet
    (R14: such a run, killed or crashed, counts as failed and owes its verdict), in order."""
    return [
        sid
        for sid, run in formal_runs(state).items()
        if sid not in state.samples
        and not is_judged(state, sid)
        and (experiment_id is None or run.experiment_id == experiment_id)
    ]


def unjudged_formal(
    state: WorkflowState, target_id: str, stage: str, experiment_id: str | None = None
) -> list[str]:
    """Samples ids of ``stage`` (``target`` or ``final_audit``) results of ``target_id`` (of
    ``experiment_id`` when given) without their verdict or final audit: recorded samples and
    started runs that recorded none (R14), in order."""
    recorded = [
        s.samples_id
        for s in state.samples.values()
        if s.target_id == target_id
        and s.stage == stage
        and (experiment_id is None or s.experiment_id == experiment_id)
        and not is_judged(state, s.samples_id)
    ]
    started = [
        sid
        for sid in unfinished_runs(state, experiment_id)
        if formal_runs(state)[sid].target_id == target_id and formal_runs(state)[sid].stage == stage
    ]
    return recorded + started


def stage_results(
    state: WorkflowState, experiment_id: str, stage: str, exclude: str | None = None
) -> list[str]:
    """Samples ids of ``experiment_id``'s formal results of ``stage``: the runs perfledger
    started (with or without samples), recorded ones first, in order, without ``exclude``
    (R14). Samples recorded from outside perfledger have no started run: they never decide
    (R5), so they are no formal result either, and measuring the stage after them is not
    optional stopping."""
    runs = formal_runs(state)
    recorded = [
        s.samples_id
        for s in state.samples.values()
        if s.experiment_id == experiment_id and s.stage == stage and s.samples_id in runs
    ]
    started = [
        sid
        for sid, run in runs.items()
        if run.experiment_id == experiment_id and run.stage == stage and sid not in state.samples
    ]
    return [s for s in recorded + started if s != exclude]


def code_results_not_passed(
    state: WorkflowState, target_id: str, content_hash: str, exclude: str | None = None
) -> list[tuple[str, str]]:
    """``(samples id, status)`` of every formal result on ``target_id`` of code
    ``content_hash`` that is not a pass: target-stage samples and started runs (a run without
    samples, or samples without a verdict yet, count as not passed) and final audits of a
    champion with that code, in order; ``exclude``: a samples id left out (R14)."""
    found: list[tuple[str, str]] = []
    for experiment in state.experiments.values():
        created = experiment.created
        if created.target_id != target_id or created.candidate.content_hash != content_hash:
            continue
        for stage in ("target", "final_audit"):
            for sid in stage_results(state, created.experiment_id, stage, exclude):
                judged = state.verdicts.get(sid) or state.final_audits.get(sid)
                status = judged.status if judged is not None else "unjudged"
                if status != "pass":
                    found.append((sid, status))
    return found


def _anomaly(state: WorkflowState, event: RecordedEvent, what: str) -> None:
    state.anomalies.append(f"{event.id[:16]} {event.kind}: {what}")


def _duplicate(state: WorkflowState, event: RecordedEvent, target_id: str, what: str) -> None:
    conflict_id = event.id[:16]
    state.conflicts[conflict_id] = Conflict(
        conflict_id=conflict_id,
        target_id=target_id,
        kind="duplicate_id",
        options=[what],
        event_ids=[event.id],
    )


def _add_target(state: WorkflowState, event: RecordedEvent, definition: TargetDefinition) -> bool:
    if definition.target_id in state.targets:
        _duplicate(state, event, definition.target_id, definition.target_id)
        return False
    state.targets[definition.target_id] = TargetView(definition=definition, frozen_event=event.id)
    return True


def _on_target_superseded(state: WorkflowState, event: RecordedEvent, p: TargetSuperseded) -> None:
    old = state.targets.get(p.target_id)
    if old is None:
        _anomaly(state, event, f"unknown target {p.target_id!r}")
        return
    if old.status == "superseded" and old.superseded_by is not None:
        # Superseded twice, concurrently on two machines (sync): both new Targets are
        # contested (no decision goes to either, R1) until a ConflictResolved keeps one.
        first = state.targets.get(old.superseded_by)
        if first is not None and _add_target(state, event, p.new_target):
            second = state.targets[p.new_target.target_id]
            second.supersedes = p.target_id
            second.status = first.status = "contested"
            conflict_id = event.id[:16]
            state.conflicts[conflict_id] = Conflict(
                conflict_id=conflict_id,
                target_id=p.target_id,
                kind="supersession",
                options=[first.definition.target_id, second.definition.target_id],
                event_ids=[first.frozen_event, event.id],
            )
        return
    if _add_target(state, event, p.new_target):
        old.status = "superseded"
        old.superseded_by = p.new_target.target_id
        state.targets[p.new_target.target_id].supersedes = p.target_id


def _on_samples(state: WorkflowState, event: RecordedEvent, p: SamplesRecorded) -> None:
    experiment = state.experiments.get(p.experiment_id)
    if experiment is None or p.samples_id in state.samples:
        _anomaly(state, event, f"unknown experiment or duplicate samples {p.samples_id!r}")
        return
    state.samples[p.samples_id] = SamplesView(
        event_id=event.id,
        samples_id=p.samples_id,
        target_id=p.target_id,
        experiment_id=p.experiment_id,
        stage=p.stage,
        reference=p.reference,
        candidate_hash=p.candidate_hash,
        test_set_hash=p.test_set_hash,
        environment_id=p.environment_id,
        units=p.units,
        n_pairs=len(p.pairs),
        ref_failures=p.ref_failures,
        cand_failures=p.cand_failures,
        unexplained_activity=p.unexplained_activity,
        implausible=p.implausible,
    )
    experiment.samples.setdefault(p.stage, []).append(p.samples_id)
    if p.stage != "final_audit":
        experiment.stage = p.stage


def _on_verdict(state: WorkflowState, event: RecordedEvent, p: VerdictRecorded) -> None:
    experiment = state.experiments.get(p.experiment_id)
    target = state.targets.get(p.target_id)
    if experiment is None or target is None:
        _anomaly(state, event, f"unknown experiment {p.experiment_id!r}")
        return
    state.verdicts[p.samples_id] = p
    experiment.verdicts.append(p.samples_id)
    if p.stage == "screen":
        if p.status == "fail" and experiment.status == "open":
            experiment.status = "screen_failed"
    elif p.stage == "target" and experiment.status not in ("champion", "rejected"):
        experiment.status = {"pass": "passed", "fail": "failed"}.get(p.status, "inconclusive")  # type: ignore[assignment]
    # R14: a target result outside the claim, or (for claims recorded from
    # R14_STATED_INTERVAL on) a failed screen of a claim predicting at least the minimum effect.
    _late_unaccounted_result(state, event, target, p)
    if p.contradicts_claim:
        target.pending[p.experiment_id] = _pending(experiment, p.samples_id, p.primary)


def _pending(
    experiment: ExperimentView, samples_id: str, primary: DerivedVerdict
) -> PendingReconciliation:
    """The reconciliation ``experiment`` owes for the result ``samples_id`` whose derived
    ``primary`` lies outside its claim (R14)."""
    figures = experiment.created.figures
    return PendingReconciliation(
        experiment_id=experiment.created.experiment_id,
        samples_id=samples_id,
        predicted_low=figures.predicted_low,
        predicted_high=figures.predicted_high,
        ci_low=primary.ci_low,
        ci_high=primary.ci_high,
    )


def _on_champion(state: WorkflowState, event: RecordedEvent, p: ChampionSelected) -> None:
    target = state.targets.get(p.target_id)
    if target is None:
        _anomaly(state, event, f"unknown target {p.target_id!r}")
        return
    chosen = p.experiment_id if p.decision == "select" else None
    current = target.champion or ORIGINAL
    if p.previous != current:
        # Decided concurrently against a champion that is no longer current (R13 compare-and-
        # swap lost across machines): keep the first, record the conflict.
        conflict_id = event.id[:16]
        state.conflicts[conflict_id] = Conflict(
            conflict_id=conflict_id,
            target_id=p.target_id,
            kind="champion",
            options=[current, chosen or ORIGINAL],
            event_ids=[target.lineage[-1].event_id if target.lineage else "", event.id],
        )
        return
    if (
        p.decision == "select"
        and target.pending
        and event.envelope.schema >= R14_UNJUDGED_BLOCKS_CHAMPION
    ):
        # Selected on a machine that had not seen a result owing a reconciliation (R14: the
        # decider refuses it locally, so only a sync gets here): not applied until resolved.
        conflict_id = event.id[:16]
        state.conflicts[conflict_id] = Conflict(
            conflict_id=conflict_id,
            target_id=p.target_id,
            kind=OWED_CHAMPION,
            options=[current, chosen or ORIGINAL],
            event_ids=[event.id],
        )
        return
    if (
        p.decision == "select"
        and p.candidate_hash is not None
        and event.envelope.schema >= R14_CODE_RESULTS_CHAMPION
        and code_results_not_passed(state, p.target_id, p.candidate_hash)
    ):
        # Selected on a machine that had not seen a formal result of the same code that did
        # not pass (R14, no optional stopping: only a sync gets here): not applied.
        _unaccounted_conflict(state, event, target, [current, chosen or ORIGINAL])
        return
    _set_champion(state, target, chosen, p.samples_id, event.id, p.decision)


def _unaccounted_conflict(
    state: WorkflowState, event: RecordedEvent, target: TargetView, options: list[str]
) -> None:
    """An ``unaccounted_champion`` conflict (R14): ``options`` are the champion the rules keep
    and the one whose code has a formal result that did not pass."""
    conflict_id = event.id[:16]
    state.conflicts[conflict_id] = Conflict(
        conflict_id=conflict_id,
        target_id=target.definition.target_id,
        kind=UNACCOUNTED_CHAMPION,
        options=options,
        event_ids=[event.id],
    )


def _late_unaccounted_result(
    state: WorkflowState, event: RecordedEvent, target: TargetView, p: VerdictRecorded
) -> None:
    """A target-stage result that did not pass, of the current champion's code, folded after
    the champion's selection (R14, ``VerdictRecorded`` schema
    :data:`~perfledger.events.workflow.R14_UNACCOUNTED_VERDICT` on; only a sync orders a
    result of another clone so): the champion's evidence does not account for it, an
    ``unaccounted_champion`` conflict offers the champion before it."""
    experiment = state.experiments.get(p.experiment_id)
    if (
        p.stage != "target"
        or p.status == "pass"
        or event.envelope.schema < R14_UNACCOUNTED_VERDICT
        or target.champion is None
        or experiment is None
        or experiment.created.candidate.content_hash != target.champion_hash
    ):
        return
    if open_conflicts(state, target.definition.target_id, UNACCOUNTED_CHAMPION):
        return
    before = _champion_before(target, target.champion, set(demoted(target)))
    _unaccounted_conflict(state, event, target, [before or ORIGINAL, target.champion])


def _set_champion(
    state: WorkflowState,
    target: TargetView,
    chosen: str | None,
    samples_id: str | None,
    event_id: str,
    decision: str,
) -> None:
    previous = state.experiments.get(target.champion or "")
    if previous is not None and previous.status == "champion":
        previous.status = "passed"
    target.champion = chosen
    target.champion_hash = None
    # R13: the final audit belongs to the champion it audited; the new one has none yet.
    target.final_audit = None
    target.final_audit_status = None
    experiment = state.experiments.get(chosen or "")
    if experiment is not None:
        experiment.status = "champion"
        target.champion_hash = experiment.created.candidate.content_hash
    target.lineage.append(
        ChampionEntry(
            champion=chosen or ORIGINAL, samples_id=samples_id, event_id=event_id, decision=decision
        )
    )


def _champion_before(target: TargetView, champion: str, skip: set[str]) -> str | None:
    """The champion that was current when ``champion`` was (last) selected, passing over those
    in ``skip`` (demoted ones): None for the original (R13)."""
    index = max(
        (
            i
            for i, e in enumerate(target.lineage)
            if e.champion == champion and e.decision != "demotion"
        ),
        default=0,
    )
    for entry in reversed(target.lineage[:index]):
        if entry.champion == ORIGINAL:
            return None
        if entry.champion not in skip:
            return entry.champion
    return None


def _demote(
    state: WorkflowState, target: TargetView, audit: FinalAuditRecorded, event_id: str
) -> None:
    """A failed final audit demotes its champion (R13, schema
    :data:`~perfledger.events.workflow.R13_FAILED_AUDIT_DEMOTES` on): the champion before it
    (or the original) is current again with its own final audit, if it had one; the failed
    audit stays, and the lineage shows the demotion (its samples are the failed audit's)."""
    failed = audit.champion
    target.demoted = [*demoted(target), failed]
    back = _champion_before(target, failed, set(target.demoted))
    _set_champion(state, target, back, audit.samples_id, event_id, "demotion")
    experiment = state.experiments.get(failed)
    if experiment is not None:
        experiment.status = "failed"
    own = [a for a in state.final_audits.values() if back is not None and a.champion == back]
    if own:  # the restored champion's own latest final audit speaks for it again
        target.final_audit = own[-1].samples_id
        target.final_audit_status = own[-1].status


def _reconciliation_conflict(
    state: WorkflowState, event: RecordedEvent, target: TargetView, experiment_id: str
) -> None:
    """An experiment created while a contradicted result of its Target awaited reconciliation
    (R14): only concurrent work on another machine gets here, the decider refuses it locally."""
    conflict_id = event.id[:16]
    pending = sorted(target.pending)
    state.conflicts[conflict_id] = Conflict(
        conflict_id=conflict_id,
        target_id=target.definition.target_id,
        kind="reconciliation",
        options=[experiment_id, WITHDRAW],
        event_ids=[state.experiments[pending[0]].event_id, event.id]
        if pending[0] in state.experiments
        else [event.id],
    )


#: The option of a ``reconciliation`` conflict that withdraws the concurrent experiment.
WITHDRAW = "withdraw"
#: The kind of conflict of a champion selected, on another machine, while a reconciliation was
#: owed on its Target (R14); options: the champion in place, the one selected.
OWED_CHAMPION = "owed_champion"
#: The kind of conflict of a champion whose code has a formal result that did not pass, seen
#: only after a sync (R14, no optional stopping); options: the champion the rules keep, the
#: one whose evidence does not account for that result (keeping it is refused).
UNACCOUNTED_CHAMPION = "unaccounted_champion"
#: Conflict kinds that block champion decisions until resolved, and whose resolution may
#: change the champion.
CHAMPION_CONFLICTS = ("champion", OWED_CHAMPION, UNACCOUNTED_CHAMPION)


def _resolve_supersession(state: WorkflowState, conflict: Conflict, keep: str) -> None:
    """Keep one of two contested Targets: it becomes current, the other is superseded by it."""
    old = state.targets.get(conflict.target_id)
    for target_id in conflict.options:
        view = state.targets.get(target_id)
        if view is None:
            continue
        if target_id == keep:
            view.status = "current"
        else:
            view.status = "superseded"
            view.superseded_by = keep
    if old is not None:
        old.superseded_by = keep


def _on_conflict_resolved(state: WorkflowState, event: RecordedEvent, p: ConflictResolved) -> None:
    conflict = state.conflicts.get(p.conflict_id)
    target = state.targets.get(p.target_id)
    if conflict is None or target is None:
        _anomaly(state, event, f"unknown conflict {p.conflict_id!r}")
        return
    conflict.resolved_by = event.id
    conflict.kept = p.keep
    if conflict.kind == "supersession":
        _resolve_supersession(state, conflict, p.keep)
        return
    if conflict.kind == "reconciliation":
        if p.keep == WITHDRAW:
            withdrawn = state.experiments.get(conflict.options[0])
            if withdrawn is not None and withdrawn.status != "champion":
                withdrawn.status = "rejected"
        return
    if conflict.kind in CHAMPION_CONFLICTS and p.keep != (target.champion or ORIGINAL):
        keep = None if p.keep == ORIGINAL else p.keep
        samples = None
        if keep is not None:
            verdicts = state.experiments[keep].verdicts if keep in state.experiments else []
            samples = verdicts[-1] if verdicts else None
        _set_champion(state, target, keep, samples, event.id, "conflict_resolution")


def evolve(state: WorkflowState, event: RecordedEvent) -> WorkflowState:
    """Fold one event into ``state`` (updated in place and returned).

    Keeps the ledger-level fields (:func:`perfledger.projections.ledger_state.evolve`) and
    applies each workflow kind; never raises for a well-formed event.
    """
    ledger_state.evolve(state, event)
    loop_projection.evolve(state.loop, event)
    review_projection.evolve(state.reviews, event)
    p = event.payload
    if isinstance(p, TargetFrozen):
        _add_target(state, event, p.target)
    elif isinstance(p, TargetSuperseded):
        _on_target_superseded(state, event, p)
    elif isinstance(p, EvidenceRecorded):
        if p.evidence_id in state.evidence:
            _anomaly(state, event, f"duplicate evidence id {p.evidence_id!r}")
        else:
            state.evidence[p.evidence_id] = p
    elif isinstance(p, UpstreamCheckRecorded):
        state.upstream_checks.setdefault(p.check_id, p)
    elif isinstance(p, HostAdviceRecorded):
        state.host_advice.setdefault(p.advice_id, p)
    elif isinstance(p, ExperimentCreated):
        target = state.targets.get(p.target_id)
        if target is None or p.experiment_id in state.experiments:
            _anomaly(state, event, f"unknown target or duplicate experiment {p.experiment_id!r}")
        else:
            state.experiments[p.experiment_id] = ExperimentView(
                created=p, event_id=event.id, rules_schema=event.envelope.schema
            )
            target.experiments.append(p.experiment_id)
            if target.pending:
                _reconciliation_conflict(state, event, target, p.experiment_id)
    elif isinstance(p, SamplesRecorded):
        _on_samples(state, event, p)
    elif isinstance(p, VerdictRecorded):
        _on_verdict(state, event, p)
    elif isinstance(p, ChampionSelected):
        _on_champion(state, event, p)
    elif isinstance(p, ConflictResolved):
        _on_conflict_resolved(state, event, p)
    elif isinstance(p, FormalRunStarted):
        if p.samples_id in formal_runs(state) or p.samples_id in state.samples:
            _anomaly(state, event, f"samples id {p.samples_id!r} already taken")
        else:
            runs = formal_runs(state)
            state.formal_runs = runs  # set once: an unset field is a fresh empty dict
            runs[p.samples_id] = p
    else:
        _evolve_target_facts(state, event, p)
    return state


#: Final-audit statuses from worst to best (R14: the worse of a champion's two stands).
_AUDIT_ORDER = ("fail", "inconclusive", "pass")


def _evolve_target_facts(state: WorkflowState, event: RecordedEvent, p: object) -> None:
    """The kinds that attach one fact to an existing Target (or an experiment of it)."""
    target_id = getattr(p, "target_id", None)
    if target_id is None:
        return  # a kind of another projection (LedgerInitialized, NoteRecorded, ...)
    target = state.targets.get(target_id)
    if target is None:
        _anomaly(state, event, f"unknown target {target_id!r}")
        return
    if isinstance(p, ReadinessRecorded):
        target.readiness = p
        target.diagnostic_only = target.diagnostic_only or target.definition.diagnostic
    elif isinstance(p, MetricAuditRecorded):
        target.metric_audits[p.metric] = p
        if p.metric == target.definition.primary.name and not p.matches_target:
            target.diagnostic_only = True
    elif isinstance(p, BaselineRecorded):
        if p.source == "declared":  # R4: recorded, deciding nothing (the measured one stays)
            target.declared_baseline = p
        else:
            target.baseline = p
    elif isinstance(p, ResolutionEstimated):
        _keep_run_resolutions(state, target)
        # R4: a declared resolution decides nothing; the measured one before it stays in force
        if p.source == "declared" and target.decided_resolution is msgspec.UNSET:
            target.decided_resolution = target.resolution
        elif p.source != "declared" and target.decided_resolution is not msgspec.UNSET:
            target.decided_resolution = p
        target.resolution = p
    elif isinstance(p, LocalResultRecorded):
        state.local_results.setdefault(p.result_id, p)
    elif isinstance(p, CandidateRejected):
        experiment = state.experiments.get(p.experiment_id)
        if experiment is not None:
            experiment.rejection = p
            if experiment.status != "champion":
                experiment.status = "rejected"
        state.rejections[p.experiment_id] = p
    elif isinstance(p, ReconciliationRecorded):
        state.reconciliations.append(p)
        target.pending.pop(p.experiment_id, None)
        experiment = state.experiments.get(p.experiment_id)
        if experiment is not None:
            experiment.reconciliations += 1
    elif isinstance(p, FinalAuditRecorded):
        state.final_audits[p.samples_id] = p
        target.latest_final_audit = p.samples_id
        champion = state.experiments.get(p.champion)
        if p.contradicts_claim is True and champion is not None:  # R14, schema 10 on
            target.pending[p.champion] = _pending(champion, p.samples_id, p.primary)
        if p.champion == (target.champion or ORIGINAL):
            status = p.status
            earlier = state.final_audits.get(target.final_audit or "")
            if (
                event.envelope.schema >= R13_ONE_FINAL_AUDIT
                and earlier is not None
                and earlier.champion == p.champion
            ):
                # R14: a champion's second final audit (only a sync makes one) never replaces
                # its first; the worse of the two stands
                status = min(status, earlier.status, key=_AUDIT_ORDER.index)
            target.final_audit = p.samples_id
            target.final_audit_status = status
            if status == "fail" and event.envelope.schema >= R13_FAILED_AUDIT_DEMOTES:
                _demote(state, target, p, event.id)
    elif isinstance(p, HandoffRecorded):
        state.handoffs.append(p)
    elif isinstance(p, ActivityExplained):
        if p.samples_id not in state.samples:
            _anomaly(state, event, f"unknown samples {p.samples_id!r}")
        else:
            state.explanations.setdefault(p.samples_id, []).append(p)
