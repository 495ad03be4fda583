"""Verify's parallel pass 1 (``verify_scan``): the workers' parse of every packed commit equals
the checking reader's, and a commit entry they cannot trust is left to the walk, which reports it
exactly as a verify in one process does."""

from __future__ import annotations

import glob
import os
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.ledger import verify_scan
from perfledger.ledger.base import EventDraft
from perfledger.ledger.gitobj import COMMIT
from perfledger.ledger.objects import parse_trailers
from perfledger.ledger.reader import ObjectReader


def _packed_ledger(path: Path, note: Callable[..., EventDraft], events: int) -> None:
    with Ledger.init(path, name="scan", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(events)])  # one pack


def _packs(path: Path) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "objects", "pack", "*.pack")))


def test_scan_parses_every_packed_commit_as_the_reader_does(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    _packed_ledger(tmp_path / "l", note, 120)
    saved = verify_scan.SCAN_CHUNK_ENTRIES
    verify_scan.SCAN_CHUNK_ENTRIES = 7  # many tasks, each ending mid-pack
    try:
        found = verify_scan.scan_packed_commits(_packs(tmp_path / "l"), 2)
    finally:
        verify_scan.SCAN_CHUNK_ENTRIES = saved
    reader = ObjectReader(lambda: None, str(tmp_path / "l" / "objects"))  # type: ignore[arg-type,return-value]
    try:
        assert len(found) == 120  # the batch's commits (the root is loose)
        for sha, facts in found.items():
            type_num, raw = reader.read(sha)
            assert type_num == COMMIT
            commit = verify_scan.parse_commit(sha, raw)
            assert facts == verify_scan.commit_facts(commit, parse_trailers(commit.message))
            assert facts.event_id is not None and facts.lamport.isdigit()
    finally:
        reader.close()


@pytest.mark.parametrize("stream", ["valid", "broken"])
def test_a_rewritten_packed_commit_is_left_to_the_walk_and_reported_as_in_one_process(
    tmp_path: Path, note: Callable[..., EventDraft], stream: str
) -> None:
    """One bit of a packed commit's subject flipped under its old name; its zlib stream's
    checksum recomputed (``valid``: only the sha tells) or not (``broken``)."""
    path = tmp_path / "l"
    _packed_ledger(path, note, 40)
    (pack,) = _packs(path)
    found = verify_scan.scan_packed_commits([pack], 2)
    victim = sorted(found)[3]
    message = found[victim].subject
    data = bytearray(Path(pack).read_bytes())
    at = data.find(message)
    assert at > 0  # stored uncompressed: the message is in the pack as is
    data[at] ^= 0x01
    if stream == "valid":
        start = data.rfind(b"tree ", 0, at)  # the stored block's content starts here
        (size,) = struct.unpack_from("<H", data, start - 4)
        data[start + size : start + size + 4] = zlib.adler32(data[start : start + size]).to_bytes(
            4, "big"
        )
    os.chmod(pack, 0o644)
    Path(pack).write_bytes(bytes(data))
    assert victim not in verify_scan.scan_packed_commits([pack], 2)
    with Ledger.open(path) as ledger:
        one = ledger.verify(workers=1)
        two = ledger.verify(workers=2)
    assert not one.ok and not two.ok
    assert one.error is not None and two.error is not None
    assert victim.hex() in one.error.message
    assert one.error.to_json() == two.error.to_json()


def _worker_dies(datas: list[bytes], decode: object, args: object) -> None:
    os._exit(3)  # a worker killed mid-chunk (OOM killer, a signal)


def test_a_worker_that_dies_is_reported_not_waited_for(
    tmp_path: Path, note: Callable[..., EventDraft], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dead worker breaks the pool: verify says so at once (exit 1, not an integrity
    finding) instead of hanging (a multiprocessing.Pool waits forever for the lost task)."""
    from perfledger.errors import IntegrityError, PerfledgerError
    from perfledger.ledger import verify
    from perfledger.ledger.store import FORMAT_VERSION

    _packed_ledger(tmp_path / "l", note, 30)
    monkeypatch.setattr(verify, "CHUNK_EVENTS", 5)
    work = verify.ChunkWork(run=_worker_dies, args=lambda: None, take=lambda extra: None)
    started = time.monotonic()
    with Ledger.open(tmp_path / "l") as ledger, pytest.raises(PerfledgerError) as raised:
        verify.verify_store(ledger.store, format_version=FORMAT_VERSION, workers=2, chunk_work=work)
    assert time.monotonic() - started < 60
    assert not isinstance(raised.value, IntegrityError)
    assert "worker process died" in raised.value.message
