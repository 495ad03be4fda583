"""R14 applies to what was measured, not to what was recorded (SPEC.md R13, R14).

A formal stage (target, final audit) has no dry run: ``perfledger measure`` appends a
``FormalRunStarted`` naming the samples id before anything is measured, and the samples it
records must be that run's. Every formal result, recorded samples or a started run that never
recorded them (killed, crashed, abandoned after a look at its figures), owes its verdict (target)
or final audit before the experiment measures that stage again, and no champion is selected on a
Target while one of its target-stage results has none. A run without samples is judged ``fail``.

No optional stopping (from ``FormalRunStarted`` schema 2, ``SamplesRecorded`` 13,
``ExperimentCreated`` 8, ``ChampionSelected`` 6): an experiment has one result per formal stage
(:func:`r14_one_result_per_stage`), and code with a formal result that did not pass does not
come back (:func:`r14_code_results_passed`). :func:`formal_stage_preconditions` is the one
precondition sequence of a formal stage that ``formal-run.start``, ``samples.record`` and the
next steps offered share.

Pure functions of the folded state; the deciders call them by the rule version their event
answers to (:data:`~perfledger.events.workflow.R14_MEASURED_OBLIGATION`,
:data:`~perfledger.events.workflow.R14_UNJUDGED_BLOCKS_CHAMPION`).
"""

from __future__ import annotations

from perfledger.commands.workflow import rules
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
    code_results_not_passed,
    demoted,
    formal_runs,
    is_judged,
    stage_results,
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


def formal_stage_preconditions(
    state: WorkflowState,
    target: TargetView,
    experiment_id: str | None,
    stage: str,
    *,
    demotion: bool = True,
    one_result: bool = False,
    exclude: str | None = None,
) -> None:
    """The preconditions of measuring (or recording) ``stage`` of ``experiment_id`` on
    ``target``, shared by ``formal-run.start``, ``samples.record`` and the next steps offered:
    R15 the experiment is not rejected, R2 readiness, R3 the metric audit, R4 the baseline and
    resolution, then the stage's own checks: a final audit (R13, where ``demotion``: not of a
    demoted experiment; R11: of the current champion), a target stage (R11: after a screen
    that did not fail; R8: a bound that may enter it); a screen has none. With ``one_result``
    (R14, :data:`~perfledger.events.workflow.R14_ONE_FORMAL_RUN`) the experiment has no other
    judged result of ``stage`` (:func:`r14_one_result_per_stage`; ``exclude``: the run now
    recording its own samples). An unknown ``experiment_id`` (or None) gets the Target's checks
    only.

    Raises: RuleRefused naming the first rule refused, with its hint.
    """
    experiment = state.experiments.get(experiment_id or "")
    if experiment is not None:
        rules.r15_not_rejected(state, experiment.created.experiment_id)
    rules.r2_ready(target)
    rules.r3_metric_audited(target)
    rules.r4_baseline_and_resolution(target)
    if experiment is None:
        return
    experiment_id = experiment.created.experiment_id
    if stage == "final_audit":
        if demotion:
            r13_not_demoted(target, experiment_id)
        if target.champion != experiment_id:
            raise refuse(
                "R11",
                "a final audit measures the current champion (this experiment is not it)",
                "measure the current champion's final audit (`perfledger champion show` names it)",
            )
    elif stage == "target":
        rules.r11_screen_before_target(state, experiment_id)
        in_force = target.resolution_in_force
        assert in_force is not None  # r4_baseline_and_resolution
        rules.r8_formal_stage_allowed(experiment, in_force.resolution)
    if one_result and stage in ("target", "final_audit"):
        r14_one_result_per_stage(state, target, experiment_id, stage, exclude)


def _stale_pass(state: WorkflowState, target: TargetView, samples_id: str) -> bool:
    """A target result that passed against a reference that is no longer current (R11 stale):
    re-measuring it against the new champion asks a new question, not the same one again."""
    verdict = state.verdicts.get(samples_id)
    samples = state.samples.get(samples_id)
    return (
        verdict is not None
        and verdict.status == "pass"
        and samples is not None
        and not rules.is_current_reference(state, target, samples.reference)
    )


def r14_one_result_per_stage(
    state: WorkflowState,
    target: TargetView,
    experiment_id: str,
    stage: str,
    exclude: str | None = None,
) -> None:
    """R14 (no optional stopping): an experiment has one formal result per stage. Its earlier
    judged result of ``stage`` (samples, or a started run, which failed if it recorded none) is
    final: a target stage is measured again only to re-measure a passed result whose reference
    is no longer current (stale, R11); a champion gets one final audit. Unjudged ones are
    :func:`r14_judged_before_next`'s. Raises: RuleRefused (R14) naming the result and what is
    left to do."""
    earlier = [
        s
        for s in stage_results(state, experiment_id, stage, exclude)
        if is_judged(state, s) and not (stage == "target" and _stale_pass(state, target, s))
    ]
    if not earlier:
        return
    first = earlier[0]
    judged = state.verdicts.get(first) or state.final_audits.get(first)
    status = judged.status if judged is not None else "unknown"
    if stage == "final_audit":
        raise refuse(
            "R14",
            f"experiment {experiment_id!r} had its final audit {first!r} ({status}): a champion "
            "gets one final audit, and its result is final (measuring it again until one passes "
            "is optional stopping)",
            "its final audit stands (an inconclusive one leaves the champion unconfirmed, a "
            "failed one demoted it): improve the code in a new experiment (`perfledger "
            "experiment create --request FILE`), or record the handoff",
        )
    raise refuse(
        "R14",
        f"experiment {experiment_id!r} already has its target-stage result {first!r} "
        f"({status}): an experiment has one formal target stage, and measuring it again until "
        "one run passes is optional stopping",
        f"reject it (`perfledger reject --experiment {experiment_id} --closes implementation "
        "--reason TEXT`), or change the code and create a new experiment (the same code may "
        "not come back, R14)",
    )


def r14_code_results_passed(
    state: WorkflowState, target_id: str, content_hash: str, what: str
) -> None:
    """R14 (no optional stopping): the same code (content hash) does not come back through a
    new experiment after a formal result of it that was not a pass (a failed, inconclusive or
    unfinished target stage, a failed or inconclusive final audit): running it again until a
    run passes is optional stopping. ``what``: the decision refused. Raises: RuleRefused
    (R14)."""
    found = code_results_not_passed(state, target_id, content_hash)
    if found:
        listed = ", ".join(f"{sid} ({status})" for sid, status in found)
        raise refuse(
            "R14",
            f"{what}: code {content_hash!r} already had formal result(s) on Target "
            f"{target_id!r} that did not pass: {listed}; the evidence for a champion accounts "
            "for every formal result of its code, and re-running the same code is optional "
            "stopping",
            "change the code (a candidate with another content hash) in a new experiment, or "
            "reject this one (`perfledger reject --experiment ID --closes implementation "
            "--reason TEXT`)",
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
