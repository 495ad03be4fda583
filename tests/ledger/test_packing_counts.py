"""A writer's loose objects are packed once they reach the threshold, however its single
appends and batches interleave (ledger/packing.py maybe_pack): the loose-object count stays
bounded."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfledger.ledger.packing as packing
from perfledger.api import Ledger
from perfledger.ledger.base import EventDraft


def _note(text: str) -> EventDraft:
    return EventDraft("NoteRecorded", {"text": text, "tags": []}, "t")


def test_loose_objects_between_batches_still_count_towards_packing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three single appends (9 loose objects) then a batch, twelve times: 108 loose objects in
    all, never 30 between two batches. Each batch used to reset the writer's count, so none
    was ever packed; now they are, by the writer, in process."""
    monkeypatch.setattr(packing, "LOOSE_PACK_THRESHOLD", 30)
    with Ledger.init(tmp_path / "l.git", actor="t") as ledger:
        for round_ in range(12):
            for i in range(3):
                ledger.store.append(_note(f"round {round_} note {i}"))
            ledger.append_batch([_note(f"round {round_} batch {i}") for i in range(8)])
        stats = packing.pack_stats(ledger.store)
        assert stats["loose"] < packing.LOOSE_PACK_THRESHOLD + 9, stats
        assert ledger.verify().ok
