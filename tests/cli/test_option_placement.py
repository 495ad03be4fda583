"""Habits (issue 38 item 8): ``--ledger`` and ``--json`` before or after the subcommand, and a
human form of ``perfledger state``. Through the real CLI on a real ledger."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from wf_scenario import record_measured_baseline

from perfledger.api import Ledger
from perfledger.commands.cli.app import hoist_global_options
from subprocess_env import isolated_env

REQUESTS = Path(__file__).resolve().parents[2] / "examples" / "requests"


def _pl(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfledger", *args], capture_output=True,
                          text=True, env=isolated_env(tmp), cwd=tmp, check=False)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "hoisted"),
    [
        (["status", "--ledger", "L"], ["--ledger", "L", "status"]),
        (["status", "--ledger=L", "--json"], ["--ledger=L", "status", "--json"]),
        (["--ledger", "L", "status"], ["--ledger", "L", "status"]),
        (
            ["experiment", "show", "e1", "--ledger", "L"],
            ["--ledger", "L", "experiment", "show", "e1"],
        ),
        # another program's argv is left alone: after `--`, and `evidence ncu`'s command
        (
            ["evidence", "ncu", "--evidence-id", "x", "prog", "--ledger", "L"],
            ["evidence", "ncu", "--evidence-id", "x", "prog", "--ledger", "L"],
        ),
        (
            ["--ledger", "L", "evidence", "ncu", "prog", "--ledger", "M"],
            ["--ledger", "L", "evidence", "ncu", "prog", "--ledger", "M"],
        ),
        (["note", "--", "--ledger", "L"], ["note", "--", "--ledger", "L"]),
    ],
)
def test_global_options_after_the_subcommand_are_the_roots(
    args: list[str], hoisted: list[str]
) -> None:
    assert hoist_global_options(args) == hoisted


@pytest.mark.slow
def test_ledger_and_json_before_or_after_the_subcommand_and_state_for_people(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    assert _pl(tmp_path, "init", str(ledger)).returncode == 0
    for path in sorted(REQUESTS.glob("0[1-7]-*.json")):
        group, verb = path.stem.split("-", 1)[1].rsplit(".", 1)
        done = _pl(tmp_path, group, verb, "--request", str(path), "--ledger", str(ledger))
        assert done.returncode == 0, done.stdout + done.stderr
        if group == "baseline":  # R4: typed, it is declared; what `measure baseline` appends
            with Ledger.open(ledger) as opened:
                record_measured_baseline(opened, json.loads(path.read_text()))
    answers = [
        _pl(tmp_path, "--ledger", str(ledger), "--json", "status").stdout,
        _pl(tmp_path, "status", "--ledger", str(ledger), "--json").stdout,
        _pl(tmp_path, "--json", "status", f"--ledger={ledger}").stdout,
    ]
    assert len({json.dumps(json.loads(a)["targets"], sort_keys=True) for a in answers}) == 1
    people = _pl(tmp_path, "state", "--ledger", str(ledger))
    assert people.returncode == 0, people.stderr
    text = people.stdout
    assert "Target t1 (current)" in text and "experiment e1: open" in text, text
    assert "champion original" in text and "ready" in text and not text.startswith("{")
    machine = json.loads(_pl(tmp_path, "state", "--json", "--ledger", str(ledger)).stdout)
    assert machine["state"]["event_count"] == 9


@pytest.mark.parametrize(
    ("args", "said"),
    [
        # the trial's shell: `--ledger $L` with L empty
        (["schema", "experiment.create", "--example", "--ledger"], "--ledger has no value"),
        (["status", "--ledger"], "--ledger has no value"),
        # the value is an operation's or a command's name, not a directory
        (
            ["schema", "--ledger", "experiment.create", "--example"],
            "--ledger took 'experiment.create' as its path",
        ),
        (
            ["--ledger", "schema", "experiment.create", "--example"],
            "--ledger took 'schema' as its path",
        ),
    ],
)
def test_ledger_without_its_directory_says_what_it_took(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """Before, these answered "No such command 'experiment.create'" or "--example needs an
    OPERATION", which named the wrong problem."""
    done = _pl(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr and "No such command" not in done.stderr
    assert "give the ledger's directory after --ledger" in done.stderr


def test_ledger_named_like_a_command_is_taken_where_that_directory_exists(tmp_path: Path) -> None:
    """Honest control: a ledger whose directory is called ``status`` is still a ledger."""
    assert _pl(tmp_path, "init", str(tmp_path / "status")).returncode == 0
    done = _pl(tmp_path, "--ledger", "status", "status", "--json")
    assert done.returncode == 0, done.stderr
