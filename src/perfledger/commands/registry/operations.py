"""The operation registry: name -> request model, decider, event kind, CLI group/verb.

This module is cheap to import (no request models, no numpy): the CLI builds its commands from
:data:`OPERATIONS`; the request models and deciders load on first use (:func:`request_model`,
:func:`decider`).

The write path of every operation is :func:`execute`:

1. :func:`validate` the body against the closed request model (``BadRequest``, exit 2);
2. with an idempotency key already in the ledger, return that event (same request) or refuse;
3. ``Ledger.transact(decide)``, where ``decide(view)`` folds the state at ``view.head`` and runs
   the pure decider (``RuleRefused``, exit 3, leaves the ledger unchanged); a lost
   compare-and-swap re-decides on the new head with the same event time.

Each event's envelope ``request`` is ``{"op": NAME, "body": VALIDATED_BODY}`` so that an auditor
can re-decide every recorded request against the state before it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from perfledger.commands.registry.placeholders import refuse_placeholders
from perfledger.errors import BadRequest

if TYPE_CHECKING:
    from perfledger.api import Ledger
    from perfledger.commands.workflow.deciders import DecisionContext
    from perfledger.events.envelope import Envelope


def _workflow_requests() -> ModuleType:
    """The workflow's request models (imported on first use: msgspec Structs)."""
    from perfledger.commands.workflow import requests  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return requests


def _workflow_deciders() -> ModuleType:
    """The workflow's deciders (R1-R18), imported on first use."""
    from perfledger.commands.workflow import deciders  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return deciders


def _activity_deciders() -> ModuleType:
    """The decider of ``activity.explain`` (R17)."""
    from perfledger.commands.workflow import activity  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return activity


def _formal_run_deciders() -> ModuleType:
    """The decider of ``formal-run.start`` (R14)."""
    from perfledger.commands.workflow import formal_run_start  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return formal_run_start


def _review_deciders() -> ModuleType:
    """The decider of ``review.record``."""
    from perfledger.commands.workflow import review_deciders  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return review_deciders


def _loop_requests() -> ModuleType:
    """The kernel-iteration loop's request models (R19-R25)."""
    from perfledger.commands.loop import requests  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return requests


def _loop_deciders() -> ModuleType:
    """The kernel-iteration loop's deciders (R19-R25)."""
    from perfledger.commands.loop import deciders  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return deciders


