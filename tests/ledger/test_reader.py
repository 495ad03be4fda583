"""The bulk object reader: both index layouts (dict for small ledgers, sorted numpy tables for
large ones) read every object, check it against its name, and give verify the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfledger.ledger.reader as reader_module
from perfledger.api import Ledger
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.reader import ObjectReader


def _ledger(path: Path) -> Ledger:
    ledger = Ledger.init(path, name="reader", actor="t")
    ledger.append_batch([EventDraft("NoteRecorded", {"text": f"b{i}"}, "t") for i in range(20)])
    ledger.append(
        "NoteRecorded", {"text": "loose"}, actor="t", artifacts={"a.bin": Artifact(b"x" * 5000)}
    )
    return ledger


@pytest.mark.parametrize("dict_max", [reader_module.DICT_INDEX_MAX, 0])
def test_both_index_layouts_verify_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dict_max: int
) -> None:
    """Forcing the numpy tables (DICT_INDEX_MAX=0) verifies to the same state_hash."""
    ledger = _ledger(tmp_path / "l")
    expected = ledger.verify()
    monkeypatch.setattr(reader_module, "DICT_INDEX_MAX", dict_max)
    report = ledger.verify()
    assert report.ok and expected.ok
    assert report.extra["state_hash"] == expected.extra["state_hash"]
    ledger.close()


def test_tables_find_every_packed_object_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every sha of the pack is found through the tables, with content that hashes to it; an
    absent sha (including one ending in NUL bytes, which numpy's S20 would strip) is not."""
    ledger = _ledger(tmp_path / "l")
    monkeypatch.setattr(reader_module, "DICT_INDEX_MAX", 0)
    reader = ObjectReader(ledger.store.repo.object_store)
    try:
        assert reader._tables, "the numpy layout was not used"
        for _number, shas, _offsets in reader._tables:
            for i in range(len(shas)):
                sha = shas[i : i + 1].tobytes()
                assert reader._locate(sha) is not None
                reader.read(sha)  # raises when the content does not hash to sha
        assert reader._locate(b"\x00" * 20) is None
        assert reader._locate(b"\xff" * 19 + b"\x00") is None
    finally:
        reader.close()
        ledger.close()
