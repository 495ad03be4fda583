"""The bulk object reader: both index layouts (dict for small ledgers, sorted numpy tables for
large ones) read every object, check it against its name, and give verify the same answer."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfledger.ledger.reader as reader_module
from perfledger.api import Ledger
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.packindex import IndexArrays


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
    reader = ledger.store.object_reader()
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


def test_a_pack_merged_away_while_the_reader_opens_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A concurrent writer's pack merge can remove a pack between the reader listing the pack
    directory and opening it (seen in CI); the reader skips it, and objects that were in it are
    still read (from the merged pack, through dulwich's rescan)."""
    ledger = _ledger(tmp_path / "l")
    head = ledger.head()
    real = reader_module.read_index
    removed: list[str] = []

    def read_then_vanish(path: str) -> IndexArrays | None:
        entries = real(path)
        if not removed:  # the first pack disappears right after its index was read
            base = path[: -len(".idx")]
            Path(base + ".pack").rename(tmp_path / "moved.pack")
            removed.append(base)
        return entries

    monkeypatch.setattr(reader_module, "read_index", read_then_vanish)
    reader = ledger.store.object_reader()
    reader.close()
    assert removed, "no pack was listed"
    Path(tmp_path / "moved.pack").rename(removed[0] + ".pack")
    assert ledger.verify().ok and ledger.head() == head
    ledger.close()


def test_sparse_index_finds_every_packed_object_where_the_map_does(tmp_path: Path) -> None:
    """The in-place binary search of the packs' indexes (``sparse=True``, for ``log``) finds
    every packed object at the offset the full map gives, and nothing else."""
    ledger = _ledger(tmp_path / "l")
    full = ledger.store.object_reader()
    sparse = ledger.store.object_reader(sparse=True)
    try:
        assert full._where and sparse._sparse and not sparse._where
        for sha, where in full._where.items():
            assert sparse._locate(sha) == where
            assert sparse.read(sha) == full.read(sha)
        for absent in (b"\x00" * 20, b"\xff" * 20, bytes(19) + b"\x01"):
            assert absent not in full._where and sparse._locate(absent) is None
    finally:
        full.close()
        sparse.close()
        ledger.close()
