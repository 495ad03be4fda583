"""A scripted optimization session through the CLI only (subprocesses, real git ledger).

freeze -> readiness -> metric audit -> baseline -> resolution -> experiment with claim -> screen
and target samples -> verdict pass -> champion -> final audit -> handoff; then a second
experiment whose result contradicts its claim, which must be reconciled before a third is
accepted; the third's secondary-only gain is recorded as a local result and refused as champion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import (
    CAND1,
    CAND2,
    CAND3,
    T1,
    Session,
    baseline,
    evidence,
    experiment,
    handoff,
    metric_audit,
    readiness,
    record_measured_aa,
    record_measured_baseline,
    resolution,
    samples,
    target_freeze,
)

from perfledger.api import Ledger


class Cli:
    """Runs ``python -m perfledger --ledger L ... --json`` with requests written to files."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ledger = str(tmp / "ledger")
        self.count = 0
        self.env = {**os.environ, "PERFLEDGER_ACTOR": "cli-agent"}
        self.env.pop("PERFLEDGER_DIR", None)

    def __call__(
        self, *args: str, request: dict[str, Any] | None = None, expect: int = 0
    ) -> dict[str, Any]:
        argv = [sys.executable, "-m", "perfledger", "--ledger", self.ledger, *args, "--json"]
        if request is not None:
            self.count += 1
            path = self.tmp / f"request-{self.count}.json"
            path.write_text(json.dumps(request))
            argv += ["--request", str(path)]
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=120)
        assert "Traceback" not in done.stderr, done.stderr
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        return json.loads(done.stdout) if done.stdout.strip() else {}

    def head(self) -> str:
        """The ledger head (from ``state --json``)."""
        return self("state")["head"]


def _measured(cli: Cli, body: dict[str, Any]) -> None:
    """Append ``body`` as ``perfledger measure workload --protocol worker`` does (R5: the
    Target's observed primary takes measured samples only; a typed ``samples record`` is
    refused), in-process on the CLI's ledger."""
    with Ledger.open(cli.ledger) as ledger:
        Session(ledger).record_measured(body)


