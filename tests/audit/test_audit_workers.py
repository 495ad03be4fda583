"""The auditor's replay with verify's forked pass-2 workers deriving verdicts in parallel
(``ChunkWork``): the report is the same as in one process, findings included, and the
derivations made in the workers are the ones used.

Chunks are made small (module constants of :mod:`perfledger.ledger.verify`) so that a session
of a few dozen events spans many chunks, as a 100,000-event ledger does."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from wf_scenario import CAND1, CAND2, Session, samples

from perfledger.commands.audit.replay import AuditReport, audit
from perfledger.commands.registry.operations import validate
from perfledger.commands.workflow.requests import dump
from perfledger.ledger import verify
from perfledger.ledger.base import EventDraft


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "FIRST_CHUNK_EVENTS", 3)
    monkeypatch.setattr(verify, "CHUNK_EVENTS", 4)


def _audit(session: Session, workers: int, monkeypatch: pytest.MonkeyPatch) -> AuditReport:
    monkeypatch.setenv("PERFLEDGER_VERIFY_WORKERS", str(workers))
    return audit(session.ledger)


def _same(one: AuditReport, other: AuditReport) -> None:
    assert [f.to_json() for f in one.findings] == [f.to_json() for f in other.findings]
    assert (one.ok, one.notes, one.state_hash, one.events, one.decisions) == (
        other.ok, other.notes, other.state_hash, other.events, other.decisions,
    )  # fmt: skip


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


def test_audit_in_workers_uses_their_derivations_and_reports_the_same(
    ready: Session, small_chunks: None, monkeypatch: pytest.MonkeyPatch, note: Any
) -> None:
    # notes first, so that the chunks holding samples are handed out after the Target's setup
    # was folded (6 chunks are in flight at a time)
    ready.ledger.append_batch([note(f"n{i}") for i in range(30)])
    ready.passed("e1", CAND1, gain=0.2)
    ready.screened("e2", CAND2)
    ready.run("samples.record", samples("e2-target", "target", experiment_id="e2",
                                        candidate=CAND2, gain=0.0))  # fmt: skip
    forged = _forge_verdict(ready, "e2-target")
    one = _audit(ready, 1, monkeypatch)
    parallel = _audit(ready, 2, monkeypatch)
    _same(one, parallel)
    assert [(f.event_id, f.rule) for f in parallel.findings] == [(forged, "R12")]
    assert one.derived_in_workers == 0 and one.derived_here == 4
    assert (parallel.derived_in_workers, parallel.derived_here) == (4, 0)


def _failing_run(datas: list[bytes], decode: Any, args: Any) -> Any:
    raise RuntimeError("extra work failed")


def test_failing_chunk_work_changes_nothing_verify_reports(
    ready: Session, small_chunks: None
) -> None:
    from perfledger.ledger.store import FORMAT_VERSION

    ready.passed("e1", CAND1, gain=0.2)
    taken: list[Any] = []
    seen: list[str] = []
    work = verify.ChunkWork(run=_failing_run, args=lambda: None, take=taken.append)
    report = verify.verify_store(
        ready.ledger.store, on_event=lambda e: seen.append(e.id),
        format_version=FORMAT_VERSION, workers=2, chunk_work=work,
    )  # fmt: skip
    plain = verify.verify_store(ready.ledger.store, format_version=FORMAT_VERSION, workers=1)
    assert report.ok and plain.ok and report.events == plain.events == len(seen)
    assert report.extra.get("verify_workers") == 2
    assert taken and all(t is None for t in taken)
    # the first chunk is small and alone, the others of CHUNK_EVENTS
    assert len(taken) == 1 + -(-(report.events - 3) // 4)


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
