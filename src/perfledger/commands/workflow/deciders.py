"""Deciders: one pure ``decide(state, request, ctx) -> [EventDraft]`` per write operation.

A decider reads the folded :class:`~perfledger.projections.workflow.WorkflowState`, the validated
request (:mod:`perfledger.commands.workflow.requests`) and a :class:`DecisionContext` (operation, actor,
event time, idempotency key, the request as stored), and returns the drafts to append, or raises
:class:`~perfledger.errors.RuleRefused` naming its rule (via :mod:`perfledger.commands.workflow.rules`) or
:class:`~perfledger.errors.BadRequest` for a reference to an unknown id. Deciders never read the
clock or any file: the same (state, request, ctx) always gives the same drafts, so an auditor can
re-decide every recorded request against the state before it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import blake3
import msgspec

from perfledger.commands.workflow import (
    formal_runs,
    handoff_rules,
    identity,
    measurement_rules,
    observed_rules,
    output_rules,
    plausibility,
    reference_watch,
    rules,
)
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.aa_table import AaTableMismatch, aa_case_medians, rederive_aa
from perfledger.commands.workflow.baseline_table import baseline_windows_rule, measured_values
from perfledger.commands.workflow.foreign_share import formal_foreign_rule
from perfledger.commands.workflow.requests import dump
from perfledger.commands.workflow.review_evidence import interested_actors, settling_review
from perfledger.commands.workflow.rules import refuse
from perfledger.commands.workflow.verdict_guards import (
    r2_declared_before_data,
    r4_declared_resolution,
    r4_declared_stage_resolution,
    r4_resolution_not_lowered,
    r4_stage_resolution,
    r12_every_case,
)
from perfledger.errors import BadRequest, IntegrityError, RuleRefused
from perfledger.events.canonical import canonical_bytes
from perfledger.events.kinds import get_kind
from perfledger.events.units import known_unit, vocabulary
from perfledger.events.workflow import (
    ENVIRONMENT_FIELDS,
    FORMAL_STAGES,
    OBSERVED_METRICS,
    OBSERVED_UNITS,
    ORIGINAL,
    PER_CASE_V2,
    R1_KNOWN_UNITS,
    R1_KNOWN_UNITS_READINESS,
    R1_OBSERVED_DIRECTION,
    R2_STATISTICS_FROZEN,
    R4_MEASURED_BASELINE,
    R4_MEASURED_RESOLUTION,
    R4_MEASURED_RESOLUTION_FINAL_AUDIT,
    R4_MEASURED_RESOLUTION_VERDICT,
    R4_RESOLUTION_AT_RUN_FINAL_AUDIT,
    R4_RESOLUTION_AT_RUN_VERDICT,
    R4_RESOLUTION_NOT_LOWERED,
    R5_FINAL_AUDIT_ACCURACY,
    R5_JUDGED_OUTPUTS,
    R5_MEASURED_CHAMPION,
    R5_MEASURED_FINAL_AUDIT,
    R5_OBSERVED_METRICS,
    R5_OBSERVED_PRIMARY_READINESS,
    R5_REPORTED_CHAMPION,
    R5_REPORTED_FINAL_AUDIT,
    R5_REPORTED_VERDICT,
    R6_RECORDED_APPLICABILITY,
    R7_COMPUTED_BOUND,
    R11_CALLS_FROM_COPIES,
    R11_CANDIDATE_SNAPSHOT,
    R11_OBSERVED_CALLS_FROM_COPIES,
    R11_REFERENCE_WATCHED,
    R11_REFERENCE_WATCHED_FINAL_AUDIT,
    R11_REFERENCE_WATCHED_VERDICT,
    R11_WATCHED_AGAINST_AA,
    R11_WATCHED_AGAINST_AA_SAMPLES,
    R12_EVERY_CASE,
    R12_EVERY_CASE_FINAL_AUDIT,
    R12_IMPLAUSIBLE_BLOCKS_CHAMPION,
    R12_IMPLAUSIBLE_FINAL_AUDIT,
    R12_NAMED_REVIEW_CLEARS,
    R12_PLAUSIBLE_RATIO,
    R12_WALL_VALUE_COUNTS,
    R13_FAILED_AUDIT_DEMOTES,
    R14_BLOCKS_CHAMPION,
    R14_CODE_RESULTS_CHAMPION,
    R14_CODE_RESULTS_EXPERIMENT,
    R14_FINAL_AUDIT_OWES,
    R14_INFORMATIVE_INTERVAL,
    R14_MEASURED_OBLIGATION,
    R14_ONE_IMPROVEMENT,
    R14_ONE_RESULT_SAMPLES,
    R14_STATED_INTERVAL,
    R14_TRUE_NOTE,
    R14_UNJUDGED_BLOCKS_CHAMPION,
    R17_BASELINE_WINDOWS,
    R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT,
    R17_FOREIGN_SHARE_BY_REVIEW_VERDICT,
    R17_SAMPLES_TYPED_EXPLANATION_IGNORED,
    R18_LEDGER_FILLED,
    R18_STOP_REASON_AGREES,
    TAIL_STATISTICS,
    BaselineRecorded,
    CandidateRejected,
    ChampionSelected,
    ConflictResolved,
    CorrectedModel,
    DerivedGuardrail,
    DerivedVerdict,
    EvidenceRecorded,
    ExperimentCreated,
    FinalAuditRecorded,
    HandoffRecorded,
    HostAdviceRecorded,
    LocalResultRecorded,
    MetricAuditRecorded,
    ReadinessRecorded,
    ReconciliationRecorded,
    Reference,
    ResolutionEstimated,
    SamplesRecorded,
    SecondaryVerdict,
    Statistics,
    TargetDefinition,
    TargetFrozen,
    TargetSuperseded,
    UpstreamCheckRecorded,
    VerdictRecorded,
)
from perfledger.ledger.base import EventDraft
from perfledger.projections import amdahl
from perfledger.projections.claims import predicted_improvement
from perfledger.projections.measurement_flags import wall_clock_note
from perfledger.projections.verdicts import Pair, derive_guardrail, derive_verdict
from perfledger.projections.workflow import (
    CHAMPION_CONFLICTS,
    OWED_CHAMPION,
    UNACCOUNTED_CHAMPION,
    TargetView,
    WorkflowState,
    open_conflicts,
)
from perfledger.projections.workflow import formal_runs as started_runs


def _median(values: Any) -> float:
    """``statistics.median``, imported on first use: ``statistics`` (with ``fractions`` and
    ``decimal``) cost ~10 ms of every CLI decision that never takes a median."""
    import statistics  # noqa: PLC0415 (statistics: off `perfledger status`'s start-up path)

    return statistics.median(values)


#: Domain prefix of an environment identity hash (R2, R11).
ENVIRONMENT_ID_DOMAIN = b"perfledger/environment/v1\x00"
#: Relative tolerance of budget arithmetic in a handoff (R18).
BUDGET_TOLERANCE = 1e-6


@dataclass(frozen=True)
class DecisionContext:
    """What a decision may depend on besides state and request.

    Attributes:
        op: the operation name (``experiment.create``).
        actor: who decides.
        ts: the event time (aware datetime), fixed once per request so a re-decision after a lost
            compare-and-swap produces the same drafts.
        idempotency_key: the caller's key, stored in the envelope.
        request: the request as stored in the envelope: ``{"op": ..., "body": ...}``.
        payload_of: the decoded (upcast) payload of a recorded event, by event id. Recorded
            events are immutable and content-addressed, so a decision that reads one is as
            deterministic as one that reads the state (the state keeps samples without their
            pairs; a verdict reads the pairs from the SamplesRecorded event).
        derive: a memo of :func:`derive_samples` for verdicts and final audits (R12): called as
            ``derive(samples_event_id, params, samples)`` and must return exactly what
            ``derive_samples(params, samples)`` returns (the auditor's replay passes one that
            returns a derivation already made in a worker process); None derives in place.
        schema: the schema version of the recorded event being re-decided (the auditor's
            replay), None for a new decision: an event recorded under an older version is
            re-decided by that version's rule (``SCHEMA_VERSIONS`` in
            :mod:`perfledger.events.workflow`).
        starting_run: the samples id of the formal run that the measuring use case asking for
            this preview will start before it measures (R14): its samples are previewed as that
            run's; never set when recording.
        actor_of: who appended a recorded event (its envelope's ``actor``), by event id, where
            a rule asks who decided (R12: a review by another actor); None where unknown (a
            dry run), and such rules then see no other actor.
        artifact: the bytes of an artifact attached to the event being decided, by name (None
            when not attached), where a rule re-derives figures from it (R4: the A/A raw
            table); None where no attachment can be read (a dry run).
    """

    op: str
    actor: str
    ts: datetime
    idempotency_key: str | None = None
    request: Any = None
    payload_of: Callable[[str], Any] | None = None
    derive: Callable[[str, DerivationParams, SamplesRecorded], Derived] | None = None
    schema: int | None = None
    actor_of: Callable[[str], str] | None = None
    starting_run: str | None = None
    artifact: Callable[[str], bytes | None] | None = None

    def recorded_before(self, kind: str, version: int) -> bool:
        """Whether this re-decides an event of ``kind`` recorded under a schema older than
        ``version`` (so under the rule before the one ``version`` introduced)."""
        return self.schema is not None and self.schema < version


def _in_force(target: TargetView) -> ResolutionEstimated:
    """The resolution a decision on ``target`` uses (R4: the measured one, else a declared one,
    whose verdicts cannot pass); the rules have checked that one is recorded."""
    in_force = target.resolution_in_force
    assert in_force is not None  # rules.r4_baseline_and_resolution
    return in_force


def rules_version(ctx: DecisionContext, kind: str) -> int:
    """The schema version of ``kind`` a decision answers to: the recorded one on replay
    (:attr:`DecisionContext.schema`), else the current one (versioned rules, e.g. R14)."""
    if ctx.schema is not None:
        return ctx.schema

    return get_kind(kind).version


def _emit(ctx: DecisionContext, payload: msgspec.Struct) -> list[EventDraft]:
    return [
        EventDraft(
            type(payload).__name__,
            payload,
            ctx.actor,
            request=ctx.request,
            idempotency_key=ctx.idempotency_key,
            ts=ctx.ts,
        )
    ]


def _build(cls: type[Any], data: dict[str, Any]) -> Any:
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:  # a request field that the payload cannot hold
        raise BadRequest(
            f"{cls.__name__}: {exc}",
            hint="`perfledger schema OP` gives each field's form and range",
        ) from None


def environment_id(environment: dict[str, Any]) -> str:
    """The environment identity hash (R2, R11): blake3 hex over a domain prefix and the canonical
    bytes of the environment fields, ``unknown`` markers normalised to null."""
    normal = {
        name: None if rules.is_unknown(environment.get(name)) else environment.get(name)
        for name in ENVIRONMENT_FIELDS
    }
    return blake3.blake3(ENVIRONMENT_ID_DOMAIN + canonical_bytes(normal)).hexdigest()


def _declared_metrics(definition: Any) -> list[tuple[str, str, Any]]:
    """``(name, unit, work_metric)`` of the primary, each guardrail and each secondary, in that
    order, of a :class:`TargetDefinition` or a ``target.freeze`` request (``work_metric``
    UNSET where none is named)."""
    primary = definition.primary
    return [
        (primary.name, primary.unit, primary.work_metric),
        *((g.metric, g.unit, g.work_metric) for g in definition.guardrails),
        *((s.name, s.unit, s.work_metric) for s in definition.secondaries),
    ]


def work_metrics(definition: TargetDefinition) -> dict[str, str]:
    """Rate metric -> the metric counting its work, as the Target declares them (R12)."""
    return {
        name: work
        for name, _unit, work in _declared_metrics(definition)
        if isinstance(work, str) and work
    }


def _target_metrics(definition: TargetDefinition) -> dict[str, tuple[str, str]]:
    """Metric name -> (unit, direction) for the primary, guardrails and secondaries."""
    out = {definition.primary.name: (definition.primary.unit, definition.primary.direction)}
    for g in definition.guardrails:
        out.setdefault(g.metric, (g.unit, g.direction))
    for s in definition.secondaries:
        out.setdefault(s.name, (s.unit, s.direction))
    return out


# ---------------------------------------------------------------------------------- targets


def _check_definition(
    req: rq.TargetFreeze, known_units: bool = False, observed_direction: bool = False
) -> None:
    rules.r1_scope_relative(req.scope)
    if known_units:  # R1: a unit perfledger has no entry for cannot be checked
        for name, unit, _work in _declared_metrics(req):
            if not known_unit(unit):
                raise BadRequest(
                    f"metric {name!r}: unit {unit!r} is not one perfledger knows; known: "
                    f"{vocabulary()}",
                    hint="spell milliseconds ms, microseconds us, a rate <work>/<time> (tokens/s)",
                )
    if observed_direction:  # R1: perfledger's own times are better when lower, whatever is typed
        _check_observed_metrics(req)
    if req.primary.direction == "lower_is_better" and req.min_effect >= 1.0:
        raise refuse(
            "R1",
            f"a minimum effect of {req.min_effect:.0%} can never be reached by a lower-is-better "
            "primary: its improvement (ref - cand) / ref stays below 100 %",
            "min_effect is a ratio: 0.05 means 5 %",
        )
    names = [req.primary.name, *(s.name for s in req.secondaries)]
    if len(set(names)) != len(names):
        raise BadRequest(
            "secondary metrics must be distinct from each other and the primary",
            hint="name each secondary once, none the primary",
        )
    guards = [g.metric for g in req.guardrails]
    if len(set(guards)) != len(guards):
        raise BadRequest(
            "guardrail metrics must be distinct", hint="name each guardrail metric once"
        )
    _check_work_metrics(req)


def _check_observed_metrics(req: rq.TargetFreeze) -> None:
    """R1 (``TargetFrozen`` 4): a primary, guardrail or secondary named after an observed
    metric (:data:`OBSERVED_METRICS`, a call's elapsed or CPU time as perfledger measures it) is
    ``lower_is_better`` in a time unit (:data:`OBSERVED_UNITS`). Raises: BadRequest naming the
    metric, its direction or unit, and what it must be."""
    metrics = [
        (req.primary.name, req.primary.unit, req.primary.direction),
        *((g.metric, g.unit, g.direction) for g in req.guardrails),
        *((s.name, s.unit, s.direction) for s in req.secondaries),
    ]
    for name, unit, direction in metrics:
        if name not in OBSERVED_METRICS:
            continue
        if direction != "lower_is_better":
            raise BadRequest(
                f"metric {name!r} is perfledger's own measured time of a call: it can only be "
                f"lower_is_better, not {direction!r}",
                hint="a figure where higher is better (a rate) is another metric: name it after "
                "what it counts (tokens_per_s), or declare the time lower_is_better",
            )
        if unit not in OBSERVED_UNITS:
            raise BadRequest(
                f"metric {name!r} is perfledger's own measured time of a call: its unit is one "
                f"of {list(OBSERVED_UNITS)}, not {unit!r}",
                hint="record an observed time in s, ms, us or ns",
            )


def _check_work_metrics(req: rq.TargetFreeze) -> None:
    """A ``work_metric`` names what a rate divides (R12's wall-clock check of rates): only a
    rate over time has one, and it is another metric, not a declared time or rate."""
    from perfledger.derive.units import SECONDS_PER_UNIT, work_unit  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    metrics = _declared_metrics(req)
    declared = {name: unit for name, unit, _work in metrics}
    for name, unit, work in metrics:
        if not isinstance(work, str):
            continue
        if work_unit(unit) is None:
            raise BadRequest(
                f"metric {name!r} in {unit!r} names a work_metric, but only a rate over time "
                "(or a time per unit of work) has one",
                hint="a rate's unit is <work>/<s|ms|us|ns>, e.g. tokens/s; a time per work's "
                "<s|ms|us|ns>/<work>, e.g. ms/token",
            )
        other = declared.get(work)
        if work == name or (
            other is not None and (other in SECONDS_PER_UNIT or work_unit(other) is not None)
        ):
            raise BadRequest(
                f"metric {name!r}: its work_metric {work!r} must count work (tokens, items), "
                "not be itself or a declared time or rate",
                hint="name a counted metric (tokens, items) as work_metric",
            )


def decide_target_freeze(
    state: WorkflowState, req: rq.TargetFreeze, ctx: DecisionContext
) -> list[EventDraft]:
    """``target.freeze`` (R1): freeze a new Target; an existing id is refused (never changes)."""
    rules.r1_target_id_free(state, req.target_id)
    version = rules_version(ctx, "TargetFrozen")
    _check_definition(req, version >= R1_KNOWN_UNITS, version >= R1_OBSERVED_DIRECTION)
    definition = _build(TargetDefinition, dump(req))
    return _emit(ctx, TargetFrozen(target=definition))


def decide_target_supersede(
    state: WorkflowState, req: rq.TargetSupersede, ctx: DecisionContext
) -> list[EventDraft]:
    """``target.supersede`` (R1): a new Target replaces the current one, which stays frozen."""
    rules.r1_target_current(state, req.target_id)
    rules.r1_target_id_free(state, req.new_target.target_id)
    version = rules_version(ctx, "TargetSuperseded")
    _check_definition(req.new_target, version >= R1_KNOWN_UNITS, version >= R1_OBSERVED_DIRECTION)
    new = _build(TargetDefinition, dump(req.new_target))
    return _emit(ctx, TargetSuperseded(target_id=req.target_id, reason=req.reason, new_target=new))


# ---------------------------------------------------------------------------------- readiness


def _r1_known_units(definition: TargetDefinition) -> None:
    """R1 at readiness: every declared metric of the Target is in a unit of the closed
    vocabulary (a Target frozen before :data:`R1_KNOWN_UNITS` may hold one it cannot check).
    Raises: RuleRefused (R1) naming the metric and listing the known units."""
    unknown = [(name, unit) for name, unit, _work in _declared_metrics(definition)
               if not known_unit(unit)]  # fmt: skip
    if unknown:
        shown = ", ".join(f"{name!r} in {unit!r}" for name, unit in unknown)
        raise refuse(
            "R1",
            f"Target {definition.target_id!r} declares metrics in units perfledger does not "
            f"know ({shown}): a unit it has no entry for cannot be checked; known: {vocabulary()}",
            "supersede the Target with each metric in a known unit (milliseconds ms, "
            "microseconds us, a rate <work>/<time> such as tokens/s): `perfledger target "
            "supersede --request FILE`",
        )


def decide_readiness_record(
    state: WorkflowState, req: rq.ReadinessRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``readiness.record`` (R2): original, user's test set, accuracy rule, driver, environment
    (missing lineage recorded as missing) and statistical requirements (>= 5 pairs per case)."""
    target = rules.r1_target_current(state, req.target_id)
    if rules_version(ctx, "ReadinessRecorded") >= R1_KNOWN_UNITS_READINESS:
        _r1_known_units(target.definition)
    rules.r2_min_pairs(req.statistics.min_pairs_per_case)
    if rules_version(ctx, "ReadinessRecorded") >= R2_STATISTICS_FROZEN:
        test_set = None if req.test_set is None else dump(req.test_set)
        r2_declared_before_data(state, target, dump(req.statistics), test_set)
    unknown_reports = sorted({r for r in req.reports if r not in state.evidence})
    if unknown_reports:
        raise refuse(
            "R2",
            f"readiness binds unknown reports {unknown_reports}",
            "add those reports first (`perfledger evidence add --request FILE`), or bind only recorded evidence ids (`perfledger evidence list`)",
        )
    if target.definition.diagnostic:
        if not req.reports:
            raise refuse(
                "R2",
                "a diagnostic Target binds existing reports: list their evidence ids",
                "list the evidence ids of the reports it binds in bound_reports (`perfledger evidence list`)",
            )
    else:
        missing = [
            name for name in ("test_set", "accuracy_rule", "driver") if getattr(req, name) is None
        ]
        if missing:
            raise refuse(
                "R2",
                f"readiness of Target {req.target_id!r} lacks {missing}: formal samples need "
                "the user's real test set, the accuracy rule and the driver command",
                "ask the user for the real test set; the tool never generates one",
            )
    if req.test_set is not None:
        cases = req.test_set.cases
        if len(set(cases)) != len(cases) or len(cases) > req.test_set.case_count:
            raise refuse(
                "R2",
                "test-set case names must be distinct and at most case_count",
                "name each case once, and at most case_count of them",
            )
    if rules_version(ctx, "ReadinessRecorded") >= R5_OBSERVED_PRIMARY_READINESS:
        observed_rules.check_readiness(
            target.definition, req
        )  # R5: a reported figure never decides
    identity.r11_readiness_snapshot(target, req, rules_version(ctx, "ReadinessRecorded"))
    output_rules.check_readiness(req)  # R2: outputs compared need an {output} place
    body = dump(req)
    env = body["environment"]
    missing_lineage = tuple(name for name in ENVIRONMENT_FIELDS if rules.is_unknown(env[name]))
    payload = _build(
        ReadinessRecorded,
        {**body, "environment_id": environment_id(env), "missing_lineage": missing_lineage},
    )
    return _emit(ctx, payload)


def decide_metric_audit_record(
    state: WorkflowState, req: rq.MetricAuditRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``metric-audit.record`` (R3): audit a decision metric of the Target; a unit that differs
    from the Target's cannot be declared matching."""
    target = rules.r1_target_current(state, req.target_id)
    metrics = _target_metrics(target.definition)
    if req.metric not in metrics:
        raise refuse(
            "R3",
            f"{req.metric!r} is not a decision metric of Target {req.target_id!r} "
            f"({sorted(metrics)})",
            f"audit one of {sorted(metrics)}",
        )
    unit = metrics[req.metric][0]
    if req.matches_target and req.unit != unit:
        raise refuse(
            "R3",
            f"the audited unit {req.unit!r} differs from the Target's {unit!r}; the metric "
            "does not match the Target",
            "record matches_target=false (results become diagnostic only) or fix the metric",
        )
    return _emit(ctx, _build(MetricAuditRecorded, dump(req)))


def decide_baseline_record(
    state: WorkflowState, req: rq.BaselineRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``baseline.record`` (R4, R2, R11): repeated samples of the original's primary metric, in
    the readiness environment. From ``BaselineRecorded`` schema
    :data:`~perfledger.events.workflow.R4_MEASURED_BASELINE` the values must be what the named
    raw table re-derives (:mod:`perfledger.commands.workflow.baseline_table`), recorded with
    ``source: perfledger``; a baseline without one is recorded ``declared`` and decides
    nothing. From schema :data:`~perfledger.events.workflow.R17_BASELINE_WINDOWS` the monitor
    windows of that table are re-judged (R17: foreign activity in more than 20 % of them is
    refused, at record time and at audit)."""
    target = rules.r1_target_current(state, req.target_id)
    rules.r2_ready(target)
    readiness = target.readiness
    assert readiness is not None
    primary = target.definition.primary
    if req.original_hash != readiness.original.content_hash:
        raise refuse(
            "R4",
            "the baseline must measure the original recorded by readiness",
            "set original_hash to the readiness's original.content_hash (`perfledger state` shows it), or measure it with `perfledger measure baseline`",
        )
    if req.metric != primary.name or req.unit != primary.unit:
        raise refuse(
            "R4",
            f"the baseline is of the primary metric {primary.name!r} in {primary.unit!r}",
            f"record values of {primary.name!r} in {primary.unit!r}",
        )
    if req.environment_id != readiness.environment_id:
        raise refuse(
            "R11",
            "the baseline's environment identity differs from readiness",
            f"readiness recorded environment_id {readiness.environment_id}",
        )
    if any(v <= 0 for v in req.values):
        raise BadRequest(
            "metric values must be positive",
            hint="record positive values (times, sizes) in the metric's unit",
        )
    body = dump(req)
    raw_table = body.pop("raw_table", "")
    if rules_version(ctx, "BaselineRecorded") >= R4_MEASURED_BASELINE:
        # R4: only values re-derived from an attached raw table of the original decide anything
        body["source"] = "perfledger" if raw_table else "declared"
        if raw_table:
            measured_values(target, req, ctx.artifact)
            if rules_version(ctx, "BaselineRecorded") >= R17_BASELINE_WINDOWS:
                baseline_windows_rule(req.raw_table, ctx.artifact)  # R17, no flag waives it
            body["raw_table"] = raw_table
    elif raw_table:
        raise BadRequest(
            "raw_table is not part of baselines of this rule version",
            hint="leave raw_table out",
        )
    per_case: dict[str, list[float]] = {}
    if req.cases:
        # R4: the baseline per case, so each case's verdict figures have the original's level
        if len(req.cases) != len(req.values):
            raise BadRequest(
                f"cases names the case of each value: {len(req.cases)} cases for "
                f"{len(req.values)} values",
                hint="give one case per value (or leave cases out)",
            )
        if readiness.test_set is not None:
            rules.r11_cases_in_test_set(req.cases, readiness.test_set, "the baseline")
        for case, value in zip(req.cases, req.values, strict=True):
            per_case.setdefault(case, []).append(value)
    payload = _build(
        BaselineRecorded,
        {
            **body,
            "median": float(_median(req.values)),
            "per_case_median": {c: float(_median(v)) for c, v in sorted(per_case.items())},
        },
    )
    return _emit(ctx, payload)


def decide_resolution_record(
    state: WorkflowState, req: rq.ResolutionRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``resolution.record`` (R4): the resolution comes from repeated original samples, after the
    baseline."""
    target = rules.r1_target_current(state, req.target_id)
    if target.baseline is None:
        raise refuse(
            "R4",
            "record the original's measured baseline before its measurement resolution"
            + rules.declared_baseline_note(target),
            "measure the baseline first: `perfledger status` names its command for this "
            "Target's kind (`perfledger measure baseline`)",
        )
    if req.repeats < 2:
        raise refuse(
            "R4",
            "a resolution needs at least 2 repeated original samples",
            "measure the A/A with at least 2 repeats (`perfledger measure aa ... --record` does)",
        )
    body = dump(req)
    raw_table = body.pop("raw_table", "")
    version = rules_version(ctx, "ResolutionEstimated")
    if version >= R4_MEASURED_RESOLUTION:
        # R4: only figures re-derived from an attached A/A raw table decide anything
        body["source"] = "perfledger" if raw_table else "declared"
        if raw_table:
            _r4_measured_figures(target, req, ctx)
            body["raw_table"] = raw_table
            if version >= R11_WATCHED_AGAINST_AA and ctx.artifact is not None:
                # R11: the A/A's per-case figure, which the reference watch compares with
                medians = aa_case_medians(ctx.artifact(raw_table) or b"", target.definition.primary)
                if medians:
                    body["per_case_median"] = medians
    elif raw_table:
        raise BadRequest(
            "raw_table is not part of resolutions of this rule version",
            hint="leave raw_table out",
        )
    if version >= R4_RESOLUTION_NOT_LOWERED and body.get("source") != "declared":
        r4_resolution_not_lowered(state, target, req.resolution, req.per_case, req.repeats)
    return _emit(ctx, _build(ResolutionEstimated, body))


def _r4_measured_figures(
    target: TargetView, req: rq.ResolutionRecord, ctx: DecisionContext
) -> None:
    """R4: a resolution that claims to be measured is what its attached A/A raw table re-derives
    (:mod:`perfledger.commands.workflow.aa_table`): the same resolution, per-case figures and
    repeats. Raises: RuleRefused (R4) naming the difference or the table's fault."""
    raw = ctx.artifact(req.raw_table) if ctx.artifact is not None else None
    if raw is None:
        raise refuse(
            "R4",
            f"the resolution names the A/A raw table {req.raw_table!r}, which is not attached",
            "record the resolution with `perfledger measure aa --target T --cmd CMD --record`",
        )
    readiness = target.readiness
    assert readiness is not None  # a baseline, hence readiness, precedes a resolution
    try:
        resolution, per_case, repeats = rederive_aa(
            raw,
            target=target.definition.target_id,
            primary=target.definition.primary,
            statistics=readiness.statistics,
            original_hash=readiness.original.content_hash,
        )
    except AaTableMismatch as exc:
        raise refuse(
            "R4", f"the resolution cannot be re-derived from its A/A raw table: {exc}",
            "record what `perfledger measure aa --record` measured, unchanged",
        ) from None  # fmt: skip
    same = (
        math.isclose(resolution, req.resolution, rel_tol=1e-9, abs_tol=1e-12)
        and repeats == req.repeats
        and set(per_case) == set(req.per_case)
        and all(
            math.isclose(v, req.per_case[c], rel_tol=1e-9, abs_tol=1e-12)
            for c, v in per_case.items()
        )
    )
    if not same:
        raise refuse(
            "R4",
            f"the resolution {req.resolution:g} from {req.repeats} repeats (per case "
            f"{dict(req.per_case)}) is not what its A/A raw table derives: {resolution:g} from "
            f"{repeats} repeats (per case {per_case})",
            "record what `perfledger measure aa --record` measured, unchanged",
        )


# ---------------------------------------------------------------------------------- evidence


def decide_evidence_add(
    state: WorkflowState, req: rq.EvidenceAdd, ctx: DecisionContext
) -> list[EventDraft]:
    """``evidence.add`` (R6, R16): facts with their layer, from a tool of known version and with
    known units; ``ERR_NVGPUCTRPERM`` is a limitation, never zero metrics. Allowed before any
    Target exists."""
    if req.evidence_id in state.evidence:
        raise BadRequest(
            f"evidence {req.evidence_id!r} is already recorded",
            hint="choose a new evidence_id (`perfledger evidence list` shows those taken)",
        )
    if req.target_id is not None:
        rules.r1_target_frozen(state, req.target_id)
    if rules.is_unknown(req.tool.version):
        raise refuse(
            "R6",
            f"the version of {req.tool.name!r} is unknown; evidence is never guessed",
            "record the tool's exact version",
        )
    bad_units = [f.name for f in req.facts if rules.is_unknown(f.unit)]
    if bad_units:
        raise refuse(
            "R6",
            f"facts with unknown units are refused: {bad_units}",
            "use the units `perfledger schema evidence.add` lists, converting the values",
        )
    names = [f.name for f in req.facts]
    if len(set(names)) != len(names):
        raise refuse(
            "R6",
            "a fact name appears twice; key fields must be unambiguous",
            "give each fact a distinct name",
        )
    if any("ERR_NVGPUCTRPERM" in item for item in req.limitations):
        zeros = [f.name for f in req.facts if f.value == 0.0]
        if zeros:
            raise refuse(
                "R16",
                f"ERR_NVGPUCTRPERM is a limitation, not zero metrics: {zeros}",
                "record the facts as null (not measured) with the limitation",
            )
    return _emit(ctx, _build(EvidenceRecorded, dump(req)))


def decide_upstream_check_record(
    state: WorkflowState, req: rq.UpstreamCheckRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``upstream-check.record`` (R10): sources consulted and whether an equivalent exists."""
    if req.check_id in state.upstream_checks:
        raise BadRequest(
            f"upstream check {req.check_id!r} is already recorded", hint="choose a new check_id"
        )
    if req.target_id is not None:
        rules.r1_target_frozen(state, req.target_id)
    if req.equivalent_exists and rules.is_unknown(req.equivalent):
        raise refuse(
            "R10",
            "name the equivalent that exists upstream",
            "set equivalent to what exists upstream (name and version), or equivalent_exists false",
        )
    return _emit(ctx, _build(UpstreamCheckRecorded, dump(req)))


# ---------------------------------------------------------------------------------- experiments


def decide_experiment_create(
    state: WorkflowState, req: rq.ExperimentCreate, ctx: DecisionContext
) -> list[EventDraft]:
    """``experiment.create`` (R1, R4, R6-R11, R14): freeze the opportunity claim and the
    preregistration; the derived figures (bound, ``s_min``, predicted interval) go in the event."""
    target = rules.r1_target_current(state, req.target_id)
    if req.experiment_id in state.experiments:
        raise BadRequest(
            f"experiment {req.experiment_id!r} already exists",
            hint="choose a new experiment_id (`perfledger experiment list` shows those taken)",
        )
    rules.r14_no_pending_reconciliation(target)
    rules.r2_ready(target)
    rules.r4_baseline_and_resolution(target)
    prereg = req.preregistration
    rules.r9_preregistered(
        prereg.rejects if prereg else None, prereg.discriminating_evidence if prereg else None
    )
    readiness = target.readiness
    assert readiness is not None and target.resolution is not None
    identity.r11_experiment_changed_paths(target, req)
    computed = rules_version(ctx, "ExperimentCreated") >= R11_CANDIDATE_SNAPSHOT
    candidate = (
        identity.r11_experiment_candidate(state, target, req, ctx.payload_of) if computed else {}
    )
    typed_hash = candidate.get("content_hash", req.candidate.content_hash)
    if candidate.get("content_hash_source") != "computed" and typed_hash in (
        readiness.original.content_hash,
        target.champion_hash,
    ):
        same = (
            "the original's" if typed_hash == readiness.original.content_hash else "the champion's"
        )
        raise refuse(
            "R11",
            f"the candidate does not differ from its reference: its content_hash "
            f"{typed_hash!r} is {same}",
            "give the candidate's own content hash (of its code, e.g. its git commit), not the "
            "reference's; a Target bound to code computes it from candidate.subject",
        )
    if rules_version(ctx, "ExperimentCreated") >= R14_CODE_RESULTS_EXPERIMENT:
        # R14: the same code does not come back after a formal result that did not pass
        formal_runs.r14_code_results_passed(
            state, req.target_id, typed_hash, f"experiment {req.experiment_id!r}"
        )
    rules.r10_upstream_checked(
        state,
        req.new_component.upstream_check_id if req.new_component else None,
        req.approach,
        req.new_component is not None,
    )
    claim = req.claim
    rules.r6_evidence_known(state, [e.evidence_id for e in claim.evidence])
    if rules_version(ctx, "ExperimentCreated") >= R6_RECORDED_APPLICABILITY:
        rules.r6_cited_as_recorded(
            state, [(e.evidence_id, e.applicability) for e in claim.evidence]
        )
    tail = target.definition.primary.statistic in TAIL_STATISTICS
    rules.r6_bound_inputs(
        [(e.evidence_id, e.applicability, e.used_for) for e in claim.evidence], tail
    )
    expected = claim.expected_improvement
    if expected is None and rules_version(ctx, "ExperimentCreated") >= R14_STATED_INTERVAL:
        raise refuse(
            "R14",
            *rules.r14_interval_missing(
                claim,
                target.definition.primary.direction
                if rules_version(ctx, "ExperimentCreated") >= R14_ONE_IMPROVEMENT
                else None,
            ),
        )
    one_improvement = rules_version(ctx, "ExperimentCreated") >= R14_ONE_IMPROVEMENT
    figures = rules.r7_claim_figures(
        target.definition,
        _in_force(target).resolution,
        coverage=claim.coverage,
        local_speedup=claim.local_speedup,
        added_cost=claim.added_cost,
        stated_bound=claim.stated_bound,
        affected_share=claim.exposure.affected_share if claim.exposure else None,
        expected=(expected.low, expected.high) if expected else None,
        bound_optional=rules_version(ctx, "ExperimentCreated") >= R7_COMPUTED_BOUND,
        improvement_units=one_improvement,
    )
    if rules_version(ctx, "ExperimentCreated") >= R14_INFORMATIVE_INTERVAL:
        rules.r14_interval_informative(
            figures.predicted_low,
            figures.predicted_high,
            target.definition.primary.direction if one_improvement else None,
        )
    secondaries = {s.name for s in target.definition.secondaries}
    if req.serves_secondary is not None and req.serves_secondary not in secondaries:
        raise refuse(
            "R8",
            f"{req.serves_secondary!r} is not a pre-declared secondary of Target "
            f"{req.target_id!r} ({sorted(secondaries)})",
            f"serve one of {sorted(secondaries)}, or freeze a Target that declares it",
        )
    body = dump(req)
    if candidate:  # R11: the candidate as perfledger computed (or recorded as declared) it
        body["candidate"] = {**body["candidate"], **msgspec.to_builtins(candidate)}
    payload = _build(ExperimentCreated, {**body, "figures": figures})
    return _emit(ctx, payload)


# ---------------------------------------------------------------------------------- samples


def _samples_common(target: TargetView, req: rq.SamplesRecord) -> None:
    """R11: compared samples share the Target's test set, environment and units; R17 for
    formal stages; subjects' correctness and values come from one call each."""
    readiness = target.readiness
    assert readiness is not None and readiness.test_set is not None
    if req.test_set_hash != readiness.test_set.hash:
        raise refuse(
            "R11",
            "the samples' test set differs from the Target's readiness",
            "measure the readiness's test set (`perfledger state` shows its hash); measuring commands fill it in",
        )
    if req.environment_id != readiness.environment_id:
        raise refuse(
            "R11",
            "the samples' environment identity differs from readiness",
            f"readiness recorded environment_id {readiness.environment_id}",
        )
    metrics = _target_metrics(target.definition)
    primary = target.definition.primary
    if req.units.get(primary.name) != primary.unit:
        raise refuse(
            "R11",
            f"the samples must carry the primary {primary.name!r} in {primary.unit!r} "
            f"(got {req.units.get(primary.name)!r})",
            f"record values of {primary.name!r} in {primary.unit!r} for every call",
        )
    for name, unit in req.units.items():
        if name in metrics and metrics[name][0] != unit:
            raise refuse(
                "R11",
                f"metric {name!r} is in {unit!r}; the Target says {metrics[name][0]!r}",
                f"record {name!r} in {metrics[name][0]!r}, converting the values",
            )
    rules.r11_cases_in_test_set((p.case for p in req.pairs), readiness.test_set, "the samples")
    for index, pair in enumerate(req.pairs):
        for side in (pair.ref, pair.cand):
            if side.environment_id != req.environment_id:
                raise refuse(
                    "R11",
                    f"pair {index}: a subject ran in another environment",
                    "measure both subjects on the machine the readiness recorded (`perfledger env`)",
                )
            missing = set(side.values) - set(req.units)
            if missing:
                raise BadRequest(
                    f"pair {index}: metrics without a unit: {sorted(missing)}",
                    hint="name the unit of every metric in units",
                )
            if not side.values.get(primary.name):
                raise BadRequest(
                    f"pair {index}: a subject has no values of {primary.name!r}",
                    hint=f"record values of {primary.name!r} for both subjects of every pair",
                )
            if any(v <= 0 for values in side.values.values() for v in values):
                raise BadRequest(
                    f"pair {index}: metric values must be positive",
                    hint="record positive values in the metric's unit",
                )
        for name in set(pair.ref.values) & set(pair.cand.values):
            ref_m = _median(pair.ref.values[name])
            cand_m = _median(pair.cand.values[name])
            if not math.isfinite((ref_m - cand_m) / ref_m) or not math.isfinite(cand_m / ref_m):
                raise BadRequest(
                    f"pair {index}: {name} values {ref_m!r} and {cand_m!r} are implausible: their "
                    "ratio overflows",
                    hint="check the driver's units; a verdict could never be derived from these",
                )
        if pair.same_process and pair.ref.call_id != pair.cand.call_id:
            raise refuse(
                "R11",
                f"pair {index}: a same-process comparison records both subjects from one "
                "driver call (call ids differ)",
                "give both subjects of a same-process pair the same call id, or set same_process false",
            )
        if req.stage != "screen" and (pair.monitor is None or not pair.monitor.observed):
            raise refuse(
                "R17",
                f"pair {index}: a formal ({req.stage}) sample carries no monitor observations",
                "run the GPU monitor over every formal sample window",
            )


def _provenance(target: TargetView, req: rq.SamplesRecord) -> dict[str, Any]:
    """R5: the samples' provenance as recorded: a request without one was recorded from outside
    perfledger; measured samples name their protocol and raw table. Formal stages accept outside
    samples only where the readiness's statistics allow them (refused otherwise)."""
    given = req.provenance
    if given is None or given.source == "outside":
        readiness = target.readiness
        assert readiness is not None
        if req.stage != "screen" and not readiness.statistics.allow_outside_samples:
            raise refuse(
                "R5",
                f"a formal ({req.stage}) stage takes samples measured by perfledger; these are "
                "recorded from outside (a hand-written pairs table), and the readiness of Target "
                f"{req.target_id!r} does not allow outside samples",
                "measure them with `perfledger measure workload|kernel|serving`, or record readiness with "
                "statistics.allow_outside_samples=true",
            )
        return dump(given) if given is not None else {"source": "outside"}
    if not given.protocol or not given.raw_table:
        raise BadRequest(
            "samples measured by perfledger name their protocol and their raw table (artifact)",
            hint="measure with a measuring command (`perfledger status` names it), or drop provenance (samples from outside, R5)",
        )
    return dump(given)


def decide_samples_record(
    state: WorkflowState, req: rq.SamplesRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``samples.record`` (R1-R5, R8, R11, R15, R17): record paired samples of one stage.
    Failed accuracy checks are stored and flagged (R5): ``ref_failures`` (the reference's own
    failures, R11), ``cand_failures``; pairs overlapping unexplained foreign activity are
    counted (R17)."""
    target = rules.r1_target_current(state, req.target_id)
    experiment = state.experiments.get(req.experiment_id)
    if experiment is None:
        raise BadRequest(
            f"unknown experiment {req.experiment_id!r}",
            hint="`perfledger experiment list` lists them",
        )
    if experiment.created.target_id != req.target_id:
        raise refuse(
            "R11",
            "the experiment belongs to another Target",
            "record the samples under the experiment's own Target (`perfledger experiment list`)",
        )
    if req.samples_id in state.samples:
        raise BadRequest(
            f"samples {req.samples_id!r} are already recorded",
            hint="choose a new samples id (measuring commands pick a free one when --samples is left out)",
        )
    version = rules_version(ctx, "SamplesRecorded")
    formal_runs.formal_stage_preconditions(
        state,
        target,
        req.experiment_id,
        req.stage,
        demotion=version >= R14_MEASURED_OBLIGATION,
        one_result=version >= R14_ONE_RESULT_SAMPLES,
        exclude=req.samples_id,
    )
    assert target.resolution is not None and target.readiness is not None
    if req.candidate_hash != experiment.created.candidate.content_hash:
        raise refuse(
            "R11",
            "the samples' candidate is not the experiment's candidate",
            f"candidate_hash is the experiment's candidate.content_hash "
            f"({experiment.created.candidate.content_hash}); `perfledger measure workload` "
            "fills it",
        )
    if req.candidate_hash == req.reference.content_hash:
        raise refuse(
            "R11",
            "a candidate must differ from its reference",
            "the reference is the current champion (or the original); measure another "
            "experiment's candidate, or create an experiment for changed code",
        )
    reference = msgspec.convert(dump(req.reference), Reference)
    if req.stage == "final_audit":
        original = target.readiness.original.content_hash
        if reference != Reference(kind="original", content_hash=original):
            raise refuse(
                "R11",
                "a final audit compares the champion with the original",
                "set the reference to the original (measuring commands do for --stage final_audit)",
            )
    elif not rules.is_current_reference(state, target, reference):
        raise refuse(
            "R11",
            "a comparison must be against the current champion (or the original when there "
            "is none); this reference is stale",
            f"compare against {rules.current_reference(state, target)}",
        )
    if rules_version(ctx, "SamplesRecorded") >= R14_MEASURED_OBLIGATION:
        _r14_measured_obligation(state, target, req, ctx)
    _samples_common(target, req)
    if rules_version(ctx, "SamplesRecorded") >= R5_JUDGED_OUTPUTS:  # R5: outputs judged
        output_rules.check_samples(target.readiness, req)
    if rules_version(ctx, "SamplesRecorded") >= R5_OBSERVED_METRICS:  # R5: observed is ours
        observed_rules.check_samples(target.definition, req)
    code = identity.r11_samples_identity(state, target, req, ctx.payload_of)
    if rules_version(ctx, "SamplesRecorded") >= R11_CALLS_FROM_COPIES:  # R11: copies, same env
        observed = rules_version(ctx, "SamplesRecorded") >= R11_OBSERVED_CALLS_FROM_COPIES
        identity.r11_calls_from_copies(req, code, observed=observed)
    pairs = req.pairs
    wall_check = _wall_check(target, req, ctx)
    body = dump(req)
    if code is not None:
        body["identity"] = msgspec.to_builtins(code)
    if not ctx.recorded_before("SamplesRecorded", 2):
        body["provenance"] = _provenance(target, req)
    payload = _build(
        SamplesRecorded,
        {
            **body,
            "ref_failures": sum(1 for p in pairs if not p.ref.correct),
            "cand_failures": sum(1 for p in pairs if p.ref.correct and not p.cand.correct),
            # R17: from schema 11 a typed `explained` explains nothing
            "unexplained_activity": sum(
                1
                for p in pairs
                if p.monitor is not None
                and p.monitor.foreign_activity
                and (
                    rules.is_unknown(p.monitor.explained)
                    or rules_version(ctx, "SamplesRecorded")
                    >= R17_SAMPLES_TYPED_EXPLANATION_IGNORED
                )
            ),
            "wall_check": None if wall_check is None else msgspec.to_builtins(wall_check),
            **_implausible(target, req, ctx),
            **_reference_watch(target, req, ctx),
        },
    )
    return _emit(ctx, payload)


def _implausible(target: TargetView, req: rq.SamplesRecord, ctx: DecisionContext) -> dict[str, Any]:
    """``{"implausible": {case: ratio}}`` for cases beyond the Target's plausible ratio (R12,
    schema :data:`~perfledger.events.workflow.R12_PLAUSIBLE_RATIO` on), else ``{}``."""
    if rules_version(ctx, "SamplesRecorded") < R12_PLAUSIBLE_RATIO:
        return {}
    cases = plausibility.implausible_cases(target.definition, req.pairs)
    return {"implausible": cases} if cases else {}


def _reference_watch(
    target: TargetView, req: rq.SamplesRecord, ctx: DecisionContext
) -> dict[str, Any]:
    """``{"reference_slowed": {case: figures}}`` for the cases of a formal stage whose reference
    ran slower than its baseline by more than the bound (R11, schema
    :data:`~perfledger.events.workflow.R11_REFERENCE_WATCHED` on), else ``{}``."""
    if rules_version(ctx, "SamplesRecorded") < R11_REFERENCE_WATCHED:
        return {}
    flagged = reference_watch.reference_slowed(
        target, req.stage, req.reference.kind, req.pairs,
        # the A/A's medians are perfledger's observations: compared with observed samples only
        against_aa=rules_version(ctx, "SamplesRecorded") >= R11_WATCHED_AGAINST_AA_SAMPLES
        and observed_rules.observing(req),
    )  # fmt: skip
    return {"reference_slowed": flagged} if flagged else {}


def _r14_measured_obligation(
    state: WorkflowState, target: TargetView, req: rq.SamplesRecord, ctx: DecisionContext
) -> None:
    """R14 on what was measured (:mod:`perfledger.commands.workflow.formal_runs`): formal samples
    follow the verdicts of the experiment's earlier results of their stage; measured ones (and
    any taking a started run's id) are that started run's, with its protocol."""
    measured = req.provenance is not None and req.provenance.source != "outside"
    if req.stage in FORMAL_STAGES:
        formal_runs.r14_judged_before_next(
            state, target.definition.target_id, req.experiment_id, req.stage, req.samples_id
        )
    if (req.stage in FORMAL_STAGES and measured) or req.samples_id in started_runs(state):
        # the run's protocol, or ``outside`` for samples recorded as outside
        given = req.provenance
        protocol = (
            given.protocol if given is not None and measured else formal_runs.OUTSIDE_PROTOCOL
        )
        if ctx.starting_run != req.samples_id:  # a preview before the run's start is appended
            formal_runs.r14_measured_samples_started(
                state, req.samples_id, req.experiment_id, req.stage, protocol
            )


def _wall_check(target: TargetView, req: rq.SamplesRecord, ctx: DecisionContext) -> Any:
    """Self-reported times against the driver's wall clock (R12; rule and tolerance in
    :mod:`perfledger.derive.wall_check`, by the version the samples answer to); None for calls
    no driver timed."""
    from perfledger.derive.wall_check import METHOD, METHOD_V2, check_pairs  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    version = rules_version(ctx, "SamplesRecorded")
    if version >= R5_OBSERVED_METRICS and observed_rules.observing(req):
        return None  # its values are perfledger's own clock: no self-reported time to check
    counts = version >= R12_WALL_VALUE_COUNTS
    directions = {name: d for name, (_unit, d) in _target_metrics(target.definition).items()}
    try:
        return check_pairs(
            req.pairs,
            req.units,
            directions,
            METHOD_V2 if counts else METHOD,
            work_metrics=work_metrics(target.definition),
        )
    except ValueError as exc:
        raise BadRequest(
            str(exc),
            hint="each pair's values are finite numbers under the metrics named in units "
            "(`perfledger schema samples.record`)",
        ) from None


# ---------------------------------------------------------------------------------- verdicts


def _pairs(samples: SamplesRecorded, metric: str) -> list[Any] | None:
    """The R12 pairs of ``metric`` (None when a subject lacks it); invalid when either subject
    failed its accuracy check (R5)."""

    out = []
    for p in samples.pairs:
        ref, cand = p.ref.values.get(metric), p.cand.values.get(metric)
        if not ref or not cand:
            return None
        out.append(Pair(p.case, tuple(ref), tuple(cand), p.ref.correct and p.cand.correct))
    return out


class DerivationParams(msgspec.Struct, frozen=True):
    """What a verdict's derivation takes from its Target besides the samples (R12).

    Attributes:
        definition: the Target's frozen definition (primary, guardrails, secondaries,
            minimum effect).
        statistics: its readiness's statistical requirements (pairs per case, resamples, level,
            aggregation, per-case regressions).
        resolution: its measured resolution (ratio).
        case_resolution: case -> that case's measured resolution (ratio), where recorded.
        pooled: derive by the pooled median of per-pair improvements (the rule of verdicts
            recorded under schema 1), not per case.
        method: the per-case method (``per_case/v2``; ``per_case/v1`` for verdicts recorded
            under schema 2).
    """

    definition: TargetDefinition
    statistics: Statistics
    resolution: float
    case_resolution: dict[str, float] = {}
    pooled: bool = False
    method: str = "per_case/v2"


#: A derivation: the primary verdict, the guardrails' and the secondaries' (R12).
Derived = tuple[DerivedVerdict, list[DerivedGuardrail], list[SecondaryVerdict]]


def derivation_params(
    target: TargetView,
    pooled: bool = False,
    method: str = "per_case/v2",
    resolution: ResolutionEstimated | None = None,
) -> DerivationParams:
    """The :class:`DerivationParams` of a Target with readiness and resolution recorded;
    ``pooled`` for the rule of schema-1 verdicts, ``method`` the per-case method,
    ``resolution`` the one to judge with when not the one in force (R4: the one in force when
    a formal run started, :func:`~perfledger.commands.workflow.verdict_guards.r4_stage_resolution`)."""
    assert target.readiness is not None
    # R4: a declared resolution after a measured one decides nothing
    in_force = resolution if resolution is not None else _in_force(target)
    return DerivationParams(
        target.definition,
        target.readiness.statistics,
        in_force.resolution,
        dict(in_force.per_case),
        pooled,
        method,
    )


def derive_samples(params: DerivationParams, samples: SamplesRecorded) -> Derived:
    """Derive the primary, guardrail and secondary verdicts of ``samples`` (R12): a pure
    function of its arguments (the same bytes on every machine).

    Raises: ValueError for pairs that have no ratio (see
        :func:`perfledger.projections.verdicts.improvements`); AssertionError when the samples
        lack the primary metric (``samples.record`` refuses that).
    """

    if not params.pooled:
        return _derive_per_case(params, samples)
    definition = params.definition
    stats = params.statistics
    common = {
        "min_pairs_per_case": stats.min_pairs_per_case,
        "resamples": stats.resamples,
        "confidence": stats.confidence,
    }
    pairs = _pairs(samples, definition.primary.name)
    assert pairs is not None  # samples.record checked the primary is present
    primary = derive_verdict(
        pairs,
        direction=definition.primary.direction,
        min_effect=definition.min_effect,
        resolution=params.resolution,
        **common,
    )
    guardrails = _guardrails(definition, samples, derive_guardrail, common)
    secondaries = []
    for s in definition.secondaries:
        s_pairs = _pairs(samples, s.name)
        if s_pairs is None:
            continue
        derived_s = derive_verdict(s_pairs, direction=s.direction, min_effect=s.threshold, **common)
        secondaries.append(
            SecondaryVerdict(
                name=s.name,
                verdict=derived_s,
            )
        )
    return primary, guardrails, secondaries


def _guardrails(
    definition: TargetDefinition,
    samples: SamplesRecorded,
    derive: Callable[..., DerivedGuardrail],
    common: dict[str, Any],
) -> list[DerivedGuardrail]:
    """Each guardrail's verdict by ``derive`` (pooled or per case, R12) with the ``common``
    bootstrap settings; inconclusive where the samples do not hold its metric."""
    out = []
    for g in definition.guardrails:
        g_pairs = _pairs(samples, g.metric)
        out.append(
            _unmeasured_guardrail(g.metric, g.allowed_regression)
            if g_pairs is None
            else derive(
                g.metric,
                g_pairs,
                direction=g.direction,
                allowed_regression=g.allowed_regression,
                **common,
            )
        )
    return out


def _unmeasured_guardrail(metric: str, allowed_regression: float) -> DerivedGuardrail:
    """The verdict of a guardrail whose metric the samples do not hold: inconclusive (R12)."""
    return DerivedGuardrail(
        metric=metric,
        status="inconclusive",
        reason="not measured in these samples",
        regression=None,
        ci_low=None,
        ci_high=None,
        allowed_regression=allowed_regression,
        n_pairs=0,
        degenerate=False,
    )


def _derive_per_case(params: DerivationParams, samples: SamplesRecorded) -> Derived:
    """:func:`derive_samples` per test case with the Target's statistic and aggregation (R12;
    :mod:`perfledger.projections.verdict_cases`)."""
    from perfledger.projections.verdict_cases import derive_case_guardrail, derive_case_verdict  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    definition = params.definition
    stats = params.statistics
    common: dict[str, Any] = {
        "min_pairs_per_case": stats.min_pairs_per_case,
        "resamples": stats.resamples,
        "confidence": stats.confidence,
    }
    pairs = _pairs(samples, definition.primary.name)
    assert pairs is not None  # samples.record checked the primary is present
    shared: dict[str, Any] = {
        **common,
        "aggregation": stats.aggregation,
        "resolution": params.resolution,
        "case_resolution": params.case_resolution,
    }
    primary = derive_case_verdict(
        pairs,
        direction=definition.primary.direction,
        min_effect=definition.min_effect,
        statistic=definition.primary.statistic,
        allow_case_regression=stats.allow_case_regression,
        method=params.method,
        **shared,
    )
    guardrails = _guardrails(definition, samples, derive_case_guardrail, common)
    secondaries = []
    for s in definition.secondaries:
        s_pairs = _pairs(samples, s.name)
        if s_pairs is not None:
            # a secondary's regression in one case is a guardrail's business, not its own; the
            # A/A resolution is the primary's noise, not a secondary's (judged without, as before)
            derived_s = derive_case_verdict(
                s_pairs, direction=s.direction, min_effect=s.threshold,
                aggregation=stats.aggregation, allow_case_regression=True,
                method=params.method, **common,
            )  # fmt: skip
            secondaries.append(SecondaryVerdict(name=s.name, verdict=derived_s))
    return primary, guardrails, secondaries


def _samples_marks(
    target: TargetView, samples: SamplesRecorded, ctx: DecisionContext
) -> dict[str, Any]:
    """What a schema-2 verdict or final audit repeats from its samples for every reader (R5):
    their provenance (``outside`` for samples recorded before provenance was kept) and the
    primary's unit; nothing when re-deciding a schema-1 event."""
    if ctx.recorded_before("VerdictRecorded", 2):
        return {}
    # R5: from VerdictRecorded 9 / FinalAuditRecorded 11 a self-timed protocol's are `reported`
    kind, version = (
        ("FinalAuditRecorded", R5_REPORTED_FINAL_AUDIT)
        if ctx.op == "final-audit.record"
        else ("VerdictRecorded", R5_REPORTED_VERDICT)
    )
    source = measurement_rules.samples_source(
        samples, self_timed=rules_version(ctx, kind) >= version
    )
    return {"samples_provenance": source, "unit": target.definition.primary.unit}


def _tail_refusal(target: TargetView, samples: SamplesRecorded) -> None:
    """R12: a tail primary (p95, p99) needs enough per-request values per case and subject;
    refused (nothing recorded) otherwise."""
    from perfledger.projections.verdict_cases import tail_min_values, tail_support_problems  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    statistic = target.definition.primary.statistic
    pairs = _pairs(samples, target.definition.primary.name)
    problems = tail_support_problems(pairs or [], statistic)
    if problems:
        raise refuse(
            "R12",
            f"the Target's primary statistic is {statistic}: each subject needs at least "
            f"{tail_min_values(statistic)} per-request values per case to support the quantile; "
            f"short: {'; '.join(problems)}",
            "measure more calls (or calls that report every request's value) and record new "
            "samples",
        )


def _derive(
    target: TargetView,
    samples: SamplesRecorded,
    samples_event: str,
    ctx: DecisionContext,
    resolution: ResolutionEstimated | None = None,
) -> Derived:
    """Derive the verdicts of ``samples`` (recorded as event ``samples_event``) against
    ``target`` (R12), through ``ctx.derive`` when given: per case, except when re-deciding a
    verdict or final audit recorded under schema 1 (the pooled median of that rule);
    ``resolution``: the one to judge with when not the one in force (R4)."""
    pooled = ctx.recorded_before("VerdictRecorded", 2)
    if not pooled:
        _tail_refusal(target, samples)
    # verdicts recorded under schema 2 are re-derived by per_case/v1 (R12)
    method = "per_case/v1" if ctx.recorded_before("VerdictRecorded", PER_CASE_V2) else "per_case/v2"
    params = derivation_params(target, pooled, method, resolution)
    if ctx.derive is not None:
        return ctx.derive(samples_event, params, samples)
    return derive_samples(params, samples)


def _verdict_samples(
    state: WorkflowState, samples_id: str, ctx: DecisionContext
) -> tuple[SamplesRecorded, TargetView, str]:
    """The recorded samples ``samples_id`` with their pairs (read from their event through
    ``ctx.payload_of``), their Target and the id of their event. Raises: BadRequest for unknown samples;
    IntegrityError when the event the state names does not hold them."""
    view = state.samples.get(samples_id)
    if view is None:
        known = sorted(state.samples)[-5:]
        raise BadRequest(
            f"unknown samples {samples_id!r}",
            hint=(f"recorded samples include {', '.join(known)}; " if known else "")
            + "`perfledger measure workload --samples ID ...` (a kernel Target: `perfledger "
            "measure kernel --samples ID ...`) records samples",
        )
    if ctx.payload_of is None:
        raise BadRequest(
            "this decision reads recorded samples, and no ledger was given to read them from",
            hint="decide it through the ledger (`perfledger` or perfledger.api), which reads the samples",
        )
    samples = ctx.payload_of(view.event_id)
    if not isinstance(samples, SamplesRecorded) or samples.samples_id != samples_id:
        raise IntegrityError(
            f"event {view.event_id} does not hold samples {samples_id!r}",
            event_id=view.event_id,
        )
    target = rules.r1_target_frozen(state, samples.target_id)
    return samples, target, view.event_id


def _r14_screen_owes(
    stage: str, status: str, primary: DerivedVerdict, predicted_low: float, min_effect: float
) -> bool:
    """R14: a screen whose verdict fails (a CI wholly below the minimum effect, or, under R12's
    every-case rule, one case that regressed) contradicts a claim whose whole predicted
    interval (in the primary's improvement units) lies at or above the minimum effect: it owes
    a reconciliation."""
    return (
        stage == "screen"
        and status == "fail"
        and not primary.degenerate
        and primary.ci_low is not None
        and primary.ci_high is not None
        and predicted_low >= min_effect
    )


def _r14_contradiction_note(
    primary: DerivedVerdict,
    low: float,
    high: float,
    min_effect: float,
    experiment_id: str,
    *,
    screen: bool,
) -> str:
    """R14's note on a verdict that owes a reconciliation, true of the figures it prints: a
    target-stage CI wholly below or above the predicted improvement interval says which; a
    failed screen says that it failed while the claim predicted at least the minimum effect
    (its pooled CI may lie inside the interval: a case that regressed fails a screen, R12)."""
    predicted = f"predicted improvement [{low:.4g}, {high:.4g}]"
    measured = f"measured CI [{primary.ci_low:.4g}, {primary.ci_high:.4g}]"
    owes = (
        f"experiment {experiment_id!r} owes a reconciliation before any new experiment or "
        "champion selection on this Target"
    )
    if screen:
        return (
            f"R14: the screen failed ({primary.reason}) although the claim's whole {predicted} "
            f"lies at or above the minimum effect {min_effect:.4g} ({measured}); {owes}"
        )
    side = "below" if primary.ci_high is not None and primary.ci_high < low else "above"
    return f"R14: the {measured} lies wholly {side} the claim's {predicted}; {owes}"


def _wall_clock_rule(samples: SamplesRecorded, status: str, notes: list[str]) -> str:
    """R12: samples whose self-reported times the driver's wall clock does not bear out
    (:mod:`perfledger.derive.wall_check`) cannot pass: ``pass`` becomes ``inconclusive``, and
    the flag is noted whatever the status. Returns: the status."""

    note = wall_clock_note(samples.wall_check)
    if note is None:
        return status
    notes.append(note)
    return "inconclusive" if status == "pass" else status


def _foreign_allowed(target: TargetView) -> bool:
    """Whether the Target's readiness sets ``statistics.allow_explained_foreign_activity``
    (R17, :func:`perfledger.commands.workflow.foreign_share.formal_foreign_rule`: it decides only
    for events recorded before the review rule)."""
    readiness = target.readiness
    return readiness is not None and readiness.statistics.allow_explained_foreign_activity


def _formal_foreign(
    state: WorkflowState,
    target: TargetView,
    samples: SamplesRecorded,
    samples_event: str,
    status: str,
    notes: list[str],
    ctx: DecisionContext,
    review_rule: bool,
) -> str:
    """R17's 20 % limit at a formal stage (:func:`formal_foreign_rule`), with what lifts it by
    the rule version: before the review rule (``review_rule`` false) the readiness flag; from
    it only a settled review of the samples' event (``samples_event``) appended by an actor
    other than the experiment's creator, the samples' recorder and the one deciding
    (:func:`perfledger.commands.workflow.review_evidence.settling_review`); the flag is then
    noted as ignored. Returns: the status."""
    flag = _foreign_allowed(target)
    if not review_rule:
        return formal_foreign_rule(samples, status, notes, flag)
    creator = state.experiments[samples.experiment_id].event_id
    interested = interested_actors(ctx.actor_of, ctx.actor, creator, samples_event)
    review = settling_review(state, samples_event, interested, ctx.actor_of)
    reviewed_by = None
    if review is not None and ctx.actor_of is not None:
        reviewed_by = ctx.actor_of(review.event_id)
    return formal_foreign_rule(
        samples, status, notes, review_rule=True, reviewed_by=reviewed_by, flag_ignored=flag
    )


def decide_verdict_record(
    state: WorkflowState, req: rq.VerdictRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``verdict.record`` (R12, R3, R11, R14, R17): derive the verdict of screen or target samples
    and record it; a claimed status that differs from the derivation is refused (R12).

    The recorded ``status`` is the primary's derived status, made ``inconclusive`` for unexplained
    foreign activity in the window (R17), a screen that would pass (R11) or a stale reference
    (R11). A target result whose CI lies outside the claim's predicted interval is flagged
    ``contradicts_claim`` and must be reconciled before the next experiment (R14).
    """
    if req.samples_id in state.verdicts:
        raise rules.r12_already_derived(req.samples_id, "verdict")
    run = formal_runs.unfinished_run(state, req.samples_id, "target")
    if run is not None:  # R14: a started run that recorded no samples counts as failed
        return _emit(ctx, formal_runs.failed_run_verdict(state, run, req.claimed_status))
    samples, target, samples_event = _verdict_samples(state, req.samples_id, ctx)
    if samples.stage == "final_audit":
        raise BadRequest(
            "final-audit samples are judged by `perfledger final-audit record`",
            hint="`perfledger final-audit record --target T --samples ID`",
        )
    experiment = state.experiments[samples.experiment_id]
    explained, notes = rules.r17_explanations(state, samples.samples_id)
    kept = None  # R4: the resolution in force when the formal run started
    if rules_version(ctx, "VerdictRecorded") >= R4_RESOLUTION_AT_RUN_VERDICT:
        kept = r4_stage_resolution(state, target, samples.samples_id, notes)
    primary, guardrails, secondaries = _derive(target, samples, samples_event, ctx, kept)
    status = primary.status
    typed_counts = rules_version(ctx, "VerdictRecorded") < R4_MEASURED_RESOLUTION_VERDICT
    unexplained = rules.r17_unexplained_pairs(samples, explained, typed_counts)
    attribution_clean = unexplained == 0
    if not attribution_clean and status != "inconclusive":
        status = "inconclusive"
        notes.append(
            f"R17: {unexplained} pair(s) overlap unexplained foreign activity; "
            "performance attribution is inconclusive (correctness stands)"
        )
    if not ctx.recorded_before("VerdictRecorded", PER_CASE_V2):
        by_review = rules_version(ctx, "VerdictRecorded") >= R17_FOREIGN_SHARE_BY_REVIEW_VERDICT
        status = _formal_foreign(
            state, target, samples, samples_event, status, notes, ctx, by_review
        )
    status = _wall_clock_rule(samples, status, notes)
    if rules_version(ctx, "VerdictRecorded") >= R12_EVERY_CASE:
        status = r12_every_case(target, samples, status, notes)
    if kept is not None:
        status = r4_declared_stage_resolution(target, kept, status, notes)
    elif rules_version(ctx, "VerdictRecorded") >= R4_MEASURED_RESOLUTION_VERDICT:
        status = r4_declared_resolution(target, status, notes)
    if rules_version(ctx, "VerdictRecorded") >= R11_REFERENCE_WATCHED_VERDICT:
        unit = target.definition.primary.unit
        status = reference_watch.judge(samples.reference_slowed, status, notes, unit)
    if samples.stage == "screen" and status == "pass":
        status = "inconclusive"
        notes.append("R11: a screen can reject but never passes; only a target stage can pass")
    stale = samples.stage == "target" and not rules.is_current_reference(
        state, target, samples.reference
    )
    if stale and status != "inconclusive":
        status = "inconclusive"
        notes.append("R11: the reference is no longer the current champion (stale)")
    if target.diagnostic_only:
        notes.append("R3: the metric audit found the metric does not match the Target")
    predicted_low, predicted_high = predicted_improvement(
        experiment, target.definition.primary.direction
    )
    contradicts = (
        samples.stage == "target"
        and attribution_clean
        and not primary.degenerate
        and primary.ci_low is not None
        and primary.ci_high is not None
        and (primary.ci_high < predicted_low or primary.ci_low > predicted_high)
    )
    if experiment.rules_schema >= R14_STATED_INTERVAL:
        screen_owes = _r14_screen_owes(
            samples.stage, status, primary, predicted_low, target.definition.min_effect
        )
        if (contradicts or screen_owes) and rules_version(ctx, "VerdictRecorded") < R14_TRUE_NOTE:
            notes.append(  # the text of verdicts recorded before (re-derived as they were)
                f"R14: the result contradicts the claim (predicted improvement "
                f"[{predicted_low:.4g}, {predicted_high:.4g}], measured CI "
                f"[{primary.ci_low:.4g}, {primary.ci_high:.4g}]); experiment "
                f"{samples.experiment_id!r} owes a reconciliation before any new experiment or "
                "champion selection on this Target"
            )
        elif contradicts or screen_owes:
            notes.append(
                _r14_contradiction_note(
                    primary, predicted_low, predicted_high, target.definition.min_effect,
                    samples.experiment_id, screen=not contradicts,
                )
            )  # fmt: skip
        contradicts = contradicts or screen_owes
    if req.claimed_status is not None and req.claimed_status != status:
        raise refuse(
            "R12",
            f"the claimed verdict {req.claimed_status!r} differs from the derived "
            f"{status!r}: {'; '.join(notes) if status != primary.status and notes else primary.reason}",
            "verdicts are derived, never asserted: record without claimed_status",
        )
    payload = VerdictRecorded(
        samples_id=samples.samples_id,
        experiment_id=samples.experiment_id,
        target_id=samples.target_id,
        stage=samples.stage,
        status=status,
        primary=primary,
        guardrails=tuple(guardrails),
        secondaries=tuple(secondaries),
        stale=stale,
        contradicts_claim=contradicts,
        diagnostic_only=target.diagnostic_only,
        notes=tuple(notes),
        **_samples_marks(target, samples, ctx),
    )
    return _emit(ctx, payload)


def decide_final_audit_record(
    state: WorkflowState, req: rq.FinalAuditRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``final-audit.record`` (R13, R12, R17): derive the final audit of the champion against the
    original: ``pass`` when the primary passes with every guardrail, ``fail`` when the primary
    fails or a guardrail fails, or (schema 4 on) the champion failed its accuracy check on any
    call (R5), else ``inconclusive``."""
    target = rules.r1_target_current(state, req.target_id)
    run = formal_runs.unfinished_run(state, req.samples_id, "final_audit")
    if run is not None and req.samples_id not in state.final_audits:
        # R14: a started final-audit run that recorded no samples counts as failed
        if run.target_id != req.target_id or target.champion != run.experiment_id:
            raise refuse(
                "R13",
                "a final audit compares the current champion with the original",
                "measure the current champion against the original (`perfledger status` names the command)",
            )
        return _emit(ctx, formal_runs.failed_run_final_audit(state, run, req.claimed_status))
    samples, _, samples_event = _verdict_samples(state, req.samples_id, ctx)
    if samples.stage != "final_audit" or samples.target_id != req.target_id:
        raise refuse(
            "R11",
            f"samples {req.samples_id!r} are not final-audit samples of this Target",
            "measure the champion's final audit: `perfledger status` names the command",
        )
    if rules_version(ctx, "FinalAuditRecorded") >= R13_FAILED_AUDIT_DEMOTES:
        formal_runs.r13_not_demoted(target, samples.experiment_id)
    if target.champion is None or samples.experiment_id != target.champion:
        raise refuse(
            "R13",
            "a final audit compares the current champion with the original",
            "measure the current champion against the original (`perfledger status` names the command)",
        )
    if req.samples_id in state.final_audits:
        raise rules.r12_already_derived(req.samples_id, "final audit")
    explained, notes = rules.r17_explanations(state, samples.samples_id)
    kept = None  # R4: the resolution in force when the formal run started
    if rules_version(ctx, "FinalAuditRecorded") >= R4_RESOLUTION_AT_RUN_FINAL_AUDIT:
        kept = r4_stage_resolution(state, target, samples.samples_id, notes)
    primary, guardrails, _ = _derive(target, samples, samples_event, ctx, kept)
    if primary.status == "fail" or any(g.status == "fail" for g in guardrails):
        status = "fail"
    elif primary.status == "pass" and all(g.status == "pass" for g in guardrails):
        status = "pass"
    else:
        status = "inconclusive"
    typed_counts = rules_version(ctx, "FinalAuditRecorded") < R4_MEASURED_RESOLUTION_FINAL_AUDIT
    unexplained = rules.r17_unexplained_pairs(samples, explained, typed_counts)
    if unexplained and status != "inconclusive":
        status = "inconclusive"
        notes.append("R17: unexplained foreign activity in the window")
    if not ctx.recorded_before("FinalAuditRecorded", PER_CASE_V2):
        by_review = (
            rules_version(ctx, "FinalAuditRecorded") >= R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT
        )
        status = _formal_foreign(
            state, target, samples, samples_event, status, notes, ctx, by_review
        )
    status = _wall_clock_rule(samples, status, notes)
    if rules_version(ctx, "FinalAuditRecorded") >= R12_EVERY_CASE_FINAL_AUDIT:
        status = r12_every_case(target, samples, status, notes)
    if kept is not None:
        status = r4_declared_stage_resolution(target, kept, status, notes)
    elif rules_version(ctx, "FinalAuditRecorded") >= R4_MEASURED_RESOLUTION_FINAL_AUDIT:
        status = r4_declared_resolution(target, status, notes)
    if rules_version(ctx, "FinalAuditRecorded") >= R11_REFERENCE_WATCHED_FINAL_AUDIT:
        unit = target.definition.primary.unit
        status = reference_watch.judge(samples.reference_slowed, status, notes, unit)
    if (
        rules_version(ctx, "FinalAuditRecorded") >= R5_FINAL_AUDIT_ACCURACY
        and samples.cand_failures
    ):
        # R5: the champion's correctness failure in its final audit is disqualifying
        notes.append(
            f"R5: the champion failed its accuracy check on {samples.cand_failures} call(s) of "
            "its final audit"
        )
        status = "fail"
    if rules_version(ctx, "FinalAuditRecorded") >= R5_MEASURED_FINAL_AUDIT:  # R5: observed only
        status = measurement_rules.r5_measured_final_audit(
            state, state.samples[req.samples_id], samples, status, notes,
            self_timed=rules_version(ctx, "FinalAuditRecorded") >= R5_REPORTED_FINAL_AUDIT,
        )  # fmt: skip
    if rules_version(ctx, "FinalAuditRecorded") >= R12_IMPLAUSIBLE_FINAL_AUDIT:
        status = _r12_implausible_final_audit(state, samples, status, notes, ctx)
    contradicts: bool | msgspec.UnsetType = msgspec.UNSET
    if rules_version(ctx, "FinalAuditRecorded") >= R14_FINAL_AUDIT_OWES:
        contradicts = _r14_final_audit_owes(state, target, samples, primary, not unexplained, notes)
    if req.claimed_status is not None and req.claimed_status != status:
        raise refuse(
            "R12",
            f"the claimed final audit {req.claimed_status!r} differs from the derived {status!r}"
            + (f": {'; '.join(notes)}" if notes else ""),
            "final audits are derived, never asserted: record without claimed_status",
        )
    payload = FinalAuditRecorded(
        target_id=req.target_id,
        samples_id=req.samples_id,
        champion=target.champion,
        status=status,  # type: ignore[arg-type]
        primary=primary,
        guardrails=tuple(guardrails),
        notes=tuple(notes),
        **_samples_marks(target, samples, ctx),
        contradicts_claim=contradicts,
    )
    return _emit(ctx, payload)


def _r12_implausible_final_audit(
    state: WorkflowState, samples: Any, status: str, notes: list[str], ctx: DecisionContext
) -> str:
    """R12 (``FinalAuditRecorded`` from
    :data:`~perfledger.events.workflow.R12_IMPLAUSIBLE_FINAL_AUDIT`): a pass on samples with a
    plausibility flag that no review by another actor names is ``inconclusive``, the refusal a
    champion selection would meet in its note."""
    view = state.samples[samples.samples_id]
    if status != "pass" or not plausibility.flagged(view):
        return status
    creator = state.experiments[view.experiment_id].event_id
    interested = interested_actors(ctx.actor_of, ctx.actor, creator, view.event_id)
    try:
        plausibility.r12_plausible_or_reviewed(state, view, interested, ctx.actor_of, named=True)
    except RuleRefused as exc:
        notes.append(exc.message)
        return "inconclusive"
    return status


def _r14_final_audit_owes(
    state: WorkflowState,
    target: TargetView,
    samples: SamplesRecorded,
    primary: DerivedVerdict,
    attribution_clean: bool,
    notes: list[str],
) -> bool:
    """R14 (``FinalAuditRecorded`` schema :data:`~perfledger.events.workflow.
    R14_FINAL_AUDIT_OWES` on): whether the champion's final audit lies wholly outside its
    claim's predicted interval, below or above (a prediction wrong either way is reconciled),
    appending R14's note when it does. Only where the claim and the audit measure the same
    thing: the target-stage result that made the champion was measured against the original
    (a later champion's claim predicts its gain over the champion before it). Not for a claim
    recorded before stated intervals or already reconciled (or owing one: its error is on
    record), unexplained foreign activity or a degenerate CI."""
    experiment = state.experiments.get(samples.experiment_id)
    if experiment is None or experiment.rules_schema < R14_STATED_INTERVAL:
        return False
    experiment_id = experiment.created.experiment_id
    if experiment.reconciliations or experiment_id in target.pending:
        return False  # this claim's error is already on record (or owed) with its premise
    selected = next((e for e in reversed(target.lineage) if e.champion == experiment_id), None)
    won = state.samples.get(selected.samples_id or "") if selected is not None else None
    if won is None or won.reference.kind != ORIGINAL:
        return False
    if not attribution_clean or primary.degenerate:
        return False
    if primary.ci_low is None or primary.ci_high is None:
        return False
    low, high = predicted_improvement(experiment, target.definition.primary.direction)
    if primary.ci_high >= low and primary.ci_low <= high:
        return False  # overlapping the interval: not wholly outside it
    notes.append(
        _r14_contradiction_note(
            primary,
            low,
            high,
            target.definition.min_effect,
            experiment_id,
            screen=False,
        )
    )
    return True


# ---------------------------------------------------------------------------------- decisions


def decide_local_result_record(
    state: WorkflowState, req: rq.LocalResultRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``local-result.record`` (R13): a pre-declared secondary's measured gain, guardrails
    holding, kept with its scenario. A metric not declared before is a hypothesis, not a
    result."""
    verdict = state.verdicts.get(req.samples_id)
    if verdict is None:
        raise refuse(
            "R13",
            f"no verdict is recorded for samples {req.samples_id!r}",
            f"derive it first: `perfledger verdict record --samples {req.samples_id}`",
        )
    if req.result_id in state.local_results:
        raise BadRequest(
            f"local result {req.result_id!r} is already recorded", hint="choose a new result_id"
        )
    target = rules.r1_target_frozen(state, verdict.target_id)
    declared = {s.name for s in target.definition.secondaries}
    if req.metric not in declared:
        raise refuse(
            "R13",
            f"{req.metric!r} is not a pre-declared secondary of Target {verdict.target_id!r}: a "
            "gain found after the fact is a hypothesis",
            "freeze a new Target with that metric as primary to pursue it",
        )
    found = next((s for s in verdict.secondaries if s.name == req.metric), None)
    if found is None or found.verdict.status != "pass":
        raise refuse(
            "R13",
            f"no measured gain on {req.metric!r} in samples {req.samples_id!r}",
            "record a local result of a metric these samples improved (`perfledger verdict explain ID` shows them)",
        )
    if any(g.status == "fail" for g in verdict.guardrails):
        raise refuse(
            "R13",
            "a guardrail failed: the local result would violate a constraint",
            "a local result needs every guardrail to hold; measure a candidate that keeps them",
        )
    assert found.verdict.estimate is not None
    assert found.verdict.ci_low is not None and found.verdict.ci_high is not None
    payload = LocalResultRecorded(
        result_id=req.result_id,
        target_id=verdict.target_id,
        experiment_id=verdict.experiment_id,
        samples_id=req.samples_id,
        metric=req.metric,
        scenario=req.scenario,
        estimate=found.verdict.estimate,
        ci_low=found.verdict.ci_low,
        ci_high=found.verdict.ci_high,
    )
    return _emit(ctx, payload)


def decide_reject(state: WorkflowState, req: rq.Reject, ctx: DecisionContext) -> list[EventDraft]:
    """``reject`` (R15): close an implementation, integration or mechanism, no wider than the
    evidence supports."""
    experiment = state.experiments.get(req.experiment_id)
    if experiment is None:
        raise BadRequest(
            f"unknown experiment {req.experiment_id!r}",
            hint="`perfledger experiment list` lists them",
        )
    if experiment.rejection is not None:
        raise BadRequest(
            f"experiment {req.experiment_id!r} is already rejected",
            hint="nothing to do: `perfledger rejected` shows the rejection",
        )
    unknown = sorted({s for s in req.samples_ids if s not in state.samples})
    unknown += sorted({e for e in req.evidence_ids if e not in state.evidence})
    if unknown:
        raise BadRequest(
            f"unknown samples or evidence {unknown}",
            hint="cite recorded evidence ids (`perfledger evidence list`) or samples ids (`perfledger status`)",
        )
    rules.r15_rejection_scope(
        experiment, req.closes, req.local_proxy, req.discriminating_evidence_ids, state
    )
    payload = _build(CandidateRejected, {**dump(req), "target_id": experiment.created.target_id})
    return _emit(ctx, payload)


def decide_reconcile(
    state: WorkflowState, req: rq.Reconcile, ctx: DecisionContext
) -> list[EventDraft]:
    """``reconcile`` (R14, R7): name the corrected premise and model of a contradicted claim; a
    numeric corrected model is re-checked by the R7 arithmetic and its bound recorded."""
    experiment = state.experiments.get(req.experiment_id)
    if experiment is None:
        raise BadRequest(
            f"unknown experiment {req.experiment_id!r}",
            hint="`perfledger experiment list` lists them",
        )
    model = req.corrected_model
    bound = None
    if model.coverage is not None or model.local_speedup is not None:
        claim = experiment.created.claim
        coverage = model.coverage if model.coverage is not None else claim.coverage
        speedup = model.local_speedup if model.local_speedup is not None else claim.local_speedup
        cost = model.added_cost if model.added_cost is not None else claim.added_cost
        if coverage is None or speedup is None:
            raise refuse(
                "R7",
                "a numeric corrected model needs coverage and local speedup",
                "state coverage and local_speedup in corrected_model, or only its description",
            )
        try:
            bound = amdahl.amdahl_bound(coverage, speedup, cost)
        except ValueError as exc:
            raise refuse(
                "R7",
                str(exc),
                "coverage must lie in (0, 1], local speedup be positive and added cost non-negative",
            ) from None
    elif model.added_cost is not None and model.added_cost < 0:
        raise refuse(
            "R7",
            f"added cost must be >= 0, got {model.added_cost}",
            "state added_cost as a non-negative share of the original time",
        )
    if model.affected_share is not None and not 0.0 < model.affected_share <= 1.0:
        raise refuse(
            "R7",
            f"affected share {model.affected_share} must lie in (0, 1]",
            "state the affected share as a fraction of the requests in (0, 1]",
        )
    corrected = _build(CorrectedModel, {**dump(model), "bound": bound})
    payload = ReconciliationRecorded(
        target_id=experiment.created.target_id,
        experiment_id=req.experiment_id,
        premise=req.premise,
        corrected_model=corrected,
        explanation=req.explanation,
    )
    return _emit(ctx, payload)


def decide_champion_select(
    state: WorkflowState, req: rq.ChampionSelect, ctx: DecisionContext
) -> list[EventDraft]:
    """``champion.select`` (R13, R2, R3, R11): an explicit champion from a passed target-stage
    verdict of the current Target with every guardrail holding; compare-and-swap against the
    champion the caller saw; ``restore_original`` only after a failed final audit."""
    target = rules.r1_target_current(state, req.target_id)
    if open_conflicts(state, req.target_id, CHAMPION_CONFLICTS):
        raise refuse(
            "R13",
            f"Target {req.target_id!r} has an unresolved champion conflict",
            "resolve it: `perfledger conflict resolve --request FILE`",
        )
    current = rules.r13_current_champion(target, req.expected_current)
    if req.decision == "restore_original":
        if target.champion is None:
            raise refuse(
                "R13",
                "the original is already the champion",
                "nothing to restore: `perfledger champion show`",
            )
        if target.final_audit_status != "fail":
            raise refuse(
                "R13",
                "restoring the original is the decision after a failed final audit only",
                "select a passed target-stage result instead (`perfledger status`)",
            )
        payload = ChampionSelected(
            target_id=req.target_id, decision="restore_original", previous=current,
            reason=req.reason,
        )  # fmt: skip
        return _emit(ctx, payload)
    if rules_version(ctx, "ChampionSelected") >= R14_BLOCKS_CHAMPION:
        rules.r14_no_pending_reconciliation(target, "champion selection")
    if rules_version(ctx, "ChampionSelected") >= R14_UNJUDGED_BLOCKS_CHAMPION:
        formal_runs.r14_no_unjudged_target_results(state, req.target_id)
    if req.samples_id is None:
        raise BadRequest(
            "champion.select needs the samples_id of a passed target-stage verdict",
            hint="pass --samples ID of a passed target-stage verdict (`perfledger status` offers it)",
        )
    verdict = state.verdicts.get(req.samples_id)
    if verdict is None:
        raise refuse(
            "R13",
            f"no verdict is recorded for samples {req.samples_id!r}",
            f"derive it first: `perfledger verdict record --samples {req.samples_id}`",
        )
    if verdict.target_id != req.target_id:
        raise refuse(
            "R13",
            "the verdict is not of the current Target",
            "select from a verdict of this Target (`perfledger status` lists them)",
        )
    if verdict.stage != "target":
        raise refuse(
            "R13",
            f"a champion comes from a target-stage result, not a {verdict.stage}",
            rules.r13_target_stage_hint(state, verdict.experiment_id),
        )
    if target.definition.diagnostic:
        raise refuse(
            "R2",
            "a diagnostic Target never yields a workload-level champion",
            "freeze a non-diagnostic Target to select a champion (`perfledger target supersede`)",
        )
    if target.diagnostic_only:
        raise refuse(
            "R3",
            "the metric audit found the metric does not match: diagnostic only",
            "freeze a Target whose primary the metric audit matches (`perfledger target supersede`)",
        )
    if rules_version(ctx, "ChampionSelected") >= R14_UNJUDGED_BLOCKS_CHAMPION:
        formal_runs.r13_not_demoted(target, verdict.experiment_id)
    samples = state.samples.get(req.samples_id)
    if samples is None:  # R14: a run that recorded no samples was judged failed
        raise refuse(
            "R13",
            f"the target run {req.samples_id!r} recorded no samples: it failed",
            "measure the target stage again (`perfledger status` names the command) and select its passed result",
        )
    if verdict.stale or not rules.is_current_reference(state, target, samples.reference):
        raise refuse(
            "R11",
            "the result's reference is no longer the current champion: it is stale",
            "measure its target stage against the current champion (`perfledger status` names the command), then select that result",
        )
    experiment = state.experiments[verdict.experiment_id]
    if experiment.rejection is not None:
        raise refuse(
            "R15",
            f"experiment {verdict.experiment_id!r} was rejected",
            "a rejected experiment is closed: select another experiment's passed result (`perfledger status`)",
        )
    measurement_rules.r5_r13_disqualified(state, experiment, ctx.payload_of)
    if verdict.status != "pass":
        gains = [s.name for s in verdict.secondaries if s.verdict.status == "pass"]
        if gains:
            raise refuse(
                "R13",
                f"the primary did not pass ({verdict.status}); a secondary-only gain ({gains}) "
                "is a local result, never a champion",
                "record it: `perfledger local-result record --request FILE`",
            )
        raise refuse(
            "R13",
            f"the primary verdict is {verdict.status!r}, not pass",
            f"`perfledger verdict explain {req.samples_id}` names the condition that decided it",
        )
    holding = [g.metric for g in verdict.guardrails if g.status != "pass"]
    if holding:
        raise refuse(
            "R13",
            f"guardrails do not hold: {holding}",
            f"`perfledger verdict explain {req.samples_id}` shows each guardrail's figures",
        )
    if rules_version(ctx, "ChampionSelected") >= R5_MEASURED_CHAMPION:  # R5: observed only
        measurement_rules.r5_measured_champion(
            state, samples, verdict.samples_provenance, ctx.payload_of,
            self_timed=rules_version(ctx, "ChampionSelected") >= R5_REPORTED_CHAMPION,
        )  # fmt: skip
    if rules_version(ctx, "ChampionSelected") >= R14_CODE_RESULTS_CHAMPION:
        # R14: the evidence for a champion accounts for every formal result of its code
        formal_runs.r14_code_results_passed(
            state, req.target_id, samples.candidate_hash, "champion selection"
        )
    if rules_version(ctx, "ChampionSelected") >= R12_IMPLAUSIBLE_BLOCKS_CHAMPION:
        creator = state.experiments[verdict.experiment_id].event_id
        interested = interested_actors(ctx.actor_of, ctx.actor, creator, samples.event_id)
        plausibility.r12_plausible_or_reviewed(
            state, samples, interested, ctx.actor_of,
            named=rules_version(ctx, "ChampionSelected") >= R12_NAMED_REVIEW_CLEARS,
        )  # fmt: skip
    payload = ChampionSelected(
        target_id=req.target_id,
        decision="select",
        experiment_id=verdict.experiment_id,
        samples_id=req.samples_id,
        candidate_hash=samples.candidate_hash,
        previous=current,
        reason=req.reason,
    )
    return _emit(ctx, payload)


def decide_host_advice_record(
    state: WorkflowState, req: rq.HostAdviceRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``host-advice.record`` (R16): host changes are recorded as advice, never applied."""
    if req.applied:
        raise refuse(
            "R16",
            "host changes (driver, counter permissions, clocks, power, services, container "
            "runtime) are advice only: perfledger never applies them",
            "record the advice with applied=false; a person applies it",
        )
    if req.advice_id in state.host_advice:
        raise BadRequest(
            f"advice {req.advice_id!r} is already recorded", hint="choose a new advice_id"
        )
    if req.target_id is not None:
        rules.r1_target_frozen(state, req.target_id)
    return _emit(ctx, _build(HostAdviceRecorded, dump(req)))


def decide_handoff_record(
    state: WorkflowState, req: rq.HandoffRecord, ctx: DecisionContext
) -> list[EventDraft]:
    """``handoff.record`` (R18): a handoff consistent with the ledger: the current champion, every
    local result, rejection (with its scope) and reconciliation of the Target, known evidence,
    budget used + left = budget, and what resuming needs."""
    target = rules.r1_target_frozen(state, req.target_id)
    if rules_version(ctx, "HandoffRecorded") >= R18_LEDGER_FILLED:
        # R18: what the ledger knows is filled from it, a stated list checked against it
        body = handoff_rules.r18_filled(state, target, req)
        if rules_version(ctx, "HandoffRecorded") >= R18_STOP_REASON_AGREES:
            handoff_rules.r18_stop_reason_agrees(req.stop_reason, body["primary_achieved"])
        _r18_budget(target, body["budget_used"], body["budget_left"])
        if not body["resume_needs"]:
            raise refuse(
                "R18",
                "say what is needed to resume (resume_needs)",
                "leave resume_needs out: perfledger fills the ledger's part",
            )
        return _emit(ctx, _build(HandoffRecorded, body))
    tid = req.target_id
    champion = target.champion or ORIGINAL
    if req.champion != champion:
        raise refuse(
            "R18",
            f"the handoff names champion {req.champion!r}; the ledger's is {champion!r}",
            f"name {champion!r}, or derive the handoff from the ledger: `perfledger handoff record --target {req.target_id} --gpu-used S`",
        )
    if req.primary_achieved and (champion == ORIGINAL or target.final_audit_status != "pass"):
        raise refuse(
            "R18",
            "the primary is achieved only with a champion whose final audit passed",
            "set primary_achieved false, or measure and record the champion's final audit first",
        )
    local = {r.result_id for r in state.local_results.values() if r.target_id == tid}
    if not local <= set(req.local_results):
        raise refuse(
            "R18",
            f"the handoff omits local results {sorted(local - set(req.local_results))}",
            f"list them in local_results, or derive the handoff from the ledger: `perfledger handoff record --target {req.target_id} --gpu-used S`",
        )
    rejected = {
        (r.experiment_id, r.closes) for r in state.rejections.values() if r.target_id == tid
    }
    stated = {(r.experiment_id, r.closes) for r in req.rejected}
    if rejected != stated:
        raise refuse(
            "R18",
            f"the handoff's rejected directions {sorted(stated)} differ from the ledger's "
            f"{sorted(rejected)} (with their scope)",
            f"list the ledger's rejections (`perfledger rejected`), or derive the handoff: `perfledger handoff record --target {req.target_id} --gpu-used S`",
        )
    corrections = {r.experiment_id for r in state.reconciliations if r.target_id == tid}
    if not corrections <= set(req.prediction_corrections):
        raise refuse(
            "R18",
            f"the handoff omits prediction-error corrections {sorted(corrections - set(req.prediction_corrections))}",
            f"list them in prediction_corrections, or derive the handoff: `perfledger handoff record --target {req.target_id} --gpu-used S`",
        )
    unknown = [e for e in req.key_evidence if e not in state.evidence and e not in state.samples]
    if unknown:
        raise refuse(
            "R18",
            f"key evidence {unknown} is neither recorded evidence nor samples",
            "cite recorded evidence ids (`perfledger evidence list`) or samples ids (`perfledger status`)",
        )
    if not req.resume_needs:
        raise refuse(
            "R18",
            "say what is needed to resume (resume_needs)",
            "list in resume_needs what the next session needs (a clone of the ledger, a machine, a file)",
        )
    _r18_budget(target, dump(req.budget_used), dump(req.budget_left))
    return _emit(ctx, _build(HandoffRecorded, dump(req)))


def _r18_budget(target: TargetView, used: dict[str, float], left: dict[str, float]) -> None:
    """R18: budget used + left = the Target's budget, per field (seconds), within
    :data:`BUDGET_TOLERANCE`; a used beyond the budget leaves 0. Raises: RuleRefused."""
    budget = target.definition.budget
    for field in ("wall_s", "gpu_s"):
        total = getattr(budget, field)
        if abs(left[field] - max(0.0, total - used[field])) > BUDGET_TOLERANCE * max(1.0, total):
            raise refuse(
                "R18",
                f"budget {field}: used {used[field]} and left {left[field]} do not add up to "
                f"the Target's {total}",
                "leave budget_left out: perfledger computes it from budget_used",
            )


def decide_conflict_resolve(
    state: WorkflowState, req: rq.ConflictResolve, ctx: DecisionContext
) -> list[EventDraft]:
    """``conflict.resolve`` (SPEC.md section 2): keep one side of an open conflict."""
    conflict = state.conflicts.get(req.conflict_id)
    if conflict is None or conflict.target_id != req.target_id:
        raise BadRequest(
            f"no conflict {req.conflict_id!r} on Target {req.target_id!r}",
            hint="`perfledger status` lists the open conflicts of each Target",
        )
    if conflict.resolved_by is not None:
        raise BadRequest(
            f"conflict {req.conflict_id!r} is already resolved",
            hint="nothing to do: `perfledger status` lists the open conflicts",
        )
    if req.keep not in conflict.options:
        raise BadRequest(
            f"keep must be one of {conflict.options}", hint=f"pass --keep one of {conflict.options}"
        )
    if conflict.kind == OWED_CHAMPION and req.keep != conflict.options[0]:
        # R14: keeping the champion selected elsewhere is a champion selection
        target = rules.r1_target_current(state, req.target_id)
        rules.r14_no_pending_reconciliation(target, "champion kept from this conflict")
    if conflict.kind == UNACCOUNTED_CHAMPION and req.keep != conflict.options[0]:
        # R14: keeping a champion whose code has a formal result that did not pass
        experiment = state.experiments.get(req.keep)
        if experiment is not None:
            formal_runs.r14_code_results_passed(
                state,
                req.target_id,
                experiment.created.candidate.content_hash,
                "keeping the champion of this conflict",
            )
    payload = ConflictResolved(
        target_id=req.target_id, conflict_id=req.conflict_id, keep=req.keep, reason=req.reason
    )
    return _emit(ctx, payload)


Decider = Callable[[WorkflowState, Any, DecisionContext], list[EventDraft]]
