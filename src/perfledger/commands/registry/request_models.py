"""The request models of the operations (closed msgspec Structs): lookup, validation with one
condensed line per error, the stored form of a request, and each request's JSON Schema.

Imports the request modules (workflow and loop), their field docs and ranges, but no decider: the
CLI's ``perfledger schema`` and the examples read here without loading the rules
(:mod:`perfledger.commands.registry.operations` is the write path).
"""

from __future__ import annotations

import functools
import math
import re
from types import ModuleType
from typing import Any

import msgspec

from perfledger.commands.registry.catalog import get_operation
from perfledger.commands.workflow import requests as workflow_requests
from perfledger.commands.workflow.field_docs import describe
from perfledger.commands.workflow.ranges import schema_with_ranges
from perfledger.commands.workflow.requests import PATTERN_WORDS, dump
from perfledger.errors import BadRequest


def models_module(family: str) -> ModuleType:
    """The module holding the request models of ``family``
    (:attr:`Operation.models <perfledger.commands.registry.catalog.Operation>`): the workflow's,
    or the kernel-iteration loop's (R19-R25), imported on its first use."""
    if family == "loop":
        from perfledger.commands.loop import requests as loop_requests  # noqa: PLC0415 (the loop's request models: off `perfledger status`'s start-up path)

        return loop_requests
    return workflow_requests


@functools.cache
def request_model(name: str) -> Any:
    """Return the request model (a closed msgspec Struct) of operation ``name`` (looked up once
    per name: the auditor re-decides every recorded request).

    Raises: BadRequest for an unknown operation."""
    operation = get_operation(name)
    return getattr(models_module(operation.models), operation.model)


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
    try:
        return {"op": name, "body": dump(request)}
    except TypeError as exc:  # a value of a str/int subclass, say, given through the library
        raise BadRequest(
            f"{name}: invalid request: {exc}",
            hint="pass plain JSON values: str, int, float, bool, None, lists and dicts",
        ) from None


__all__ = [
    "EDGE_FIELDS", "condense", "json_schema", "models_module", "request_model", "stored_request", "validate",
]  # fmt: skip
