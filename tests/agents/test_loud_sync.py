"""Loud sync: ``pull``/``push``/``sync`` name the local ledger they acted on, and a pull (or
sync) whose merge creates a conflict says what conflicts, what it blocks and the resolve
command, and exits 6; running that command clears it."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from wf_scenario import Session

from perfledger.api import Ledger
from perfledger.commands.cli.sync import CONFLICT_EXIT

CANDIDATES = {"e1": "sha256:" + "1" * 64, "e2": "sha256:" + "2" * 64}


def _cli(ledger: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", str(ledger), *args],
        capture_output=True, text=True,
    )  # fmt: skip


def _two_clones_with_rival_champions(tmp_path: Path) -> tuple[Path, Path, Path]:
    origin = tmp_path / "origin.git"
    ledger = Ledger.init(origin, name="wf", actor="agent")
    session = Session(ledger).ready()
    for experiment_id, candidate in CANDIDATES.items():
        session.passed(experiment_id, candidate)
    ledger.close()
    clones = []
    for name, champion in (("a", "e1"), ("b", "e2")):
        clone, _ = Ledger.clone(str(origin), tmp_path / name)
        Session(clone).champion(champion)  # each against the champion it saw: the original
        clone.close()
        clones.append(tmp_path / name)
    return origin, clones[0], clones[1]


@pytest.mark.slow
def test_a_pull_that_creates_a_conflict_names_it_and_exits_6(tmp_path: Path) -> None:
    _, a, b = _two_clones_with_rival_champions(tmp_path)
    pushed = _cli(a, "push")
    assert pushed.returncode == 0, pushed.stderr
    assert str(a) in pushed.stdout  # names the ledger it acted on

    pulled = _cli(b, "--json", "pull")
    assert pulled.returncode == CONFLICT_EXIT, pulled.stderr
    answer = json.loads(pulled.stdout)
    assert answer["ledger"] == str(b) and answer["action"] == "merged"
    (conflict,) = answer["conflicts"]
    assert conflict["kind"] == "champion" and sorted(conflict["options"]) == ["e1", "e2"]
    assert "champion selection" in conflict["blocks"]

    again = _cli(b, "pull")  # nothing new: no new conflict, exit 0
    assert again.returncode == 0 and f"ledger {b}" in again.stdout

    assert conflict["resolve"].endswith("(KEEP: one of e1, e2)")
    command = conflict["resolve"].split("  (")[0].replace("KEEP", "e2")
    command = command.replace("TEXT", "'e2 is faster'")
    words = shlex.split(command)
    assert words[:2] == ["perfledger", "resolve"]
    resolved = _cli(b, *words[1:])
    assert resolved.returncode == 0, resolved.stderr
    assert _cli(b, "sync").returncode == 0


@pytest.mark.slow
def test_a_sync_that_creates_a_conflict_says_so_on_stderr_and_exits_6(tmp_path: Path) -> None:
    _, a, b = _two_clones_with_rival_champions(tmp_path)
    assert _cli(a, "sync").returncode == 0
    synced = _cli(b, "sync")
    assert synced.returncode == CONFLICT_EXIT
    assert f"ledger {b}" in synced.stdout and "pushed" in synced.stdout
    assert "CONFLICT (champion)" in synced.stderr and "perfledger resolve" in synced.stderr
