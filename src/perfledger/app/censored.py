"""Rounds a failed call would silently drop from a formal stage (R5, R11, R12; SPEC.md section
5, "Workload driver").

A samples pair needs both calls' values, so a round in which either call failed (non-zero exit,
timeout, no JSON, a partial object) or left out the primary metric is not recorded. Left to that,
a candidate chooses which of its calls count:

- one that exits 1 (or omits the metric) whenever its own timer says the call was slow keeps
  only its fast calls. Measured here: an identical candidate whose work varies +-50 % per call
  and which failed its slower half showed 26 % "faster" in a target stage (5 of 12 pairs kept),
  every kept time honest, so the wall clock had nothing to doubt;
- one that, after a slow call of its own, hides a file the reference reads (and puts it back
  when its next call starts) makes the reference's next call fail, and the round with its slow
  call is dropped as "the reference's failure": 25 % "faster" in a screen, measured the same way.

So a formal stage (target, final audit) is recorded only when every paired round gave the
primary metric from both calls; otherwise ``measure`` records nothing and names the calls. A
screen keeps the rounds it can and says which were dropped. Who failed is named; a reference's
failure still never counts against the candidate (R5, R11): it only stops the stage being
recorded, as any incomplete formal stage.
"""

from __future__ import annotations

from typing import Any

from perfledger.errors import MeasurementError

#: Most call ids named in a message.
_NAMED = 8


def unrecorded_rounds(run: Any, primary: str) -> list[str]:
    """Paired rounds (warm-up excluded) the samples cannot hold, one phrase each.

    Args:
        run: a :class:`perfledger.kernels.workload.driver.DriverRun`.
        primary: the Target's primary metric name.
    Returns: ``"<call_id> (<why>)"`` for each call of a paired round that failed or did not give
        ``primary``, in run order (both calls where both did).
    """
    out = []
    for p in run.pairs:
        for call in (p.ref, p.cand):
            if not call.ok:
                out.append(f"{call.call_id} ({call.reason}: {call.message})")
            elif primary not in call.metrics:
                out.append(f"{call.call_id} (no {primary!r} in its metrics)")
    return out


def refuse_censored_formal_stage(
    run: Any, primary: str, stage: str, formal: bool, detail: str = ""
) -> list[str]:
    """Stop a formal stage with a round that cannot be recorded (module docstring).

    Args:
        run: the driver run; primary: the primary metric; stage: its name (for messages);
        formal: whether ``stage`` is formal (target, final audit); detail: appended to the
        error (the first failed call's stderr).
    Returns: the note lines for a screen (empty when nothing was dropped).
    Raises: MeasurementError (exit 1, nothing recorded) in a formal stage with such a round.
    """
    calls = unrecorded_rounds(run, primary)
    if not calls:
        return []
    shown = "; ".join(calls[:_NAMED]) + (
        f" and {len(calls) - _NAMED} more" if len(calls) > _NAMED else ""
    )
    # whose calls: a flaky reference is the operator's to fix, a failing candidate the agent's
    ref_n = sum(1 for p in run.pairs if not p.ref.ok or primary not in p.ref.metrics)
    whose = f" (the reference's: {ref_n}, the candidate's: {len(calls) - ref_n})"
    if formal:
        raise MeasurementError(
            f"{len(calls)} call(s) of this {stage} stage gave no {primary!r}{whose}: {shown}. Their "
            "rounds cannot be recorded, and dropping them would let a candidate choose which "
            "of its calls count (failing its slow ones, or making the reference's call after "
            f"them fail) (R5, R12); nothing was recorded{detail}",
            hint="make every call of both subjects give a result (run them by hand), then "
            "measure again; a reference's failure does not count against the candidate",
        )
    return [
        f"note failed calls: {len(calls)} call(s) gave no {primary!r} and their rounds were "
        f"dropped ({shown}); a target or final-audit stage with such a round is not recorded"
    ]


__all__ = ["refuse_censored_formal_stage", "unrecorded_rounds"]
