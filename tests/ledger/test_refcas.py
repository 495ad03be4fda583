"""The ref compare-and-swap (git's lock-file protocol)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import run_git

from perfledger.api import Ledger
from perfledger.ledger.refcas import RefLocked, lock_ref, read_ref

REF = b"refs/heads/ledger"
A, B, C = (c * 40 for c in (b"a", b"b", b"c"))


def _swap(git_dir: Path, expected: bytes | None, new: bytes) -> bool:
    held = lock_ref(str(git_dir), REF, expected, new, owner_dir=str(git_dir / "perfledger"))
    if held is None:
        return False
    held.commit()
    return True


def test_compare_and_swap_moves_only_from_the_expected_value(tmp_path: Path) -> None:
    assert _swap(tmp_path, None, A)
    assert read_ref(str(tmp_path), REF) == A
    assert not _swap(tmp_path, None, B)  # exists already
    assert not _swap(tmp_path, B, C)  # holds A, not B
    assert read_ref(str(tmp_path), REF) == A
    assert not (tmp_path / "refs/heads/ledger.lock").exists()
    assert _swap(tmp_path, A, B) and _swap(tmp_path, B, C)
    assert (tmp_path / "refs/heads/ledger").read_bytes() == C + b"\n"
    assert os.listdir(tmp_path / "perfledger") == []  # no owner name outlives its lock


def test_existing_lock_is_refused_and_left_alone(tmp_path: Path) -> None:
    _swap(tmp_path, None, A)
    lock = tmp_path / "refs/heads/ledger.lock"
    lock.write_bytes(b"someone else\n")
    with pytest.raises(RefLocked):
        lock_ref(str(tmp_path), REF, A, B, owner_dir=str(tmp_path / "perfledger"))
    assert lock.read_bytes() == b"someone else\n"
    assert read_ref(str(tmp_path), REF) == A


def test_packed_ref_is_read_and_swapped(tmp_path: Path) -> None:
    (tmp_path / "packed-refs").write_bytes(
        b"# pack-refs with: peeled fully-peeled sorted\n" + A + b" refs/heads/ledger\n"
    )
    assert read_ref(str(tmp_path), REF) == A
    assert _swap(tmp_path, A, B)
    assert read_ref(str(tmp_path), REF) == B


def test_ref_directory_made_again_while_a_store_is_open_receives_the_next_append(
    tmp_path: Path,
) -> None:
    """When ``refs/heads`` is removed and made again while a store is open (by hand, or a
    tool), the next appends move the ref in the new directory: git and verify see them."""
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        ledger.append("NoteRecorded", {"text": "before", "tags": []}, actor="t")
        heads = path / "refs" / "heads"
        moved = path / "refs" / "heads-old"
        heads.rename(moved)
        heads.mkdir()
        (heads / "ledger").write_bytes((moved / "ledger").read_bytes())
        for f in moved.iterdir():
            f.unlink()
        moved.rmdir()
        after = ledger.append("NoteRecorded", {"text": "after", "tags": []}, actor="t")
        assert read_ref(str(path), REF) == ledger.head().encode()
        ledger.append("NoteRecorded", {"text": "again", "tags": []}, actor="t")
        assert (heads / "ledger").read_bytes() == ledger.head().encode() + b"\n"
        assert ledger.get(after.id).id == after.id
        assert ledger.verify().ok
    assert run_git("fsck", "--strict", "--full", "--no-dangling", cwd=path).returncode == 0
