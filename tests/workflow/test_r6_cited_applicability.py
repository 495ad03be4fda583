"""R6: a claim cites evidence no more applicable than it was recorded. Evidence recorded as
``diagnostic`` (a knowledge query, a triage of another workload, a report measured elsewhere)
cannot enter an ROI bound by being cited ``same_boundary``; experiments recorded before the rule
(``ExperimentCreated`` schema < 3) are re-decided by the old rule."""

from __future__ import annotations

from wf_scenario import CAND1, Session, evidence, experiment

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import validate
from perfledger.commands.workflow.requests import dump
from perfledger.ledger.base import EventDraft


def _cite(body: dict, evidence_id: str) -> dict:
    for cited in body["claim"]["evidence"]:
        cited["evidence_id"] = evidence_id
    return body


def test_r6_diagnostic_evidence_cited_as_same_boundary_is_refused(ready: Session) -> None:
    ready.run("evidence.add", evidence("ev-diag", applicability="diagnostic"))
    error = ready.refused("experiment.create", _cite(experiment("e1"), "ev-diag"), "R6")
    assert "ev-diag" in error.message and "recorded as diagnostic" in error.message


def test_r6_conservative_bound_cited_as_same_boundary_is_refused(ready: Session) -> None:
    ready.run("evidence.add", evidence("ev-ub", applicability="conservative_upper_bound"))
    error = ready.refused("experiment.create", _cite(experiment("e1"), "ev-ub"), "R6")
    assert "may not be cited as same_boundary" in error.message


def test_r6_evidence_cited_as_recorded_or_weaker_is_accepted(ready: Session) -> None:
    ready.run("evidence.add", evidence("ev-sb", applicability="same_boundary"))
    payload = ready.run("experiment.create", _cite(experiment("e1", candidate=CAND1), "ev-sb"))
    assert payload["experiment_id"] == "e1"


def test_r6_audit_finds_diagnostic_evidence_planted_in_a_bound(ready: Session) -> None:
    """Written around the decider (a raw store append): the auditor's replay re-decides the
    experiment and finds the diagnostic evidence cited as same-boundary."""
    ready.run("evidence.add", evidence("ev-diag", applicability="diagnostic"))
    body = _cite(experiment("e1", candidate=CAND1), "ev-diag")
    ready.run("evidence.add", evidence("ev-sb", applicability="same_boundary"))
    honest = ready.run("experiment.create", _cite(experiment("e1", candidate=CAND1), "ev-sb"))
    planted_payload = {**honest, "experiment_id": "e2", "claim": {**honest["claim"]}}
    planted_payload["claim"]["evidence"] = body["claim"]["evidence"]
    body["experiment_id"] = "e2"
    request = {"op": "experiment.create", "body": dump(validate("experiment.create", body))}
    planted = ready.ledger.store.append(
        EventDraft("ExperimentCreated", planted_payload, "tampered-tool", request=request)
    )
    report = audit(ready.ledger)
    assert (planted.id, "R6") in {(f.event_id, f.rule) for f in report.findings}, report.findings
