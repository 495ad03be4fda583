"""Explanations only by evidence (SPEC.md R12, R17): a review by an actor other than the ones
who want the result.

A figure the rules would flag (foreign activity in a formal window, R17; a ratio beyond the
plausible bound, R12) is explained only by a ``ReviewRecorded`` on the event that holds it, its
dissent settled, appended by an actor outside ``interested`` (the experiment's creator, the
samples' recorder, the one deciding): never by a string from the agent that wants the result.
Actors are the envelopes' (``DecisionContext.actor_of``): who appended each event.
"""

from __future__ import annotations

from collections.abc import Callable

from perfledger.projections.reviews import ReviewView
from perfledger.projections.workflow import WorkflowState


def settling_review(
    state: WorkflowState,
    subject_event: str,
    interested: set[str],
    actor_of: Callable[[str], str] | None,
    review_id: str | None = None,
) -> ReviewView | None:
    """The first review (``review_id`` only, when given) of ``subject_event`` whose dissent is
    settled and whose appender is outside ``interested``; None when there is none, or when the
    appenders cannot be known (``actor_of`` None)."""
    if actor_of is None:
        return None
    for view in state.reviews.reviews.values():
        review = view.review
        if review_id is not None and review.review_id != review_id:
            continue
        if review.subject_event != subject_event or review.dissent_remains:
            continue
        if actor_of(view.event_id) not in interested:
            return view
    return None


def interested_actors(
    actor_of: Callable[[str], str] | None, deciding: str, *event_ids: str
) -> set[str]:
    """The actors who want the result: the one ``deciding`` and the appenders of ``event_ids``
    (the experiment's creation, the samples)."""
    found = {deciding}
    if actor_of is not None:
        found |= {actor_of(event_id) for event_id in event_ids}
    return found