@dataclass(frozen=True)
class Operation:
    """One write operation.

    Attributes:
        name: ``group.verb`` (``experiment.create``), the key of envelopes' ``request.op``.
        group: the CLI group (``experiment``), or None for a top-level command (``reject``).
        verb: the CLI verb (``create``).
        kind: the event kind it appends.
        model: the request model's name in :mod:`perfledger.commands.workflow.requests`.
        decider: the decider's name in :mod:`perfledger.commands.workflow.deciders`.
        rules: the rule ids it enforces.
        help: one line for ``--help``.
        models_module: returns the module holding the request model (a function, imported on
            first use, so that the registry stays cheap to import and names no module by string).
        decider_module: returns the module holding the decider (likewise).
        generic_cli: whether ``workflow_cli`` builds its ``--request`` command (the loop's
            operations have their own CLI, :mod:`perfledger.commands.cli.loop`).
    """

    name: str
    group: str | None
    verb: str
    kind: str
    model: str
    decider: str
    rules: str
    help: str
    models_module: Callable[[], ModuleType] = _workflow_requests
    decider_module: Callable[[], ModuleType] = _workflow_deciders
    generic_cli: bool = True


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "target.freeze",
            "target",
            "freeze",
            "TargetFrozen",
            "TargetFreeze",
            "decide_target_freeze",
            "R1",
            "Freeze a Target (primary, minimum effect, "
            "guardrails, secondaries, scope, risk, budget).",
        ),
        Operation(
            "target.supersede",
            "target",
            "supersede",
            "TargetSuperseded",
            "TargetSupersede",
            "decide_target_supersede",
            "R1",
            "Freeze a new Target in place of the current one.",
        ),
        Operation(
            "readiness.record",
            "readiness",
            "record",
            "ReadinessRecorded",
            "ReadinessRecord",
            "decide_readiness_record",
            "R1 R2",
            "Record readiness: original, real test set, accuracy rule, driver, "
            "environment, statistics.",
        ),
        Operation(
            "metric-audit.record",
            "metric-audit",
            "record",
            "MetricAuditRecorded",
            "MetricAuditRecord",
            "decide_metric_audit_record",
            "R1 R3",
            "Record how a decision metric is computed and whether it matches the Target.",
        ),
        Operation(
            "baseline.record",
            "baseline",
            "record",
            "BaselineRecorded",
            "BaselineRecord",
            "decide_baseline_record",
            "R1 R2 R4 R11",
            "Record the original's baseline from repeated samples.",
        ),
        Operation(
            "resolution.record",
            "resolution",
            "record",
            "ResolutionEstimated",
            "ResolutionRecord",
            "decide_resolution_record",
            "R1 R4",
            "Record the measurement resolution (A/A of the original).",
        ),
        Operation(
            "evidence.add",
            "evidence",
            "add",
            "EvidenceRecorded",
            "EvidenceAdd",
            "decide_evidence_add",
            "R6 R16",
            "Record profiler or compiler facts with their layer.",
        ),
        Operation(
            "upstream-check.record",
            "upstream-check",
            "record",
            "UpstreamCheckRecorded",
            "UpstreamCheckRecord",
            "decide_upstream_check_record",
            "R10",
            "Record an upstream check before a new kernel, primitive or adapter.",
        ),
        Operation(
            "experiment.create",
            "experiment",
            "create",
            "ExperimentCreated",
            "ExperimentCreate",
            "decide_experiment_create",
            "R1 R2 R4 R6 R7 R8 R9 R10 R11 R14",
            "Create an experiment with its opportunity claim and preregistration; "
            "candidate.subject names the candidate's directory, which perfledger hashes (R11).",
        ),
        Operation(
            "samples.record",
            "samples",
            "record",
            "SamplesRecorded",
            "SamplesRecord",
            "decide_samples_record",
            "R1 R2 R3 R4 R5 R8 R11 R15 R17",
            "Record paired samples of one stage (screen, target, final_audit).",
        ),
        Operation(
            "verdict.record",
            "verdict",
            "record",
            "VerdictRecorded",
            "VerdictRecord",
            "decide_verdict_record",
            "R3 R11 R12 R14 R17",
            "Derive and record the verdict of screen or target samples.",
        ),
        Operation(
            "local-result.record",
            "local-result",
            "record",
            "LocalResultRecorded",
            "LocalResultRecord",
            "decide_local_result_record",
            "R13",
            "Record a secondary-only gain as a local result.",
        ),
        Operation(
            "reject",
            None,
            "reject",
            "CandidateRejected",
            "Reject",
            "decide_reject",
            "R15",
            "Reject an experiment, stating what it closes.",
        ),
        Operation(
            "reconcile",
            None,
            "reconcile",
            "ReconciliationRecorded",
            "Reconcile",
            "decide_reconcile",
            "R7 R14",
            "Reconcile a contradicted prediction: corrected premise and model.",
        ),
        Operation(
            "champion.select",
            "champion",
            "select",
            "ChampionSelected",
            "ChampionSelect",
            "decide_champion_select",
            "R1 R2 R3 R11 R13",
            "Select a champion (compare-and-swap), or restore the original.",
        ),
        Operation(
            "final-audit.record",
            "final-audit",
            "record",
            "FinalAuditRecorded",
            "FinalAuditRecord",
            "decide_final_audit_record",
            "R11 R12 R13 R17",
            "Derive and record the final audit of the champion against the original.",
        ),
        Operation(
            "host-advice.record",
            "host-advice",
            "record",
            "HostAdviceRecorded",
            "HostAdviceRecord",
            "decide_host_advice_record",
            "R16",
            "Record host-change advice (never applied).",
        ),
        Operation(
            "handoff.record",
            "handoff",
            "record",
            "HandoffRecorded",
            "HandoffRecord",
            "decide_handoff_record",
            "R18",
            "Record a handoff: state target_id, budget_used, stop_reason and feedback; "
            "perfledger fills the champion, gain figures, rejections and the other lists from "
            "the ledger (stated lists must match it).",
        ),
        Operation(
            "conflict.resolve",
            "conflict",
            "resolve",
            "ConflictResolved",
            "ConflictResolve",
            "decide_conflict_resolve",
            "",
            "Resolve a conflict between concurrent decisions.",
        ),
        Operation(
            "activity.explain",
            "activity",
            "explain",
            "ActivityExplained",
            "ActivityExplain",
            "decide_activity_explain",
            "R17",
            "Explain foreign activity in sample windows after the samples, before the verdict.",
            decider_module=_activity_deciders,
        ),
        Operation(
            "formal-run.start",
            "formal-run",
            "start",
            "FormalRunStarted",
            "FormalRunStart",
            "decide_formal_run_start",
            "R2 R3 R4 R8 R11 R13 R14 R15",
            "Record the start of a formal-stage measurement (perfledger measure does, first).",
            decider_module=_formal_run_deciders,
        ),
    )
}


