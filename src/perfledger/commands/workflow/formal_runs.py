"""R14 applies to what was measured, not to what was recorded (SPEC.md R13, R14).

A formal stage (target, final audit) has no dry run: ``perfledger measure`` appends a
``FormalRunStarted`` naming the samples id before anything is measured, and the samples it
records must be that run's. Every formal result, recorded samples or a started run that never
recorded them (killed, crashed, abandoned after a look at its figures), owes its verdict (target)
or final audit before the experiment measures that stage again, and no champion is selected on a
Target while one of its target-stage results has none. A run without samples is judged ``fail``.

Pure functions of the folded state; the deciders call them by the rule version their event
answers to (:data:`~perfledger.events.workflow.R14_MEASURED_OBLIGATION`,
:data:`~perfledger.events.workflow.R14_UNJUDGED_BLOCKS_CHAMPION`).
"""

from __future__ import annotations

from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import (
    DerivedVerdict,
    FinalAuditRecorded,
    FormalRunStarted,
    VerdictRecorded,
)
from perfledger.projections.workflow import (
    TargetView,
    WorkflowState,
    demoted,
    formal_runs,
    unjudged_formal,
)

#: The protocol of a formal run whose samples are recorded as outside samples (R5: ``measure
#: serving`` records its windows without a raw table): its samples carry no provenance.
OUTSIDE_PROTOCOL = "outside"
#: The reason of the verdict (or final audit) of a started run that recorded no samples.
NO_SAMPLES = (
    "R14: the formal run started but never recorded its samples (killed, crashed or abandoned): "
    "it counts as failed"
)


def judge_command(target_id: str, samples_id: str, stage: str) -> str:
    """The command that records the verdict (target) or final audit of ``samples_id``."""
    if stage == "final_audit":
        return f"`perfledger final-audit record --target {target_id} --samples {samples_id}`"
    return f"`perfledger verdict record --samples {samples_id}`"


def r14_judged_before_next(
    state: WorkflowState,
    target_id: str,
    experiment_id: str,
    stage: str,
    exclude: str | None = None,
) -> None:
    """R14: the experiment's earlier ``stage`` results (samples, or started runs) all have their
    verdict or final audit before it measures or records that stage again (``exclude``: the
    run now recording its own samples). Raises: RuleRefused (R14) naming them and the command."""
    owed = [s for s in unjudged_formal(state, target_id, stage, experiment_id) if s != exclude]
    if owed:
        raise refuse(
            "R14",
            f"experiment {experiment_id!r} has {stage} result(s) {owed} without "
            f"{'a final audit' if stage == 'final_audit' else 'a verdict'}: R14 applies to "
            "what was measured, not to what was recorded (a run that recorded no samples "
            "counts as failed); judge it before measuring this stage again",
            f"record it: {judge_command(target_id, owed[0], stage)}",
        )


def r14_no_unjudged_target_results(state: WorkflowState, target_id: str) -> None:
    """R14: no champion selection on ``target_id`` while a target-stage result of it (samples,
    or a started run without samples) has no verdict. Raises: RuleRefused (R14)."""
    owed = unjudged_formal(state, target_id, "target")
    if owed:
        raise refuse(
            "R14",
            f"Target {target_id!r} has target-stage result(s) {owed} without a verdict: every "
            "measured result is judged before any champion selection",
            f"record it: {judge_command(target_id, owed[0], 'target')}",
        )


def r13_not_demoted(target: TargetView, experiment_id: str) -> None:
    """R13: an experiment whose champion a failed final audit demoted never becomes champion
    again, nor is audited again; its code comes back only through a new experiment's target
    stage. Raises: RuleRefused (R13)."""
    if experiment_id in demoted(target):
        raise refuse(
            "R13",
            f"experiment {experiment_id!r} was champion and failed its final audit, which "
            "demoted it: it is not audited or selected again",
            "its code comes back only through a new experiment (its own claim, screen and "
            "target stage): `perfledger experiment create --request FILE`",
        )


