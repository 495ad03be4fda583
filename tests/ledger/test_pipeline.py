"""Large batches packed by a forked child (ledger/pipeline.py): the same commits as packing in
process, byte for byte; a bad draft, a failing child or a dead child append nothing."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.errors import BadRequest, PerfledgerError
from perfledger.ledger import pipeline
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.gitobj import PackBuilder

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _drafts(count: int, start: int = 0) -> list[EventDraft]:
    """Deterministic drafts numbered from ``start`` (fixed times, idempotency keys); every 50th
    carries an artifact over 1 KiB."""
    return [
        EventDraft(
            "NoteRecorded",
            {"text": f"pipelined note {i}", "tags": ["p"]},
            "t",
            ts=START + timedelta(seconds=i),
            idempotency_key=f"key-{i}" if i % 7 == 0 else None,
            artifacts={"a.bin": Artifact(bytes([i % 251]) * 1500, "application/octet-stream")}
            if i % 50 == 0
            else {},
        )
        for i in range(start, start + count)
    ]


def _ledger(path: Path) -> Ledger:
    ledger = Ledger.init(path, name="pipe", actor="t")
    return ledger


def _packs(path: Path) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "objects", "pack", "*.pack")))


@pytest.mark.skipif(not pipeline.pipeline_available(), reason="needs fork (Linux)")
def test_pipelined_batch_writes_the_same_commits_as_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count = pipeline.PIPELINE_MIN_EVENTS + 77  # several chunks, the last one partial
    with _ledger(tmp_path / "base"):
        pass
    heads = {}
    forked: list[int] = []
    real_finish = pipeline.PackerProcess.finish

    def finish(self: pipeline.PackerProcess) -> list[bytes]:
        commits = real_finish(self)
        forked.append(len(commits))
        return commits

    monkeypatch.setattr(pipeline.PackerProcess, "finish", finish)
    for mode in ("1", "0"):
        monkeypatch.setenv("PERFLEDGER_APPEND_FORK", mode)
        path = tmp_path / f"fork{mode}"
        shutil.copytree(tmp_path / "base", path)  # the same root event
        with Ledger.open(path) as ledger:
            envelopes = ledger.store.append_batch(_drafts(count))
            assert len(envelopes) == count
            heads[mode] = ledger.head()
            report = ledger.verify()
            assert report.ok and report.events == count + 1
        fsck = subprocess.run(
            ["git", "-C", str(path), "fsck", "--strict", "--full", "--no-dangling"],
            capture_output=True,
            text=True,
        )
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert forked == [count]  # the child packed the batch with the fork on, not with it off
    assert heads["1"] == heads["0"]  # every object, hence every commit sha, identical


@pytest.mark.skipif(not pipeline.pipeline_available(), reason="needs fork (Linux)")
def test_a_bad_draft_mid_batch_appends_nothing_and_writes_no_pack(tmp_path: Path) -> None:
    with _ledger(tmp_path / "l") as ledger:
        head = ledger.head()
        packs = _packs(tmp_path / "l")
        drafts = _drafts(pipeline.PIPELINE_MIN_EVENTS + 10)
        drafts[200] = EventDraft("NoteRecorded", {"text": float("nan")}, "t")
        with pytest.raises(BadRequest):
            ledger.store.append_batch(drafts)
        assert ledger.head() == head
        assert _packs(tmp_path / "l") == packs


def _fail_in_child(*args: object, **kwargs: object) -> object:
    raise OSError(28, "No space left on device")


def _die_in_child(*args: object, **kwargs: object) -> object:
    os._exit(9)


@pytest.mark.skipif(not pipeline.pipeline_available(), reason="needs fork (Linux)")
@pytest.mark.parametrize("how", [_fail_in_child, _die_in_child], ids=["fails", "dies"])
def test_a_failing_or_dead_packing_child_appends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: object
) -> None:
    with _ledger(tmp_path / "l") as ledger:
        head = ledger.head()
        monkeypatch.setattr(PackBuilder, "write", how)  # runs in the child only
        with pytest.raises(PerfledgerError) as raised:
            ledger.store.append_batch(_drafts(pipeline.PIPELINE_MIN_EVENTS))
        hint = raised.value.hint or ""  # a full disk (OSError 28) says so, as a ResourceError
        assert "nothing was appended" in hint or "the ledger is unchanged" in hint
        assert ledger.head() == head
        monkeypatch.undo()
        if how is _die_in_child:  # a new child is forked for the next batch
            ledger.store.append_batch(_drafts(pipeline.PIPELINE_MIN_EVENTS))
            assert ledger.head() != head
        else:  # the child lives on: its next batch is refused too, then one in process works
            with pytest.raises(PerfledgerError):
                ledger.store.append_batch(_drafts(pipeline.PIPELINE_MIN_EVENTS))
            monkeypatch.setenv("PERFLEDGER_APPEND_FORK", "0")
            ledger.store.append_batch(_drafts(pipeline.PIPELINE_MIN_EVENTS))
        assert ledger.verify().ok
    assert not [p for p in os.listdir("/proc") if p.isdigit() and _is_zombie_child(int(p))]


@pytest.mark.skipif(not pipeline.pipeline_available(), reason="needs fork (Linux)")
def test_one_child_serves_every_batch_and_ends_with_the_store(tmp_path: Path) -> None:
    with _ledger(tmp_path / "l") as ledger:
        for batch in range(3):
            count = pipeline.PIPELINE_MIN_EVENTS
            ledger.store.append_batch(_drafts(count, start=batch * count))
        packer = ledger.store._packer
        assert packer is not None and packer.alive()
        pid = packer.pid
        assert ledger.verify().ok
    assert not os.path.exists(f"/proc/{pid}") or _state(pid) in ("Z", "X")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _is_zombie_child(pid: int) -> bool:
    """True for a zombie process whose parent is this one (an unreaped packing child)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] == "Z" and int(fields[1]) == os.getpid()
