"""``perfledger schema OP --example``: a request every operation's model accepts (the packaged
curated ones equal the repository's ``examples/requests/``; the rest are built from the
schema)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from perfledger.commands.registry.operations import OPERATIONS, json_schema, validate
from perfledger.commands.registry.request_examples import (
    EXAMPLE_HASH,
    EXAMPLE_ID,
    curated,
    example,
)
from subprocess_env import isolated_env

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


# ----------------------------------------------------- examples that fit the ledger (issue 38)


def _session_until_experiment(tmp: Path, bound: bool) -> Any:
    """A ledger holding examples/requests up to (not including) ``experiment.create``; with
    ``bound``, its readiness binds the original's directory (a ``{subject}`` place, R11)."""
    from perfledger.api import Ledger
    from perfledger.app.identity import readiness_edge
    from perfledger.commands.registry.operations import execute

    ledger = Ledger.init(tmp / ("bound" if bound else "unbound"), name="ex", actor="agent")
    for path in sorted(EXAMPLES.glob("[0-9][0-9]-*.json"))[:6]:
        op = path.stem.split("-", 1)[1]
        body = json.loads(path.read_text())
        artifacts: dict[str, Any] = {}
        if op == "readiness.record" and bound:
            subject = tmp / "orig"
            (subject / "src" / "kernels").mkdir(parents=True)
            (subject / "bench.py").write_text("print('the original')\n")
            (subject / "src" / "kernels" / "attn.cu").write_text("// the original kernel\n")
            body["original"]["subject"] = str(subject)
            body["driver"]["argv"] = ["python", "{subject}/bench.py", "--out", "{output}",
                                      "--seed", "{seed}"]  # fmt: skip
            body, artifacts = readiness_edge(ledger, body)
        execute(ledger, op, body, actor="agent", artifacts=artifacts or None)
    return ledger


@pytest.mark.parametrize("bound", [False, True], ids=["unbound", "subject-bound"])
def test_experiment_example_fits_the_ledgers_target_and_is_accepted(
    tmp_path: Path, bound: bool
) -> None:
    """``schema experiment.create --example --ledger L``: typed ``changed_paths`` only where
    the Target binds no subject directory (R11 refuses them where it does); either way the
    decider accepts the example on the state it is shown for. The unfitted example is the
    control: refused (R11) on the bound Target."""
    from perfledger.app.next_steps import dry_decide
    from perfledger.app.snapshots import candidate_edge
    from perfledger.commands.registry.request_examples import CANDIDATE_SUBJECT, example_for

    ledger = _session_until_experiment(tmp_path, bound)
    try:
        state = ledger.state()
        body = example_for("experiment.create", state)
        assert ("changed_paths" in body["candidate"]) is not bound
        assert (body["candidate"].get("subject") == CANDIDATE_SUBJECT) is bound
        if bound:  # the directory the example names, holding a change: snapshotted at the edge
            candidate = tmp_path / CANDIDATE_SUBJECT
            shutil.copytree(tmp_path / "orig", candidate)
            (candidate / "src" / "kernels" / "attn.cu").write_text("// the fused kernel\n")
            body["candidate"]["subject"] = str(candidate)
            body, _ = candidate_edge(ledger, body)
        assert dry_decide(state, "experiment.create", body, ledger.payload) is None
        unfitted = dry_decide(state, "experiment.create", example("experiment.create"),
                              ledger.payload)  # fmt: skip
        assert (unfitted is not None and unfitted.rule == "R11") is bound
    finally:
        ledger.close()


def test_schema_example_without_a_ledger_shows_both_variants(tmp_path: Path) -> None:
    from perfledger.commands.registry.request_examples import CANDIDATE_SUBJECT

    env = {**isolated_env(tmp_path)}
    base = [sys.executable, "-m", "perfledger", "schema", "experiment.create", "--example"]
    human = subprocess.run(base, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert human.returncode == 0, human.stderr
    validate("experiment.create", json.loads(human.stdout))  # stdout: one request as is
    assert "changed_paths" in human.stdout and "with subject directories" in human.stderr
    machine = subprocess.run([*base, "--json"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)  # fmt: skip
    variants = json.loads(machine.stdout)["variants"]
    assert "changed_paths" in variants["without subject directories"]["candidate"]
    assert "changed_paths" not in variants["with subject directories"]["candidate"]
    bound = variants["with subject directories"]
    # candidate.subject names a directory: `experiment create` replaces it by its snapshot
    # before the request is validated (the edge), so validate what the edge leaves
    assert bound["candidate"].pop("subject") == CANDIDATE_SUBJECT
    for body in variants.values():
        validate("experiment.create", body)
