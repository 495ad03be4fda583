"""Forged commits that git accepts, packed: verify reports each as an integrity failure naming
it."""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from perfledger.api import Ledger
from perfledger.ledger.base import EventDraft

GitRun = Callable[..., "object"]


def _git(git_run: GitRun, repo: Path, *args: str, data: bytes | None = None) -> str:
    return git_run(repo, *args, input=data).stdout.decode().strip()  # type: ignore[attr-defined]


def _forge_head(git_run: GitRun, repo: Path, edit: Callable[[bytes, list[str]], bytes]) -> str:
    """Replace the head commit by ``edit(raw head commit, [head, parent, grandparent])`` and
    move the branch there; returns the forged commit's sha."""
    chain = _git(git_run, repo, "rev-list", "-n", "3", "refs/heads/ledger").split()
    raw = git_run(repo, "cat-file", "commit", chain[0]).stdout  # type: ignore[attr-defined]
    forged = _git(
        git_run, repo, "hash-object", "-t", "commit", "-w", "--stdin", data=edit(raw, chain)
    )
    _git(git_run, repo, "update-ref", "refs/heads/ledger", forged, chain[0])
    return forged


def _second_parent(raw: bytes, chain: list[str]) -> bytes:
    return raw.replace(b"\nauthor ", f"\nparent {chain[2]}\nauthor ".encode(), 1)


def _lamport_leading_zero(raw: bytes, chain: list[str]) -> bytes:
    return re.sub(rb"\nLamport: (\d+)", rb"\nLamport: 0\1", raw)


def _merge_with_content(raw: bytes, chain: list[str]) -> bytes:
    """A commit without ledger trailers, two parents, and the event's tree (not the empty one)."""
    header, _, _message = raw.partition(b"\n\n")
    header = header.replace(b"\nauthor ", f"\nparent {chain[2]}\nauthor ".encode(), 1)
    return header + b"\n\nMerge\n"


def _event_id_uppercase(raw: bytes, chain: list[str]) -> bytes:
    return re.sub(rb"\nEvent-Id: ([0-9a-f]{64})", lambda m: b"\nEvent-Id: " + m[1].upper(), raw)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (_second_parent, "has 2 parent commits"),
        (_lamport_leading_zero, "Lamport trailer says 0"),
        (_merge_with_content, "carries content"),
        (_event_id_uppercase, "malformed Event-Id"),
    ],
    ids=["event-two-parents", "lamport-leading-zero", "merge-with-content", "bad-event-id"],
)
def test_forged_packed_commit_is_an_integrity_failure(
    tmp_path: Path,
    note: Callable[..., EventDraft],
    git_run: GitRun,
    edit: Callable[[bytes, list[str]], bytes],
    expected: str,
) -> None:
    repo = tmp_path / "l"
    with Ledger.init(repo, name="forged", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(30)])
    forged = _forge_head(git_run, repo, edit)
    # everything into one pack, no deltas: the scan reads every commit, the forged one included
    _git(git_run, repo, "repack", "-a", "-d", "-q", "--window=0", "--depth=0")
    packs = sorted(glob.glob(os.path.join(repo, "objects", "pack", "*.pack")))
    assert len(packs) == 1 and not glob.glob(os.path.join(repo, "objects", "??", "*"))
    reachable = _git(git_run, repo, "rev-list", "refs/heads/ledger").split()
    assert len(reachable) == 31 and reachable[0] == forged  # the forged head is packed too
    with Ledger.open(repo) as ledger:
        one = ledger.verify()
    assert one.error is not None, one
    assert expected in one.error.message


def _lamport_superscript(raw: bytes, chain: list[str]) -> bytes:
    """``'³'.isdigit()`` is True in Python; ``int('³')`` fails: a form check must refuse it."""
    return re.sub(rb"\nLamport: \d+", "\nLamport: \u00b3".encode(), raw)


def test_lamport_trailer_in_another_script_is_an_integrity_failure(
    tmp_path: Path, note: Callable[..., EventDraft], git_run: GitRun
) -> None:
    repo = tmp_path / "l"
    with Ledger.init(repo, name="forged", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(10)])
    _forge_head(git_run, repo, _lamport_superscript)
    _git(git_run, repo, "repack", "-a", "-d", "-q", "--window=0", "--depth=0")
    with Ledger.open(repo) as ledger:
        one = ledger.verify()
    assert one.error is not None and "malformed Event-Id or Lamport" in one.error.message


# ------------------------------------------- hand-built head events (content id recomputed)


