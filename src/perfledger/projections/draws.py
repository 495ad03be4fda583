"""How many draws a Target's champion came out of (R14, the findings' O2): the experiments that
reached a formal target stage on the Target, and how many of them have no passing target
verdict. R14 refuses a second formal result of the same code, keyed on its bytes; a changed
comment is new bytes, so nothing stops a new experiment from drawing again. The count makes
the draws visible where a champion is read (``champion show``, the handoff, the audit's notes),
so that a reader can weigh a pass among many failed attempts. No rule is attached to it."""

from __future__ import annotations

import msgspec

from perfledger.events.workflow import ORIGINAL
from perfledger.projections.workflow import WorkflowState, formal_runs, is_judged


class FormalDraws(msgspec.Struct, kw_only=True, frozen=True):
    """The formal target-stage attempts on one Target (R14).

    Attributes:
        target_id: the Target.
        experiments: experiments with a target-stage result (a started run or recorded samples).
        not_passing: those of them without a passing target verdict (failed, inconclusive,
            stale, unfinished or not yet judged).
    """

    target_id: str
    experiments: int
    not_passing: int

    def text(self) -> str:
        """``N formal target stage(s) on this Target, M not passing``."""
        return (
            f"{self.experiments} formal target stage(s) on this Target, "
            f"{self.not_passing} not passing"
        )


def formal_draws(state: WorkflowState, target_id: str) -> FormalDraws:
    """Count the experiments of ``target_id`` that reached a formal target stage and those of
    them without a passing target verdict (R14); read-only, no rule depends on it."""
    reached: set[str] = {
        run.experiment_id
        for run in formal_runs(state).values()
        if run.target_id == target_id and run.stage == "target"
    }
    reached |= {
        s.experiment_id
        for s in state.samples.values()
        if s.target_id == target_id and s.stage == "target"
    }
    passed = {
        v.experiment_id
        for v in state.verdicts.values()
        if v.target_id == target_id and v.stage == "target" and v.status == "pass"
    }
    return FormalDraws(
        target_id=target_id, experiments=len(reached), not_passing=len(reached - passed)
    )


def champion_draws_note(state: WorkflowState, target_id: str) -> str | None:
    """``champion E of Target T after N formal target stage(s) on this Target, M not passing``,
    or None where the Target has no champion but the original."""
    target = state.targets.get(target_id)
    if target is None or target.champion in (None, ORIGINAL):
        return None
    return f"champion {target.champion} of Target {target_id} after {formal_draws(state, target_id).text()}"


def unfinished_run_notes(state: WorkflowState) -> list[str]:
    """One note per started formal run that recorded no samples on this history (R14: it counts
    as failed; a run measured elsewhere and never pushed leaves no such trace, SPEC section 1),
    saying whether its failed verdict or final audit is recorded."""
    out = []
    for sid, run in formal_runs(state).items():
        if sid in state.samples:
            continue
        judged = (
            "judged as failed" if is_judged(state, sid) else "its failed result not yet recorded"
        )
        out.append(
            f"formal run {sid} ({run.stage} of {run.experiment_id}, Target {run.target_id}) "
            f"started and recorded no samples: it counts as failed (R14; {judged})"
        )
    return out
