"""``perfledger gc``: the garbage of killed writers and pulls is removed, never what a live
writer is writing (:mod:`perfledger.ledger.gc`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import perfledger
from perfledger.ledger import gc as gc_module
from perfledger.ledger import layout
from perfledger.ledger.base import EventDraft

PERFLEDGER = Path(sys.executable).with_name("perfledger")
WRITER = Path(__file__).parents[1] / "powerloss" / "_writer.py"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PERFLEDGER), *args], capture_output=True, text=True, check=False)


def count_objects(path: Path) -> dict[str, int]:
    """``git count-objects -v`` as a dict (``garbage``, ``size-garbage``, ``count``, ...)."""
    out = subprocess.run(
        ["git", "-C", str(path), "count-objects", "-v"], capture_output=True, text=True, check=True
    ).stdout
    return {k: int(v) for k, v in (line.split(": ") for line in out.splitlines())}


def _dead_pid() -> int:
    """The pid of a process that ran and was killed (and reaped): nobody has it now."""
    proc = subprocess.Popen(["sleep", "60"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.pid


def _batch(n: int, text: str) -> list[EventDraft]:
    return [EventDraft("NoteRecorded", {"text": f"{text} {i}", "tags": []}, "t", None, None, {})
            for i in range(n)]  # fmt: skip


@pytest.mark.slow
def test_gc_removes_what_killed_writers_and_a_killed_pull_left(tmp_path: Path) -> None:
    """Writers SIGKILLed at random instants, a pull SIGKILLed mid-way, and a
    writer's pack left without its index: gc removes all of it, `git count-objects -v` then
    counts no garbage, and the ledger verifies with every acknowledged event."""
    ledger_path = tmp_path / "ledger"
    perfledger.init(ledger_path, name="gc").close()
    acks = tmp_path / "acks"
    for round_ in range(8):
        procs = [
            subprocess.Popen([sys.executable, str(WRITER), str(ledger_path), str(acks), str(round_ * 3 + i)])
            for i in range(2)
        ]  # fmt: skip
        time.sleep(0.4 + 0.1 * round_)
        for proc in procs:
            proc.kill()
            proc.wait()
    # a pull killed mid-way (it receives its pack in memory: nothing of it is left)
    remote = tmp_path / "remote"  # a clone that moves on
    origin, _ = perfledger.Ledger.clone(str(ledger_path), remote)
    with origin:
        for block in range(20):
            origin.append_batch(_batch(500, f"remote {block} " + "x" * 300))
    derived = ledger_path / layout.DERIVED_DIR
    pull = subprocess.Popen([str(PERFLEDGER), "--ledger", str(ledger_path), "pull", str(remote)])
    time.sleep(0.5)
    pull.kill()
    pull.wait()
    # a writer killed between renaming its pack and its index (made here: that instant is
    # microseconds wide), and a packing temporary of a dead writer
    pack_dir = ledger_path / "objects" / "pack"
    some_pack = next(pack_dir.glob("pack-*.pack"))
    shutil.copy(some_pack, pack_dir / ("pack-" + "0" * 40 + ".pack"))
    (pack_dir / f"tmp_pack_{_dead_pid()}_1").write_bytes(b"PACK half written")
    assert count_objects(ledger_path)["garbage"] >= 2

    dry = json.loads(_cli("--ledger", str(ledger_path), "gc", "--dry-run", "--json").stdout)
    assert dry["removed"] and all(os.path.exists(path) for path in dry["removed"])
    answer = _cli("--ledger", str(ledger_path), "gc", "--json")
    assert answer.returncode == 0, answer.stderr
    report = json.loads(answer.stdout)
    assert report["guard_held"] and set(dry["removed"]) <= set(report["removed"])
    assert not list(derived.glob("incoming-*.pack"))
    assert not list(ledger_path.glob("objects/**/tmp_*"))
    counted = count_objects(ledger_path)
    assert counted["garbage"] == 0 and counted["size-garbage"] == 0, counted
    with perfledger.open(ledger_path) as ledger:
        assert ledger.verify().ok
        present = {event.envelope.id for event in ledger.events()}
    assert set(acks.read_text().split()) <= present
    with perfledger.open(ledger_path) as ledger:
        ledger.pull(str(remote))  # the killed pull's events come with the next one
    fsck = subprocess.run(["git", "-C", str(ledger_path), "fsck", "--strict", "--full"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert fsck.returncode == 0, fsck.stderr


def test_gc_leaves_alone_what_a_live_writer_may_be_writing(tmp_path: Path) -> None:
    """While another process has the ledger open, gc removes only the temporaries of dead
    writers: a pack without its index (it may be between its two renames), a spooled pull and
    the temporaries of a live pid stay; a ref lock file stays whoever is alive."""
    ledger_path = tmp_path / "ledger"
    with perfledger.init(ledger_path, name="gc") as ledger:
        ledger.append_batch(_batch(10, "packed"))
    pack_dir = ledger_path / "objects" / "pack"
    orphan = pack_dir / ("pack-" + "1" * 40 + ".pack")
    shutil.copy(next(pack_dir.glob("pack-*.pack")), orphan)
    spool = ledger_path / layout.DERIVED_DIR / "incoming-abc.pack"
    spool.write_bytes(b"PACK")
    dead = pack_dir / f"tmp_pack_{_dead_pid()}_7"
    dead.write_bytes(b"PACK")
    ref_lock = ledger_path / "refs" / "heads" / "ledger.lock"
    ref_lock.write_bytes(b"0" * 40 + b"\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, perfledger; l = perfledger.open(sys.argv[1]); "
         "print('open', flush=True); sys.stdin.read()", str(ledger_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline() == "open\n"
    live = pack_dir / f"tmp_idx_{holder.pid}_1"
    live.write_bytes(b"idx being written")
    try:
        report = gc_module.collect(str(ledger_path))
        assert not report.guard_held
        assert report.removed == [str(dead)]
        kept = dict(report.kept)
        assert str(orphan) in kept and str(spool) in kept and str(live) in kept
        assert str(ref_lock) in kept
        assert orphan.exists() and spool.exists() and live.exists() and ref_lock.exists()
    finally:
        holder.kill()
        holder.wait()
    report = gc_module.collect(str(ledger_path))  # the holder is gone: the rest is garbage
    assert report.guard_held
    assert set(report.removed) == {str(orphan), str(spool), str(live)}
    assert ref_lock.exists()  # never removed: a git process may hold it
    ref_lock.unlink()
    with perfledger.open(ledger_path) as ledger:
        assert ledger.verify().ok


def test_next_writer_removes_dead_writers_pack_temporaries(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    perfledger.init(ledger_path, name="gc").close()
    pack_dir = ledger_path / "objects" / "pack"
    pack_dir.mkdir(exist_ok=True)
    dead = pack_dir / f"tmp_pack_{_dead_pid()}_1"
    dead.write_bytes(b"PACK")
    mine = pack_dir / f"tmp_idx_{os.getpid()}_99"  # a live writer's (this process)
    mine.write_bytes(b"idx")
    with perfledger.open(ledger_path) as ledger:
        ledger.append("NoteRecorded", {"text": "next", "tags": []}, actor="t")
    assert not dead.exists() and mine.exists()
    mine.unlink()


def test_gc_outside_a_repository_is_a_bad_request(tmp_path: Path) -> None:
    answer = _cli("--ledger", str(tmp_path), "gc")
    assert answer.returncode == 2 and "not a ledger" in answer.stderr


@pytest.mark.slow
def test_storage_doc_gc_block_runs(tmp_path: Path) -> None:
    """The gc example of docs/storage.md runs as written (its /tmp paths moved here)."""
    doc = (Path(__file__).parents[2] / "docs" / "storage.md").read_text()
    block = next(b for b in re.findall(r"```sh\n(.*?)```", doc, flags=re.S) if " gc" in b)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace("/tmp/", f"{tmp_path}/")],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "would remove 0 files" in done.stdout and "removed 0 files" in done.stdout
