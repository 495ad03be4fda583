"""R17 at formal stages: an explanation of foreign activity cannot by itself let a target or
final-audit derivation pass when the activity touched more than :data:`FOREIGN_SHARE_LIMIT` of
the pairs (``VerdictRecorded``/``FinalAuditRecorded`` schema
:data:`perfledger.events.workflow.PER_CASE_V2` on).

Why: an explanation (``--explain-foreign``, ``ActivityExplained``) is an assertion, and a
process that only slows the reference (e.g. one that stops the reference's calls) shows as
foreign activity in every window. A formal stage that a quiet host would decide must then be
measured again on a quiet host; screens keep the earlier rule (explained activity is cleared).
A Target whose metric the host's load cannot move (e.g. a process's own CPU time) may declare so
before measuring (readiness ``statistics.allow_explained_foreign_activity``).
"""

from __future__ import annotations

from typing import Any

from perfledger.events.workflow import FORMAL_STAGES

#: Largest share of pairs with foreign activity (explained or not) with which a formal stage
#: may still pass.
FOREIGN_SHARE_LIMIT = 0.20


def foreign_pairs(samples: Any) -> int:
    """How many pairs of ``samples`` (a SamplesRecorded) the monitor saw foreign activity in,
    whether or not it was explained (R17)."""
    return sum(1 for p in samples.pairs if p.monitor is not None and p.monitor.foreign_activity)


def formal_foreign_rule(samples: Any, status: str, notes: list[str], allowed: bool = False) -> str:
    """R17: a formal-stage ``pass`` whose samples saw foreign activity in more than
    :data:`FOREIGN_SHARE_LIMIT` of their pairs becomes ``inconclusive``, with a note saying to
    measure again on a quiet host; other stages and statuses are returned unchanged.

    Args:
        samples: the SamplesRecorded judged; status: the status derived so far;
        notes: the verdict's notes (appended to); allowed: the readiness declared
            ``statistics.allow_explained_foreign_activity`` (the pass stands, noted).
    Returns: the status.
    """
    total = len(samples.pairs)
    if samples.stage not in FORMAL_STAGES or status != "pass" or total == 0:
        return status
    touched = foreign_pairs(samples)
    if touched / total <= FOREIGN_SHARE_LIMIT:
        return status
    if allowed:
        # not an "R17:" note: those name what kept a result from passing (verdict explain)
        notes.append(
            f"allowed by the readiness (R17): explained foreign activity on {touched} of {total} "
            "pairs (statistics.allow_explained_foreign_activity: the metric is declared immune "
            "to the host's load)"
        )
        return status
    notes.append(
        f"R17: foreign activity touched {touched} of {total} pairs "
        f"({100 * touched / total:.0f} % > {100 * FOREIGN_SHARE_LIMIT:.0f} %); at a formal stage "
        "an explanation cannot by itself let the result pass: measure again on a quiet host"
    )
    return "inconclusive"
