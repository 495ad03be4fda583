"""ROI claims against their outcomes (SPEC.md R7, R12, R14): the ``perfledger claims`` read model.

For every experiment: the opportunity claim it froze (coverage ``f``, expected local speedup ``s``,
added cost ``c``, the stated Amdahl bound and the bound recomputed here from ``f, s, c``, the
minimum effect, ``s_min``), beside what was measured (the latest target-stage verdict, else the
latest screen verdict: the median improvement and its CI) and the prediction error.

Units. A verdict's improvement is a ratio of the primary metric: ``(ref - cand) / ref`` for a
lower-is-better metric, ``(cand - ref) / ref`` for a higher-is-better one (R12). The Amdahl bound is
an end-to-end *speedup* ``S`` (1.0 = none). The measured improvement is converted to the bound's
units as ``S = 1 / (1 - g)`` (lower is better: ``S = ref / cand``) or ``S = 1 + g`` (higher is
better), and the prediction error is ``measured S - bound`` (negative: the claim promised more
than was measured). Tail primaries (p95, p99) have no numeric bound (R7); their error is against the
predicted improvement interval only (``interval_error``, in improvement ratios: 0 inside it, else
the signed distance to its nearest end).

A reconciliation is *owed* when a verdict contradicted the claim (R14): a target-stage CI outside
the predicted interval, or, for claims recorded under the stated-interval rule, a failed screen of
a claim predicting at least the minimum effect; ``reconciled`` says whether one was recorded.

Pure: reads a :class:`~perfledger.projections.workflow.WorkflowState`, never a store.
"""

from __future__ import annotations

import math

import msgspec

from perfledger.events.workflow import R14_ONE_IMPROVEMENT, DerivedCase, VerdictRecorded
from perfledger.projections import amdahl
from perfledger.projections.measurement_flags import experiment_flags
from perfledger.projections.workflow import ExperimentView, WorkflowState


class Measured(msgspec.Struct, kw_only=True):
    """What a verdict measured for the primary.

    Attributes:
        samples_id, stage, status: the verdict's samples, stage and decision status.
        estimate, ci_low, ci_high: median improvement and its CI (ratios of the primary).
        speedup, speedup_low, speedup_high: the same, converted to end-to-end speedups (the
            bound's units; None where the improvement is None or ``>= 1`` for lower-is-better).
        n_pairs: valid pairs the verdict used.
        notes: the verdict's notes (why its status differs from the primary's; R14 owed
            reconciliations; R17 foreign activity and its explanations).
        cases: per test case (R12): each subject's absolute per-call statistic with its CI (in
            ``unit``) and the case's improvement; empty for verdicts derived by the pooled rule.
        samples_provenance: ``outside`` for samples recorded from outside perfledger (R5),
            ``perfledger`` for measured ones, None for verdicts recorded before it was kept.
        implausible: test case -> measured candidate/reference ratio beyond the Target's
            plausible bound (R12: no champion until another actor's review explains it);
            absent when none is.
    """

    samples_id: str
    stage: str
    status: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    speedup: float | None
    speedup_low: float | None
    speedup_high: float | None
    n_pairs: int
    notes: list[str] = msgspec.field(default_factory=list)
    cases: list[DerivedCase] = []
    unit: str | None = None
    samples_provenance: str | None = None
    implausible: dict[str, float] | msgspec.UnsetType = msgspec.UNSET


class ClaimRow(msgspec.Struct, kw_only=True):
    """One experiment's claim beside its outcome.

    Attributes:
        experiment_id, target_id, title, status: the experiment.
        statistic: the Target primary's statistic (``p95``/``p99``: tail, no bound).
        coverage, local_speedup, added_cost: ``f``, ``s``, ``c`` as claimed (ratios).
        stated_bound: the bound the claim stated (speedup ratio); None for a tail primary.
        recomputed_bound: ``1/((1-f)+f/s+c)`` recomputed here; None for a tail primary.
        bound_consistent: the stated bound follows from its inputs (R7); None without a bound.
        min_effect: the Target's minimum effect (ratio).
        s_min: the local speedup needed to cross the minimum effect; None when unreachable.
        predicted_low, predicted_high: the predicted improvement interval in the verdict's units
            (ratios, R12; claims recorded before ``ExperimentCreated`` schema 7 converted from
            speedup - 1 by :func:`predicted_improvement`).
        measured: the latest target verdict (else screen verdict), None before any.
        prediction_error: ``measured speedup - bound`` (speedup units); None without both.
        interval_error: the measured estimate's signed distance outside the predicted interval
            (improvement ratio; 0.0 inside it); None without a measurement.
        reconciliation_owed: a verdict contradicted the claim (R14).
        reconciled: a reconciliation is recorded for this experiment.
        reconciliations: the premises named by its reconciliations, in order.
        measurement_flags: what its measurements found suspicious (wall-clock check, R12;
            candidate accuracy failures in a formal stage, R5), one line each.
    """

    experiment_id: str
    target_id: str
    title: str
    status: str
    statistic: str
    coverage: float | None
    local_speedup: float | None
    added_cost: float
    stated_bound: float | None
    recomputed_bound: float | None
    bound_consistent: bool | None
    min_effect: float
    s_min: float | None
    predicted_low: float
    predicted_high: float
    measured: Measured | None
    prediction_error: float | None
    interval_error: float | None
    reconciliation_owed: bool
    reconciled: bool
    reconciliations: list[str]
    measurement_flags: list[str] = msgspec.field(default_factory=list)


