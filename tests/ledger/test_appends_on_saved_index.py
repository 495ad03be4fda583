"""Appends in a new process on a ledger whose derived index was saved earlier: they chain on
the head exactly as in the writing process, an idempotency key is found across processes, and
an index saved before later appends catches up by walking them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from perfledger.api import Ledger
from perfledger.ledger.base import EventDraft


def _ledger_with_saved_index(path: Path, note: Callable[..., EventDraft]) -> None:
    with Ledger.init(path, name="fast", actor="t") as ledger:
        ledger.store.append_batch([note(f"n{i}") for i in range(300)])
        ledger.store._index.save(ledger.store._index_file)


def test_appends_in_a_new_process_chain_on_the_head_and_the_saved_index_catches_up(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    _ledger_with_saved_index(path, note)
    with Ledger.open(path) as ledger:
        before = ledger.store.head_view()
    with Ledger.open(path) as ledger:
        first = ledger.store.append(note("a"))
        second = ledger.store.append(note("b"))
        assert ledger.store.commits_since(before.head.encode()) is not None
    assert first.parents == before.event_heads and first.lamport == before.lamport + 1
    assert second.parents == (first.id,) and second.lamport == first.lamport + 1
    with Ledger.open(path) as ledger:  # the saved index lags; loading it walks the new commits
        assert ledger.store.count() == 301 + 2
        assert ledger.store.get_event(second.id) == second
        report = ledger.verify()
    assert report.ok, report.error


def test_an_idempotency_key_used_in_an_earlier_process_returns_the_earlier_event(
    tmp_path: Path, note: Callable[..., EventDraft]
) -> None:
    path = tmp_path / "l"
    _ledger_with_saved_index(path, note)
    with Ledger.open(path) as ledger:
        kept = ledger.store.append(note("k", idempotency_key="key-1"))
    with Ledger.open(path) as ledger:
        ledger.store.append(note("no key"))
        again = ledger.store.append(note("k", idempotency_key="key-1"))
        assert again == kept
        assert ledger.store.count() == 301 + 2
