"""R11 case checks before measuring (commands/cli/measure.py,
``rules.r11_cases_in_test_set``), through the real CLI on a real ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_measure_cli import _head
from wf_scenario import (
    TEST_SET_HASH,
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    target_freeze,
)

from perfledger.api import Ledger
from subprocess_env import isolated_env, perfledger_command

WORKLOAD = """
import json, random, sys
open(sys.argv[1], "a").write("x")
print(json.dumps({"correct": True, "metrics": {"latency_ms": [10.0 + random.random()]}}))
"""


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A ready Target whose test set has 2 cases but names none, and experiment e1."""
    path = tmp_path / "ledger"
    session = Session(Ledger.init(path, name="r11", actor="agent"))
    session.run("target.freeze", target_freeze())
    session.run("evidence.add", evidence())
    session.run(
        "readiness.record",
        readiness(test_set={"hash": TEST_SET_HASH, "case_count": 2, "cases": []}),
    )
    for op, body in [("metric-audit.record", metric_audit()), ("baseline.record", baseline()),
                     ("resolution.record", resolution()), ("experiment.create", experiment())]:  # fmt: skip
        session.run(op, body)
    session.ledger.close()
    return path


def _cli(ledger: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args], capture_output=True, text=True,
        env={**isolated_env(tmp), "PERFLEDGER_ACTOR": "agent"}, timeout=300, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("case", ["", "x" * 201], ids=["empty", "201-chars"])
def test_r11_a_case_name_the_samples_request_refuses_is_refused_before_measuring(
    ledger_path: Path, tmp_path: Path, case: str
) -> None:
    """With a test set that names no cases, ``--case ''`` (or a 201-character name) is a case
    name no samples request can hold: refused before any call, like an unknown case (it used
    to be measured, 12 workload calls, and then refused)."""
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    marker = tmp_path / "ran"
    cmd = f"{sys.executable} {workload} {marker}"
    out = _cli(ledger_path, tmp_path, "measure", "workload", "--experiment", "e1", "--stage",
               "screen", "--ref", cmd, "--cand", cmd, "--case", case, "--pairs", "5",
               "--no-monitor", "--json", "--quiet")  # fmt: skip
    assert out.returncode in (2, 3), out.stdout + out.stderr
    assert not marker.exists(), f"measured {len(marker.read_text())} calls before refusing"


def test_r11_a_spec_with_a_non_string_case_is_a_bad_request(
    ledger_path: Path, tmp_path: Path
) -> None:
    """``PROBLEMS = {1: ..., 'small': ...}`` in a kernel spec is a clear bad request naming
    the case (sorting the names used to raise TypeError: exit 1)."""
    spec = tmp_path / "spec.py"
    spec.write_text("PROBLEMS = {1: object(), 'small': object()}\nREFERENCE = object()\n"
                    "CANDIDATE = object()\n")  # fmt: skip
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "screen", "--spec", str(spec), "--json", "--quiet")  # fmt: skip
    assert out.returncode in (2, 3), out.stdout
    assert "unexpected" not in json.loads(out.stdout)["error"]["message"]


def test_r11_another_environment_is_refused_before_measuring(
    ledger_path: Path, tmp_path: Path
) -> None:
    """The Target's readiness recorded another machine's environment (wf_scenario's H200):
    samples measured here would be refused by R11, so nothing is measured."""
    workload = tmp_path / "workload.py"
    workload.write_text(WORKLOAD)
    marker = tmp_path / "ran"
    cmd = f"{sys.executable} {workload} {marker}"
    head = _head(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "workload", "--experiment", "e1", "--stage",
               "screen", "--ref", cmd, "--cand", cmd, "--case", "small", "--pairs", "5",
               "--no-monitor", "--json", "--quiet")  # fmt: skip
    error = json.loads(out.stdout)["error"]
    assert out.returncode == 3 and error["rule"] == "R11", out.stdout
    assert "environment" in error["message"] and "environment_id" in error["hint"]
    assert not marker.exists()
    assert _head(ledger_path) == head
