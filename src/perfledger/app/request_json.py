"""Reading a write's JSON request (SPEC.md section 6): the closed request object that
``--request FILE`` (or ``-`` for stdin) names, checked against the storage format's limits
(:mod:`perfledger.events.limits`) before anything walks it, with duplicate keys and non-finite
numbers refused where they stand (R-independent: a malformed request decides nothing)."""

from __future__ import annotations

import json
import sys
from typing import Any

from perfledger.errors import BadRequest
from perfledger.events import limits

#: Largest request accepted on the command line (bytes): the storage format's (events.limits).
MAX_REQUEST_BYTES = limits.MAX_REQUEST_BYTES


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: a key given twice is ambiguous (last-wins would hide one), refuse it."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"key {key!r} appears twice in one object")
        seen[key] = value
    return seen


class _NonFinite:
    """Where the JSON had ``NaN``, ``±Infinity`` or a literal beyond the double range
    (``1e999``): kept while parsing, so that the refusal can name its place in the request."""

    def __init__(self, literal: str, why: str) -> None:
        self.literal, self.why = literal, why


def _number_hooks() -> tuple[list[_NonFinite], Any, Any]:
    """``json.loads``' ``parse_constant`` (``NaN``, ``±Infinity``) and ``parse_float`` (a literal
    beyond the double range is not read as infinity) hooks, and the list of markers they made."""
    made: list[_NonFinite] = []

    def constant(literal: str) -> _NonFinite:
        made.append(_NonFinite(literal, "is not a number a request may hold"))
        return made[-1]

    def number(text: str) -> float | _NonFinite:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            made.append(_NonFinite(text, "is beyond the range of a double"))
            return made[-1]
        return value

    return made, constant, number


def _first_non_finite(node: Any, path: str = "") -> tuple[str, _NonFinite] | None:
    """The path (``pairs.0.ref.values.latency_ms.2``) and marker of the first non-finite
    literal in a parsed request, or None."""
    if isinstance(node, _NonFinite):
        return path or "(request)", node
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, value in items:
        found = _first_non_finite(value, f"{path}.{key}" if path else str(key))
        if found is not None:
            return found
    return None


def read_request(source: str | None, stdin: str | None = None) -> dict[str, Any]:
    """Read a JSON request object from ``source`` (a path, or ``-`` for stdin: ``stdin``'s text
    where the caller gives it, as the MCP server's ``cli`` tool does, else this process's
    stdin); an empty object when ``source`` is None. Raises: BadRequest for unreadable or
    malformed JSON."""
    if source is None:
        return {}
    try:
        if source == "-" and stdin is not None:
            data = stdin.encode()[: MAX_REQUEST_BYTES + 1]
        elif source == "-":
            data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(MAX_REQUEST_BYTES + 1)
    except OSError as exc:
        raise BadRequest(
            f"cannot read the request {source!r}: {exc.strerror}",
            hint="name a readable file, or - for stdin",
        ) from None
    if len(data) > MAX_REQUEST_BYTES:
        raise BadRequest(
            f"the request is larger than {MAX_REQUEST_BYTES} bytes",
            hint="keep a request within the limit: large data goes in artifacts (measuring commands attach them)",
        )

    made, constant, number = _number_hooks()
    try:
        body = json.loads(
            data, object_pairs_hook=_no_duplicate_keys, parse_constant=constant, parse_float=number
        )
    except (ValueError, RecursionError) as exc:
        raise BadRequest(
            f"the request is not valid JSON: {exc}",
            hint="`perfledger schema OP --example` prints a valid request",
        ) from None
    # the storage format's limits (the body is level 3 of its event: request.body), before
    # any walk below recurses through it
    problem = limits.shape_problem(body, "$", 3)
    if problem is not None:
        raise BadRequest(
            f"the request is outside the storage format's limits: {problem}",
            hint="docs/storage.md gives the limits (depth, sizes)",
        )
    if made:
        found = _first_non_finite(body)
        if found is not None:
            where, marker = found
            raise BadRequest(
                f"the request is not valid JSON: {where}: {marker.literal} {marker.why} "
                "(numbers must be finite)",
                hint="write finite numbers (no NaN or Infinity)",
            )
    if not isinstance(body, dict):
        raise BadRequest(
            f"the request must be a JSON object, got {type(body).__name__}",
            hint="`perfledger schema OP --example` prints one",
        )
    return body


__all__ = ["MAX_REQUEST_BYTES", "read_request"]
