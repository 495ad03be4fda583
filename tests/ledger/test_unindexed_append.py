"""Appends that do not load the derived index (``GitStore._attempt``): a new process appending a
few events reads the head commit from git instead of decoding the whole index, and everything it
writes is exactly what an indexed append writes; the saved index catches up later."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from perfledger.api import Ledger
from perfledger.ledger import store as store_module
from perfledger.ledger.base import EventDraft


def _ledger_with_saved_index(path: Path, note: Callable[..., EventDraft]) -> None:
    with Ledger.init(path, name="fast", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(300)])
        ledger.store._save_index()


def test_an_append_in_a_new_process_does_not_load_the_index_and_chains_correctly(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    _ledger_with_saved_index(path, note)
    with Ledger.open(path) as ledger:
        before = ledger.store.head_view()  # loads the index (the reference)
    with Ledger.open(path) as ledger:
        first = ledger.store.append(note("a"))
        second = ledger.store.append(note("b"))
        assert not ledger.store._index.loaded
        assert ledger.store.commits_since(before.head.encode()) is not None
        assert not ledger.store._index.loaded  # two commits read from git, no index
    assert first.parents == before.event_heads and first.lamport == before.lamport + 1
    assert second.parents == (first.id,) and second.lamport == first.lamport + 1
    with Ledger.open(path) as ledger:  # the saved index lags; loading it walks the new commits
        assert ledger.store.count() == 301 + 2
        assert ledger.store.get_event(second.id) == second
        report = ledger.verify()
    assert report.ok, report.error


def test_an_idempotency_key_loads_the_index_and_finds_the_earlier_event(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    _ledger_with_saved_index(path, note)
    with Ledger.open(path) as ledger:
        kept = ledger.store.append(note("k", idempotency_key="key-1"))
        assert ledger.store._index.loaded
    with Ledger.open(path) as ledger:
        ledger.store.append(note("no key"))
        assert not ledger.store._index.loaded
        again = ledger.store.append(note("k", idempotency_key="key-1"))
        assert ledger.store._index.loaded
        assert again == kept
        assert ledger.store.count() == 301 + 2


def test_a_long_running_writer_loads_and_keeps_the_index_after_a_few_appends(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    _ledger_with_saved_index(path, note)
    with Ledger.open(path) as ledger:
        for i in range(store_module._UNINDEXED_MAX + 1):
            ledger.store.append(note(f"x{i}"))
        assert ledger.store._index.loaded
        assert ledger.store.count() == 301 + store_module._UNINDEXED_MAX + 1
