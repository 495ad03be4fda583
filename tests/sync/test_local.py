"""Path and ``file://`` remotes, the ``remote`` commands, what changed since the last pull, and
the refusals that need no server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from synchelpers import fsck_clean, snapshot

from perfledger.api import Ledger
from perfledger.errors import BadRequest, IntegrityError
from perfledger.ledger.base import EventDraft


def _notes(ledger: Ledger, n: int, actor: str = "alice") -> None:
    ledger.append_batch(
        [EventDraft("NoteRecorded", {"text": f"{actor} {i}", "tags": []}, actor) for i in range(n)]
    )


@pytest.mark.parametrize("scheme", ["path", "file"])
def test_clone_pull_push_with_path_and_file_url_remotes(
    tmp_path: Path, scheme: str, git: Any
) -> None:
    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    _notes(origin, 30)
    url = str(tmp_path / "origin.git") if scheme == "path" else f"file://{tmp_path}/origin.git"
    clone, result = Ledger.clone(url, tmp_path / "clone")
    try:
        assert result.action == "cloned" and len(result.new_events) == 31
        assert clone.head() == origin.head()
        _notes(origin, 5)
        _notes(clone, 7, "bob")
        pulled = clone.pull()
        assert pulled.action == "merged" and len(pulled.new_events) == 5
        assert {e.actor for e in pulled.new_events} == {"alice"}
        assert clone.push().pushed
        assert origin.head() == clone.head()
        assert origin.verify().extra["state_hash"] == clone.verify().extra["state_hash"]
        # a second pull brings nothing and writes nothing
        before = snapshot(tmp_path / "clone")
        assert clone.pull().action == "up_to_date"
        assert snapshot(tmp_path / "clone") == before
    finally:
        origin.close()
        clone.close()
    fsck_clean(git, tmp_path / "clone")
    fsck_clean(git, tmp_path / "origin.git")


def test_merge_commits_are_deterministic_and_carry_no_event(tmp_path: Path, git: Any) -> None:
    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    a, _ = Ledger.clone(str(tmp_path / "origin.git"), tmp_path / "a")
    b, _ = Ledger.clone(str(tmp_path / "origin.git"), tmp_path / "b")
    try:
        _notes(a, 3, "a")
        _notes(b, 4, "b")
        # both machines join the same two heads independently: the same merge commit
        shutil.copytree(tmp_path / "a", tmp_path / "a0")  # a, before it merges
        merged_a = a.pull(str(tmp_path / "b")).merge_commit
        merged_b = b.pull(str(tmp_path / "a0")).merge_commit
        assert merged_a is not None and merged_a == merged_b
        tree = git("-C", tmp_path / "a", "rev-parse", f"{merged_a}^{{tree}}").stdout.strip()
        assert tree == b"4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # the empty tree: no event
        parents = git("-C", tmp_path / "a", "rev-list", "--parents", "-n1", merged_a).stdout.split()
        assert len(parents) == 3
        assert a.verify().merges == 1 and a.store.count() == 1 + 7
    finally:
        for ledger in (origin, a, b):
            ledger.close()


@pytest.mark.slow
def test_remote_add_list_remove_and_pull_summary(tmp_path: Path, cli: Any, git: Any) -> None:
    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    other = Ledger.init(tmp_path / "mine", actor="me")
    other.close()
    assert (
        cli(
            "--ledger", tmp_path / "mine", "remote", "add", "up", tmp_path / "origin.git"
        ).returncode
        == 0
    )
    proc = cli("--ledger", tmp_path / "mine", "remote", "add", "up", tmp_path / "x")
    assert proc.returncode == 2 and "already exists" in proc.stderr
    proc = cli("--ledger", tmp_path / "mine", "remote", "add", "bad name", tmp_path / "x")
    assert proc.returncode == 2
    proc = cli("--ledger", tmp_path / "mine", "--json", "remote", "list")
    rows = json.loads(proc.stdout)["remotes"]
    assert rows == [{"name": "up", "url": str(tmp_path / "origin.git"), "last_seen": None}]
    # git itself sees the remote
    assert b"up" in git("-C", tmp_path / "mine", "remote").stdout
    # another ledger (another root) is refused, naming the reason, nothing changes
    before = snapshot(tmp_path / "mine")
    proc = cli("--ledger", tmp_path / "mine", "pull", "up")
    assert proc.returncode == 5 and "different ledger" in proc.stderr
    assert snapshot(tmp_path / "mine") == before
    proc = cli("--ledger", tmp_path / "mine", "remote", "remove", "up")
    assert proc.returncode == 0
    proc = cli("--ledger", tmp_path / "mine", "pull", "up")
    assert proc.returncode == 2 and "no remote" in proc.stderr
    # the summary of a pull names what came
    proc = cli("clone", tmp_path / "origin.git", tmp_path / "c")
    assert proc.returncode == 0 and "cloned" in proc.stdout
    origin.append("NoteRecorded", {"text": "x", "tags": []}, actor="alice")
    origin.close()
    proc = cli("--ledger", tmp_path / "c", "pull")
    assert proc.returncode == 0 and "fast-forward; 1 new event" in proc.stdout
    assert "NoteRecorded" in proc.stdout


def test_changes_since_the_last_local_head(tmp_path: Path) -> None:
    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    clone, _ = Ledger.clone(str(tmp_path / "origin.git"), tmp_path / "c")
    try:
        record, events = clone.changes_since_last_pull()
        assert record is not None and record.action == "cloned" and len(events) == 1
        _notes(origin, 4)
        _notes(clone, 2, "bob")
        before = clone.head()
        result = clone.pull()
        record, events = clone.changes_since_last_pull()
        assert record is not None and record.before == before and record.after == result.after
        assert [e.id for e in events] == [e.id for e in result.new_events]
        assert {e.actor for e in events} == {"alice"} and len(events) == 4
        assert clone.pull().action == "up_to_date"  # a pull that brings nothing keeps the record
        assert [e.id for e in clone.changes_since_last_pull()[1]] == [e.id for e in events]
        assert clone.changes_since(clone.head()) == []
        assert len(clone.changes_since(None)) == 1 + 4 + 2
        with pytest.raises(BadRequest):
            clone.changes_since("0" * 40)
    finally:
        origin.close()
        clone.close()


def test_clone_refuses_a_non_empty_directory_and_a_non_ledger(tmp_path: Path, git: Any) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    origin.close()
    with pytest.raises(BadRequest):
        Ledger.clone(str(tmp_path / "origin.git"), tmp_path / "full")
    git("init", "--bare", "-q", tmp_path / "plain.git")
    with pytest.raises((BadRequest, IntegrityError)):
        Ledger.clone(str(tmp_path / "plain.git"), tmp_path / "new")
    assert not (tmp_path / "new").exists()


def test_push_to_an_empty_git_repository_then_clone_it(tmp_path: Path, git: Any) -> None:
    """A ledger started on one machine continues on a fresh git host: push creates the branch."""
    git("init", "--bare", "-q", tmp_path / "host.git")
    ledger = Ledger.init(tmp_path / "mine", actor="alice")
    try:
        _notes(ledger, 12)
        with pytest.raises(BadRequest):
            ledger.pull(str(tmp_path / "host.git"))  # nothing to pull: no ledger branch yet
        pushed = ledger.push(str(tmp_path / "host.git"))
        assert pushed.pushed and pushed.before is None
        assert git("-C", tmp_path / "host.git", "rev-parse", "ledger").stdout.decode().strip() == (
            ledger.head()
        )
        clone, result = Ledger.clone(f"file://{tmp_path}/host.git", tmp_path / "other")
        assert clone.head() == ledger.head() and len(result.new_events) == 13
        assert clone.verify().extra["state_hash"] == ledger.verify().extra["state_hash"]
        clone.close()
    finally:
        ledger.close()
    git("-C", tmp_path / "host.git", "symbolic-ref", "HEAD", "refs/heads/ledger")  # host's default
    fsck_clean(git, tmp_path / "host.git")


@pytest.mark.slow
def test_pulls_while_another_process_appends_locally(
    tmp_path: Path, env: dict[str, str], git: Any
) -> None:
    """A pull's ref update races local appends by compare-and-swap: nothing is lost."""
    import subprocess
    import sys

    from synchelpers import HERE

    origin = Ledger.init(tmp_path / "origin.git", actor="alice")
    clone, _ = Ledger.clone(str(tmp_path / "origin.git"), tmp_path / "c")
    appender = subprocess.Popen(
        [sys.executable, str(HERE / "_appender.py"), str(tmp_path / "c"), "300"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        pulls = 0
        while appender.poll() is None or pulls < 3:
            _notes(origin, 5)
            clone.pull()
            pulls += 1
    finally:
        _, err = appender.communicate(timeout=300)
    assert appender.returncode == 0, err
    clone.pull()
    try:
        report = clone.verify()
        assert report.ok, report.error
        assert report.events == 1 + 300 + 5 * pulls
    finally:
        clone.close()
        origin.close()
    fsck_clean(git, tmp_path / "c")
