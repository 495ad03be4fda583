"""A forger's toolkit for planted-defect tests: read a ledger's linear history, edit events, and
write the history back with real git plumbing (``git hash-object``, ``git mktree``,
``git commit-tree``, ``git update-ref``), every event id, trailer, parent and Lamport clock
recomputed so that the forgery is what someone holding the whole history could write:
``git fsck --strict --full`` passes on it, and only what the rules or hashes bind can expose it.

Nothing here uses perfledger's writer: the objects are made with git's own plumbing, the way
docs/storage.md describes them; only the canonical JSON encoder is perfledger's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

#: Domain prefix of an event id (docs/storage.md: blake3 over it and the canonical bytes).
EVENT_ID_DOMAIN = b"perfledger/event/v1\x00"
REF = "refs/heads/ledger"


def git(
    repo: Path, *args: str, data: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    """Run real ``git --git-dir=repo ARGS`` (stdin ``data``); returns stdout, stripped.
    Raises: AssertionError with git's stderr on failure."""
    full_env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        **(env or {}),
    }
    proc = subprocess.run(
        ["git", f"--git-dir={repo}", *args], input=data, capture_output=True, env=full_env,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        raise AssertionError(f"git {args} exited {proc.returncode}: {proc.stderr.decode()}")
    return proc.stdout.decode().strip()


def git_dir(ledger: Path) -> Path:
    """The git directory of a ledger (bare, or a work tree with ``.git/``)."""
    return ledger / ".git" if (ledger / ".git").is_dir() else ledger


def canonical(value: Any) -> bytes:
    """Canonical JSON as docs/storage.md defines it (sorted keys, compact, UTF-8, shortest
    round-trip floats in msgspec's spelling: ``1e-7``, where Python's json writes ``1e-07``)."""
    from perfledger.events.canonical import canonical_bytes

    return canonical_bytes(value)


def event_id(envelope: dict[str, Any]) -> str:
    """The content id of an envelope dict: blake3 of the domain and every field but ``id``."""
    body = {k: v for k, v in envelope.items() if k != "id"}
    return blake3.blake3(EVENT_ID_DOMAIN + canonical(body)).hexdigest()


@dataclass
class Event:
    """One event of a history as a forger edits it: the envelope dict, its artifact blobs
    (blake3 hex -> bytes), the commit subject, and extra tree entries (``name -> (mode, sha)``,
    added beside ``event.json``)."""

    envelope: dict[str, Any]
    blobs: dict[str, bytes]
    subject: str
    extra_entries: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    commit_body: str = ""

    @property
    def kind(self) -> str:
        """The event's kind."""
        return str(self.envelope["kind"])

    @property
    def payload(self) -> dict[str, Any]:
        """The event's payload (edit in place)."""
        return self.envelope["payload"]  # type: ignore[no-any-return]

    def attach(self, name: str, data: bytes, media_type: str = "application/json") -> None:
        """Attach ``data`` under ``name`` (replacing what the name held)."""
        digest = blake3.blake3(data).hexdigest()
        self.envelope["artifacts"][name] = {"blake3": digest, "media_type": media_type,
                                            "size": len(data)}  # fmt: skip
        self.blobs[digest] = data
        used = {ref["blake3"] for ref in self.envelope["artifacts"].values()}
        self.blobs = {d: b for d, b in self.blobs.items() if d in used}

    def artifact(self, name: str) -> bytes:
        """The bytes attached under ``name``."""
        return self.blobs[self.envelope["artifacts"][name]["blake3"]]


def read_history(ledger: Path) -> list[Event]:
    """Every event of the linear history of ``refs/heads/ledger``, oldest first."""
    repo = git_dir(ledger)
    shas = git(repo, "rev-list", "--reverse", "--first-parent", REF).split()
    events = []
    for sha in shas:
        envelope = json.loads(git(repo, "cat-file", "blob", f"{sha}:event.json"))
        blobs = {}
        for ref in envelope["artifacts"].values():
            digest = ref["blake3"]
            proc = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "blob",
                                   f"{sha}:artifacts/{digest}"], capture_output=True, check=True)  # fmt: skip
            blobs[digest] = proc.stdout
        subject = git(repo, "log", "-1", "--format=%s", sha)
        events.append(Event(envelope, blobs, subject))
    return events


def _write_blob(repo: Path, data: bytes) -> str:
    return git(repo, "hash-object", "-w", "--stdin", data=data)


