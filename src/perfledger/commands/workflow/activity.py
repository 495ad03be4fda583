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
from perfledger.commands.workflow.deciders import DecisionContext, _emit, _verdict_samples
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events.workflow import ActivityExplained
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
    samples, _, _ = _verdict_samples(state, req.samples_id, ctx)
    if req.samples_id in state.verdicts or req.samples_id in state.final_audits:
        raise refuse(
            "R17",
            f"the verdict of samples {req.samples_id!r} is already recorded: an explanation "
            "comes before it (a recorded verdict is never re-derived)",
            "record new samples, explain their activity, then record their verdict",
        )
    if rules.is_unknown(req.explanation):
        raise refuse("R17", "the explanation must say why the activity does not matter")
    if len(set(req.pairs)) != len(req.pairs):
        raise BadRequest(f"pairs {req.pairs} name a window twice")
    already, _ = rules.r17_explanations(state, req.samples_id)
    for index in req.pairs:
        if index >= len(samples.pairs):
            raise BadRequest(
                f"pair {index} is out of range: samples {req.samples_id!r} have "
                f"{len(samples.pairs)} pairs (indices 0..{len(samples.pairs) - 1})"
            )
        monitor = samples.pairs[index].monitor
        if monitor is None or not monitor.foreign_activity:
            raise BadRequest(f"pair {index} of {req.samples_id!r} saw no foreign activity")
        if not rules.is_unknown(monitor.explained) or index in already:
            raise BadRequest(f"the foreign activity of pair {index} is already explained")
    payload = ActivityExplained(
        samples_id=samples.samples_id,
        target_id=samples.target_id,
        experiment_id=samples.experiment_id,
        pairs=tuple(req.pairs),
        explanation=req.explanation,
        explained_by=req.explained_by or ctx.actor,
    )
    return _emit(ctx, payload)
