"""What a measurement found suspicious, per experiment, for the read models (``claims``, the
handoff, the report): verdict notes of the wall-clock check (R12) and the candidate's failed
accuracy checks in formal stages (R5). Pure functions of the state (SPEC.md section 1)."""

from __future__ import annotations

from collections.abc import Iterator

from perfledger.events.workflow import FORMAL_STAGES, WallCheck
from perfledger.projections.workflow import ExperimentView, SamplesView, WorkflowState

#: How a verdict note of the wall-clock check begins (R12); the deciders write it.
WALL_CLOCK_NOTE = "R12: wall clock:"


def wall_clock_note(check: WallCheck | None) -> str | None:
    """The verdict note of a flagged wall-clock check (R12): :data:`WALL_CLOCK_NOTE` and the
    first reasons; None when the check is absent or not flagged."""
    if check is None or not check.flagged:
        return None
    reasons = "; ".join(check.reasons[:3]) or "flagged"
    return f"{WALL_CLOCK_NOTE} self-reported times are not borne out by the driver's wall time: {reasons}"


def formal_samples(
    state: WorkflowState, experiment: ExperimentView
) -> Iterator[tuple[str, str, SamplesView]]:
    """``(stage, samples_id, view)`` of every formal-stage (target, final audit) samples of
    ``experiment`` that the state holds, stage by stage in recorded order (R5, R13)."""
    for stage in FORMAL_STAGES:
        for samples_id in experiment.samples.get(stage, []):
            view = state.samples.get(samples_id)
            if view is not None:
                yield stage, samples_id, view


def experiment_flags(state: WorkflowState, experiment_id: str) -> list[str]:
    """The measurement flags of an experiment, one line each: its verdicts' wall-clock notes
    (``SAMPLES: NOTE``) and, per formal-stage samples where its candidate failed an accuracy
    check that the reference passed, a disqualification line (R5, R13). Empty when none.

    Not :func:`perfledger.commands.workflow.measurement_rules.formal_findings` on purpose: a
    projection reads no payloads, so it shows the verdicts' notes and the samples' failure counts
    where the decider names each failed call and reads the samples' own wall-clock check."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return []
    out: list[str] = []
    for samples_id in experiment.verdicts:
        verdict = state.verdicts.get(samples_id)
        if verdict is None:
            continue
        out += [f"{samples_id}: {n}" for n in verdict.notes if n.startswith(WALL_CLOCK_NOTE)]
    for _stage, samples_id, view in formal_samples(state, experiment):
        if view.cand_failures:
            out.append(
                f"{samples_id}: the candidate failed its accuracy check on "
                f"{view.cand_failures} call(s) of a formal stage: it cannot be champion (R5)"
            )
    return out


__all__ = [
    "FORMAL_STAGES",
    "WALL_CLOCK_NOTE",
    "experiment_flags",
    "formal_samples",
    "wall_clock_note",
]