def write_history(
    ledger: Path,
    events: list[Event],
    *,
    relink: bool = True,
    rehash: bool = True,
    keep: Callable[[int, Event], bool] | None = None,
) -> list[str]:
    """Write ``events`` as the ledger's whole linear history and move ``refs/heads/ledger`` to
    it. With ``relink``, each event's parents and Lamport clock are set from the one before it;
    with ``rehash``, its id is recomputed (and the next event's parents follow). ``keep(i,
    event)`` true leaves that event's envelope exactly as given. Returns the new event ids.
    """
    repo = git_dir(ledger)
    parent_commit: str | None = None
    previous: dict[str, Any] | None = None
    ids = []
    for i, event in enumerate(events):
        envelope = event.envelope
        if not (keep and keep(i, event)):
            if relink:
                envelope["parents"] = [] if previous is None else [previous["id"]]
                envelope["lamport"] = 1 if previous is None else previous["lamport"] + 1
            if rehash:
                envelope["id"] = event_id(envelope)
        data = canonical(envelope)
        entries = [f"100644 blob {_write_blob(repo, data)}\tevent.json"]
        if envelope["artifacts"]:
            art = [f"100644 blob {_write_blob(repo, event.blobs[d])}\t{d}"
                   for d in sorted(event.blobs)]  # fmt: skip
            tree = git(repo, "mktree", data=("\n".join(art) + "\n").encode())
            entries.append(f"040000 tree {tree}\tartifacts")
        for name, (mode, kind, sha) in event.extra_entries.items():
            entries.append(f"{mode} {kind} {sha}\t{name}")
        tree = git(repo, "mktree", data=("\n".join(entries) + "\n").encode())
        trailers = f"Event-Id: {envelope['id']}\nLamport: {envelope['lamport']}\n"
        if envelope.get("idempotency_key") is not None:
            trailers += f"Idempotency-Key: {envelope['idempotency_key']}\n"
        body = f"{event.commit_body}\n\n" if event.commit_body else ""
        message = f"{event.subject}\n\n{body}{trailers}"
        from datetime import datetime

        seconds = int(datetime.fromisoformat(envelope["ts"]).timestamp())
        who = {"GIT_AUTHOR_NAME": envelope["actor"], "GIT_AUTHOR_EMAIL": "perfledger",
               "GIT_COMMITTER_NAME": envelope["actor"], "GIT_COMMITTER_EMAIL": "perfledger",
               "GIT_AUTHOR_DATE": f"{seconds} +0000", "GIT_COMMITTER_DATE": f"{seconds} +0000"}  # fmt: skip
        args = ["commit-tree", tree]
        if parent_commit is not None:
            args += ["-p", parent_commit]
        parent_commit = git(repo, *args, data=message.encode(), env=who)
        previous = envelope
        ids.append(envelope["id"])
    assert parent_commit is not None
    git(repo, "update-ref", REF, parent_commit)
    return ids


def fsck(ledger: Path) -> None:
    """Assert ``git fsck --strict --full`` passes (a forgery git itself rejects is too easy)."""
    git(git_dir(ledger), "fsck", "--strict", "--full", "--no-dangling")


def find(events: list[Event], kind: str, **payload: Any) -> int:
    """Index of the only event of ``kind`` whose payload has the given values."""
    hits = [i for i, e in enumerate(events) if e.kind == kind
            and all(e.payload.get(k) == v for k, v in payload.items())]  # fmt: skip
    assert len(hits) == 1, (kind, payload, hits)
    return hits[0]


def branch_and_merge(ledger: Path, fork: int, envelope: dict[str, Any], subject: str) -> str:
    """Append ``envelope`` (NoteRecorded or a decision, no artifacts) on a side branch forked
    after the ``fork``-th event of the linear history, and join it to the head with the merge
    commit perfledger writes (``Joins:`` the two event heads). Sets the envelope's parents,
    Lamport clock and id; returns its id."""
    from datetime import datetime

    repo = git_dir(ledger)
    shas = git(repo, "rev-list", "--reverse", REF).split()
    base = json.loads(git(repo, "cat-file", "blob", f"{shas[fork]}:event.json"))
    head = json.loads(git(repo, "cat-file", "blob", f"{shas[-1]}:event.json"))
    envelope["parents"] = [base["id"]]
    envelope["lamport"] = base["lamport"] + 1
    envelope["id"] = event_id(envelope)
    blob = _write_blob(repo, canonical(envelope))
    tree = git(repo, "mktree", data=f"100644 blob {blob}\tevent.json\n".encode())
    seconds = int(datetime.fromisoformat(envelope["ts"]).timestamp())
    who = {"GIT_AUTHOR_NAME": envelope["actor"], "GIT_AUTHOR_EMAIL": "perfledger",
           "GIT_COMMITTER_NAME": envelope["actor"], "GIT_COMMITTER_EMAIL": "perfledger",
           "GIT_AUTHOR_DATE": f"{seconds} +0000", "GIT_COMMITTER_DATE": f"{seconds} +0000"}  # fmt: skip
    message = f"{subject}\n\nEvent-Id: {envelope['id']}\nLamport: {envelope['lamport']}\n"
    side = git(repo, "commit-tree", tree, "-p", shas[fork], data=message.encode(), env=who)
    joins = "".join(f"\nJoins: {h}" for h in sorted([head["id"], envelope["id"]]))
    parents = [arg for p in sorted([shas[-1], side]) for arg in ("-p", p)]
    merge = git(repo, "commit-tree", git(repo, "mktree", data=b""), *parents,
                data=f"Merge divergent ledger heads\n{joins}\n".encode(), env=who)  # fmt: skip
    git(repo, "update-ref", REF, merge)
    return str(envelope["id"])


def resubject(event: Event) -> None:
    """Set the event's commit subject to the one perfledger writes for its (edited) payload,
    as a careful forger would (verify binds the subject to the payload)."""
    from perfledger.events.envelope import decode_envelope
    from perfledger.events.kinds import get_kind, upcast

    envelope = decode_envelope(canonical(event.envelope))
    summary = get_kind(envelope.kind).summary(upcast(envelope.kind, envelope.schema,
                                                     envelope.payload))  # fmt: skip
    summary = " ".join(summary.split())[:100]
    event.subject = f"{envelope.kind}: {summary}" if summary else envelope.kind
