"""A full disk, a read-only filesystem, a refused permission: the CLI says what happened and what
to do (exit 1, code ``resource``), and the ledger is unchanged.

The faults are injected by :mod:`lazyfs` (every operation that would change the tree fails with
the errno): the tests run as root, for whom a ``chmod`` refuses nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lazymount import LazyMount

import perfledger
from perfledger.errors import ResourceError, resource_error

PERFLEDGER = Path(sys.executable).with_name("perfledger")

FAULTS = {
    "ENOSPC": "no space left on the device holding",
    "EROFS": "is on a read-only filesystem",
    "EACCES": "permission denied on",
}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PERFLEDGER), *args], capture_output=True, text=True, check=False)


def _fsck_clean(path: Path) -> bool:
    fsck = subprocess.run(
        ["git", "-C", str(path), "fsck", "--strict", "--full", "--no-dangling"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return fsck.returncode == 0 and "error" not in fsck.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_resource_failure_of_append_and_pull_is_explained_and_changes_nothing(
    lazyfs: LazyMount, tmp_path: Path, fault: str
) -> None:
    ledger_path = lazyfs.path / "ledger"
    with perfledger.init(ledger_path, name="full") as ledger:
        ledger.append("NoteRecorded", {"text": "before", "tags": []}, actor="t")
        head = ledger.head()
    remote = tmp_path / "remote"  # a clone with an event to pull: the pull must write it
    origin, _ = perfledger.Ledger.clone(str(ledger_path), remote)
    with origin:
        origin.append("NoteRecorded", {"text": "remote", "tags": []}, actor="r")
    lazyfs.control(f"fault {fault}")
    try:
        note = _cli("--ledger", str(ledger_path), "note", "during the fault")
        as_json = _cli("--ledger", str(ledger_path), "--json", "note", "during the fault")
        pull = _cli("--ledger", str(ledger_path), "pull", str(remote))
        new = _cli("init", str(lazyfs.path / "another"))
        reading = _cli("--ledger", str(ledger_path), "log")
    finally:
        lazyfs.control("fault none")
    for answer in (note, pull, new):
        assert answer.returncode == 1, answer.stderr
        assert FAULTS[fault] in answer.stderr, answer.stderr
        assert "hint: " in answer.stderr
        assert "unexpected" not in answer.stderr and "Traceback" not in answer.stderr
    error = json.loads(as_json.stdout)["error"]
    assert as_json.returncode == 1 and error["code"] == "resource"
    assert FAULTS[fault] in error["message"] and error["hint"]
    assert reading.returncode == 0 and "before" in reading.stdout  # reads still work
    with perfledger.open(ledger_path) as ledger:
        assert ledger.head() == head
        assert ledger.verify().ok
        ledger.append("NoteRecorded", {"text": "after the fault", "tags": []}, actor="t")
    assert _fsck_clean(ledger_path)


def test_only_full_disk_read_only_and_permission_errors_are_resource_errors() -> None:
    import errno

    full = resource_error(OSError(errno.ENOSPC, "No space left on device", "/l/objects/ab"))
    assert isinstance(full, ResourceError) and full.exit_code == 1
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC  # `except OSError` holds
    assert full.path == "/l/objects/ab" and "/l/objects/ab" in full.message and full.hint
    assert resource_error(PermissionError(errno.EACCES, "Permission denied")) is not None
    assert resource_error(OSError(errno.EIO, "Input/output error")) is None
    assert resource_error(FileNotFoundError(errno.ENOENT, "gone")) is None
    assert resource_error(ValueError("not an OSError")) is None


@pytest.mark.slow
def test_full_disk_during_a_large_batch_is_a_resource_error_and_appends_nothing(
    lazyfs: LazyMount,
) -> None:
    """A batch large enough to be packed by the packing process: its failure on a full disk
    is a ResourceError too (it was "writing the batch's git objects failed")."""
    from perfledger.ledger.base import EventDraft

    def batch(text: str) -> list[EventDraft]:
        return [EventDraft("NoteRecorded", {"text": f"{text} {i}", "tags": []}, "t", None, None, {})
                for i in range(300)]  # fmt: skip

    ledger_path = lazyfs.path / "ledger"
    with perfledger.init(ledger_path, name="full") as ledger:
        ledger.append_batch(batch("fits"))
        head = ledger.head()
        lazyfs.control("fault ENOSPC")
        try:
            with pytest.raises(ResourceError, match="no space left"):
                ledger.append_batch(batch("too much"))
        finally:
            lazyfs.control("fault none")
        assert ledger.head() == head
        ledger.append_batch(batch("after"))
        assert ledger.verify().ok
    assert _fsck_clean(ledger_path)


def test_pack_merge_failing_on_a_full_disk_logs_its_cause_and_the_append_stands(
    lazyfs: LazyMount, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk fills up while packs are merged (after the batch that crossed the pack count
    was appended): the batch stands, the warning names the real cause, the next batch merges."""
    from perfledger.ledger import packing
    from perfledger.ledger.base import EventDraft

    def batch(text: str) -> list[EventDraft]:
        return [EventDraft("NoteRecorded", {"text": f"{text} {i}", "tags": []}, "t", None, None, {})
                for i in range(10)]  # fmt: skip

    pack_dir = lazyfs.path / "ledger" / "objects" / "pack"
    copy_merge_packs = packing.copy_merge_packs

    def merge_on_a_full_disk(*args: object, **kwargs: object) -> str:
        # the batch's own pack is written; the disk fills up as the merged pack is written
        lazyfs.control("fault ENOSPC tmp_pack_")
        return copy_merge_packs(*args, **kwargs)  # type: ignore[arg-type]

    with perfledger.init(lazyfs.path / "ledger", name="merge") as ledger:
        for n in range(packing.MAX_PACKS):
            ledger.append_batch(batch(f"batch {n}"))
        packs = len(list(pack_dir.glob("*.pack")))
        monkeypatch.setattr(packing, "copy_merge_packs", merge_on_a_full_disk)
        try:
            with caplog.at_level("WARNING"):
                appended = ledger.append_batch(batch("crosses the pack count"))
        finally:
            lazyfs.control("fault none")
            monkeypatch.setattr(packing, "copy_merge_packs", copy_merge_packs)
        assert ledger.get(appended[-1].id).id == appended[-1].id
        assert len(list(pack_dir.glob("*.pack"))) == packs + 1  # written, not merged
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any("No space left on device" in w for w in warnings), warnings
        ledger.append_batch(batch("merges now"))
        assert len(list(pack_dir.glob("*.pack"))) < packs
        assert ledger.verify().ok
    assert _fsck_clean(lazyfs.path / "ledger")