def r14_measured_samples_started(
    state: WorkflowState, samples_id: str, experiment_id: str, stage: str, protocol: str
) -> None:
    """R14: formal-stage samples measured by perfledger are those of a ``FormalRunStarted``
    of the same experiment, stage and protocol, not yet judged (a formal stage has no dry run).
    Raises: RuleRefused (R14)."""
    run = formal_runs(state).get(samples_id)
    if run is None or run.experiment_id != experiment_id or run.stage != stage:
        raise refuse(
            "R14",
            f"measured {stage} samples {samples_id!r} of experiment {experiment_id!r} belong to "
            "no started formal run: a formal stage has no dry run, its start is recorded before "
            "anything is measured",
            "measure with `perfledger measure workload|kernel|serving`, which records the start",
        )
    if run.protocol != protocol:
        raise refuse(
            "R14",
            f"formal run {samples_id!r} started with protocol {run.protocol!r}; these samples "
            f"were measured with {protocol!r}",
            f"record these samples with the protocol its run started with ({run.protocol!r}), or start a new run under another samples id",
        )
    if samples_id in state.verdicts or samples_id in state.final_audits:
        raise refuse(
            "R14",
            f"formal run {samples_id!r} was already judged as a run without samples (failed): "
            "its samples can no longer be recorded",
            "measure again under a new samples id",
        )


def _no_samples_verdict(target: TargetView) -> DerivedVerdict:
    """The derived primary of a run without samples: ``fail`` with :data:`NO_SAMPLES`."""
    readiness = target.readiness
    resolution = target.resolution_in_force
    return DerivedVerdict(
        status="fail",
        reason=NO_SAMPLES,
        direction=target.definition.primary.direction,
        estimate=None,
        ci_low=None,
        ci_high=None,
        min_effect=target.definition.min_effect,
        resolution=resolution.resolution if resolution is not None else 0.0,
        n_pairs=0,
        n_excluded=0,
        pairs_per_case={},
        degenerate=False,
        clear_loss=False,
        wilcoxon_p=None,
        resamples=readiness.statistics.resamples if readiness is not None else 0,
        confidence=readiness.statistics.confidence if readiness is not None else 0.0,
        seed=0,
    )


def unfinished_run(state: WorkflowState, samples_id: str, stage: str) -> FormalRunStarted | None:
    """The started ``stage`` run ``samples_id`` if it recorded no samples (else None)."""
    run = formal_runs(state).get(samples_id)
    if run is None or samples_id in state.samples or run.stage != stage:
        return None
    return run


def failed_run_verdict(
    state: WorkflowState, run: FormalRunStarted, claimed: str | None
) -> VerdictRecorded:
    """The verdict of a target run that recorded no samples: ``fail`` (R14). Raises:
    RuleRefused (R12) for a claimed status other than ``fail``."""
    target = state.targets[run.target_id]
    _check_claim(claimed)
    return VerdictRecorded(
        samples_id=run.samples_id,
        experiment_id=run.experiment_id,
        target_id=run.target_id,
        stage=run.stage,
        status="fail",
        primary=_no_samples_verdict(target),
        notes=(NO_SAMPLES,),
    )


def failed_run_final_audit(
    state: WorkflowState, run: FormalRunStarted, claimed: str | None
) -> FinalAuditRecorded:
    """The final audit of a final-audit run that recorded no samples: ``fail`` (R13, R14)."""
    target = state.targets[run.target_id]
    _check_claim(claimed)
    return FinalAuditRecorded(
        target_id=run.target_id,
        samples_id=run.samples_id,
        champion=run.experiment_id,
        status="fail",
        primary=_no_samples_verdict(target),
        notes=(NO_SAMPLES,),
    )


def _check_claim(claimed: str | None) -> None:
    if claimed is not None and claimed != "fail":
        raise refuse(
            "R12",
            f"the claimed status {claimed!r} differs from the derived 'fail': {NO_SAMPLES}",
            "verdicts are derived, never asserted: record without claimed_status",
        )
