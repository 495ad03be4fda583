"""``perfledger show`` with a git commit id: a ledger commit's sha or unique
prefix shows the event it carries; a merge commit (from ``sync``) is said to carry none; an id
that is neither gets a hint. Real git (``git rev-parse``) names the commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.mark.slow
def test_show_commit_sha_shows_the_event_it_carries(cli: Any, git_cli: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "l.git"
    assert cli("init", ledger).returncode == 0
    assert cli("--ledger", ledger, "note", "hello").returncode == 0
    commit = git_cli("-C", ledger, "rev-parse", "ledger")
    [entry] = json.loads(cli("--ledger", ledger, "log", "-n", "1", "--json").stdout)["events"]
    event_id = entry["event_id"]
    shown = cli("--ledger", ledger, "show", commit[:10])
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"commit {commit} carries event {event_id}")
    data = json.loads(cli("--ledger", ledger, "show", commit, "--json").stdout)
    assert data["commit"] == commit and data["event"]["id"] == event_id


@pytest.mark.slow
def test_show_merge_commit_says_it_carries_no_event(cli: Any, git_cli: Any, tmp_path: Path) -> None:
    shared, laptop = tmp_path / "shared.git", tmp_path / "laptop"
    assert cli("init", shared).returncode == 0
    assert cli("clone", shared, laptop).returncode == 0
    assert cli("--ledger", laptop, "note", "on the laptop").returncode == 0
    assert cli("--ledger", shared, "note", "elsewhere").returncode == 0
    assert cli("--ledger", laptop, "sync").returncode == 0
    merge = git_cli("-C", laptop, "rev-parse", "ledger")
    assert len(git_cli("-C", laptop, "rev-parse", "ledger^@").split()) == 2  # really a merge
    shown = cli("--ledger", laptop, "show", merge[:8], "--json")
    assert shown.returncode == 2
    error = json.loads(shown.stdout)["error"]
    assert "is a merge commit" in error["message"] and "carries no event" in error["message"]
    assert "parents" in error["hint"]


@pytest.mark.slow
def test_show_unknown_id_has_a_hint(cli: Any, tmp_path: Path) -> None:
    ledger = tmp_path / "l.git"
    assert cli("init", ledger).returncode == 0
    shown = cli("--ledger", ledger, "show", "ea5711fb", "--json")
    assert shown.returncode == 2
    error = json.loads(shown.stdout)["error"]
    assert "git log ledger" in error["hint"] and "perfledger log" in error["hint"]
