"""Packs merged away are retired: moved out of the pack directory at once (no reader sees them
again) and deleted by the store's background thread; files a killed writer left there go with
the next retirement. The ledger stays complete for git throughout."""

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


def test_merged_packs_are_retired_and_deleted(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    with Ledger.init(path, name="retire", actor="t") as ledger:
        store = ledger.store
        retired = Path(store.derived_dir) / packing.RETIRED_PACKS_DIR
        retired.mkdir(parents=True, exist_ok=True)
        (retired / "pack-left-by-a-killed-writer.pack").write_bytes(b"stale")
        for batch in range(packing.MAX_PACKS + 3):  # one pack per batch: merges must happen
            ledger.store.append_batch([note(f"b{batch}-{i}") for i in range(40)])
        store.wait_background()
        packs = [p for p in _pack_files(path) if p.endswith(".pack")]
        assert len(packs) <= packing.MAX_PACKS
        assert list(retired.iterdir()) == []  # retired packs and the leftover deleted
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
