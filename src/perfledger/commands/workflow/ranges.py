"""The range check of requests (SPEC.md section 6, "Ranges").

A numeric request field whose range was declared after the field first existed carries it as
:func:`perfledger.commands.workflow.requests.ranged` metadata: the JSON Schema shows it, but
decoding ignores it, so that a request recorded before the range decodes (and is re-decided by
the auditor) exactly as it was. This module checks those ranges before the decider runs, from
the schema version of the operation's kind that introduced them on
(:data:`RANGED_KINDS`): a new request out of range is a
:class:`~perfledger.errors.BadRequest` (exit 2, nothing written); a recorded event of an older
version is re-decided without the check.

The bounds are read from the models' annotations (``msgspec.inspect``), never restated here, so
the schema a caller reads and the check it meets cannot drift apart.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from typing import Any

import msgspec
from msgspec import inspect as mi

from perfledger.commands.workflow.requests import Range
from perfledger.errors import BadRequest
from perfledger.events.kinds import get_kind
from perfledger.events.loop import LOOP_RANGED_FROM
from perfledger.events.workflow import RANGED_FROM

#: kind -> the schema version from which its request's declared ranges are checked (the
#: workflow's kinds and the kernel-iteration loop's).
RANGED_KINDS: dict[str, int] = {**RANGED_FROM, **LOOP_RANGED_FROM}

#: Walk plans: a type -> whether any declared range lies inside it (prunes large lists of
#: plain numbers: a samples request's values never cost a walk).
_HAS_RANGE: dict[int, bool] = {}


def ranges_apply(kind: str, schema: int | None) -> bool:
    """Whether a decision of ``kind`` answers to the declared ranges: ``schema`` is the
    recorded event's version on the auditor's replay (None: a new decision, the kind's current
    version)."""
    version = get_kind(kind).version if schema is None else schema
    floor = RANGED_KINDS.get(kind)
    return floor is not None and version >= floor


def check_ranges(operation: str, request: msgspec.Struct) -> None:
    """Refuse ``request`` (a validated request model of ``operation``) when a numeric field
    lies outside its declared range.

    Raises: BadRequest naming the field's path, the value, the range and its unit (exit 2)."""
    for path, value, bounds in out_of_range(request):
        raise BadRequest(
            f"{operation}: invalid request: {path}: {value!r} is outside its range "
            f"{bounds.words()}",
            hint=f"see `perfledger schema {operation}` (SPEC.md section 6, Ranges)",
        )


def out_of_range(request: msgspec.Struct) -> Iterator[tuple[str, float, Range]]:
    """Yield ``(path, value, range)`` for each numeric field of ``request`` outside its declared
    range (the ends a rule owns are the rule's: :attr:`Range.low_rule`), in field order."""
    yield from _walk(_info(type(request)), request, "")


def declared_ranges(model: type[msgspec.Struct]) -> Iterator[tuple[str, Range]]:
    """Yield ``(path, range)`` for each declared range in ``model``'s fields (nested models
    included; a list's items as ``field[]``, a map's values as ``field{}``): what the docs and
    tests enumerate."""
    yield from _declared(_info(model), "", set())


@functools.cache
def _info(model: type[Any]) -> mi.Type:
    return mi.type_info(model)


def _range_of(info: mi.Type) -> tuple[Range | None, mi.Type]:
    """The declared range of a (possibly annotated) type, and the type under the metadata."""
    bounds = None
    while isinstance(info, mi.Metadata):
        found = (info.extra or {}).get("range")
        if isinstance(found, Range):
            bounds = found
        info = info.type
    return bounds, info


def _has_range(info: mi.Type) -> bool:
    key = id(info)
    known = _HAS_RANGE.get(key)
    if known is None:
        known = _HAS_RANGE[key] = any(True for _ in _declared(info, "", set()))
    return known


