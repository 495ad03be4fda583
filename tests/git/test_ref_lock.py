"""The ledger ref's lock against other processes (SPEC.md section 2: "a lock another process may
hold (git's own) is never broken: it is waited for, bounded, then reported").

A real ``git update-ref --stdin`` transaction holds ``refs/heads/ledger.lock`` between
``prepare`` and ``commit``; a perfledger append meanwhile must wait and then fail with exit 4
naming the lock, and git's own update must then succeed. A perfledger writer SIGKILLed while it
holds the lock leaves a lock that the next append recognises as a dead writer's (its owner name
and free flock) and removes at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from tests.git.conftest import CliRun, GitRun

from perfledger.api import Ledger
from perfledger.errors import ConcurrentAppend
from perfledger.ledger import store as store_module


def _init(path: Path) -> str:
    with Ledger.init(path, actor="tester") as ledger:
        ledger.append("NoteRecorded", {"text": "first", "tags": []}, actor="tester")
        return ledger.store.read_head().decode()


class GitRefTransaction:
    """``git update-ref --stdin`` holding the ledger ref's lock from ``prepare`` until
    :meth:`commit` (git's own lock-file protocol, nothing simulated)."""

    def __init__(self, repo: Path, env: dict[str, str], head: str) -> None:
        self.proc = subprocess.Popen(
            ["git", "-C", str(repo), "update-ref", "--stdin"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        # an update to the value the ref holds: git locks the ref, and the ledger stays valid
        self.proc.stdin.write(f"start\nupdate refs/heads/ledger {head} {head}\nprepare\n".encode())
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == b"start: ok\n"
        assert self.proc.stdout.readline() == b"prepare: ok\n"  # git holds the lock now

    def commit(self) -> tuple[int, str]:
        """Commit git's transaction; return (git's exit code, its stderr)."""
        _out, err = self.proc.communicate(b"commit\n", timeout=30)
        return self.proc.returncode, err.decode(errors="replace")


@pytest.mark.slow
def test_ref_lock_of_a_live_git_process_is_waited_for_then_reported_never_broken(
    tmp_path: Path, perfledger_run: CliRun, subprocess_env: dict[str, str]
) -> None:
    ledger = tmp_path / "ledger"
    head = _init(ledger)
    lock = ledger / "refs" / "heads" / "ledger.lock"
    git = GitRefTransaction(ledger, subprocess_env, head)
    try:
        assert lock.exists()
        started = time.monotonic()
        proc = perfledger_run("--ledger", ledger, "note", "while git holds the lock", "--json")
        waited_s = time.monotonic() - started
        assert proc.returncode == 4, proc.stdout + proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "concurrent_append"
        assert str(lock) in error["message"] and str(lock) in error["hint"]
        assert waited_s >= store_module.REF_LOCK_WAIT_S  # it waited before reporting
        assert lock.exists()  # never broken
    finally:
        code, err = git.commit()
    assert code == 0, err  # git's own update went through
    assert not lock.exists()
    with Ledger.open(ledger) as opened:
        assert opened.store.read_head().decode() == head
        assert opened.verify().ok


def test_append_waits_for_a_short_git_ref_lock_and_then_succeeds(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    ledger = tmp_path / "ledger"
    head = _init(ledger)
    git = GitRefTransaction(ledger, subprocess_env, head)
    released: list[tuple[int, str]] = []

    def release_soon() -> None:
        time.sleep(0.3)
        released.append(git.commit())

    thread = threading.Thread(target=release_soon)
    thread.start()
    try:
        with Ledger.open(ledger) as opened:
            event = opened.append("NoteRecorded", {"text": "after git", "tags": []}, actor="t")
            assert opened.store.read_head().decode() != head
            assert opened.store.has_event(event.id)
    finally:
        thread.join()
    assert released and released[0][0] == 0, released


def test_leftover_lock_not_made_by_perfledger_is_reported_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_run: GitRun
) -> None:
    """A lock file with no perfledger owner (git's, say, left by a killed git) is never
    removed by perfledger, however old: the append reports it with what to do."""
    ledger = tmp_path / "ledger"
    head = _init(ledger)
    lock = ledger / "refs" / "heads" / "ledger.lock"
    lock.write_text(head + "\n")
    os.utime(lock, (time.time() - 3600, time.time() - 3600))  # an hour old: age decides nothing
    monkeypatch.setattr(store_module, "REF_LOCK_WAIT_S", 0.2)
    with Ledger.open(ledger) as opened:
        with pytest.raises(ConcurrentAppend) as caught:
            opened.append("NoteRecorded", {"text": "blocked", "tags": []}, actor="t")
        assert str(lock) in caught.value.message
        assert opened.store.read_head().decode() == head
    assert lock.read_text() == head + "\n"
    lock.unlink()  # what the hint says to do once no git process runs
    with Ledger.open(ledger) as opened:
        opened.append("NoteRecorded", {"text": "unblocked", "tags": []}, actor="t")
    git_run(ledger, "fsck", "--strict", "--full", "--no-progress")


_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from perfledger.api import Ledger
    from perfledger.ledger import refcas

    real = refcas.RefLock.commit

    def commit(self, dir_fd=None):
        os.write(1, b"holding\\n")
        os.kill(os.getpid(), signal.SIGKILL)  # dies holding refs/heads/ledger.lock

    refcas.RefLock.commit = commit
    with Ledger.open(sys.argv[1]) as ledger:
        ledger.append("NoteRecorded", {"text": "never acknowledged", "tags": []}, actor="k")
    """
)


def test_ref_lock_of_a_sigkilled_perfledger_writer_is_recovered_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = tmp_path / "ledger"
    head = _init(ledger)
    lock = ledger / "refs" / "heads" / "ledger.lock"
    proc = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(ledger)],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert proc.stdout == b"holding\n"
    assert lock.exists()
    # recognised by what it held, not by waiting: a wait would fail here
    monkeypatch.setattr(store_module, "REF_LOCK_WAIT_S", 0.0)
    with Ledger.open(ledger) as opened:
        event = opened.append("NoteRecorded", {"text": "after the kill", "tags": []}, actor="t")
        assert opened.store.has_event(event.id)
        assert opened.store.read_head().decode() != head
        assert opened.verify().ok
    assert not lock.exists()
    owners = [n for n in os.listdir(ledger / "perfledger") if n.startswith("ref-lock-")]
    assert owners == []  # the dead writer's owner name went with its lock


def test_init_beside_a_held_ref_lock_is_reported_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_run: GitRun
) -> None:
    repo = tmp_path / "repo.git"
    repo.mkdir()
    git_run(repo, "init", "-q", "--bare")
    lock = repo / "refs" / "heads" / "ledger.lock"
    lock.write_text("0" * 40 + "\n")
    monkeypatch.setattr(store_module, "REF_LOCK_WAIT_S", 0.1)
    with pytest.raises(ConcurrentAppend) as caught:
        Ledger.init(repo, actor="t")
    assert str(lock) in caught.value.message
    assert lock.exists()
