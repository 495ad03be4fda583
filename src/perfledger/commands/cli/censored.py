"""Rounds a candidate's failed call would silently drop from a formal stage (R5, R12; SPEC.md
section 5, "Workload driver").

A samples pair needs both calls' values, so a round whose candidate call failed (non-zero exit,
timeout, no JSON, a partial object) or left out the primary metric is not recorded. Left to that,
a candidate chooses which of its calls count: one that exits 1 (or omits the metric) whenever its
own timer says the call was slow keeps only its fast calls. Measured here: an identical
candidate whose work varies +-50 % per call and which failed its slower half showed 26 %
"faster" in a target stage (5 of 12 pairs kept), every kept time honest, so the wall clock had
nothing to doubt. A formal stage is therefore not recorded when the candidate's call failed in a
round where the reference's call gave the primary metric; a screen keeps the rounds it can and
says which were dropped.

A round where the reference's call failed stays the reference's failure (R11) and is dropped.
"""

from __future__ import annotations

from typing import Any

from perfledger.errors import MeasurementError

#: Most call ids named in a message.
_NAMED = 8


def censored_candidate_calls(run: Any, primary: str) -> list[str]:
    """Candidate calls whose round the samples cannot hold because of the candidate alone.

    Args:
        run: a :class:`perfledger.kernels.driver.DriverRun`.
        primary: the Target's primary metric name.
    Returns: ``"<call_id> (<why>)"`` for every paired round (warm-up excluded) whose reference
        call gave ``primary`` and whose candidate call failed or did not give it.
    """
    out = []
    for p in run.pairs:
        if not (p.ref.ok and primary in p.ref.metrics):
            continue
        if not p.cand.ok:
            out.append(f"{p.cand.call_id} ({p.cand.reason}: {p.cand.message})")
        elif primary not in p.cand.metrics:
            out.append(f"{p.cand.call_id} (no {primary!r} in its metrics)")
    return out


def refuse_censored_formal_stage(run: Any, primary: str, stage: str, formal: bool) -> list[str]:
    """Stop a formal stage whose candidate failed a call the reference did not (module docstring).

    Args:
        run: the driver run; primary: the primary metric; stage: its name (for messages);
        formal: whether ``stage`` is formal (target, final audit).
    Returns: the note lines for a screen (empty when nothing was dropped).
    Raises: MeasurementError (exit 1, nothing recorded) in a formal stage with such a call.
    """
    calls = censored_candidate_calls(run, primary)
    if not calls:
        return []
    shown = "; ".join(calls[:_NAMED]) + (
        f" and {len(calls) - _NAMED} more" if len(calls) > _NAMED else ""
    )
    if formal:
        raise MeasurementError(
            f"the candidate's call failed in {len(calls)} round(s) of this {stage} stage where "
            f"the reference's gave {primary!r}: {shown}. Those rounds cannot be recorded, and "
            "dropping them would let a candidate keep only the calls it chose (R5, R12); "
            "nothing was recorded",
            hint="fix the candidate so that every call gives a result, then measure again",
        )
    return [
        f"note failed calls: {len(calls)} round(s) dropped because the candidate's call failed "
        f"where the reference's did not ({shown}); a target stage with such a call is not "
        "recorded"
    ]


__all__ = ["censored_candidate_calls", "refuse_censored_formal_stage"]
