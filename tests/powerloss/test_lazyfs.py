"""The power-loss filesystem itself loses exactly what was not fsynced (else the power-loss tests
would pass on a store that fsyncs nothing)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from lazymount import LazyMount


def _write(path: Path, data: bytes, *, fsync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_power_cut_keeps_only_what_was_fsynced(lazyfs: LazyMount) -> None:
    root = lazyfs.path
    _write(root / "durable", b"file and entry synced", fsync=True)
    _write(root / "entry-only", b"data never synced", fsync=False)
    _write(root / "data-only", b"entry never synced", fsync=True)
    _fsync_dir(root)  # makes the three entries durable
    _write(root / "renamed.tmp", b"new content, not synced", fsync=False)
    _write(root / "target", b"old content", fsync=True)
    _fsync_dir(root)
    os.rename(root / "renamed.tmp", root / "target")
    _fsync_dir(root)  # the rename is durable, the renamed file's data is not
    (root / "dir").mkdir()
    _write(root / "dir" / "inner", b"inner", fsync=True)
    _fsync_dir(root / "dir")  # dir's entries durable, but not dir's own entry in the root
    (root / "durable").write_bytes(b"overwritten, not synced")
    _write(root / "data-only-2", b"entry never synced", fsync=True)
    lazyfs.crash()
    with pytest.raises(OSError) as raised:
        os.listdir(root)
    assert raised.value.errno == errno.EIO  # the power is off
    lazyfs.remount()
    assert (root / "durable").read_bytes() == b"file and entry synced"
    assert (root / "entry-only").read_bytes() == b""  # the classic zero-length file
    assert (root / "data-only").read_bytes() == b"entry never synced"
    assert not (root / "data-only-2").exists()
    assert (root / "target").read_bytes() == b""  # renamed in place, its data lost
    assert not (root / "dir").exists()


def test_clean_unmount_keeps_everything_and_faults_refuse_writes_only(
    lazyfs: LazyMount,
) -> None:
    root = lazyfs.path
    _write(root / "kept", b"never fsynced", fsync=False)
    lazyfs.control("fault ENOSPC")
    with pytest.raises(OSError) as raised:
        _write(root / "refused", b"x", fsync=False)
    assert raised.value.errno == errno.ENOSPC
    assert (root / "kept").read_bytes() == b"never fsynced"  # reads still work
    lazyfs.control("fault none")
    lazyfs.remount()  # a clean unmount writes everything back
    assert (root / "kept").read_bytes() == b"never fsynced"
    assert not (root / "refused").exists()
