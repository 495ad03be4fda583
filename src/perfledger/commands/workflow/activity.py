"""``activity.explain`` (R17): foreign activity explained after the samples were recorded.

A formal sample window that overlaps unexplained foreign activity makes its performance
attribution ``inconclusive``. The monitor finds such activity while measuring; what it was (a
known backup job on another GPU, a clock event the Target tolerates, ...) is often learned only
afterwards. This decider records that explanation as its own ``ActivityExplained`` event, without
measuring again; the verdict or final audit of the samples then counts those windows as explained
(:func:`perfledger.commands.workflow.rules.r17_explanations`) and shows the explanation in its notes.

An explanation comes before the samples' verdict (a recorded verdict is never re-derived), names
only windows whose activity was unexplained, each once, and says why.
"""

from __future__ import annotations

from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.deciders import (
    DecisionContext,
    _emit,
    _verdict_samples,
    rules_version,
)
from perfledger.commands.workflow.review_evidence import interested_actors, settling_review
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events.workflow import (
    R17_EXPLAINED_BY_REVIEW,
    R17_NO_TYPED_EXPLANATION,
    ActivityExplained,
)
from perfledger.ledger.base import EventDraft
from perfledger.projections.workflow import WorkflowState


def decide_activity_explain(
    state: WorkflowState, req: rq.ActivityExplain, ctx: DecisionContext
) -> list[EventDraft]:
    """``activity.explain`` (R17): explain the foreign activity of ``req.pairs`` (0-based pair
    indices) of samples ``req.samples_id``.

    Raises: BadRequest for unknown samples, an index out of range or given twice, or a window
        without unexplained foreign activity (nothing to explain, or explained already);
        RuleRefused (R17) once the samples' verdict or final audit is recorded, or for an
        explanation that says nothing.
    """
    samples, _, samples_event = _verdict_samples(state, req.samples_id, ctx)
    if req.samples_id in state.verdicts or req.samples_id in state.final_audits:
        raise refuse(
            "R17",
            f"the verdict of samples {req.samples_id!r} is already recorded: an explanation "
            "comes before it (a recorded verdict is never re-derived)",
            "record new samples, explain their activity, then record their verdict",
        )
    if rules.is_unknown(req.explanation):
        raise refuse(
            "R17",
            "the explanation must say why the activity does not matter",
            "state in words why the foreign activity did not affect the measurement (e.g. what ran and on which device)",
        )
    if len(set(req.pairs)) != len(req.pairs):
        raise BadRequest(f"pairs {req.pairs} name a window twice", hint="name each pair index once")
    already, _ = rules.r17_explanations(state, req.samples_id)
    for index in req.pairs:
        if index >= len(samples.pairs):
            raise BadRequest(
                f"pair {index} is out of range: samples {req.samples_id!r} have "
                f"{len(samples.pairs)} pairs (indices 0..{len(samples.pairs) - 1})",
                hint="name pair indices of these samples (`perfledger verdict explain ID` lists the pairs with activity)",
            )
        monitor = samples.pairs[index].monitor
        if monitor is None or not monitor.foreign_activity:
            raise BadRequest(
                f"pair {index} of {req.samples_id!r} saw no foreign activity",
                hint="explain only the pairs whose monitor saw foreign activity (`perfledger verdict explain ID`)",
            )
        typed = not rules.is_unknown(monitor.explained)  # R17: from schema 3, it explains nothing
        if index in already or (
            typed and rules_version(ctx, "ActivityExplained") < R17_NO_TYPED_EXPLANATION
        ):
            raise BadRequest(
                f"the foreign activity of pair {index} is already explained",
                hint="leave that pair out: its explanation is recorded",
            )
    evidence: dict[str, str] = {"explained_by": req.explained_by or ctx.actor}
    if rules_version(ctx, "ActivityExplained") >= R17_EXPLAINED_BY_REVIEW:
        evidence = _r17_review_evidence(state, req, ctx, samples_event)
    payload = ActivityExplained(
        samples_id=samples.samples_id,
        target_id=samples.target_id,
        experiment_id=samples.experiment_id,
        pairs=tuple(req.pairs),
        explanation=req.explanation,
        **evidence,
    )
    return _emit(ctx, payload)


def _r17_review_evidence(
    state: WorkflowState, req: rq.ActivityExplain, ctx: DecisionContext, samples_event: str
) -> dict[str, str]:
    """R17 (schema :data:`~perfledger.events.workflow.R17_EXPLAINED_BY_REVIEW` on): the
    explanation's evidence is review ``req.review_id`` of the samples' event, dissent settled,
    appended by an actor other than the experiment's creator, the samples' recorder and the one
    explaining; returns ``explained_by`` (that actor) and ``review_id``. Raises: RuleRefused
    (R17) otherwise, a typed ``explained_by`` included."""
    experiment = state.experiments[state.samples[req.samples_id].experiment_id]
    interested = interested_actors(ctx.actor_of, ctx.actor, experiment.event_id, samples_event)
    hint = (
        "a reviewer other than the experiment's agent records `perfledger review record` "
        f'(--actor NAME) with "subject": "other", "subject_event": "{samples_event}", '
        '"dissent_remains": false; then explain citing its "review_id"'
    )
    if req.explained_by is not None:
        raise refuse("R17", "who explains is the review's appender, never a typed name", hint)
    if req.review_id is None:
        raise refuse(
            "R17",
            "foreign activity is explained only by evidence: a review by another actor",
            hint,
        )
    review = settling_review(state, samples_event, interested, ctx.actor_of, req.review_id)
    if review is None or ctx.actor_of is None:
        raise refuse(
            "R17",
            f"review {req.review_id!r} is not a settled review of samples {req.samples_id!r} "
            f"by an actor other than {sorted(interested)}",
            hint,
        )
    return {"explained_by": ctx.actor_of(review.event_id), "review_id": req.review_id}
