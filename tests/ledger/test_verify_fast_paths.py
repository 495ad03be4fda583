"""Verify's reads and time checks: a timestamp that names no real time is refused, and the
reader's read of packed entries (stored blocks and compressed streams) agrees with dulwich's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.errors import IntegrityError
from perfledger.ledger import reader as reader_mod
from perfledger.ledger.base import EventDraft
from perfledger.ledger.gitobj import STORE_BELOW_BYTES
from perfledger.ledger.reader import ObjectReader
from perfledger.ledger.verify import _ts_seconds


@pytest.mark.parametrize(
    "ts",
    ["2026-13-01T00:00:00.000000Z", "2026-02-30T00:00:00.000000Z", "2026-01-01T24:00:00.000000Z",
     "2026-01-01T00:60:00.000000Z", "2026-01-01T00:00:60.000000Z"],
)  # fmt: skip
def test_ts_seconds_refuses_a_time_that_does_not_exist(ts: str) -> None:
    with pytest.raises(IntegrityError, match="not a valid UTC time"):
        _ts_seconds(ts)


def test_packed_reads_equal_dulwichs_and_a_rewritten_object_is_refused(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    """Every packed object, small (one pread), larger than the first read, or compressed,
    reads as dulwich reads it; a rewritten one is refused naming it."""
    from dulwich.repo import Repo

    path = tmp_path / "l"
    with Ledger.init(path, name="fast", actor="t") as ledger:
        ledger.store.append_batch(
            [note(f"n{i}" + "x" * (i * 97 % 3000)) for i in range(60)]  # up to ~3 KB
        )
    reader = ObjectReader(lambda: None, str(path / "objects"))  # type: ignore[arg-type,return-value]
    repo = Repo(str(path))
    try:
        sizes = []
        for sha in reader._where:
            read = reader.read(sha)
            assert read == repo.object_store.get_raw(sha)
            sizes.append(len(read[1]))
        assert min(sizes) < reader_mod._FIRST_READ  # read in one pread
        # stored blocks that need a second pread, and compressed streams
        assert any(reader_mod._FIRST_READ < n < STORE_BELOW_BYTES for n in sizes)
        assert max(sizes) > STORE_BELOW_BYTES
        victim = next(iter(reader._where))
        with pytest.raises(IntegrityError, match="rewritten"):
            _read_under_another_name(reader, victim)
    finally:
        reader.close()
        repo.close()


def _read_under_another_name(reader: ObjectReader, victim: bytes) -> None:
    """Ask for another name at the victim's place: its content no longer hashes to the name."""
    other = bytes([victim[0] ^ 1]) + victim[1:]
    reader._where[other] = reader._where[victim]
    reader.read(other)
