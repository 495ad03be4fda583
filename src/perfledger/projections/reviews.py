"""Review records folded: every review, and which dissent is still unresolved (pure).

A review with ``dissent_remains`` stays unresolved until a later review names it in
``resolves``. Nothing here judges who is right: the read model only lists what was recorded.
"""

from __future__ import annotations

import re

import msgspec

from perfledger.events.kinds import RecordedEvent
from perfledger.events.review import ReviewRecorded


class ReviewView(msgspec.Struct, kw_only=True):
    """One recorded review, its event id and the review that resolved its dissent (if any)."""

    review: ReviewRecorded
    event_id: str
    resolved_by: str | None = None


class ReviewState(msgspec.Struct, kw_only=True):
    """Every review by id, in ledger order."""

    reviews: dict[str, ReviewView] = msgspec.field(default_factory=dict)


def evolve(state: ReviewState, event: RecordedEvent) -> ReviewState:
    """Fold one event (kinds other than ReviewRecorded are ignored); updated in place."""
    p = event.payload
    if isinstance(p, ReviewRecorded) and p.review_id not in state.reviews:
        state.reviews[p.review_id] = ReviewView(review=p, event_id=event.id)
        for earlier in p.resolves:
            view = state.reviews.get(earlier)
            if view is not None and view.resolved_by is None:
                view.resolved_by = p.review_id
    return state


def unresolved_dissent(state: ReviewState, target_id: str | None = None) -> list[ReviewView]:
    """Reviews whose dissent remains and that no later review resolved; with ``target_id``,
    those of that Target and those that name no Target."""
    return [
        v
        for v in state.reviews.values()
        if v.review.dissent_remains
        and v.resolved_by is None
        and (target_id is None or v.review.target_id in (None, target_id))
    ]


def dissent_line(view: ReviewView) -> str:
    """One line for a handoff: who dissents about what, the challenge and the response."""
    r = view.review
    return (
        f"unresolved dissent: review {r.review_id} by {r.reviewer} ({r.model_family}) on the "
        f"{r.subject} {r.subject_event[:12]}: {r.challenge} (response: {r.response})"
    )


_LINE = re.compile(r"^unresolved dissent: review (?P<id>\S+) by ")


def settled_dissent(state: ReviewState, question: str) -> bool:
    """Whether ``question`` (a line of an earlier recorded handoff) is a :func:`dissent_line`
    whose review a later review has resolved: a handoff carries it forward no longer."""
    match = _LINE.match(question)
    view = state.reviews.get(match.group("id")) if match else None
    return view is not None and view.resolved_by is not None
