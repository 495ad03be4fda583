"""Packs are merged geometrically as batches add them: the pack count stays bounded, merged-away
packs are deleted once the merged pack is durable, and the ledger stays complete for git."""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from perfledger.api import Ledger
from perfledger.ledger import packing
from perfledger.ledger.base import EventDraft


def _pack_files(path: Path) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "objects", "pack", "pack-*")))


def test_merged_packs_are_deleted_and_the_pack_count_stays_bounded(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    with Ledger.init(path, name="retire", actor="t") as ledger:
        store = ledger.store
        for batch in range(packing.MAX_PACKS + 3):  # one pack per batch: merges must happen
            ledger.store.append_batch([note(f"b{batch}-{i}") for i in range(40)])
        packs = [p for p in _pack_files(path) if p.endswith(".pack")]
        indexes = [p for p in _pack_files(path) if p.endswith(".idx")]
        assert 1 <= len(packs) <= packing.MAX_PACKS
        assert len(indexes) == len(packs)  # no pack without its index, nor the reverse
        assert packing.pack_stats(store)["packs"] == len(packs)
        report = ledger.verify()
        assert report.ok and report.events == 1 + 40 * (packing.MAX_PACKS + 3)
    fsck = subprocess.run(
        ["git", "-C", str(path), "fsck", "--strict", "--full", "--no-dangling"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    log = subprocess.run(
        ["git", "-C", str(path), "rev-list", "--count", "refs/heads/ledger"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(log.stdout) == 1 + 40 * (packing.MAX_PACKS + 3)


def test_a_pack_with_deltas_from_git_gc_is_left_out_and_the_others_are_merged(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    """After ``git gc --aggressive`` (one pack of deltas), packs that later batches add are
    merged among themselves; git's pack is kept as it is, and git and verify accept the
    result."""
    path = tmp_path / "l"
    with Ledger.init(path, name="gc", actor="t") as ledger:
        for batch in range(3):
            ledger.store.append_batch(
                [note(f"before-{batch}-{i} " + "words every note shares " * 30) for i in range(40)]
            )
    subprocess.run(
        ["git", "-C", str(path), "gc", "--aggressive", "--prune=now", "--quiet"], check=True
    )
    git_packs = [p for p in _pack_files(path) if p.endswith(".pack")]
    assert len(git_packs) == 1
    verified = subprocess.run(
        ["git", "-C", str(path), "verify-pack", "-v", git_packs[0]],
        capture_output=True,
        text=True,
        check=True,
    )
    assert any(len(line.split()) == 7 for line in verified.stdout.splitlines()), "no deltas"
    with Ledger.open(path) as ledger:
        for batch in range(2):
            ledger.store.append_batch([note(f"after-{batch}-{i}") for i in range(40)])
        assert packing.pack_stats(ledger.store)["packs"] == 3
        assert packing.merge_packs(ledger.store, force=True) == 2
        packs = [p for p in _pack_files(path) if p.endswith(".pack")]
        assert len(packs) == 2 and git_packs[0] in packs
        report = ledger.verify()
        assert report.ok and report.events == 1 + 40 * 5, report.error
    fsck = subprocess.run(
        ["git", "-C", str(path), "fsck", "--strict", "--full", "--no-dangling"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
