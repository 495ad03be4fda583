"""Forged commits that git accepts, packed (so verify's parallel pass-1 scan reads them): the
scan's workers leave each one to the walk, and verify reports it exactly as in one process."""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.ledger import verify_scan
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
def test_forged_packed_commit_reported_as_in_one_process(
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
    found = verify_scan.scan_packed_commits(packs, 2)
    reachable = _git(git_run, repo, "rev-list", "refs/heads/ledger").split()
    assert len(reachable) == 31  # the root, 29 of the batch and the forged head (its last)
    assert {bytes.fromhex(c) for c in reachable[1:]} <= set(found)
    if expected.startswith("Lamport"):  # well formed for pass 1: pass 2 catches it
        assert bytes.fromhex(forged) in found
    else:
        assert bytes.fromhex(forged) not in found
    with Ledger.open(repo) as ledger:
        one = ledger.verify(workers=1)
        two = ledger.verify(workers=2)
    assert one.error is not None and two.error is not None, (one, two)
    assert expected in one.error.message
    assert one.error.to_json() == two.error.to_json()
