"""Determinism: the same samples give byte-identical verdicts on repeated runs, in independent
ledgers, and when re-derived from a ``git clone`` of the ledger (the auditor's path)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import Session

from perfledger.api import Ledger
from perfledger.commands.registry.operations import decider, payload_reader, validate
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.events.canonical import canonical_bytes
from perfledger.projections.base import DEFAULT_PROJECTION


def _session(path: Path) -> tuple[Session, Any]:
    session = Session(Ledger.init(path, name="det", actor="agent"))
    session.ready()
    verdict = session.passed()
    return session, verdict


def _redecide(ledger: Ledger, kind: str) -> tuple[bytes, bytes]:
    """Fold the ledger up to its last event of ``kind``, re-run that event's recorded request
    through its decider on the state before it; return (recorded, re-decided) payload bytes."""
    events = list(ledger.events())
    index = max(i for i, e in enumerate(events) if e.kind == kind)
    state = DEFAULT_PROJECTION.initial()
    for event in events[:index]:
        state = DEFAULT_PROJECTION.evolve(state, event)
    envelope = events[index].envelope
    op, body = envelope.request["op"], envelope.request["body"]
    ctx = DecisionContext(op=op, actor=envelope.actor, ts=Session(ledger).clock,
                          request=envelope.request, payload_of=payload_reader(ledger))  # fmt: skip
    (draft,) = decider(op)(state, validate(op, body), ctx)
    return canonical_bytes(envelope.payload), canonical_bytes(draft.payload)


@pytest.mark.slow
def test_same_samples_give_byte_identical_verdicts(tmp_path: Path) -> None:
    first, verdict_a = _session(tmp_path / "a")
    second, verdict_b = _session(tmp_path / "b")
    try:
        assert canonical_bytes(verdict_a) == canonical_bytes(verdict_b)
        assert verdict_a["primary"]["seed"] == verdict_b["primary"]["seed"]
        recorded, again = _redecide(first.ledger, "VerdictRecorded")
        assert recorded == again
        assert first.ledger.verify().extra["state_hash"] != ""
    finally:
        first.ledger.close()
        second.ledger.close()


def test_verdict_rederived_from_a_git_clone_is_identical(
    tmp_path: Path, git: Callable[..., Any]
) -> None:
    session, _ = _session(tmp_path / "origin")
    session.champion()
    origin = session.ledger
    try:
        git("clone", "--quiet", "--bare", origin.path, tmp_path / "clone")
        with Ledger.open(tmp_path / "clone") as clone:
            assert clone.verify().extra["state_hash"] == origin.verify().extra["state_hash"]
            assert canonical_bytes(clone.state()) == canonical_bytes(origin.state())
            recorded, again = _redecide(clone, "VerdictRecorded")
            assert recorded == again
            recorded, again = _redecide(clone, "ChampionSelected")
            assert recorded == again
    finally:
        origin.close()