@pytest.mark.slow
def test_scripted_session_through_the_cli(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "perfledger", "init", cli.ledger, "--name", "session"],
        check=True, capture_output=True, env=cli.env,
    )  # fmt: skip
    assert cli("target", "freeze", request=target_freeze())["kind"] == "TargetFrozen"
    cli("evidence", "add", request=evidence())
    ready = cli("readiness", "record", request=readiness())
    assert "container_overlay" in ready["payload"]["missing_lineage"]
    cli("metric-audit", "record", request=metric_audit())
    typed_baseline = cli("baseline", "record", request=baseline())
    assert typed_baseline["payload"]["source"] == "declared"  # R4: typed, it decides nothing
    with Ledger.open(cli.ledger) as ledger:  # what `measure baseline` appends
        record_measured_baseline(ledger, baseline())
    typed = cli("resolution", "record", request=resolution())
    assert typed["payload"]["source"] == "declared"  # R4: typed, it decides nothing
    with Ledger.open(cli.ledger) as ledger:  # what `measure aa --record` appends
        record_measured_aa(ledger)

    # -- experiment 1: claim, screen, target, pass, champion, final audit, handoff ----------
    created = cli("experiment", "create", request=experiment("e1", candidate=CAND1))
    assert created["payload"]["figures"]["s_min"] > 1.0
    _measured(cli, samples("e1-screen", "screen"))
    screen = cli("verdict", "record", "--samples", "e1-screen")
    assert screen["payload"]["status"] == "inconclusive"  # a screen never passes (R11)
    with Ledger.open(cli.ledger) as ledger:  # R5: what `measure workload --record` appends
        Session(ledger).record_measured(samples("e1-target", "target", gain=0.2))
    verdict = cli(
        "verdict", "record", request={"samples_id": "e1-target", "claimed_status": "pass"}
    )
    assert verdict["payload"]["status"] == "pass"
    assert verdict["payload"]["primary"]["ci_low"] >= 0.05
    shown = cli("champion", "show", T1)
    assert shown["champion"] == "original"
    cli(
        "champion", "select", "--target", T1, "--samples", "e1-target",
        request={"expected_current": "original", "reason": "passed with guardrails"},
    )  # fmt: skip
    # The same compare-and-swap again loses: the champion is e1 now (R13).
    lost = cli(
        "champion", "select", request={"target_id": T1, "samples_id": "e1-target",
                                        "expected_current": "original"}, expect=3,
    )  # fmt: skip
    assert lost["error"]["rule"] == "R13"
    with Ledger.open(cli.ledger) as ledger:  # R5: a final audit passes on measured samples
        Session(ledger).record_measured(samples("e1-final", "final_audit", gain=0.2))
    audit = cli("final-audit", "record", request={"target_id": T1, "samples_id": "e1-final"})
    assert audit["payload"]["status"] == "pass"
    cli("handoff", "record", request=handoff())

    # -- experiment 2 contradicts its claim: reconcile before experiment 3 (R14) ------------
    champion_ref = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}
    cli("experiment", "create", request=experiment("e2", candidate=CAND2))
    for stage, gain in (("screen", 0.1), ("target", -0.1)):
        _measured(cli, samples(
            f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2, gain=gain,
            reference=champion_ref))  # fmt: skip
    contradicted = cli("verdict", "record", request={"samples_id": "e2-screen"})
    assert contradicted["payload"]["status"] == "inconclusive"
    contradicted = cli("verdict", "record", request={"samples_id": "e2-target"})
    assert contradicted["payload"]["contradicts_claim"] is True
    head = cli.head()
    refused = cli("experiment", "create", request=experiment("e3", candidate=CAND3), expect=3)
    assert refused["error"]["rule"] == "R14" and refused["error"]["code"] == "refused"
    assert cli.head() == head  # a refusal leaves the ledger unchanged
    cli(
        "reconcile",
        request={"experiment_id": "e2", "premise": "cost", "explanation": "an extra copy",
                 "corrected_model": {"description": "added cost 0.15", "added_cost": 0.15,
                                     "coverage": 0.6, "local_speedup": 2.0}},
    )  # fmt: skip
    cli("experiment", "create", request=experiment("e3", candidate=CAND3))

    # -- experiment 3: a secondary-only gain is a local result, never a champion (R13) ------
    for stage, gain in (("screen", 0.05), ("target", 0.0)):
        _measured(cli, samples(
            f"e3-{stage}", stage, experiment_id="e3", candidate=CAND3, gain=gain,
            secondary_gain=0.2, reference=champion_ref))  # fmt: skip
        cli("verdict", "record", request={"samples_id": f"e3-{stage}"})
    refused = cli(
        "champion", "select",
        request={"target_id": T1, "samples_id": "e3-target", "expected_current": "e1"}, expect=3,
    )  # fmt: skip
    assert refused["error"]["rule"] == "R13"
    local = cli("local-result", "record", request={
        "result_id": "lr-p99", "samples_id": "e3-target", "metric": "cpu_time",
        "scenario": "long prompts"})  # fmt: skip
    assert local["kind"] == "LocalResultRecorded"

    # -- read models and verification -------------------------------------------------------
    listed = cli("experiment", "list")["experiments"]
    assert {row["experiment_id"]: row["status"] for row in listed} == {
        "e1": "champion", "e2": "failed", "e3": "failed",
    }  # fmt: skip
    state = cli("state")["state"]
    assert state["targets"][T1]["champion"] == "e1"
    assert state["targets"][T1]["pending"] == {}
    assert sorted(state["local_results"]) == ["lr-p99"]
    report = cli("verify")
    assert report["ok"] is True
    schema = subprocess.run(
        [sys.executable, "-m", "perfledger", "schema", "experiment.create"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(schema.stdout)["additionalProperties"] is False


@pytest.mark.slow
def test_cli_errors_are_json_objects_with_exit_codes(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "perfledger", "init", cli.ledger], check=True,
        capture_output=True, env=cli.env,
    )  # fmt: skip
    bad = cli("target", "freeze", request={"target_id": "t", "surprise": 1}, expect=2)
    assert bad["error"]["code"] == "bad_request" and "surprise" in bad["error"]["message"]
    refused = cli("experiment", "create", request=experiment(), expect=3)
    assert refused["error"]["rule"] == "R1"
    missing = cli("target", "freeze", "--request", str(tmp_path / "missing.json"), expect=2)
    assert missing["error"]["code"] == "bad_request"
