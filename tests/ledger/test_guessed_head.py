"""An append starts from the head its writer last swapped in, without reading the ref
(GitStore._attempt's guess): never a wrong decision, whatever other writers did meanwhile."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfledger.ledger.store as store_module
from perfledger.api import Ledger
from perfledger.errors import BadRequest
from perfledger.ledger.base import EventDraft, HeadView


def _note(text: str) -> EventDraft:
    return EventDraft("NoteRecorded", {"text": text, "tags": []}, "t")


def test_a_lone_writer_does_not_read_the_ref_before_deciding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger.init(tmp_path / "l.git", actor="t") as ledger:
        store = ledger.store
        store.append(_note("first"))
        reads = []
        real = store.read_head
        monkeypatch.setattr(store, "read_head", lambda: reads.append(1) or real())
        for i in range(5):
            store.append(_note(f"n{i}"))
        assert reads == []
        assert ledger.verify().ok


def test_a_refusal_on_a_stale_guess_is_decided_again_on_the_ref(tmp_path: Path) -> None:
    """Another writer appended since this one's last append: a decision that refuses on the
    old head but accepts on the current one is accepted (decided again), not refused."""
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger, Ledger.open(path) as other:
        store = ledger.store
        old = store.append(_note("mine"))
        theirs = other.store.append(_note("theirs"))
        seen: list[str] = []

        def decide(view: HeadView) -> list[EventDraft]:
            seen.append(view.head)
            if theirs.id not in view.event_heads:
                raise BadRequest("refused: the other writer's event is not there")
            return [_note("after theirs")]

        [appended] = store.transact(decide)
        assert list(appended.parents) == [theirs.id]
        assert len(seen) == 2 and seen[0] != seen[1]  # the guess, then the ref's head
        assert old.id != theirs.id
        assert ledger.verify().ok


def test_nothing_to_append_on_a_stale_guess_is_decided_again(tmp_path: Path) -> None:
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger, Ledger.open(path) as other:
        store = ledger.store
        store.append(_note("mine"))
        theirs = other.store.append(_note("theirs"))

        def decide(view: HeadView) -> list[EventDraft]:
            return [_note("needed now")] if theirs.id in view.event_heads else []

        assert len(store.transact(decide)) == 1
        # a refusal on the ref's own head is a refusal
        with pytest.raises(BadRequest):
            store.transact(lambda view: (_ for _ in ()).throw(BadRequest("no")))


def test_a_guess_that_loses_its_race_pauses_guessing(tmp_path: Path) -> None:
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger, Ledger.open(path) as other:
        store = ledger.store
        store.append(_note("mine"))
        other.store.append(_note("theirs"))
        store.append(_note("lost the guess, then appended on the ref's head"))
        assert store._guess_pause == store_module._GUESS_PAUSE  # set by the lost race
        last = list(ledger.events())[-1]
        assert last.payload.text.startswith("lost the guess")
        assert ledger.verify().ok


def test_no_guess_once_this_process_has_read_past_its_last_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer whose index already moved past its last swapped head (it read the other
    writers' events) reads the ref: stepping its index back to the old head would rebuild the
    whole index (O(ledger)) for an append that then loses its race anyway."""
    path = tmp_path / "l.git"
    with Ledger.init(path, actor="t") as ledger, Ledger.open(path) as other:
        store = ledger.store
        store.append(EventDraft("NoteRecorded", {"text": "keyed", "tags": []}, "t", None, "k1"))
        assert store._index_loaded  # an idempotency key loads the index
        theirs = other.store.append(_note("theirs"))
        assert theirs.id in {e.id for e in ledger.events()}  # this process reads past its head
        rebuilds = []
        real = store._rebuild
        monkeypatch.setattr(store, "_rebuild", lambda head: rebuilds.append(head) or real(head))
        appended = store.append(_note("mine again"))
        assert list(appended.parents) == [theirs.id]
        assert rebuilds == []
        assert ledger.verify().ok
