"""The ref compare-and-swap (git's lock-file protocol, spare inode) and the durability method."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import run_git

from perfledger.api import Ledger
from perfledger.errors import BadRequest
from perfledger.ledger import durable
from perfledger.ledger.refcas import RefLocked, lock_ref, read_ref

REF = b"refs/heads/ledger"
A, B, C = (c * 40 for c in (b"a", b"b", b"c"))


def _swap(git_dir: Path, expected: bytes | None, new: bytes, spare: Path | None) -> bool:
    held = lock_ref(str(git_dir), REF, expected, new, fsync=True, spare=spare and str(spare))
    if held is None:
        return False
    held.commit()
    return True


@pytest.mark.parametrize("use_spare", [True, False])
def test_compare_and_swap_moves_only_from_the_expected_value(
    tmp_path: Path, use_spare: bool
) -> None:
    spare = tmp_path / "spare" if use_spare else None
    assert _swap(tmp_path, None, A, spare)
    assert read_ref(str(tmp_path), REF) == A
    assert not _swap(tmp_path, None, B, spare)  # exists already
    assert not _swap(tmp_path, B, C, spare)  # holds A, not B
    assert read_ref(str(tmp_path), REF) == A
    assert not (tmp_path / "refs/heads/ledger.lock").exists()
    assert _swap(tmp_path, A, B, spare) and _swap(tmp_path, B, C, spare)
    assert (tmp_path / "refs/heads/ledger").read_bytes() == C + b"\n"


def test_spare_file_is_reused_and_never_the_live_ref(tmp_path: Path) -> None:
    spare = tmp_path / "spare"
    _swap(tmp_path, None, A, spare)
    _swap(tmp_path, A, B, spare)
    ref = tmp_path / "refs/heads/ledger"
    first_spare = os.stat(spare).st_ino
    _swap(tmp_path, B, C, spare)
    # the ref's file is now the old spare, the spare the ref's previous file
    assert os.stat(ref).st_ino == first_spare
    assert os.stat(spare).st_ino != os.stat(ref).st_ino
    assert os.stat(ref).st_nlink == 1 and os.stat(spare).st_nlink == 1
    assert spare.read_bytes() == B + b"\n"


def test_spare_that_is_the_ref_itself_is_dropped_not_written(tmp_path: Path) -> None:
    """A writer killed after keeping the ref's own file as the spare but before renaming its
    lock leaves spare == ref: the next lock must not write the live ref in place."""
    spare = tmp_path / "spare"
    _swap(tmp_path, None, A, spare)
    spare.unlink(missing_ok=True)
    os.link(tmp_path / "refs/heads/ledger", spare)
    held = lock_ref(str(tmp_path), REF, A, B, fsync=True, spare=str(spare))
    assert held is not None
    assert read_ref(str(tmp_path), REF) == A  # not changed before the commit
    held.commit()
    assert read_ref(str(tmp_path), REF) == B
    assert not (tmp_path / "refs/heads/ledger.lock").exists()
    assert _swap(tmp_path, B, C, spare)


def test_existing_lock_is_refused_and_left_alone(tmp_path: Path) -> None:
    _swap(tmp_path, None, A, tmp_path / "spare")
    lock = tmp_path / "refs/heads/ledger.lock"
    lock.write_bytes(b"someone else\n")
    with pytest.raises(RefLocked):
        lock_ref(str(tmp_path), REF, A, B, fsync=True, spare=str(tmp_path / "spare"))
    assert lock.read_bytes() == b"someone else\n"
    assert read_ref(str(tmp_path), REF) == A


def test_packed_ref_is_read_and_swapped(tmp_path: Path) -> None:
    (tmp_path / "packed-refs").write_bytes(
        b"# pack-refs with: peeled fully-peeled sorted\n" + A + b" refs/heads/ledger\n"
    )
    assert read_ref(str(tmp_path), REF) == A
    assert _swap(tmp_path, A, B, None)
    assert read_ref(str(tmp_path), REF) == B


@pytest.mark.parametrize("method", ["syncfs", "fsync"])
def test_each_durability_method_appends_readable_by_git(
    tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if method == "syncfs" and durable._libc_syncfs() is None:
        pytest.skip("this C library has no syncfs")
    monkeypatch.setenv(durable.METHOD_ENV, method)
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        ids = [
            ledger.append("NoteRecorded", {"text": f"n{i}", "tags": []}, actor="t").id
            for i in range(5)
        ]
        head = ledger.head()
    assert run_git("rev-parse", "refs/heads/ledger", cwd=path).stdout.strip() == head
    assert run_git("fsck", "--strict", "--full", "--no-dangling", cwd=path).returncode == 0
    with Ledger.open(path) as ledger:
        assert [e.id for e in ledger.events()][1:] == ids


def test_unknown_durability_method_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "l.git"
    Ledger.init(path, actor="t").close()
    run_git("config", "perfledger.fsyncMethod", "never", cwd=path)
    with pytest.raises(BadRequest, match="unknown fsync method 'never'"):
        Ledger.open(path)
    monkeypatch.setenv(durable.METHOD_ENV, "fsync")  # the environment wins over the config
    Ledger.open(path).close()
