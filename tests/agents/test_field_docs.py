"""Schemas that teach: every field of every request's JSON Schema has a description, and every
numeric field's says its unit or range."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from perfledger.commands.registry.operations import OPERATIONS, json_schema
from perfledger.commands.registry.request_examples import example
from subprocess_env import isolated_env, perfledger_command

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


@pytest.mark.slow
def test_readiness_schema_takes_original_subject_and_the_cli_records_its_snapshot(
    tmp_path: Path,
) -> None:
    schema = json_schema("readiness.record")
    subject = schema["$defs"]["Original"]["properties"]["subject"]
    assert subject["type"] == "string" and "snapshot" in subject["description"]
    code = tmp_path / "original"
    (code / "src" / "kernels").mkdir(parents=True)  # the example Target's scope: src/kernels/*
    (code / "bench.py").write_text("print('{}')\n")
    (code / "src" / "kernels" / "attn.cu").write_text("// the original kernel\n")
    body = {
        **example("readiness.record"),
        "driver": {"argv": ["python", "{subject}/bench.py", "{output}", "{seed}"]},
    }
    body["original"] = {**body["original"], "subject": str(code)}
    # what an agent reads accepts what the CLI takes
    jsonschema.Draft202012Validator(schema).validate(body)
    env = isolated_env(tmp_path)
    ledger = str(tmp_path / "ledger")

    def cli(*args: str, request: dict[str, Any] | None = None) -> Any:
        done = subprocess.run(
            [*perfledger_command(), "--ledger", ledger, *args, "--json"],
            input=json.dumps(request) if request is not None else None,
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    cli("init", ledger)
    cli("target", "freeze", "--request", "-", request=example("target.freeze"))
    done = cli("readiness", "record", "--request", "-", "--dry-run", request=body)
    snapshot = done["events"][0]["payload"]["original"]["snapshot"]
    assert snapshot["subject"] == str(code)
    assert sorted(snapshot["files"]) == ["bench.py", "src/kernels/attn.cu"]
    recorded = subprocess.run(
        [*perfledger_command(), "--ledger", ledger, "readiness", "record", "--request", "-"],
        input=json.dumps(body), capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    said = f"original's code: snapshot {snapshot['digest'][:16]}, 2 file(s) of {code} (R11)"
    assert said in recorded.stdout
