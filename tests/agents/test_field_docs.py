"""Schemas that teach: every field of every request's JSON Schema has a description, and every
numeric field's says its unit or range."""

from __future__ import annotations

import re
from typing import Any

import pytest

from perfledger.commands.registry.operations import OPERATIONS, json_schema

#: Words that state a unit or a range in a description.
UNIT_OR_RANGE = re.compile(
    r"ratio|second|millisecond|bytes|>= ?-?\d|> 0|\(0, 1\)|\(0, 1\]|unit|\d+-\d+|-?\d+\.\.-?\d+"
)


def _properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    nodes = [(schema.get("title", "?"), schema), *schema.get("$defs", {}).items()]
    return [(f"{m}.{f}", p) for m, n in nodes for f, p in n.get("properties", {}).items()]


def _numeric(prop: dict[str, Any]) -> bool:
    if "anyOf" in prop:
        return any(_numeric(p) for p in prop["anyOf"])
    if prop.get("type") == "array":
        return _numeric(prop.get("items", {}))
    return prop.get("type") in ("number", "integer")


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_request_field_has_a_description(op: str) -> None:
    missing = [name for name, p in _properties(json_schema(op)) if not p.get("description")]
    assert not missing, f"add to perfledger.commands.workflow.field_docs: {missing}"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_numeric_request_field_states_its_unit_or_range(op: str) -> None:
    vague = [
        name
        for name, p in _properties(json_schema(op))
        if _numeric(p) and not UNIT_OR_RANGE.search(p.get("description", ""))
    ]
    assert not vague, vague
