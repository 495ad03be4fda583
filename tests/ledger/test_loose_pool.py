"""The pool of spare files (ledger/loosepool.py): packed loose object files are recycled as new
loose objects instead of being deleted, safely (quarantine, one writer per batch, bounded), and
the ledger stays what git and ``verify`` accept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import run_git

import perfledger.ledger.loosepool as loosepool
import perfledger.ledger.packing as packing
from perfledger.api import Ledger
from perfledger.ledger.loosepool import LoosePool


def _loose_files(git_dir: Path) -> dict[str, int]:
    """Loose object path -> inode number."""
    found = {}
    for sub in (git_dir / "objects").iterdir():
        if len(sub.name) == 2:
            for f in sub.iterdir():
                if len(f.name) == 38:
                    found[str(f)] = f.stat().st_ino
    return found


def _pool_inodes(git_dir: Path) -> set[int]:
    root = git_dir / "perfledger" / loosepool.POOL_DIR
    return {f.stat().st_ino for batch in root.iterdir() for f in batch.iterdir()}


def _note(ledger: Ledger, i: int) -> str:
    return ledger.append("NoteRecorded", {"text": f"note {i}", "tags": []}, actor="t").id


@pytest.fixture
def fast_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "LOOSE_PACK_THRESHOLD", 30)
    monkeypatch.setattr(loosepool, "QUARANTINE_S", 0.0)
    monkeypatch.setattr(loosepool, "_LOOK_EVERY_S", 0.0)


def test_packed_loose_files_are_pooled_then_rewritten_as_new_objects(
    tmp_path: Path, fast_pool: None
) -> None:
    path = tmp_path / "l.git"
    ids = []
    with Ledger.init(path, actor="t") as ledger:
        ids += [_note(ledger, i) for i in range(12)]  # 36+ loose objects: packed at 30
        ledger.store.wait_background()
        pooled = _pool_inodes(path)
        assert len(pooled) >= 20  # 33 retired, some maybe rewritten already (no quarantine)
        assert not set(_loose_files(path).values()) & pooled
        ids += [_note(ledger, i) for i in range(12, 18)]
        rewritten = set(_loose_files(path).values()) & pooled
        assert len(rewritten) >= 15  # the new events' blobs, trees and commits reuse them
        for name, inode in _loose_files(path).items():
            if inode in rewritten:
                assert os.stat(name).st_mode & 0o777 == 0o444  # read-only, as git writes them
        head = ledger.head()
    assert run_git("fsck", "--strict", "--full", "--no-dangling", cwd=path).returncode == 0
    assert run_git("rev-parse", "refs/heads/ledger", cwd=path).stdout.strip() == head
    with Ledger.open(path) as ledger:
        assert [e.id for e in ledger.events()][1:] == ids
        assert ledger.verify().ok


def test_a_batch_is_reused_only_after_its_quarantine(
    tmp_path: Path, fast_pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loosepool, "QUARANTINE_S", 3600.0)
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        for i in range(12):
            _note(ledger, i)
        ledger.store.wait_background()
        pooled = _pool_inodes(path)
        assert pooled
        for i in range(12, 16):
            _note(ledger, i)
        assert not set(_loose_files(path).values()) & pooled


_HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(60)
"""


def _make_batch(root: Path, name: str, files: int) -> Path:
    batch = root / name
    batch.mkdir(parents=True)
    for i in range(files):
        (batch / str(i)).write_bytes(b"x" * 100)
    old = time.time() - 3600
    os.utime(batch, (old, old))
    return batch


def test_a_batch_held_by_a_live_writer_is_left_and_a_dead_writers_is_adopted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loosepool, "_LOOK_EVERY_S", 0.0)
    root = tmp_path / loosepool.POOL_DIR
    batch = _make_batch(root, "held-other", 3)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(batch)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        pool = LoosePool(str(tmp_path))
        assert pool.take() is None  # its writer still holds it
        assert batch.exists()
    finally:
        holder.kill()
        holder.wait()
    pool = LoosePool(str(tmp_path))
    taken = [pool.take() for _ in range(3)]
    assert all(t is not None and "held-" in t and "held-other" not in t for t in taken)
    assert len(set(taken)) == 3
    for i, t in enumerate(taken):  # the writer renames each spare into place as an object
        os.rename(str(t), tmp_path / f"object{i}")
    assert pool.take() is None  # used up ...
    pool.settle()  # ... and, its files renamed away, removed
    assert list(root.iterdir()) == []


