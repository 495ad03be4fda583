"""Fixtures of the workflow tests: sessions on fresh git ledgers (see ``wf_scenario``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from wf_scenario import Session

from perfledger.api import Ledger


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[Session]:
    """A session on a fresh ledger holding only its root event."""
    ledger = Ledger.init(tmp_path / "ledger", name="wf", actor="agent")
    try:
        yield Session(ledger)
    finally:
        ledger.close()


@pytest.fixture
def ready(bare: Session) -> Session:
    """A session whose Target ``t1`` is frozen, ready, audited, with baseline and resolution."""
    return bare.ready()
