"""The auditor checks samples' provenance (R5): samples that claim to be measured by perfledger
must carry the raw per-call table their provenance names, as an artifact of their event."""

from __future__ import annotations

import json

from wf_scenario import Session, samples

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import validate
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.commands.workflow.requests import dump
from perfledger.ledger.base import Artifact, EventDraft

MEASURED = {"source": "perfledger", "protocol": "workload_abba", "raw_table": "samples.json"}


def _plant(session: Session, payload: dict[str, object], artifacts: dict[str, Artifact]) -> str:
    """Append a SamplesRecorded through the raw store (what a forger with write access could
    do), with its request; returns the event id."""
    body = {k: v for k, v in payload.items() if k not in (
        "kind", "ref_failures", "cand_failures", "unexplained_activity")}  # fmt: skip
    request = {"op": "samples.record", "body": dump(validate("samples.record", body))}
    draft = EventDraft("SamplesRecorded", payload, "tampered-tool", request=request,
                       artifacts=artifacts)  # fmt: skip
    return session.ledger.store.append(draft).id


def test_r5_audit_finds_measured_samples_without_their_raw_table(ready: Session) -> None:
    ready.screened()
    body = {**samples("e1-target", "target"), "provenance": MEASURED}
    payload = {"kind": "SamplesRecorded", **body, "ref_failures": 0, "cand_failures": 0,
               "unexplained_activity": 0}  # fmt: skip
    forged = _plant(ready, payload, {})
    report = audit(ready.ledger)
    found = [f for f in report.findings if f.event_id == forged]
    # R14 too: measured target samples of no started formal run (SamplesRecorded schema 7)
    assert [f.rule for f in found] == ["R5", "R14"], [f.to_json() for f in report.findings]
    assert "raw table 'samples.json'" in found[0].message and not report.ok


def test_r5_audit_finds_measured_samples_whose_raw_table_re_derives_nothing(
    ready: Session,
) -> None:
    ready.screened()
    body = {**samples("e1-target", "target"), "provenance": MEASURED}
    payload = {"kind": "SamplesRecorded", **body, "ref_failures": 0, "cand_failures": 0,
               "unexplained_activity": 0}  # fmt: skip
    # a table bound to these samples but of no kind: it holds no pairs to re-derive, which
    # samples recorded under the current schema may not lean on (real tables are re-derived in
    # tests/kernels/test_measure_raw_table_bound.py)
    table = Artifact(json.dumps({"binding": binding_of(body)}).encode(), "application/json")
    planted = _plant(ready, payload, {"samples.json": table})
    report = audit(ready.ledger)
    found = [f for f in report.findings if f.event_id == planted]
    # R14 too: measured target samples of no started formal run (SamplesRecorded schema 7)
    assert [f.rule for f in found] == ["R5", "R14"], [f.to_json() for f in report.findings]
    assert "of kind None" in found[0].message
