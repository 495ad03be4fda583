"""Shared fixtures: real git ledgers in ``tmp_path``, the in-memory store, the real git CLI and a
draft factory. Nothing here is a mock: every ledger is a git repository on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from perfledger.api import Ledger
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.memory import MemoryStore

# The workflow scenario (tests/workflow/wf_scenario.py) and the scripted read-model session
# (tests/readmodels/rm_session.py) are imported by name from several test directories.
for _name in ("workflow", "readmodels"):
    _path = str(Path(__file__).resolve().parent / _name)
    if _path not in sys.path:
        sys.path.insert(0, _path)

#: Actor written by :func:`make_note` unless told otherwise.
TEST_ACTOR = "tester"


def run_git(
    *args: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run the real ``git`` CLI with a neutral configuration; returns the completed process.

    Raises: AssertionError with git's stderr when ``check`` and git exits non-zero.
    """
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    proc = subprocess.run(
        ["git", *map(os.fspath, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"git {' '.join(map(os.fspath, args))} exited {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc


def make_note(
    text: str,
    *,
    tags: list[str] | None = None,
    actor: str = TEST_ACTOR,
    request: Any = None,
    idempotency_key: str | None = None,
    artifacts: dict[str, Artifact] | None = None,
    ts: datetime | None = None,
) -> EventDraft:
    """Return a ``NoteRecorded`` draft with ``text`` (``request`` defaults to the payload)."""
    payload = {"text": text, "tags": list(tags or [])}
    return EventDraft(
        "NoteRecorded",
        payload,
        actor,
        request=payload if request is None else request,
        idempotency_key=idempotency_key,
        artifacts=dict(artifacts or {}),
        ts=ts,
    )


@pytest.fixture(scope="session")
def note() -> Callable[..., EventDraft]:
    """The :func:`make_note` draft factory (session-scoped, so hypothesis tests may use it)."""
    return make_note


@pytest.fixture(scope="session")
def git() -> Callable[..., subprocess.CompletedProcess[str]]:
    """The :func:`run_git` helper: ``git("fsck", "--strict", cwd=path)``."""
    return run_git


@pytest.fixture
def git_ledger(tmp_path: Path) -> Iterator[Ledger]:
    """A freshly initialised, opened git ledger (a bare repository at ``tmp_path/"ledger"``)."""
    ledger = Ledger.init(tmp_path / "ledger", name="test", actor=TEST_ACTOR)
    try:
        yield ledger
    finally:
        ledger.close()


@pytest.fixture
def memory_store() -> MemoryStore:
    """A fresh in-memory store holding only its root event."""
    return MemoryStore("test")


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Any]:
    """A workflow session (``wf_scenario.Session``) on a fresh ledger holding only its root."""
    from wf_scenario import Session

    ledger = Ledger.init(tmp_path / "ledger", name="wf", actor="agent")
    try:
        yield Session(ledger)
    finally:
        ledger.close()


@pytest.fixture
def ready(bare: Any) -> Any:
    """A session whose Target ``t1`` is frozen, ready, audited, with baseline and resolution."""
    return bare.ready()


@pytest.fixture
def self_timed(tmp_path: Path) -> Iterator[Any]:
    """A session (``wf_legacy.Session``) of a Target whose primary the subject reports
    (``latency_ms``, measured by the self-timed driver), made ready as an older perfledger did
    (``wf_legacy.self_timed_ready``): for tests of self-timed and outside samples."""
    from wf_legacy import self_timed_ready

    ledger = Ledger.init(tmp_path / "ledger", name="wf", actor="agent")
    try:
        yield self_timed_ready(ledger)
    finally:
        ledger.close()
