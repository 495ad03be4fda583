"""R15 as audit exposed it: a mechanism rejection needs discriminating evidence that the experiment
preregistered and then obtained, not the claim's own premise (fixed in ``rules.r15_...``)."""

from __future__ import annotations

import msgspec
from wf_scenario import T1, Session, evidence, experiment, target_freeze

from perfledger.commands.audit.replay import audit
from perfledger.ledger.base import EventDraft

PREREG = {"rejects": "mechanism", "discriminating_evidence": "dram bytes unchanged under ncu"}
REJECT = {"experiment_id": "e1", "closes": "mechanism", "reason": "dram bytes unchanged"}


def test_r15_mechanism_rejection_needs_discriminating_evidence_obtained_beyond_the_claim(
    ready: Session,
) -> None:
    ready.run("experiment.create", experiment(preregistration=PREREG))
    # the claim's own input (ev-ncu motivated the experiment) cannot refute its mechanism
    error = ready.refused("reject", {**REJECT, "discriminating_evidence_ids": ["ev-ncu"]}, "R15")
    assert "own claim" in error.message
    # evidence recorded for another Target is not this experiment's
    ready.run("target.freeze", target_freeze("t2"))
    ready.run("evidence.add", evidence("ev-t2", target_id="t2"))
    error = ready.refused("reject", {**REJECT, "discriminating_evidence_ids": ["ev-t2"]}, "R15")
    assert "another Target" in error.message
    ready.run("evidence.add", evidence("ev-dram", target_id=T1))
    assert ready.run("reject", {**REJECT, "discriminating_evidence_ids": ["ev-dram"]})[
        "closes"
    ] == ("mechanism")
    assert audit(ready.ledger).ok


def test_r15_mechanism_rejection_needs_a_preregistered_discriminating_evidence(
    ready: Session,
) -> None:
    """An experiment written around R9 (no discriminating evidence preregistered, through the raw
    store) can never have a mechanism closed, whatever evidence is cited later."""
    ready.run("experiment.create", experiment("e0"))
    created = msgspec.to_builtins(ready.state().experiments["e0"].created)
    created.update(experiment_id="e1", preregistration={"rejects": "mechanism"})
    created["candidate"]["content_hash"] = "sha256:" + "9" * 16
    planted = ready.ledger.store.append(EventDraft("ExperimentCreated", created, "old-tool"))
    ready.run("evidence.add", evidence("ev-dram", target_id=T1))
    error = ready.refused("reject", {**REJECT, "discriminating_evidence_ids": ["ev-dram"]}, "R15")
    assert "did not preregister" in error.message
    report = audit(ready.ledger)
    assert [(f.event_id, f.rule) for f in report.findings] == [(planted.id, "R9")]
