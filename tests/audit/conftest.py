"""Make the workflow scenario (``tests/workflow/wf_scenario.py``) and the scripted read-model
session (``tests/readmodels/rm_session.py``) importable here."""

from __future__ import annotations

import sys
from pathlib import Path

for _name in ("workflow", "readmodels"):
    _path = str(Path(__file__).resolve().parents[1] / _name)
    if _path not in sys.path:
        sys.path.insert(0, _path)

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402
from wf_scenario import Session  # noqa: E402

from perfledger.api import Ledger  # noqa: E402


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
