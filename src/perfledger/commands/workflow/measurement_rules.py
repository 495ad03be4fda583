"""Rules on what a measurement found (R5, R13): a candidate that failed its accuracy check on any
call of a formal stage, or whose formal-stage samples the driver's wall clock flagged
(:mod:`perfledger.derive.wall_check`), cannot support a champion, whatever its other pairs say.
The reference's failures stay the reference's (R11): they never count against the candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfledger.commands.workflow.rules import refuse
from perfledger.projections.measurement_flags import FORMAL_STAGES, formal_samples
from perfledger.projections.workflow import ExperimentView, WorkflowState

#: Most call ids named in a refusal.
_NAMED = 8


def formal_findings(
    state: WorkflowState,
    experiment: ExperimentView,
    payload_of: Callable[[str], Any] | None,
) -> tuple[list[str], list[str]]:
    """What the experiment's formal-stage samples hold against its candidate.

    Args:
        state: the state; experiment: the experiment whose samples are read.
        payload_of: event id -> recorded payload (the pairs live in the SamplesRecorded event);
            None reads the state's failure counts only (no call ids, no wall-clock check).
    Returns: ``(failed_calls, flags)``: ``samples_id/call_id`` of every candidate call that
        failed its accuracy check (R5; a pair where only the reference failed is not one), and
        one line per samples whose wall-clock check is flagged.
    """
    # the read models' twin (measurement_flags.experiment_flags) reads no payloads: it shows
    # counts and verdict notes; a refusal names the calls and the samples' own wall check
    failed: list[str] = []
    flags: list[str] = []
    for stage, samples_id, view in formal_samples(state, experiment):
        if payload_of is None:
            failed += [f"{samples_id}: {view.cand_failures} call(s)"] * bool(view.cand_failures)
            continue
        samples = payload_of(view.event_id)
        failed += [f"{samples_id}/{p.cand.call_id}" for p in samples.pairs if not p.cand.correct]
        check = getattr(samples, "wall_check", None)
        if check is not None and check.flagged:
            reason = check.reasons[0] if check.reasons else "flagged"
            flags.append(f"{samples_id} ({stage}): {reason}")
    return failed, flags


def r5_r13_disqualified(
    state: WorkflowState,
    experiment: ExperimentView,
    payload_of: Callable[[str], Any] | None,
) -> None:
    """R5/R13: refuse a champion whose candidate failed its accuracy check on any call of a
    formal stage (naming the calls), or whose formal-stage samples the wall-clock check flagged
    (naming the flag). Raises: RuleRefused (R5 or R13)."""
    failed, flags = formal_findings(state, experiment, payload_of)
    name = experiment.created.experiment_id
    if failed:
        shown = ", ".join(failed[:_NAMED]) + (
            f" and {len(failed) - _NAMED} more" if len(failed) > _NAMED else ""
        )
        raise refuse(
            "R5",
            f"experiment {name!r}: the candidate failed its accuracy check in a formal stage "
            f"({shown}); a correctness failure disqualifies it from being champion (R13), "
            "whatever its other pairs say",
            "fix the candidate and measure it as a new experiment",
        )
    if flags:
        raise refuse(
            "R13",
            f"experiment {name!r}: flagged by the wall-clock check: {flags[0]}",
            "a self-reported time that the driver's wall clock does not bear out supports no "
            "champion; see docs/measurement.md, 'Workload driver'",
        )


__all__ = ["FORMAL_STAGES", "formal_findings", "r5_r13_disqualified"]
