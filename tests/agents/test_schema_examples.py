"""``perfledger schema OP --example``: a request every operation's model accepts (the packaged
curated ones equal the repository's ``examples/requests/``; the rest are built from the
schema)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from perfledger.commands.registry.operations import OPERATIONS, json_schema, validate
from perfledger.commands.registry.request_examples import (
    EXAMPLE_HASH,
    EXAMPLE_ID,
    curated,
    example,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_has_an_example_its_model_accepts(op: str) -> None:
    validate(op, example(op))


def test_packaged_examples_are_the_repository_examples_of_a_session() -> None:
    first: dict[str, Path] = {}
    for path in sorted(EXAMPLES.glob("[0-9]*.json")):
        first.setdefault(path.stem.split("-", 1)[1], path)
    assert len(first) >= 12
    for op, path in first.items():
        assert curated(op) == json.loads(path.read_text()), op


def test_schema_example_cli_prints_json_and_needs_an_operation() -> None:
    base = [sys.executable, "-m", "perfledger", "schema"]
    done = subprocess.run([*base, "reject", "--example"], capture_output=True, text=True)
    assert done.returncode == 0
    validate("reject", json.loads(done.stdout))
    bare = subprocess.run([*base, "--example"], capture_output=True, text=True)
    assert bare.returncode == 2 and "needs an OPERATION" in bare.stderr


#: The operations whose requests `perfledger loop ...` builds from a measurement: their
#: examples are built from the schema (an agent never writes them by hand).
BUILT = {op for op in OPERATIONS if op.startswith("loop.")}


def _strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize("op", sorted(set(OPERATIONS) - BUILT))
def test_every_workflow_example_is_a_curated_request_not_placeholders(op: str) -> None:
    shown = example(op)
    assert curated(op) == shown, f"ship perfledger/skill/examples/{op}.json"
    assert not {"example", EXAMPLE_ID, EXAMPLE_HASH} & set(_strings(shown)), shown


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_example_is_valid_against_the_json_schema_an_agent_reads(op: str) -> None:
    jsonschema.Draft202012Validator(json_schema(op)).validate(example(op))


def test_schema_of_a_bare_verb_names_the_operation_it_means() -> None:
    done = subprocess.run([sys.executable, "-m", "perfledger", "schema", "supersede"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2 and "did you mean target.supersede?" in done.stderr