def improvement_to_speedup(improvement: float | None, direction: str) -> float | None:
    """Convert an improvement ratio ``g`` into an end-to-end speedup (the Amdahl bound's units):
    ``1/(1-g)`` for lower-is-better metrics (``ref/cand``), ``1+g`` for higher-is-better ones.
    Returns None for None or for ``g >= 1`` with lower-is-better (the candidate took no time)."""
    if improvement is None:
        return None
    if direction == "lower_is_better":
        return None if improvement >= 1.0 else 1.0 / (1.0 - improvement)
    return 1.0 + improvement


def predicted_improvement(experiment: ExperimentView, direction: str) -> tuple[float, float]:
    """The claim's predicted interval ``(low, high)`` in the verdict's units (R12, R14): as
    recorded for claims from ``ExperimentCreated`` schema
    :data:`~perfledger.events.workflow.R14_ONE_IMPROVEMENT` on; claims recorded before stated it
    in the bound's units (speedup - 1) and keep that meaning, converted here by
    :func:`perfledger.projections.amdahl.gain_to_improvement`."""
    figures = experiment.created.figures
    if experiment.rules_schema >= R14_ONE_IMPROVEMENT:
        return figures.predicted_low, figures.predicted_high
    return (
        amdahl.gain_to_improvement(figures.predicted_low, direction),
        amdahl.gain_to_improvement(figures.predicted_high, direction),
    )


def _latest_verdict(state: WorkflowState, experiment: ExperimentView) -> VerdictRecorded | None:
    verdicts = [state.verdicts[s] for s in experiment.verdicts if s in state.verdicts]
    for stage in ("target", "screen"):
        staged = [v for v in verdicts if v.stage == stage]
        if staged:
            return staged[-1]
    return None


def _measured(state: WorkflowState, verdict: VerdictRecorded) -> Measured:
    p = verdict.primary
    samples = state.samples.get(verdict.samples_id)
    return Measured(
        samples_id=verdict.samples_id,
        stage=verdict.stage,
        status=verdict.status,
        estimate=p.estimate,
        ci_low=p.ci_low,
        ci_high=p.ci_high,
        speedup=improvement_to_speedup(p.estimate, p.direction),
        speedup_low=improvement_to_speedup(p.ci_low, p.direction),
        speedup_high=improvement_to_speedup(p.ci_high, p.direction),
        n_pairs=p.n_pairs,
        notes=list(verdict.notes),
        cases=list(p.cases),
        unit=verdict.unit,
        samples_provenance=verdict.samples_provenance,
        implausible=samples.implausible if samples is not None else msgspec.UNSET,
    )


def _interval_error(estimate: float | None, low: float, high: float) -> float | None:
    if estimate is None:
        return None
    if estimate < low:
        return estimate - low
    if estimate > high:
        return estimate - high
    return 0.0


def claim_row(state: WorkflowState, experiment: ExperimentView) -> ClaimRow:
    """Build the :class:`ClaimRow` of one experiment (see the module docstring)."""
    created = experiment.created
    claim = created.claim
    figures = created.figures
    target = state.targets[created.target_id]
    definition = target.definition
    recomputed: float | None = None
    consistent: bool | None = None
    if claim.coverage is not None and claim.local_speedup is not None:
        try:
            recomputed = amdahl.amdahl_bound(claim.coverage, claim.local_speedup, claim.added_cost)
        except ValueError:
            recomputed = None
        if claim.stated_bound is not None:
            consistent = recomputed is not None and amdahl.bound_matches(
                claim.stated_bound, recomputed
            )
    verdict = _latest_verdict(state, experiment)
    measured = _measured(state, verdict) if verdict is not None else None
    bound = recomputed if recomputed is not None else figures.bound
    error = None
    if measured is not None and measured.speedup is not None and bound is not None:
        error = measured.speedup - bound
    owed = any(
        state.verdicts[s].contradicts_claim  # a target result, or a failed screen (R14)
        for s in experiment.verdicts
        if s in state.verdicts
    )
    premises = [
        r.premise for r in state.reconciliations if r.experiment_id == created.experiment_id
    ]
    s_min = figures.s_min
    predicted_low, predicted_high = predicted_improvement(experiment, definition.primary.direction)
    return ClaimRow(
        experiment_id=created.experiment_id,
        target_id=created.target_id,
        title=created.title,
        status=experiment.status,
        statistic=definition.primary.statistic,
        coverage=claim.coverage,
        local_speedup=claim.local_speedup,
        added_cost=claim.added_cost,
        stated_bound=claim.stated_bound,
        recomputed_bound=recomputed,
        bound_consistent=consistent,
        min_effect=definition.min_effect,
        s_min=None if s_min is None or math.isinf(s_min) else s_min,
        predicted_low=predicted_low,
        predicted_high=predicted_high,
        measured=measured,
        prediction_error=error,
        interval_error=_interval_error(
            measured.estimate if measured else None, predicted_low, predicted_high
        ),
        reconciliation_owed=owed,
        reconciled=bool(premises),
        reconciliations=premises,
        measurement_flags=experiment_flags(state, created.experiment_id),
    )


def claims(state: WorkflowState, target_id: str | None = None) -> list[ClaimRow]:
    """Return every experiment's claim beside its outcome, in creation order (optionally only
    those of ``target_id``)."""
    return [
        claim_row(state, experiment)
        for experiment in state.experiments.values()
        if target_id is None or experiment.created.target_id == target_id
    ]
