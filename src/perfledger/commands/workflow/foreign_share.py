"""R17 at formal stages: an explanation of foreign activity cannot by itself let a target or
final-audit derivation pass when the activity touched more than :data:`FOREIGN_SHARE_LIMIT` of
the pairs (``VerdictRecorded``/``FinalAuditRecorded`` schema
:data:`perfledger.events.workflow.PER_CASE_V2` on).

Why: an explanation (``--explain-foreign``, ``ActivityExplained``) is an assertion, and a
process that only slows the reference (e.g. one that stops the reference's calls) shows as
foreign activity in every window. A formal stage that a quiet host would decide must then be
measured again on a quiet host; screens keep the earlier rule (explained activity is cleared).

What lifts the limit: before ``VerdictRecorded`` schema
:data:`~perfledger.events.workflow.R17_FOREIGN_SHARE_BY_REVIEW_VERDICT` (``FinalAuditRecorded``
:data:`~perfledger.events.workflow.R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT`), the readiness's
``statistics.allow_explained_foreign_activity`` (a value the agent who wants the result types);
from them, only evidence: a settled review of the samples' event by an actor other than the
experiment's creator, the samples' recorder and the one deciding (issue 34); the flag is noted
as ignored. The same share judges the monitor windows of a measurement of the original against
itself (:func:`windows_share`: the baseline, the A/A), which no flag waives.
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


def windows_share(windows: Any) -> tuple[int, int]:
    """How many of ``windows`` (the monitor's windows as a raw table records them: dicts with
    ``foreign_activity``) saw foreign activity, and how many there are (R17). Anything that is
    not a list counts as no windows; an entry that is not a dict counts as touched (a window
    that cannot be read was not shown to be quiet)."""
    if not isinstance(windows, list):
        return 0, 0
    touched = sum(1 for w in windows if not isinstance(w, dict) or bool(w.get("foreign_activity")))
    return touched, len(windows)


def over_limit(touched: int, total: int) -> bool:
    """Whether ``touched`` of ``total`` monitor windows exceed :data:`FOREIGN_SHARE_LIMIT` (R17;
    the comparison the baseline's and the A/A's refusal has always made)."""
    return total > 0 and touched > FOREIGN_SHARE_LIMIT * total


def formal_foreign_rule(
    samples: Any,
    status: str,
    notes: list[str],
    allowed: bool = False,
    *,
    review_rule: bool = False,
    reviewed_by: str | None = None,
    flag_ignored: bool = False,
) -> str:
    """R17: a formal-stage ``pass`` whose samples saw foreign activity in more than
    :data:`FOREIGN_SHARE_LIMIT` of their pairs becomes ``inconclusive``, with a note saying to
    measure again on a quiet host; other stages and statuses are returned unchanged.

    Args:
        samples: the SamplesRecorded judged; status: the status derived so far;
        notes: the verdict's notes (appended to); allowed: the readiness declared
            ``statistics.allow_explained_foreign_activity`` and the rule version still reads it
            (before :data:`~perfledger.events.workflow.R17_FOREIGN_SHARE_BY_REVIEW_VERDICT`; the
            pass stands, noted).
        review_rule: the rule version is that one or later (only a review lifts the limit).
        reviewed_by: from that version, the appender of a settled review of the samples by an
            actor other than the interested ones (the pass stands, noted); None: no such review.
        flag_ignored: the readiness sets the flag and the rule version ignores it (noted where
            the share is over the limit).
    Returns: the status.
    """
    total = len(samples.pairs)
    if samples.stage not in FORMAL_STAGES or total == 0:
        return status
    touched = foreign_pairs(samples)
    if touched / total <= FOREIGN_SHARE_LIMIT:
        return status
    if flag_ignored:
        notes.append(
            "ignored (R17): the readiness's statistics.allow_explained_foreign_activity, a value "
            "typed by the agent who wants the result, decides nothing; only a review of these "
            "samples by another actor lifts the 20 % limit"
        )
    if status != "pass":
        return status
    if review_rule and reviewed_by is not None:
        # not an "R17:" note: those name what kept a result from passing (verdict explain)
        notes.append(
            f"reviewed (R17): foreign activity on {touched} of {total} pairs; a review of these "
            f"samples by {reviewed_by!r}, an actor other than the experiment's, lifts the "
            f"{100 * FOREIGN_SHARE_LIMIT:.0f} % limit"
        )
        return status
    if allowed and not review_rule:
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
        + (
            ", or have an actor other than the experiment's review these samples"
            if review_rule
            else ""
        )
    )
    return "inconclusive"
