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