#: The kernel-iteration loop's operations (R19-R25): requests in ``loop.requests``, deciders in
#: ``loop.deciders``, commands in ``cli.loop`` (which measures, then executes these).
_LOOP: dict[str, Any] = {"models_module": _loop_requests, "decider_module": _loop_deciders,
                         "generic_cli": False}  # fmt: skip
OPERATIONS.update(
    (op.name, op)
    for op in (
        Operation("loop.setup", "loop", "setup", "RunSetUp", "LoopSetup", "decide_loop_setup",
                  "R16 R23", "Set up a kernel-iteration run.", **_LOOP),
        Operation("loop.profile", "loop", "profile", "ProfileRecorded", "LoopProfile",
                  "decide_loop_profile", "R16 R25", "Record one profile of a run's kernel.",
                  **_LOOP),
        Operation("loop.attempt", "loop", "attempt", "AttemptRecorded", "LoopAttempt",
                  "decide_loop_attempt", "R19 R20 R21 R22 R23 R24 R25",
                  "Record a candidate that failed its correctness check.", **_LOOP),
        Operation("loop.close-iter", "loop", "close-iter", "IterationClosed", "LoopCloseIter",
                  "decide_loop_close_iter", "R19 R20 R21 R22 R23 R24 R25",
                  "Close an iteration with its methods, analysis and paired timing.", **_LOOP),
        Operation("loop.finalize", "loop", "finalize", "RunFinalized", "LoopFinalize",
                  "decide_loop_finalize", "", "Finalize a run with its headline.", **_LOOP),
    )
)  # fmt: skip

#: Research and review records: the request in ``requests``, the decider in ``review_deciders``.
OPERATIONS["review.record"] = Operation(
    "review.record", "review", "record", "ReviewRecorded", "ReviewRecord",
    "decide_review_record", "",
    "Record a reviewer's challenge, the response and whether dissent remains (never judged).",
    decider_module=_review_deciders,
)  # fmt: skip


def get_operation(name: str) -> Operation:
    """Return the operation ``name``; BadRequest listing the known ones otherwise."""
    try:
        return OPERATIONS[" ".join(name.split()).replace(" ", ".")]
    except KeyError:
        # `schema supersede` for `target.supersede`: name the one operation with that verb
        alike = [op for op in OPERATIONS if op.rsplit(".", 1)[-1] == name.strip()]
        mean = f"did you mean {alike[0]}? " if len(alike) == 1 else ""
        raise BadRequest(
            f"unknown operation {name!r}", hint=mean + "known: " + ", ".join(sorted(OPERATIONS))
        ) from None


@functools.cache
def request_model(name: str) -> Any:
    """Return the request model (a closed msgspec Struct) of operation ``name`` (looked up once
    per name: the auditor re-decides every recorded request).

    Raises: BadRequest for an unknown operation."""
    operation = get_operation(name)
    return getattr(operation.models_module(), operation.model)


@functools.cache
def decider(name: str) -> Any:
    """Return the decider ``decide(state, request, ctx) -> [EventDraft]`` of ``name`` (looked up
    once per name), behind the range check of its request (SPEC.md section 6, "Ranges": from the
    schema version of its kind that introduced them, checked before any rule, the auditor's
    replay included). Raises: BadRequest for an unknown operation."""
    operation = get_operation(name)
    return functools.partial(
        _ranged_decide, operation, getattr(operation.decider_module(), operation.decider)
    )


def _ranged_decide(
    operation: Operation, run: Callable[..., Any], state: Any, request: Any, ctx: Any
) -> Any:
    """Check ``request``'s declared ranges where its kind's rule version asks for them, then
    run the decider. Raises: BadRequest for a value out of range (exit 2)."""
    from perfledger.commands.workflow import ranges  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    if ranges.ranges_apply(operation.kind, ctx.schema):
        ranges.check_ranges(operation.name, request)
    return run(state, request, ctx)


