"""Rules on what a measurement found (R5, R13): a candidate that failed its accuracy check on any
call of a formal stage, or whose formal-stage samples the driver's wall clock flagged
(:mod:`perfledger.derive.wall_check`), cannot support a champion, whatever its other pairs say.
The reference's failures stay the reference's (R11): they never count against the candidate.

Samples recorded from outside perfledger (provenance ``outside``, or none) are shown, labelled
as outside, but never make a champion nor pass a final audit (R5, from ``ChampionSelected``
:data:`~perfledger.events.workflow.R5_MEASURED_CHAMPION` and ``FinalAuditRecorded``
:data:`~perfledger.events.workflow.R5_MEASURED_FINAL_AUDIT`): perfledger observes, and a pairs
table written elsewhere is a declaration.

Samples of a self-timed protocol (:data:`~perfledger.events.workflow.SELF_TIMED_PROTOCOLS`, the
workload driver's calls report their own times) are figures the subject reports: from
``ChampionSelected`` :data:`~perfledger.events.workflow.R5_REPORTED_CHAMPION` and
``FinalAuditRecorded`` :data:`~perfledger.events.workflow.R5_REPORTED_FINAL_AUDIT` they are
``reported`` (:func:`samples_source` with ``self_timed``) and, like outside samples, shown but
never make a champion nor pass a final audit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import SELF_TIMED_PROTOCOLS
from perfledger.projections.measurement_flags import FORMAL_STAGES, formal_samples
from perfledger.projections.target_kind import measuring_command
from perfledger.projections.workflow import ExperimentView, SamplesView, WorkflowState

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


def samples_source(
    recorded: Any | None, marked: str | None = None, *, self_timed: bool = False
) -> str:
    """R5: where samples come from, as their event records it: ``perfledger`` (measured, with
    their raw table), ``outside``, or, where ``self_timed`` asks (the rule versions of
    :data:`~perfledger.events.workflow.R5_REPORTED_CHAMPION`), ``reported`` for samples of a
    self-timed protocol (the subject's own timer). ``recorded`` is the SamplesRecorded payload
    (None when no ledger was given to read it); then ``marked`` (a verdict's
    ``samples_provenance``) is taken. Samples of unknown provenance count as outside."""
    if recorded is not None:
        provenance = getattr(recorded, "provenance", None)
        if provenance is None or provenance.source != "perfledger":
            return "outside"
        if self_timed and provenance.protocol in SELF_TIMED_PROTOCOLS:
            return "reported"
        return "perfledger"
    if marked == "reported":
        return "reported" if self_timed else "perfledger"
    return "perfledger" if marked == "perfledger" else "outside"


#: Why samples of each source other than ``perfledger`` decide nothing (R5), for messages.
_NOT_MEASURED = {
    "outside": "were recorded from outside perfledger (a pairs table written elsewhere)",
    "reported": "are figures the subject reported (the self-timed driver, `--protocol self`: "
    "its own timer, not perfledger's clock)",
}


def _free_samples_id(state: WorkflowState, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``, ... : the first samples id not yet recorded."""
    n, sid = 1, base
    while sid in state.samples:
        n += 1
        sid = f"{base}-{n}"
    return sid


def r5_measured_champion(
    state: WorkflowState,
    view: SamplesView,
    marked: str | None,
    payload_of: Callable[[str], Any] | None,
    *,
    self_timed: bool = False,
) -> None:
    """R5/R13: refuse a champion whose target-stage samples (``view``; ``marked``: their
    verdict's ``samples_provenance``) were recorded from outside perfledger, or, with
    ``self_timed`` (``ChampionSelected`` from
    :data:`~perfledger.events.workflow.R5_REPORTED_CHAMPION`), are figures the subject reported.
    Raises: RuleRefused (R5) naming the samples and the measuring command of the Target's kind."""
    recorded = payload_of(view.event_id) if payload_of is not None else None
    source = samples_source(recorded, marked, self_timed=self_timed)
    if source == "perfledger":
        return
    measure = measuring_command(state, view.target_id, "samples.record", view.experiment_id)
    sid = _free_samples_id(state, f"{view.experiment_id}-target-measured")
    raise refuse(
        "R5",
        f"samples {view.samples_id!r} {_NOT_MEASURED[source]}: they are shown, labelled as "
        f"{source}, but a champion comes only from target-stage samples perfledger measured "
        "(observed by its own clock)",
        f"measure {view.experiment_id}'s target stage: `{measure} --samples {sid}`, derive its "
        f"verdict (`perfledger verdict record --samples {sid}`), then select --samples {sid} if "
        "it passed",
    )


def r5_measured_final_audit(
    state: WorkflowState,
    view: SamplesView,
    recorded: Any,
    status: str,
    notes: list[str],
    *,
    self_timed: bool = False,
) -> str:
    """R5/R13: a final audit on samples recorded from outside perfledger (``recorded``: the
    SamplesRecorded payload of ``view``), or, with ``self_timed`` (``FinalAuditRecorded`` from
    :data:`~perfledger.events.workflow.R5_REPORTED_FINAL_AUDIT`), on figures the subject
    reported, cannot pass: ``pass`` becomes ``inconclusive``, and the note says why and what to
    run, whatever the status. Returns: the status."""
    source = samples_source(recorded, self_timed=self_timed)
    if source == "perfledger":
        return status
    measure = measuring_command(state, view.target_id, "samples.record", view.experiment_id)
    sid = _free_samples_id(state, f"{view.experiment_id}-audit-measured")
    notes.append(
        f"R5: samples {view.samples_id!r} {_NOT_MEASURED[source]}; a final audit "
        f"passes only on samples perfledger measured: `{measure} --samples {sid}`, then "
        f"`perfledger final-audit record --target {view.target_id} --samples {sid}`"
    )
    return "inconclusive" if status == "pass" else status
