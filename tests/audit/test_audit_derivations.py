"""The auditor's replay re-derives every verdict in its one verify pass: a forged verdict is
the one finding, and the collector's state is restored."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from wf_scenario import CAND1, CAND2, Session, samples

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import validate
from perfledger.commands.workflow.requests import dump
from perfledger.ledger.base import EventDraft


def _forge_verdict(session: Session, samples_id: str) -> str:
    """Append the honest verdict of ``samples_id`` with its status flipped to ``pass`` through
    the raw store (as a tampered tool would); returns the event id."""
    from perfledger.commands.workflow.deciders import DecisionContext, decide_verdict_record
    from perfledger.commands.workflow.requests import VerdictRecord

    honest = decide_verdict_record(
        session.state(),
        VerdictRecord(samples_id=samples_id),
        DecisionContext("x", "a", session.clock, payload_of=session.ledger.payload),
    )[0].payload
    assert honest.status == "fail"
    forged = msgspec.to_builtins(honest)
    forged["status"] = "pass"
    forged["primary"]["status"] = "pass"
    request = {"op": "verdict.record", "body": dump(validate("verdict.record", {
        "samples_id": samples_id}))}  # fmt: skip
    envelope = session.ledger.store.append(
        EventDraft("VerdictRecorded", forged, "tampered-tool", request=request)
    )
    return envelope.id


@pytest.mark.slow
def test_audit_derives_each_verdict_once_and_reports_the_forged_one(
    ready: Session, note: Any
) -> None:
    ready.ledger.append_batch([note(f"n{i}") for i in range(30)])
    ready.passed("e1", CAND1, gain=0.2)
    ready.screened("e2", CAND2)
    ready.run("samples.record", samples("e2-target", "target", experiment_id="e2",
                                        candidate=CAND2, gain=0.0))  # fmt: skip
    forged = _forge_verdict(ready, "e2-target")
    report = audit(ready.ledger)
    assert [(f.event_id, f.rule) for f in report.findings] == [(forged, "R12")]
    assert report.derived_here == 4


@pytest.mark.parametrize("enabled", [True, False])
def test_audit_restores_the_cyclic_collectors_state(ready: Session, enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        assert audit(ready.ledger).ok
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
