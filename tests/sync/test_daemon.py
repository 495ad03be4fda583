"""Sync over a real ``git daemon`` on 127.0.0.1: concurrent clones, non-fast-forward
pushes, force-pushed (rewritten) and tampered remotes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from synchelpers import HERE, fsck_clean, snapshot

from perfledger.api import Ledger
from perfledger.errors import IntegrityError
from perfledger.ledger.packing import MAX_PACKS, pack_stats
from perfledger.ledger.sync import NonFastForward, RemoteRewritten


def _origin(served: Path, notes: int = 3) -> Ledger:
    ledger = Ledger.init(served / "ledger.git", name="shared", actor="alice")
    for i in range(notes):
        ledger.append("NoteRecorded", {"text": f"origin {i}", "tags": []}, actor="alice")
    return ledger


def _verify_json(cli: Callable[..., Any], path: Path) -> dict[str, Any]:
    proc = cli("--ledger", path, "verify", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_two_clones_append_200_each_concurrently_and_converge(
    tmp_path: Path, served: Path, daemon: str, cli: Any, git: Any, env: dict[str, str]
) -> None:
    # 200 appends each, a sync every 10: twenty sync rounds per writer racing the other's, as many
    # fetched packs as 500 appends synced every 25 made (what the pack bound below is about)
    origin = _origin(served)
    origin.close()
    url = f"{daemon}/ledger.git"
    for name in ("a", "b"):
        proc = cli("clone", url, tmp_path / name)
        assert proc.returncode == 0, proc.stderr
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "_syncer.py"), str(tmp_path / name), name, "200", "10"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    for proc in procs:
        _out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert "Traceback" not in err
    # a last round so that both hold everything: a pushed last; b pulls, merges, pushes; a pulls
    for name in ("b", "a", "b"):
        assert cli("--ledger", tmp_path / name, "sync").returncode == 0
    heads = {name: Ledger.open(tmp_path / name) for name in ("a", "b")}
    try:
        assert heads["a"].head() == heads["b"].head()  # the same DAG, to the commit
        assert heads["a"].store.count() == 1 + 3 + 400
        for ledger in heads.values():
            stats = pack_stats(ledger.store)
            assert stats["packs"] <= MAX_PACKS + 1, stats
    finally:
        for ledger in heads.values():
            ledger.close()
    reports = [_verify_json(cli, tmp_path / name) for name in ("a", "b")]
    assert reports[0]["ok"] and reports[1]["ok"]
    assert reports[0]["events"] == 404 and reports[0]["merges"] >= 1
    assert reports[0]["state_hash"] == reports[1]["state_hash"]
    # An auditor's clone made with the real git CLI verifies to the same state.
    git("clone", "--bare", "--branch", "ledger", url, tmp_path / "auditor.git")
    audited = _verify_json(cli, tmp_path / "auditor.git")
    assert audited["state_hash"] == reports[0]["state_hash"]
    assert audited["head"] == reports[0]["head"]
    for name in ("a", "b", "auditor.git"):
        fsck_clean(git, tmp_path / name)


def test_push_is_fast_forward_only(tmp_path: Path, served: Path, daemon: str) -> None:
    origin = _origin(served)
    url = f"{daemon}/ledger.git"
    a, _ = Ledger.clone(url, tmp_path / "a")
    b, _ = Ledger.clone(url, tmp_path / "b")
    try:
        a.append("NoteRecorded", {"text": "a", "tags": []}, actor="a")
        b.append("NoteRecorded", {"text": "b", "tags": []}, actor="b")
        assert a.push().pushed
        remote_head = origin.head()
        with pytest.raises(NonFastForward) as info:
            b.push()
        assert info.value.exit_code == 4 and "pull first" in (info.value.hint or "")
        assert origin.head() == remote_head  # nothing forced
        result = b.sync()
        assert result.pull.action == "merged" and result.push.pushed
        assert origin.head() == b.head()
        assert a.pull().action == "fast_forward" and a.head() == b.head()
    finally:
        for ledger in (origin, a, b):
            ledger.close()


@pytest.mark.slow
def test_pull_of_a_force_pushed_remote_is_refused_and_changes_nothing(
    tmp_path: Path, served: Path, daemon: str, git: Any, cli: Any
) -> None:
    origin = _origin(served)
    url = f"{daemon}/ledger.git"
    old, _ = Ledger.clone(url, tmp_path / "old")  # a machine that stays behind
    old.close()
    origin.append("NoteRecorded", {"text": "seen by c", "tags": []}, actor="alice")
    c, _ = Ledger.clone(url, tmp_path / "c")
    c.close()
    origin.close()
    # Someone rewrites the remote: valid events on an older base, force-pushed by the git CLI.
    other = Ledger.open(tmp_path / "old")
    other.append("NoteRecorded", {"text": "another history", "tags": []}, actor="mallory")
    other.close()
    git("-C", tmp_path / "old", "push", "--force", url, "ledger:ledger")
    before = snapshot(tmp_path / "c")
    proc = cli("--ledger", tmp_path / "c", "--json", "pull")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "remote_rewritten" and "rewritten" in error["message"]
    assert snapshot(tmp_path / "c") == before
    # in the library, the same refusal
    ledger = Ledger.open(tmp_path / "c")
    try:
        with pytest.raises(RemoteRewritten):
            ledger.pull()
    finally:
        ledger.close()


def _tamper_last_event(git: Any, repo: Path, tmp_path: Path) -> str:
    """With the git CLI only, inside the served repository: replace its last event by a copy
    whose event.json says something else (same id, same trailers), and move its ref to it.
    Returns the event's id."""
    work = repo
    head = git("-C", work, "rev-parse", "ledger").stdout.decode().strip()
    data = git("-C", work, "show", f"{head}:event.json").stdout
    envelope = json.loads(data)
    forged = data.replace(b"tampered-free text", b"tampered-FREE text")
    assert forged != data
    blob = subprocess.run(
        ["git", "-C", str(work), "hash-object", "-w", "--stdin"],
        input=forged, capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    tree = subprocess.run(
        ["git", "-C", str(work), "mktree"],
        input=f"100644 blob {blob}\tevent.json\n".encode(), capture_output=True, check=True,
    ).stdout.decode().strip()  # fmt: skip
    raw = git("-C", work, "cat-file", "commit", head).stdout
    header, _, message = raw.partition(b"\n\n")
    parent = next(line.split()[1] for line in header.split(b"\n") if line.startswith(b"parent "))
    ident = next(line for line in header.split(b"\n") if line.startswith(b"author "))[7:]
    name_email, seconds, tz = ident.rsplit(b" ", 2)
    env = {
        "GIT_AUTHOR_NAME": name_email.split(b" <")[0].decode(),
        "GIT_AUTHOR_EMAIL": "perfledger",
        "GIT_AUTHOR_DATE": f"{seconds.decode()} {tz.decode()}",
        "GIT_COMMITTER_NAME": name_email.split(b" <")[0].decode(),
        "GIT_COMMITTER_EMAIL": "perfledger",
        "GIT_COMMITTER_DATE": f"{seconds.decode()} {tz.decode()}",
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    commit = subprocess.run(
        ["git", "-C", str(work), "commit-tree", tree, "-p", parent.decode()],
        input=message, capture_output=True, check=True, env=env,
    ).stdout.decode().strip()  # fmt: skip
    git("-C", repo, "update-ref", "refs/heads/ledger", commit, head)
    return str(envelope["id"])


@pytest.mark.slow
def test_pull_of_a_tampered_event_is_refused_naming_it_and_changes_nothing(
    tmp_path: Path, served: Path, daemon: str, git: Any, cli: Any
) -> None:
    origin = _origin(served)
    url = f"{daemon}/ledger.git"
    c, _ = Ledger.clone(url, tmp_path / "c")
    c.close()
    origin.append("NoteRecorded", {"text": "fine", "tags": []}, actor="alice")
    origin.append("NoteRecorded", {"text": "tampered-free text", "tags": []}, actor="alice")
    origin.close()
    event_id = _tamper_last_event(git, served / "ledger.git", tmp_path)
    before = snapshot(tmp_path / "c")
    proc = cli("--ledger", tmp_path / "c", "--json", "pull")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "integrity" and event_id in error["message"]
    assert snapshot(tmp_path / "c") == before  # refs and object files, byte for byte
    ledger = Ledger.open(tmp_path / "c")
    try:
        with pytest.raises(IntegrityError):
            ledger.pull()
        assert ledger.verify().ok
    finally:
        ledger.close()
    # a clone of the tampered remote is refused too, and leaves nothing behind
    proc = cli("clone", url, tmp_path / "fresh")
    assert proc.returncode == 5 and not (tmp_path / "fresh").exists()