#: Fields a caller sends that the CLI and the MCP server turn into others before the request is
#: validated and recorded (:func:`perfledger.app.identity.readiness_edge` snapshots
#: ``original.subject`` into ``original.snapshot``, R11). They are part of what a caller writes,
#: so part of the schema it reads; the recorded request holds what they became.
#: Operation -> ``$defs`` model -> field -> its JSON Schema.
EDGE_FIELDS: dict[str, dict[str, dict[str, dict[str, Any]]]] = {
    "readiness.record": {
        "Original": {"subject": {"type": "string", "minLength": 1, "maxLength": 4_000}},
    },
    # :func:`perfledger.app.snapshots.candidate_edge`: candidate.subject -> candidate.snapshot
    "experiment.create": {
        "Candidate": {"subject": {"type": "string", "minLength": 1, "maxLength": 4_000}},
    },
}


def json_schema(name: str) -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of operation ``name``'s request: the request's own
    object schema at the top, the models it nests under ``$defs``, the fields the CLI's edge
    takes (:data:`EDGE_FIELDS`), every property described
    (:mod:`perfledger.commands.workflow.field_docs`)."""

    from perfledger.commands.workflow.field_docs import describe  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)
    from perfledger.commands.workflow.ranges import schema_with_ranges  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    model = request_model(name)
    schema = schema_with_ranges(model, msgspec.json.schema(model))
    defs = schema.pop("$defs", {})
    root: dict[str, Any] = defs.pop(model.__name__)
    for nested, fields in EDGE_FIELDS.get(get_operation(name).name, {}).items():
        defs[nested]["properties"].update({k: dict(v) for k, v in fields.items()})
    # every field says what it means, with its unit and range (field_docs)
    return describe({**root, "$defs": defs} if defs else root)


#: A ``- at `$.path``` (or ``- at `key` in `$.path```) suffix of a msgspec validation message.
_AT = re.compile(r" - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`$")
#: A msgspec pattern failure: ``Expected `str` matching regex '<regex>'``.
_PATTERN = re.compile(r"Expected `str` matching regex '(?P<regex>.*)'$")
#: The finite bounds of :data:`perfledger.commands.workflow.requests.Number` as msgspec words them.
_FINITE = re.compile(r"Expected `float` [<>]= -?1\.7976931348623157e\+308")


def condense(exc: Exception, body: Any = None) -> str:
    """One line for a msgspec ValidationError: ``where: what`` with ``where`` the field path
    (``pairs.0.ref.values``; ``(request)`` at the top; ``units (a key)`` for a bad map key). A
    NaN or infinite number found at that path in ``body`` (the request as given) is named so,
    rather than as a number out of the field's range."""
    message = str(exc)
    where, parts = "(request)", []
    match = _AT.search(message)
    if match:
        message = message[: match.start()]
        parts = re.sub(r"\[(\d+)\]", r".\1", match.group("path")).lstrip(".").split(".")
        where = ".".join(parts) or where
        if match.group("key"):
            where += " (a key)"
    value = _value_at(body, parts) if match and not match.group("key") else None
    if isinstance(value, float) and not math.isfinite(value):
        message = f"{value} is not a finite number (NaN and ±Infinity are refused)"
    pattern = _PATTERN.search(message)
    if pattern is not None:
        from perfledger.commands.workflow.requests import PATTERN_WORDS  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

        words = PATTERN_WORDS.get(pattern.group("regex").replace("\\\\", "\\"))
        if words is not None:
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            message = f"{shown} is not {words}" if isinstance(value, str) else f"expected {words}"
    message = _FINITE.sub("Expected a finite number (NaN and ±Infinity are refused)", message)
    return f"{where}: {message}"


def _value_at(body: Any, parts: list[str]) -> Any:
    """The value at a dotted path (``pairs.0.ref``) of a request body, or None."""
    for part in (p for p in parts if p):
        if isinstance(body, dict):
            body = body.get(part)
        elif isinstance(body, list | tuple) and part.isdigit() and int(part) < len(body):
            body = body[int(part)]
        else:
            return None
    return body


