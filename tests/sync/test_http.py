"""Smart HTTP through the real ``git http-backend`` behind a small WSGI server on 127.0.0.1:
clone, pull and push."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gitservers import http_server
from synchelpers import fsck_clean

from perfledger.api import Ledger
from perfledger.ledger.sync import RemoteError


@pytest.fixture
def http(served: Path, env: dict[str, str]) -> Any:
    with http_server(str(served), env) as prefix:
        yield prefix


@pytest.mark.slow
def test_clone_pull_and_push_over_smart_http(
    tmp_path: Path, served: Path, http: str, cli: Any, git: Any
) -> None:
    origin = Ledger.init(served / "ledger.git", name="web", actor="alice")
    for i in range(20):
        origin.append("NoteRecorded", {"text": f"n{i}", "tags": []}, actor="alice")
    url = f"{http}/ledger.git"
    proc = cli("--json", "clone", url, tmp_path / "c")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cloned = json.loads(proc.stdout)
    assert cloned["action"] == "cloned" and len(cloned["new_events"]) == 21
    assert cloned["after"] == origin.head()

    origin.append("NoteRecorded", {"text": "later", "tags": []}, actor="alice")
    proc = cli("--ledger", tmp_path / "c", "--json", "pull")
    assert proc.returncode == 0, proc.stderr
    pulled = json.loads(proc.stdout)
    assert pulled["action"] == "fast_forward"
    assert [e["kind"] for e in pulled["new_events"]] == ["NoteRecorded"]

    proc = cli("--ledger", tmp_path / "c", "note", "from the clone")
    assert proc.returncode == 0
    origin.append("NoteRecorded", {"text": "meanwhile", "tags": []}, actor="alice")
    proc = cli("--ledger", tmp_path / "c", "push")
    assert proc.returncode == 4 and "pull first" in proc.stderr  # not a fast-forward
    proc = cli("--ledger", tmp_path / "c", "--json", "sync")
    assert proc.returncode == 0, proc.stderr
    synced = json.loads(proc.stdout)
    assert synced["pull"]["action"] == "merged" and synced["push"]["pushed"]
    assert origin.head() == synced["push"]["after"]
    report = origin.verify()
    assert report.ok and report.events == 24 and report.merges == 1
    origin.close()
    fsck_clean(git, served / "ledger.git")
    fsck_clean(git, tmp_path / "c")


def test_an_unreachable_remote_is_a_clear_error(tmp_path: Path, http: str, cli: Any) -> None:
    ledger = Ledger.init(tmp_path / "l", actor="a")
    try:
        with pytest.raises(RemoteError):
            ledger.pull(f"{http}/no-such-ledger.git")
    finally:
        ledger.close()
    proc = cli("--ledger", tmp_path / "l", "pull", "git://127.0.0.1:9/none.git")
    assert proc.returncode == 1 and "remote" in proc.stderr
