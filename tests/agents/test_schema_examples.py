"""``perfledger schema OP --example``: a request every operation's model accepts (the packaged
curated ones equal the repository's ``examples/requests/``; the rest are built from the
schema)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfledger.commands.registry.operations import OPERATIONS, validate
from perfledger.commands.registry.request_examples import curated, example

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
