"""The derived commit index (ledger/index.py): the idempotency rule and the saved file."""

from __future__ import annotations

from pathlib import Path

from perfledger.ledger.index import CommitIndex, IndexEntry


def _diamond() -> dict[bytes, IndexEntry]:
    """root <- a (lamport 2, key k), root <- b (lamport 2, key k), merge(a, b)."""
    return {
        b"r": IndexEntry("e0", 1, [], None),
        b"a": IndexEntry("e9", 2, [b"r"], "k"),
        b"b": IndexEntry("e1", 2, [b"r"], "k"),
        b"m": IndexEntry(None, 0, [b"a", b"b"], None),
    }


def test_a_key_carried_by_two_events_maps_to_the_first_in_total_order_whatever_the_walk() -> None:
    commits = _diamond()
    for order in ([b"r", b"a", b"b", b"m"], [b"r", b"b", b"a", b"m"]):
        index = CommitIndex()
        for sha in order:
            index.add(sha, commits[sha])
        assert index.keys == {"k": "e1"}  # same lamport: the smaller id wins
    walked = CommitIndex()
    walked.rebuild(b"m", commits.__getitem__)
    assert walked.keys == {"k": "e1"}
    assert walked.ordered() == [b"r", b"b", b"a"]


def test_a_walk_that_never_meets_the_previous_head_changes_nothing() -> None:
    commits = _diamond()
    index = CommitIndex()
    index.rebuild(b"a", commits.__getitem__)
    before = (set(index.reachable), dict(index.by_event), index.head)
    assert not index.walk_new(b"b", b"zz", commits.__getitem__)
    assert (index.reachable, index.by_event, index.head) == before


def test_saved_index_loads_back_and_a_damaged_or_orphaned_one_is_ignored(tmp_path: Path) -> None:
    path = str(tmp_path / "derived" / "index.msgpack")
    index = CommitIndex()
    index.rebuild(b"m", _diamond().__getitem__)
    index.save(path)
    back = CommitIndex()
    back.load(path, lambda head: True)
    assert (back.head, back.keys, back.by_event) == (b"m", index.keys, index.by_event)
    orphan = CommitIndex()
    orphan.load(path, lambda head: False)  # its head is gone from the repository
    assert orphan.head is None and not orphan.commits and orphan.loaded
    Path(path).write_bytes(b"\x93not msgpack of an index")
    damaged = CommitIndex()
    damaged.load(path, lambda head: True)
    assert damaged.head is None and not damaged.commits
