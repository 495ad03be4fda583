"""Smaller things a new user stumbled on (issue 9, item 9), through the real console script:
``perfledger schema`` without an operation lists the operations, and every ``--actor`` help
states the same default."""

from __future__ import annotations

import json
from typing import Any

import pytest


def test_schema_without_operation_lists_the_operations(cli: Any) -> None:
    done = cli("schema")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("operations (perfledger schema OPERATION")
    assert "  experiment.create" in done.stdout and "  verdict.record" in done.stdout
    listed = json.loads(cli("schema", "--json").stdout)["operations"]
    assert "target.freeze" in listed and listed == sorted(listed)
    assert cli("schema", "verdict.record").stdout.lstrip().startswith("{")


@pytest.mark.parametrize(
    "command",
    [("init",), ("note",), ("target", "freeze"), ("handoff", "record"), ("measure", "aa"),
     ("evidence", "add"), ("resolve",)],
)  # fmt: skip
def test_actor_help_states_one_default(cli: Any, command: tuple[str, ...]) -> None:
    text = " ".join(cli(*command, "--help").stdout.split())
    assert "$PERFLEDGER_ACTOR, else $USER" in text
