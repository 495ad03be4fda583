"""Shared fixtures: real git ledgers in ``tmp_path``, the in-memory store, the real git CLI and a
draft factory. Nothing here is a mock: every ledger is a git repository on disk."""

from __future__ import annotations

import os
import shutil
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

import wf_scenario  # noqa: E402 (found through the path set above)

# the tests' scenario declares 1,000 bootstrap resamples, not the default 10,000 (wf_scenario)
wf_scenario.RESAMPLES = 1000


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``serial`` must be ``slow`` too: ``make test-fast`` runs only in parallel
    (``-n``), so a serial test there would run beside another and fail on its load."""
    wrong = [
        i.nodeid
        for i in items
        if i.get_closest_marker("serial") and not i.get_closest_marker("slow")
    ]
    if wrong:
        raise pytest.UsageError(f"marked serial but not slow (mark them slow too): {wrong[:5]}")


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


@pytest.fixture(scope="session")
def _ready_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, datetime]:
    """A closed ledger on which ``wf_scenario.Session.ready`` ran, made once per run, and the
    session's clock after it: :func:`ready` copies it."""
    from wf_scenario import Session

    path = tmp_path_factory.mktemp("ready-template") / "ledger"
    ledger = Ledger.init(path, name="wf", actor="agent")
    try:
        clock = Session(ledger).ready().clock
    finally:
        ledger.close()
    return path, clock


@pytest.fixture
def ready(
    request: pytest.FixtureRequest, tmp_path: Path, _ready_template: tuple[Path, datetime]
) -> Iterator[Any]:
    """A session whose Target ``t1`` is frozen, ready, audited, with baseline and resolution:
    a copy (at ``tmp_path/"ledger"``) of a ledger made so once per run, with its session's
    clock (the events a fresh ``bare.ready()`` records, at a fraction of its CPU time: several
    hundred tests start here). A test that asks for ``bare`` as well gets ``bare.ready()``, one
    session."""
    from wf_scenario import Session

    if "bare" in request.fixturenames:
        yield request.getfixturevalue("bare").ready()
        return
    template, clock = _ready_template
    path = tmp_path / "ledger"
    shutil.copytree(template, path, symlinks=True)
    ledger = Ledger.open(path)
    try:
        session = Session(ledger)
        session.clock = clock
        yield session
    finally:
        ledger.close()


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