def _children(info: mi.Type) -> Iterator[tuple[str, mi.Type]]:
    """The types nested in ``info`` with their path suffix (``.name``, ``[]``, ``{}``)."""
    if isinstance(info, mi.StructType):
        for field in info.fields:
            yield "." + field.encode_name, field.type
    elif isinstance(info, mi.UnionType):
        for member in info.types:
            yield "", member
    elif isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        yield "[]", info.item_type
    elif isinstance(info, mi.DictType):
        yield "{}", info.value_type


def _declared(info: mi.Type, path: str, seen: set[int]) -> Iterator[tuple[str, Range]]:
    bounds, inner = _range_of(info)
    if bounds is not None:
        yield path.lstrip("."), bounds
    if isinstance(inner, mi.StructType):
        if id(inner.cls) in seen:  # a recursive model
            return
        seen = seen | {id(inner.cls)}
    for suffix, child in _children(inner):
        yield from _declared(child, path + suffix, seen)


def _walk(info: mi.Type, value: Any, path: str) -> Iterator[tuple[str, float, Range]]:
    bounds, inner = _range_of(info)
    if bounds is not None and type(value) in (int, float):
        number = float(value)
        if math.isfinite(number) and not bounds.contains(number):
            yield path.lstrip("."), value, bounds
        return
    if value is None or value is msgspec.UNSET or not _has_range(inner):
        return
    if isinstance(inner, mi.StructType):
        if isinstance(value, inner.cls):
            for field in inner.fields:
                yield from _walk(
                    field.type, getattr(value, field.name), f"{path}.{field.encode_name}"
                )
    elif isinstance(inner, mi.UnionType):
        for member in inner.types:
            yield from _walk(member, value, path)
    elif isinstance(inner, mi.ListType | mi.VarTupleType | mi.SetType | mi.FrozenSetType):
        if isinstance(value, list | tuple | set | frozenset):
            for index, item in enumerate(value):
                yield from _walk(inner.item_type, item, f"{path}.{index}")
    elif isinstance(inner, mi.DictType) and isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(inner.value_type, item, f"{path}.{key}")


def schema_with_ranges(model: type[msgspec.Struct], schema: dict[str, Any]) -> dict[str, Any]:
    """Write the declared ranges of ``model`` (and the models it nests) into its JSON Schema
    ``schema`` (msgspec's, ``$defs`` by model name), in place: a ranged number's ``minimum`` /
    ``exclusiveMinimum`` and ``maximum`` / ``exclusiveMaximum`` replace the finite bounds that
    decoding checks (msgspec lets a decode constraint win over ``extra_json_schema``).
    Returns: ``schema``."""
    defs = schema.get("$defs", {})
    for cls, field, bounds in _struct_ranges(_info(model), set()):
        target = defs.get(cls.__name__)
        prop = (target or {}).get("properties", {}).get(field)
        if prop is None:
            continue
        for place in [m for m in prop.get("anyOf", []) if m.get("type") == "number"] or [prop]:
            for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
                place.pop(key, None)
            place["exclusiveMinimum" if bounds.low_open else "minimum"] = bounds.low
            place["exclusiveMaximum" if bounds.high_open else "maximum"] = bounds.high
    return schema


def _struct_ranges(info: mi.Type, seen: set[int]) -> Iterator[tuple[type, str, Range]]:
    """``(model, field's JSON name, range)`` of every field holding a ranged number directly
    (or as an optional one), in ``info`` and the models it nests."""
    _, inner = _range_of(info)
    if isinstance(inner, mi.StructType):
        if id(inner.cls) in seen:
            return
        seen.add(id(inner.cls))
        for field in inner.fields:
            bounds, under = _range_of(field.type)
            members = under.types if isinstance(under, mi.UnionType) else ()
            for member in members:
                bounds = bounds or _range_of(member)[0]
            if bounds is not None:
                yield inner.cls, field.encode_name, bounds
    for _, child in _children(inner):
        yield from _struct_ranges(child, seen)
