"""``formal-run.start`` (R14): the start of a formal-stage measurement, recorded before anything
is measured (:mod:`perfledger.commands.workflow.formal_runs`: a run that never records its samples
counts as failed and owes its verdict)."""

from __future__ import annotations

from perfledger.commands.workflow import formal_runs, rules
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.deciders import DecisionContext, _emit, rules_version
from perfledger.errors import BadRequest
from perfledger.events.workflow import R14_ONE_FORMAL_RUN, FormalRunStarted
from perfledger.ledger.base import EventDraft
from perfledger.projections.workflow import WorkflowState
from perfledger.projections.workflow import formal_runs as started_runs


def decide_formal_run_start(
    state: WorkflowState, req: rq.FormalRunStart, ctx: DecisionContext
) -> list[EventDraft]:
    """``formal-run.start`` (R14, R2-R4, R8, R11, R13, R15): the experiment may enter the stage
    now (as its samples would be checked, :func:`formal_runs.formal_stage_preconditions`), its
    earlier results of that stage are judged, it has no other result of the stage (from schema
    :data:`~perfledger.events.workflow.R14_ONE_FORMAL_RUN`: no optional stopping), and the
    samples id is free.

    Raises: BadRequest for an unknown experiment or a samples id already taken; RuleRefused
        naming its rule otherwise.
    """
    experiment = state.experiments.get(req.experiment_id)
    if experiment is None:
        raise BadRequest(
            f"unknown experiment {req.experiment_id!r}",
            hint="`perfledger experiment list` lists them",
        )
    target_id = experiment.created.target_id
    target = rules.r1_target_current(state, target_id)
    if req.samples_id in state.samples or req.samples_id in started_runs(state):
        raise BadRequest(
            f"samples id {req.samples_id!r} is already taken",
            hint="choose a new samples id (leave --samples out to get a free one)",
        )
    formal_runs.formal_stage_preconditions(
        state,
        target,
        req.experiment_id,
        req.stage,
        one_result=rules_version(ctx, "FormalRunStarted") >= R14_ONE_FORMAL_RUN,
    )
    formal_runs.r14_judged_before_next(state, target_id, req.experiment_id, req.stage)
    payload = FormalRunStarted(
        target_id=target_id,
        experiment_id=req.experiment_id,
        stage=req.stage,
        samples_id=req.samples_id,
        protocol=req.protocol,
    )
    return _emit(ctx, payload)