def validate(name: str, body: Any) -> Any:
    """Validate ``body`` (builtins) against operation ``name``'s closed request model (strict
    msgspec conversion: unknown fields, wrong types, out-of-range or non-finite numbers and
    over-long strings or lists are refused).

    Returns: the request model instance.
    Raises: BadRequest naming the first invalid field (never a traceback).
    """

    model = request_model(name)
    if not isinstance(body, dict):
        raise BadRequest(
            f"{name}: the request must be a JSON object, got {type(body).__name__}",
            hint=f"`perfledger schema {name} --example` prints one",
        )
    try:
        return msgspec.convert(body, model)
    except msgspec.ValidationError as exc:
        raise BadRequest(
            f"{name}: invalid request: {condense(exc, body)}",
            hint=f"see `perfledger schema {name}`",
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:  # pathological inputs
        raise BadRequest(
            f"{name}: invalid request: {exc}", hint=f"see `perfledger schema {name}`"
        ) from None


def stored_request(name: str, request: Any) -> dict[str, Any]:
    """The envelope's ``request``: ``{"op": name, "body": the validated body as JSON}``."""
    from perfledger.commands.workflow.requests import dump  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    try:
        return {"op": name, "body": dump(request)}
    except TypeError as exc:  # a value of a str/int subclass, say, given through the library
        raise BadRequest(
            f"{name}: invalid request: {exc}",
            hint="pass plain JSON values: str, int, float, bool, None, lists and dicts",
        ) from None


def decide(state: Any, name: str, request: Any, ctx: DecisionContext) -> list[Any]:
    """Run operation ``name``'s pure decider (see :mod:`perfledger.commands.workflow.deciders`)."""
    return decider(name)(state, request, ctx)


def payload_reader(ledger: Ledger) -> Callable[[str], Any]:
    """Return ``event id -> decoded (upcast) payload`` over ``ledger``, for
    :attr:`DecisionContext.payload_of`. Raises (when called): BadRequest for an unknown id."""
    return ledger.payload


def preview(
    ledger: Ledger,
    name: str,
    body: Any,
    *,
    actor: str,
    idempotency_key: str | None = None,
    now: datetime | None = None,
    starting_run: str | None = None,
) -> list[Any]:
    """Validate and decide ``body`` on the current head without appending: what
    :func:`execute` would do now (a dry run). ``starting_run``: the samples id of a formal run
    the caller will start before it measures (R14; see
    :attr:`~perfledger.commands.workflow.deciders.DecisionContext.starting_run`).

    Returns: the drafts (:class:`~perfledger.ledger.base.EventDraft`), payloads as decided; or,
        when ``idempotency_key`` is already in the ledger for this same request, the existing
        envelope(s), which :func:`execute` would return without appending.
    Raises: BadRequest (exit 2) and RuleRefused (exit 3) exactly as :func:`execute` would; the
        ledger is never changed.
    """
    prepared = _prepare(ledger, name, body, actor, idempotency_key, now)
    if not isinstance(prepared, tuple):
        return [prepared]
    request, ctx = prepared
    if starting_run is not None:
        ctx = replace(ctx, starting_run=starting_run)
    return list(decider(name)(ledger.state_at(ledger.head(), lazy=True), request, ctx))


def _prepare(
    ledger: Ledger,
    name: str,
    body: Any,
    actor: str,
    idempotency_key: str | None,
    now: datetime | None,
) -> tuple[Any, Any] | Envelope:
    """What :func:`execute` and :func:`preview` do before deciding: validate ``body``, then
    either the event already appended under ``idempotency_key`` for this same request, or
    ``(request, DecisionContext)`` (the event time read once, here at the edge).
    Raises: BadRequest for an invalid request, free text still an example's placeholder
    (:mod:`~perfledger.commands.registry.placeholders`) or a key used for another request."""
    from perfledger.commands.workflow.deciders import DecisionContext  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    request = validate(name, body)
    refuse_placeholders(name, body)  # an example's free text never recorded as fact
    stored = stored_request(name, request)
    existing = _idempotent_event(ledger, name, idempotency_key, stored)
    if existing is not None:
        return existing
    ctx = DecisionContext(
        op=name,
        actor=actor,
        ts=now or datetime.now(UTC),
        idempotency_key=idempotency_key,
        request=stored,
        payload_of=payload_reader(ledger),
        actor_of=lambda event_id: ledger.get(event_id).actor,
    )
    return request, ctx


def _idempotent_event(
    ledger: Ledger, name: str, idempotency_key: str | None, stored: dict[str, Any]
) -> Envelope | None:
    """The event already appended under ``idempotency_key`` for this same request, or None
    when the key is unused. Raises: BadRequest when the key was used for another request."""
    from perfledger.events.canonical import canonical_bytes  # noqa: PLC0415 (off `perfledger schema`'s start-up path)

    if idempotency_key is None:
        return None
    found = ledger.store.find_by_idempotency_key(idempotency_key)
    if found is None:
        return None
    existing: Envelope = found if not isinstance(found, str) else ledger.get(found)
    if existing.kind != get_operation(name).kind or canonical_bytes(existing.request) != (
        canonical_bytes(stored)
    ):
        raise BadRequest(
            f"idempotency key {idempotency_key!r} was already used for a different request "
            f"(event {existing.id})",
            hint="use a new idempotency key for a new request",
        )
    return existing


def execute(
    ledger: Ledger,
    name: str,
    body: Any,
    *,
    actor: str,
    idempotency_key: str | None = None,
    now: datetime | None = None,
    artifacts: dict[str, Any] | None = None,
) -> list[Envelope]:
    """Validate, decide and append one request (see the module docstring).

    Args:
        ledger: the open ledger.
        name: the operation.
        body: the request body (builtins, as parsed from JSON).
        actor: who decides.
        idempotency_key: retry-safe key; a request already appended under it returns that event.
        now: the event time (default: the clock, read once, here at the edge).
        artifacts: files to attach to every appended event (logical name ->
            :class:`~perfledger.ledger.base.Artifact`), e.g. the raw per-sample table of
            ``perfledger measure``.
    Returns: the appended (or idempotently found) envelopes.
    Raises: BadRequest (exit 2), RuleRefused (exit 3), ConcurrentAppend (exit 4).
    """
    prepared = _prepare(ledger, name, body, actor, idempotency_key, now)
    if not isinstance(prepared, tuple):
        return [prepared]
    request, ctx = prepared
    if artifacts:  # a rule may re-derive figures from what is attached (R4: the A/A table)
        attached = {n: a.data for n, a in artifacts.items()}
        ctx = replace(ctx, artifact=attached.get)
    run = decider(name)
    provenance = getattr(request, "provenance", None)
    # R5: measured samples come with their raw table, attached under the name they give
    if (
        provenance is not None
        and provenance.source == "perfledger"
        and provenance.raw_table not in (artifacts or {})
    ):
        raise BadRequest(
            f"samples measured by perfledger attach their raw table {provenance.raw_table!r}; "
            "it is not attached",
            hint="record samples with `perfledger measure`, or without `provenance`",
        )
    if provenance is not None and provenance.source == "perfledger":
        _refuse_unlike_raw_table(request, artifacts[provenance.raw_table].data, artifacts)

    def decide_at(view: Any) -> list[Any]:
        drafts = run(ledger.state_at(view.head, lazy=True), request, ctx)
        if artifacts:
            drafts = [replace(d, artifacts={**d.artifacts, **artifacts}) for d in drafts]
        return drafts

    return ledger.transact(decide_at)


def _refuse_unlike_raw_table(request: Any, raw: bytes, artifacts: Any = None) -> None:
    """R5: measured samples must be what their attached raw table holds, bound to these samples,
    kept outputs compared again (:mod:`perfledger.commands.workflow.raw_table`; ``artifacts``:
    name -> Artifact). Raises: RuleRefused (exit 3)."""

    from perfledger.commands.workflow import rules  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)
    from perfledger.commands.workflow.raw_table import raw_table_mismatch  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    def read(name: str) -> bytes | None:
        artifact = (artifacts or {}).get(name)
        return None if artifact is None else artifact.data

    mismatch = raw_table_mismatch(
        msgspec.to_builtins(request), raw, bound=True, read_artifact=read, checks=True
    )
    if mismatch is not None:
        raise rules.refuse(
            "R5",
            f"samples {getattr(request, 'samples_id', '?')!r} claim to be measured by perfledger, "
            f"but {mismatch}; nothing was recorded",
            "record what `perfledger measure` measured, unchanged, or record the samples without "
            "`provenance` (outside samples, screens only)",
        )
