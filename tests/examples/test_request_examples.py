"""``examples/requests/``: one valid request per step of a whole optimization session, in order
(file ``NN-<group>.<verb>.json`` is sent as ``perfledger <group> <verb> --request FILE``). Run
through the real CLI on a fresh ledger, they must all be accepted and end in a champion and a
passing audit (the typed baseline and resolution are recorded as declared, R4: the measured
baseline and A/A a session runs with ``measure baseline`` and ``measure aa --record`` are
appended beside them; every stage's pairs, which a session
measures with ``measure workload --protocol worker``, are recorded with the raw table such a
run attaches, R5: the Target's primary ``wall_time`` is observed by perfledger, so it takes no
typed samples), so the examples a new user copies can never drift from the schemas and rules."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from wf_scenario import Session, record_measured_aa, record_measured_baseline

from perfledger.api import Ledger
from perfledger.commands.registry.request_examples import example
from subprocess_env import isolated_env, perfledger_command

REQUESTS = Path(__file__).resolve().parents[2] / "examples" / "requests"


def _pl(ledger: Path, env: dict[str, str], *args: str) -> dict:
    proc = subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args, "--json"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{args}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_example_requests_replay_to_a_champion_and_a_passing_audit(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    ledger = tmp_path / "ledger"
    _pl(ledger, env, "init", str(ledger))
    files = sorted(REQUESTS.glob("[0-9][0-9]-*.json"))
    assert len(files) >= 15
    operations = []
    for path in files:
        operation = path.stem.split("-", 1)[1]
        group, verb = operation.rsplit(".", 1)
        operations.append(operation)
        body = json.loads(path.read_text())
        if operation == "samples.record":
            # R5: the pairs are measured (`measure workload --protocol worker`, which needs a
            # real command): the raw table such a run attaches is appended with them
            with Ledger.open(ledger) as opened:
                recorded = Session(opened).record_measured(body)
            assert recorded["provenance"]["source"] == "perfledger"
            continue
        recorded = _pl(ledger, env, group, verb, "--request", str(path))
        if operation == "baseline.record":
            # R4: a typed baseline is recorded as declared and decides nothing; a session
            # measures it (`measure baseline --target t1 --cmd CMD`), which needs a real
            # command: the raw table such a run attaches is appended here instead
            assert recorded["payload"]["source"] == "declared"
            with Ledger.open(ledger) as opened:
                record_measured_baseline(opened, body)
        if operation == "resolution.record":
            # R4: a typed resolution is recorded as declared and decides nothing; a session
            # measures it (`measure aa --target t1 --cmd CMD --record`), which needs a real
            # command: the A/A table such a run attaches is appended here instead
            assert recorded["payload"]["source"] == "declared"
            with Ledger.open(ledger) as opened:
                record_measured_aa(opened, "t1")
    for needed in ("target.freeze", "experiment.create", "verdict.record", "champion.select",
                   "final-audit.record", "handoff.record"):  # fmt: skip
        assert needed in operations
    champion = _pl(ledger, env, "champion", "show")["champions"][0]
    assert (champion["target_id"], champion["champion"]) == ("t1", "e1")
    report = _pl(ledger, env, "audit")
    assert report["ok"] is True and report["findings"] == []
    # `schema OP --example` of the operations this state allows: the rules accept them too
    for operation in ("target.supersede", "upstream-check.record", "host-advice.record"):
        body = example(operation)
        group, verb = operation.rsplit(".", 1)
        request = tmp_path / f"{operation}.json"
        request.write_text(json.dumps(body))
        dry = _pl(ledger, env, group, verb, "--request", str(request), "--dry-run")
        assert dry["events"], (operation, dry)
