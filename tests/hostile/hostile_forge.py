"""Forging events into a real ledger the way a hostile writer would: each forged event carries
a correct content id, trailers, parents, Lamport clock and commit, so that only the property
under test (its shape, its kind, its schema version) can make a reader refuse it.

Nothing here goes through perfledger's writer: the objects are made with the real ``git`` CLI
(``hash-object``, ``mktree``, ``update-ref``), as an older or newer version, or an attacker,
would leave them. Imported by the tests in this directory and by ``bench/fuzz_readers.py``.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3

from perfledger.events.canonical import canonical_encoder
from perfledger.events.envelope import EVENT_ID_DOMAIN, format_ts
from perfledger.events.kinds import get_kind

#: Placeholder replaced by the raw request bytes in the canonical encoding.
_SLOT = "@@forged-request@@"
_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


def git(repo: Path | str, *args: str, data: bytes | None = None) -> bytes:
    """Run ``git -C repo args`` with ``data`` on stdin; returns stdout (stripped).
    Raises: AssertionError with git's stderr on a non-zero exit."""
    proc = subprocess.run(
        ["git", "-C", os.fspath(repo), *args], input=data, capture_output=True, env=_ENV
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.strip()


def _head(repo: Path | str) -> tuple[str, str, int]:
    """(head commit sha, its event id, its Lamport clock) of the ledger's head event commit."""
    sha = git(repo, "rev-parse", "refs/heads/ledger").decode()
    message = git(repo, "cat-file", "commit", sha).decode()
    trailers = dict(
        line.split(": ", 1) for line in message.splitlines() if line.startswith(("Event-", "Lam"))
    )
    return sha, trailers["Event-Id"], int(trailers["Lamport"])


def forge_event(
    repo: Path | str,
    *,
    request_json: bytes = b"null",
    kind: str = "NoteRecorded",
    schema: int | None = None,
    payload: dict[str, Any] | None = None,
    actor: str = "forger",
    summary: str = "forged",
) -> tuple[str, str]:
    """Append to the ledger at ``repo`` one event whose ``request`` is the raw JSON
    ``request_json`` (placed verbatim: any depth, size or value), of ``kind`` at ``schema``
    (default: the kind's current version, 1 for an unknown kind) with ``payload`` (default: a
    note's) and the commit subject ``<kind>: <summary>``, on the current head, with a correct
    id, trailers and commit. No limit is checked.
    Returns: (event id, commit sha)."""
    head, parent_id, lamport = _head(repo)
    if schema is None:
        try:
            schema = get_kind(kind).version
        except Exception:
            schema = 1
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    first = canonical_encoder.encode({"actor": actor, "artifacts": {}})[:-1]
    tail = {
        "idempotency_key": None,
        "kind": kind,
        "lamport": lamport + 1,
        "parents": [parent_id],
        "payload": payload if payload is not None else {"tags": [], "text": "forged"},
        "request": _SLOT,
        "schema": schema,
        "ts": format_ts(moment),
    }
    second = canonical_encoder.encode(tail)[1:].replace(b'"' + _SLOT.encode() + b'"', request_json)
    event_id = blake3.blake3(EVENT_ID_DOMAIN + first + b"," + second).hexdigest()
    data = first + b',"id":"' + event_id.encode() + b'",' + second
    blob = git(repo, "hash-object", "-w", "--stdin", data=data).decode()
    tree = git(repo, "mktree", data=f"100644 blob {blob}\tevent.json\n".encode()).decode()
    stamp = f"{actor} <perfledger> {int(moment.timestamp())} +0000"
    message = f"{kind}: {summary}\n\nEvent-Id: {event_id}\nLamport: {lamport + 1}\n"
    raw = f"tree {tree}\nparent {head}\nauthor {stamp}\ncommitter {stamp}\n\n{message}"
    commit = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw.encode()).decode()
    git(repo, "update-ref", "refs/heads/ledger", commit, head)
    return event_id, commit


def run_cli(home: Path, *args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
    """Run the perfledger console script (the venv's) with ``args`` in an isolated environment
    (``home`` as HOME); asserts that no traceback reached its output."""
    from subprocess_env import isolated_env, perfledger_command

    proc = subprocess.run(
        [*perfledger_command(), *map(os.fspath, args)],
        env=isolated_env(home),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def nested(depth: int, leaf: bytes = b"0") -> bytes:
    """JSON of ``depth`` nested arrays around ``leaf`` (``[[[0]]]`` for depth 3)."""
    return b"[" * depth + leaf + b"]" * depth
