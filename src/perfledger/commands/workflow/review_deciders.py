"""The decider of ``review.record``: a research/review record (never a judgment).

It checks only what makes the record well-formed: a new review id, a reviewed event that exists
and is of the kind its subject names, and ``resolves`` naming earlier reviews whose dissent is
still open. It derives the reviewed event's kind and Target. It blocks no other decision.
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.deciders import DecisionContext, _emit
from perfledger.commands.workflow.requests import ReviewRecord, dump
from perfledger.errors import BadRequest
from perfledger.events.review import SUBJECT_KINDS, ReviewRecorded
from perfledger.projections.workflow import WorkflowState


def decide_review_record(
    state: WorkflowState, req: ReviewRecord, ctx: DecisionContext
) -> list[Any]:
    """``review.record``: append a ReviewRecorded with the reviewed event's kind and Target.

    Raises: BadRequest (exit 2) for a repeated review id, an unknown reviewed event, a subject
        that does not name the event's kind, or a ``resolves`` entry that is unknown, has no
        remaining dissent or is already resolved.
    """
    reviews = state.reviews.reviews
    if req.review_id in reviews:
        raise BadRequest(
            f"review {req.review_id!r} is already recorded", hint="choose a new review_id"
        )
    if ctx.payload_of is None:
        raise BadRequest(
            "review.record needs the ledger to read the reviewed event",
            hint="record it through the ledger (`perfledger review record` or perfledger.api)",
        )
    try:
        payload = ctx.payload_of(req.subject_event)
    except BadRequest as exc:
        raise BadRequest(
            f"subject_event: {exc.message}",
            hint="name an event of this ledger: `perfledger log` lists them with their ids "
            "(samples' event ids: `perfledger state --json`, samples.<id>.event_id)",
        ) from None
    kind = type(payload).__name__
    wanted = SUBJECT_KINDS[req.subject]
    if wanted is not None and kind != wanted:
        raise BadRequest(
            f"subject {req.subject!r} reviews a {wanted}, but event {req.subject_event[:12]} "
            f"is a {kind}",
            hint="use subject `other` for any other event",
        )
    for earlier in req.resolves:
        view = reviews.get(earlier)
        if view is None:
            raise BadRequest(
                f"resolves: no review {earlier!r}",
                hint="`perfledger review list` lists the reviews",
            )
        if not view.review.dissent_remains:
            raise BadRequest(
                f"resolves: review {earlier!r} recorded no remaining dissent",
                hint="resolve only a review with remaining dissent (`perfledger review list --unresolved`)",
            )
        if view.resolved_by is not None:
            raise BadRequest(
                f"resolves: review {earlier!r} was resolved by {view.resolved_by!r}",
                hint="nothing to do: `perfledger review list` shows the resolution",
            )
    target_id = getattr(payload, "target_id", None)
    body = dump(req)
    payload_out = ReviewRecorded(
        **{**body, "resolves": tuple(body["resolves"])},
        subject_kind=kind,
        target_id=target_id if isinstance(target_id, str) else None,
    )
    return _emit(ctx, payload_out)