def _forge_event(
    git_run: GitRun, repo: Path, edit: Callable[[dict[str, Any]], None], seconds: int | None
) -> str:
    """Append a hand-built event on the head: the head event's envelope edited by ``edit``,
    its id recomputed over the edited content, its commit written with git (author and
    committer time ``seconds``, else the envelope's). Returns the forged event id."""
    import blake3

    from perfledger.events.envelope import EVENT_ID_DOMAIN

    head = _git(git_run, repo, "rev-parse", "refs/heads/ledger")
    content = git_run(repo, "cat-file", "blob", f"{head}:event.json").stdout  # type: ignore[attr-defined]
    envelope = json.loads(content)
    envelope["parents"] = [envelope["id"]]
    envelope["lamport"] += 1
    envelope["payload"] = {"text": "forged", "tags": []}
    edit(envelope)
    del envelope["id"]
    body = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    event_id = blake3.blake3(EVENT_ID_DOMAIN + body.encode()).hexdigest()
    envelope["id"] = event_id
    data = json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    blob = _git(git_run, repo, "hash-object", "-t", "blob", "-w", "--stdin", data=data.encode())
    tree = _git(git_run, repo, "mktree", data=f"100644 blob {blob}\tevent.json\n".encode())
    when = seconds if seconds is not None else 1_800_000_000
    who = f"{envelope['actor']} <perfledger> {when} +0000"
    raw = (
        f"tree {tree}\nparent {head}\nauthor {who}\ncommitter {who}\n\nNoteRecorded: forged\n\n"
        f"Event-Id: {event_id}\nLamport: {envelope['lamport']}\n"
    )
    commit = _git(git_run, repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw.encode())
    _git(git_run, repo, "update-ref", "refs/heads/ledger", commit, head)
    return event_id


@pytest.mark.parametrize(
    ("ts", "seconds", "expected"),
    [
        ("2026-03-01T10:00:00.000000Z\n", None, "timestamp"),
        ("2026-03-01T10:\u0660\u0660:00.000000Z", None, "timestamp"),
        ("2026-03-01T10:00:00.\u0661\u0660\u0660\u0660\u0660\u0660Z", None, "timestamp"),
        ("2026-13-01T10:00:00.000000Z", None, "not a valid UTC time"),
        ("1960-01-01T00:00:00.000000Z", -315619200, "commit time does not match"),
    ],
    ids=["trailing-newline", "arabic-minute", "arabic-micro", "month-13", "before-1970"],
)
def test_forged_timestamps_are_integrity_failures(
    tmp_path: Path,
    note: Callable[..., EventDraft],
    git_run: GitRun,
    ts: str,
    seconds: int | None,
    expected: str,
) -> None:
    """Timestamps that are not exactly ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in ASCII digits, name no
    real time, or lie before 1970 (a negative commit time): exit-5 failures naming the event,
    (they were accepted, or crashed verify, before)."""
    repo = tmp_path / "l"
    with Ledger.init(repo, name="forged", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(10)])
    forged = _forge_event(git_run, repo, lambda e: e.update(ts=ts), seconds)
    with Ledger.open(repo) as ledger:
        one = ledger.verify()
    assert one.error is not None, one
    assert forged in one.error.message and expected in one.error.message, one.error.message


@pytest.mark.parametrize("damage", ["delta-type-bit", "truncated"])
def test_damaged_pack_is_an_integrity_failure(
    tmp_path: Path, note: Callable[..., EventDraft], damage: str
) -> None:
    """A pack entry whose type byte now says 'delta' (read through dulwich, which fails on it),
    or a pack cut short: exit 5 naming the object, not a crash."""
    repo = tmp_path / "l"
    with Ledger.init(repo, name="damaged", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(30)])
    (pack,) = glob.glob(os.path.join(repo, "objects", "pack", "*.pack"))
    data = bytearray(Path(pack).read_bytes())
    if damage == "truncated":
        data = data[:-100]
    else:
        from perfledger.ledger.packindex import read_index

        index = read_index(pack[: -len(".pack")] + ".idx")
        assert index is not None
        offsets = sorted(int(o) for o in index.offsets)
        at = next(o for o in offsets[len(offsets) // 2 :] if (data[o] >> 4) & 7 == 2)  # a tree
        data[at] ^= 0x40  # type 2 (tree) -> 6 (offset delta)
    os.chmod(pack, 0o644)
    Path(pack).write_bytes(bytes(data))
    with Ledger.open(repo) as ledger:
        one = ledger.verify()
    assert one.error is not None, one
    assert one.error.to_json()["error"]["code"] == "integrity"


@pytest.mark.parametrize(
    ("second", "expected"),
    [("head", "lists a parent twice"), ("grandparent", "joins no divergent heads")],
)
def test_a_merge_that_joins_nothing_divergent_is_refused(
    tmp_path: Path, note: Callable[..., EventDraft], git_run: GitRun, second: str, expected: str
) -> None:
    """A forged merge inserted on top of a linear ledger, its parents the head twice or the
    head and an ancestor: valid git, but not what sync writes (it joins divergent heads)."""
    repo = tmp_path / "l"
    with Ledger.init(repo, name="forged", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(10)])
    chain = _git(git_run, repo, "rev-list", "-n", "3", "refs/heads/ledger").split()
    other = chain[0] if second == "head" else chain[2]
    empty = _git(git_run, repo, "mktree", data=b"")
    who = "t <perfledger> 1800000000 +0000"
    raw = (
        f"tree {empty}\nparent {chain[0]}\nparent {other}\nauthor {who}\ncommitter {who}\n\n"
        "Merge divergent ledger heads\n"
    )
    merge = _git(git_run, repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw.encode())
    _git(git_run, repo, "update-ref", "refs/heads/ledger", merge, chain[0])
    _git(git_run, repo, "repack", "-a", "-d", "-q", "--window=0", "--depth=0")
    with Ledger.open(repo) as ledger:
        one = ledger.verify()
    assert one.error is not None and expected in one.error.message, one.error
    assert merge in one.error.message
