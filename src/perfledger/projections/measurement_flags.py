"""What a measurement found suspicious, per experiment, for the read models (``claims``, the
handoff, the report): verdict notes of the wall-clock check (R12) and the candidate's failed
accuracy checks in formal stages (R5). Pure functions of the state (SPEC.md section 1)."""

from __future__ import annotations

from perfledger.events.workflow import FORMAL_STAGES, WallCheck
from perfledger.projections.workflow import WorkflowState

#: How a verdict note of the wall-clock check begins (R12); the deciders write it.
WALL_CLOCK_NOTE = "R12: wall clock:"


def wall_clock_note(check: WallCheck | None) -> str | None:
    """The verdict note of a flagged wall-clock check (R12): :data:`WALL_CLOCK_NOTE` and the
    first reasons; None when the check is absent or not flagged."""
    if check is None or not check.flagged:
        return None
    reasons = "; ".join(check.reasons[:3]) or "flagged"
    return f"{WALL_CLOCK_NOTE} self-reported times are not borne out by the driver's wall time: {reasons}"


def experiment_flags(state: WorkflowState, experiment_id: str) -> list[str]:
    """The measurement flags of an experiment, one line each: its verdicts' wall-clock notes
    (``SAMPLES: NOTE``) and, per formal-stage samples where its candidate failed an accuracy
    check that the reference passed, a disqualification line (R5, R13). Empty when none."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return []
    out: list[str] = []
    for samples_id in experiment.verdicts:
        verdict = state.verdicts.get(samples_id)
        if verdict is None:
            continue
        out += [f"{samples_id}: {n}" for n in verdict.notes if n.startswith(WALL_CLOCK_NOTE)]
    for stage in FORMAL_STAGES:
        for samples_id in experiment.samples.get(stage, []):
            view = state.samples.get(samples_id)
            if view is not None and view.cand_failures:
                out.append(
                    f"{samples_id}: the candidate failed its accuracy check on "
                    f"{view.cand_failures} call(s) of a formal stage: it cannot be champion (R5)"
                )
    return out


__all__ = ["FORMAL_STAGES", "WALL_CLOCK_NOTE", "experiment_flags", "wall_clock_note"]
