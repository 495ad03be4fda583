"""``perfledger show`` and ``note``'s use cases (perfledger.app.event_lookup) from Python (issue
33): an empty note is refused before the ledger is opened; an event is found by id, prefix,
HEAD or the commit that carries it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.app.event_lookup import Note, record_note, show_event
from perfledger.errors import BadRequest


def _never() -> Ledger:
    raise AssertionError("the ledger was opened for an empty note")


def test_note_is_recorded_and_found_by_head_prefix_and_commit(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    Ledger.init(path, name="n", actor="a").close()
    with pytest.raises(BadRequest, match="a note needs text"):
        record_note(Note(text="  ", actor="a"), open_ledger=_never)
    done = record_note(
        Note(text="slow", tags=["x"], actor="a"), open_ledger=lambda: Ledger.open(path)
    )
    commit = subprocess.run(["git", "-C", str(path), "rev-parse", "refs/heads/ledger"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    with Ledger.open(path) as ledger:
        for name in ("HEAD", done.event_id, done.event_id[:8]):
            shown = show_event(ledger, name)
            assert shown.envelope.id == done.event_id and shown.commit is None
        by_commit = show_event(ledger, commit[:12])
        assert by_commit.envelope.id == done.event_id and by_commit.commit == commit
        assert by_commit.to_json()["event"]["payload"] == {"text": "slow", "tags": ["x"]}
        with pytest.raises(BadRequest):
            show_event(ledger, "zzzzzzzz")
