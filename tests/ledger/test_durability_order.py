"""The order of an append's writes, renames and flushes (SPEC.md section 2; the list of claims is
in docs/storage.md).

SIGKILL tests cannot check durability (the page cache survives a killed process), so these tests
record the real system calls an append makes (``os.fsync``, ``os.replace``, ``os.link``, each
still performed) and check the order that makes a power loss leave the old head or the new one:
every file is fsynced before it is renamed into place, every directory that received a rename
is fsynced before the ref's lock is taken, the lock's content is fsynced before the lock exists,
and the ref's directory is fsynced before the append returns.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.ledger.base import EventDraft

Call = tuple[str, str, str]  # (call, path, second path or "")


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Call]]:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc/self/fd to name a descriptor's file")
    log: list[Call] = []
    real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

    def fsync(fd: int) -> None:
        log.append(("fsync", _fd_path(fd), ""))
        real_fsync(fd)

    def replace(src: str, dst: str, *, src_dir_fd: int | None = None, **kw: object) -> None:
        src_path = os.path.join(_fd_path(src_dir_fd), src) if src_dir_fd is not None else src
        dst_dir_fd = kw.get("dst_dir_fd")
        dst_path = os.path.join(_fd_path(dst_dir_fd), dst) if dst_dir_fd is not None else dst  # type: ignore[arg-type]
        log.append(("replace", os.path.realpath(src_path), os.path.realpath(dst_path)))
        real_replace(src, dst, src_dir_fd=src_dir_fd, **kw)  # type: ignore[arg-type]

    def link(src: str, dst: str, **kw: object) -> None:
        log.append(("link", os.path.realpath(src), os.path.realpath(dst)))
        real_link(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    yield log


def _note(text: str) -> EventDraft:
    return EventDraft("NoteRecorded", {"text": text, "tags": []}, "t")


def _check_order(log: list[Call], git_dir: Path) -> None:
    git_dir = Path(os.path.realpath(git_dir))
    ref = str(git_dir / "refs" / "heads" / "ledger")
    lock = ref + ".lock"
    take = next(i for i, c in enumerate(log) if c[0] == "link" and c[2] == lock)
    publish = next(i for i, c in enumerate(log) if c[0] == "replace" and c[2] == ref)
    assert take < publish
    renamed = [(i, c) for i, c in enumerate(log[:take]) if c[0] == "replace"]
    assert renamed, "the append renamed no object into place"
    for i, (_, src, dst) in renamed:
        assert ("fsync", src, "") in log[:i], f"{dst} renamed before its content was fsynced"
        directory = os.path.dirname(dst)
        assert any(c == ("fsync", directory, "") for c in log[i:take]), (
            f"{directory} not fsynced after the rename into it and before the ref's lock"
        )
    owner = log[take][1]
    assert ("fsync", owner, "") in log[:take], "the lock's content was not fsynced first"
    assert ("fsync", str(git_dir / "refs" / "heads"), "") in log[publish:], (
        "the ref's directory was not fsynced after the ref moved"
    )


@pytest.mark.parametrize("events", [1, 12], ids=["single-loose", "batch-pack"])
def test_an_append_flushes_objects_then_the_lock_then_the_ref(
    tmp_path: Path, calls: list[Call], events: int
) -> None:
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        calls.clear()
        ledger.store.append_batch([_note(f"n{i}") for i in range(events)])
        _check_order(calls, path)
        assert ledger.verify().ok


def test_the_order_check_fails_when_an_object_is_not_fsynced(
    tmp_path: Path, calls: list[Call], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above can fail: with the objects' fsync skipped, it does."""
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger:
        recording_fsync = os.fsync

        def fsync_except_objects(fd: int) -> None:
            if "/objects/" not in _fd_path(fd):
                recording_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync_except_objects)
        calls.clear()
        ledger.store.append(_note("unflushed"))
        with pytest.raises(AssertionError, match="fsynced"):
            _check_order(calls, path)