def test_a_new_batch_is_left_to_its_writer_until_it_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A retiring writer makes its batch as ``new-*`` and locks it before naming it ``fill-*``:
    a claimer must not adopt the unlocked ``new-*`` meanwhile (it did, with no quarantine, and
    the writer's files then stayed loose), but does adopt one left by a killed writer."""
    monkeypatch.setattr(loosepool, "_LOOK_EVERY_S", 0.0)
    monkeypatch.setattr(loosepool, "QUARANTINE_S", 0.0)
    root = tmp_path / loosepool.POOL_DIR
    batch = _make_batch(root, "new-other", 2)
    os.utime(batch)  # made just now
    pool = LoosePool(str(tmp_path))
    assert pool.take() is None  # unlocked, but young: its writer may be about to lock it
    assert batch.exists()
    old = time.time() - loosepool.NEW_ORPHAN_S - 1
    os.utime(batch, (old, old))
    taken = [pool.take() for _ in range(2)]
    assert all(t is not None and "held-" in t for t in taken)
    assert not batch.exists()


def test_two_pools_never_take_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loosepool, "_LOOK_EVERY_S", 0.0)
    root = tmp_path / loosepool.POOL_DIR
    for n in range(3):
        _make_batch(root, f"ready-0-b{n}", 4)
    first, second = LoosePool(str(tmp_path)), LoosePool(str(tmp_path))
    taken = []
    for _ in range(8):
        taken += [first.take(), second.take()]
    files = [t for t in taken if t is not None]
    assert len(files) == 12 and len(set(files)) == 12  # every spare once, none twice
    first.release()
    second.release()
    # files a writer took but did not rename away go back to the pool, as ready batches
    assert all(b.name.startswith("ready-") for b in root.iterdir())


def test_the_pool_is_bounded_and_large_files_are_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loosepool, "MAX_BATCHES", 1)
    pool = LoosePool(str(tmp_path / "derived"))
    files = []
    for i in range(6):
        f = tmp_path / f"obj{i}"
        f.write_bytes(b"y" * 10)
        files.append(f)
    big = tmp_path / "big"
    big.write_bytes(b"z" * (loosepool.MAX_FILE_BYTES + 1))
    pool.retire([(str(f), 10) for f in files[:3]] + [(str(big), loosepool.MAX_FILE_BYTES + 1)])
    assert not big.exists()
    batches = list((tmp_path / "derived" / loosepool.POOL_DIR).iterdir())
    assert len(batches) == 1 and len(list(batches[0].iterdir())) == 3
    pool.retire([(str(f), 10) for f in files[3:]])  # the pool is full: deleted
    assert not any(f.exists() for f in files)
    assert len(list((tmp_path / "derived" / loosepool.POOL_DIR).iterdir())) == 1


def test_a_loose_file_holding_another_object_is_moved_aside_and_the_rest_packed(
    tmp_path: Path,
) -> None:
    """What a power loss can leave under ``writeout`` or ``syncfs``: a spare renamed to a new
    object's name whose new content never reached the disk (it still holds the old object).
    No ref reaches it; packing moves it aside instead of failing forever."""
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        for i in range(3):
            _note(ledger, i)
        loose = _loose_files(path)
        victim = sorted(loose)[0]
        stale_name = "ab" * 20  # no such object
        stale = path / "objects" / stale_name[:2] / stale_name[2:]
        stale.parent.mkdir(exist_ok=True)
        stale.write_bytes(Path(victim).read_bytes())
        packed = packing.pack_loose(ledger.store)
        assert packed == len(loose)
        assert not stale.exists()
        assert (path / "perfledger" / packing.CORRUPT_LOOSE_DIR / stale_name).exists()
        assert _loose_files(path) == {}
        assert ledger.verify().ok
    assert run_git("fsck", "--strict", "--full", "--no-dangling", cwd=path).returncode == 0
