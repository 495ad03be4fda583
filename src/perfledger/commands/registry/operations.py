"""The operations' write path: every decider bound to its operation, and validate-decide-append.

The table of operations (name -> request model, decider, event kind, CLI group/verb) is
:mod:`perfledger.commands.registry.catalog`, cheap to import: the CLI builds its commands from it
and imports this module (the deciders, R1-R25) only in the commands that decide. The request
models, their validation and schemas are :mod:`perfledger.commands.registry.request_models`;
both are re-exported here.

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
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from perfledger.commands.registry.catalog import OPERATIONS, Operation, get_operation
from perfledger.commands.registry.placeholders import refuse_placeholders
from perfledger.commands.registry.request_models import (
    EDGE_FIELDS,
    condense,
    json_schema,
    request_model,
    stored_request,
    validate,
)
from perfledger.commands.workflow import (
    activity,
    deciders,
    formal_run_start,
    ranges,
    review_deciders,
    rules,
)
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.raw_table import raw_table_mismatch
from perfledger.errors import BadRequest
from perfledger.events.canonical import canonical_bytes

if TYPE_CHECKING:
    from perfledger.api import Ledger
    from perfledger.events.envelope import Envelope

#: :attr:`Operation.deciders <perfledger.commands.registry.catalog.Operation>` -> the module
#: holding the deciders of that family (the loop's: :func:`decider_module`).
DECIDERS: dict[str, ModuleType] = {
    "workflow": deciders,
    "activity": activity,
    "formal_run": formal_run_start,
    "review": review_deciders,
}


def decider_module(family: str) -> ModuleType:
    """The module holding the deciders of ``family``: :data:`DECIDERS`, or the
    kernel-iteration loop's (R19-R25), imported on its first use."""
    if family == "loop":
        from perfledger.commands.loop import deciders as loop_deciders  # noqa: PLC0415 (the loop's deciders and rules, with the event catalog: off `perfledger status`'s start-up path)

        return loop_deciders
    return DECIDERS[family]


@functools.cache
def decider(name: str) -> Any:
    """Return the decider ``decide(state, request, ctx) -> [EventDraft]`` of ``name`` (looked up
    once per name), behind the range check of its request (SPEC.md section 6, "Ranges": from the
    schema version of its kind that introduced them, checked before any rule, the auditor's
    replay included). Raises: BadRequest for an unknown operation."""
    operation = get_operation(name)
    return functools.partial(
        _ranged_decide, operation, getattr(decider_module(operation.deciders), operation.decider)
    )


def _ranged_decide(
    operation: Operation, run: Callable[..., Any], state: Any, request: Any, ctx: Any
) -> Any:
    """Check ``request``'s declared ranges where its kind's rule version asks for them, then
    run the decider. Raises: BadRequest for a value out of range (exit 2)."""
    if ranges.ranges_apply(operation.kind, ctx.schema):
        ranges.check_ranges(operation.name, request)
    return run(state, request, ctx)


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
    artifacts: dict[str, Any] | None = None,
) -> list[Any]:
    """Validate and decide ``body`` on the current head without appending: what
    :func:`execute` would do now (a dry run). ``starting_run``: the samples id of a formal run
    the caller will start before it measures (R14; see
    :attr:`~perfledger.commands.workflow.deciders.DecisionContext.starting_run`);
    ``artifacts``: what :func:`execute` would attach (a rule may re-derive figures from them,
    R4's baseline and A/A tables).

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
    if artifacts:
        attached = {n: a.data for n, a in artifacts.items()}
        ctx = replace(ctx, artifact=attached.get)
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


__all__ = [
    "DECIDERS", "EDGE_FIELDS", "OPERATIONS", "Operation", "condense", "decide", "decider", "decider_module",
    "execute", "get_operation", "json_schema", "payload_reader", "preview", "request_model",
    "stored_request", "validate",
]  # fmt: skip
