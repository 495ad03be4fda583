"""The decider of ``review.record``: a research/review record (never a judgment).

It checks only what makes the record well-formed: a new review id, a reviewed event that exists
and is of the kind its subject names, ``resolves`` naming earlier reviews whose dissent is
still open, and (schema :data:`~perfledger.events.workflow.R12_REVIEW_NAMES_FLAG` on)
``explains`` naming flags that the reviewed samples record, and (schema
:data:`~perfledger.events.workflow.R12_SIGNED_REVIEW` on) a ``signature`` that is a good one of
the review's content by the key it carries. It derives the reviewed event's kind and Target, and
the signer's key. It blocks no other decision.
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.commands.workflow.deciders import DecisionContext, _emit, rules_version
from perfledger.commands.workflow.requests import ReviewRecord, dump
from perfledger.commands.workflow.review_signature import checked_signature
from perfledger.errors import BadRequest
from perfledger.events.review import SUBJECT_KINDS, FlagRef, ReviewRecorded
from perfledger.events.workflow import R12_REVIEW_NAMES_FLAG, R12_SIGNED_REVIEW
from perfledger.projections.workflow import WorkflowState


def decide_review_record(
    state: WorkflowState, req: ReviewRecord, ctx: DecisionContext
) -> list[Any]:
    """``review.record``: append a ReviewRecorded with the reviewed event's kind and Target.

    Raises: BadRequest (exit 2) for a repeated review id, an unknown reviewed event, a subject
        that does not name the event's kind, a ``resolves`` entry that is unknown, has no
        remaining dissent or is already resolved, or an ``explains`` entry that names no flag of
        the reviewed samples (:func:`_explained_flags`), or a signature that does not check
        (:func:`~perfledger.commands.workflow.review_signature.checked_signature`).
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
    explains = _explained_flags(state, req, ctx)
    if req.signature is not None and rules_version(ctx, "ReviewRecorded") < R12_SIGNED_REVIEW:
        raise BadRequest(
            "signature: a review of this schema carries no signature",
            hint="record it with a perfledger that records ReviewRecorded schema 3 or later",
        )
    signed = checked_signature(req)
    target_id = getattr(payload, "target_id", None)
    body = dump(req)
    del body["explains"], body["signature"]
    payload_out = ReviewRecorded(
        **{**body, "resolves": tuple(body["resolves"])},
        subject_kind=kind,
        target_id=target_id if isinstance(target_id, str) else None,
        explains=explains or msgspec.UNSET,
        **signed,
    )
    return _emit(ctx, payload_out)


def _explained_flags(
    state: WorkflowState, req: ReviewRecord, ctx: DecisionContext
) -> tuple[FlagRef, ...]:
    """R12 (schema :data:`~perfledger.events.workflow.R12_REVIEW_NAMES_FLAG` on): the flags
    ``req.explains`` names, each one the reviewed samples record (the review's subject event is
    the samples' event, the case is in their ``implausible``), none twice, the review's dissent
    settled. Raises: BadRequest otherwise, or for ``explains`` under an earlier schema."""
    if not req.explains:
        return ()
    if rules_version(ctx, "ReviewRecorded") < R12_REVIEW_NAMES_FLAG:
        raise BadRequest(
            "explains: a review of this schema names no flags",
            hint="record it with a perfledger that records ReviewRecorded schema 2 or later",
        )
    if req.dissent_remains:
        raise BadRequest(
            "explains: a review that explains a flag settles it (dissent_remains must be false)",
            hint="record the challenge with dissent_remains true and no explains; a later "
            "review that resolves it names the flags",
        )
    out: list[FlagRef] = []
    for flag in req.explains:
        samples = state.samples.get(flag.samples_id)
        if samples is None or samples.event_id != req.subject_event:
            raise BadRequest(
                f"explains: samples {flag.samples_id!r} are not the reviewed event "
                f"{req.subject_event[:12]}",
                hint="review the samples' event (`perfledger state --json`, "
                "samples.<id>.event_id) and name its flags",
            )
        recorded = samples.implausible
        cases = {} if isinstance(recorded, msgspec.UnsetType) else recorded
        if flag.case not in cases:
            raise BadRequest(
                f"explains: samples {flag.samples_id!r} record no {flag.flag} flag on case "
                f"{flag.case!r} (flagged: {sorted(cases) or 'none'})",
                hint="name a flag as the samples record it (`perfledger verdict explain "
                f"{flag.samples_id}`)",
            )
        ref = FlagRef(samples_id=flag.samples_id, flag=flag.flag, case=flag.case)
        if ref in out:
            raise BadRequest(
                f"explains: {flag.flag} {flag.case!r} is named twice",
                hint="name each flag once in explains",
            )
        out.append(ref)
    return tuple(out)
