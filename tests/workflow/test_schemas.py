"""The committed JSON Schemas of the requests (``schemas/<operation>.json``) match the models: an
unintended change to a request fails here. After an intended change, regenerate them with
``PERFLEDGER_UPDATE_SCHEMAS=1 pytest tests/workflow/test_schemas.py`` and commit the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfledger.app.command_lines import COMMON_FLAGS, FIELD_HINTS
from perfledger.commands.cli.app import to_json_text
from perfledger.commands.registry.operations import OPERATIONS, json_schema, request_model

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _render(operation: str) -> str:
    """The schema exactly as ``perfledger schema OPERATION`` prints it (so that its output can be
    diffed against the committed copy)."""
    return to_json_text(json_schema(operation), indent=2) + "\n"


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_committed_schema_matches_the_request_model(operation: str) -> None:
    path = SCHEMAS / f"{operation}.json"
    rendered = _render(operation)
    if os.environ.get("PERFLEDGER_UPDATE_SCHEMAS"):
        SCHEMAS.mkdir(exist_ok=True)
        path.write_text(rendered)
    assert path.exists(), f"{path} is missing: regenerate with PERFLEDGER_UPDATE_SCHEMAS=1"
    assert path.read_text() == rendered, f"the request of {operation} changed: see {path}"


def test_no_stray_committed_schemas() -> None:
    assert sorted(p.stem for p in SCHEMAS.glob("*.json")) == sorted(OPERATIONS)


def test_every_request_is_closed() -> None:
    for operation in OPERATIONS:
        assert json_schema(operation)["additionalProperties"] is False, operation


def test_cli_flag_hints_match_the_models() -> None:
    flag_fields = {field for _, field, _ in COMMON_FLAGS}
    for operation in OPERATIONS:
        fields = set(request_model(operation).__struct_fields__) & flag_fields
        assert set(FIELD_HINTS.get(operation, ())) == fields, operation
