"""R17 from ``VerdictRecorded`` 11 / ``FinalAuditRecorded`` 14 (issue 34): foreign activity on
more than 20 % of a formal stage's pairs is lifted only by evidence, a settled review of those
samples by an actor other than the experiment's; never by the readiness flag
``statistics.allow_explained_foreign_activity`` (typed by the agent who wants the result), nor
by a review the experiment's own actor writes.

The cheats explain the loaded pairs as an older perfledger let them (``ActivityExplained`` 1: a
typed explanation), so that what lifts the 20 % limit is the only thing under test."""

from __future__ import annotations

from typing import Any

import pytest
from wf_legacy import rules_at
from wf_scenario import (
    ACTOR,
    Session,
    baseline,
    evidence,
    explain_by_review,
    make_pairs,
    metric_audit,
    readiness,
    samples,
    target_freeze,
)

from perfledger.commands.audit.replay import audit
from perfledger.commands.audit.schema_floor import IMPLIES
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow import deciders
from perfledger.commands.workflow.requests import VerdictRecord
from perfledger.errors import RuleRefused
from perfledger.events.workflow import R17_FOREIGN_SHARE_BY_REVIEW_VERDICT, SCHEMA_VERSIONS


def _ready(session: Session, *, flag: bool) -> None:
    session.run("target.freeze", target_freeze())
    body = readiness()
    if flag:  # what the agent who wants the champion types
        body["statistics"] = {**body["statistics"], "allow_explained_foreign_activity": True}
    for op, request in (("evidence.add", evidence()), ("readiness.record", body),
                        ("metric-audit.record", metric_audit()), ("baseline.record", baseline())):  # fmt: skip
        session.run(op, request)
    session.measure_aa()
    session.screened()


def _loaded_target(session: Session) -> str:
    """Target samples 20 % better whose every pair (12 of 12) saw foreign activity."""
    pairs = make_pairs(0.2, tag="e1-target")
    for pair in pairs:
        pair["monitor"] = {"observed": True, "foreign_activity": True, "explained": None}
    session.run("samples.record", samples("e1-target", "target", pairs=pairs))
    return "e1-target"


def _own_review_and_typed_explanation(session: Session, samples_id: str) -> None:
    """The experiment's own actor reviews its samples (dissent settled) and explains every
    loaded pair in words, as ``ActivityExplained`` 1 took it."""
    view = session.state().samples[samples_id]
    floor = max((IMPLIES.get((e.kind, e.envelope.schema), {}).get("ReviewRecorded", 1)
                 for e in session.ledger.events()), default=1)  # fmt: skip
    with rules_at({"ReviewRecorded": floor}):
        execute(session.ledger, "review.record", {
            "review_id": "rv-own", "reviewer": "me", "model_family": "human",
            "subject": "other", "subject_event": view.event_id,
            "challenge": "foreign activity in the windows",
            "response": "the host's load cannot move this metric", "dissent_remains": False,
        }, actor=ACTOR)  # fmt: skip
    # the current rule refuses the explanation: the review is the experiment's own
    with pytest.raises(RuleRefused) as refused:
        execute(session.ledger, "activity.explain", {
            "samples_id": samples_id, "pairs": list(range(12)),
            "explanation": "a backup job", "review_id": "rv-own"}, actor=ACTOR)  # fmt: skip
    assert refused.value.rule == "R17"
    with rules_at({"ActivityExplained": 1}):
        execute(session.ledger, "activity.explain", {
            "samples_id": samples_id, "pairs": list(range(12)),
            "explanation": "a backup job"}, actor=ACTOR)  # fmt: skip


def _decided_at(session: Session, samples_id: str, schema: int) -> Any:
    """The verdict as the auditor re-decides one recorded under ``schema``."""
    ctx = deciders.DecisionContext(
        op="verdict.record", actor=ACTOR, ts=session.clock, payload_of=session.ledger.payload,
        schema=schema, actor_of=lambda event_id: session.ledger.get(event_id).actor,
    )  # fmt: skip
    [draft] = deciders.decide_verdict_record(
        session.state(), VerdictRecord(samples_id=samples_id), ctx
    )
    return draft.payload


def test_r17_review_rule_versions_are_the_ones_assigned() -> None:
    assert SCHEMA_VERSIONS["VerdictRecorded"] >= R17_FOREIGN_SHARE_BY_REVIEW_VERDICT == 11


def test_cheat_readiness_flag_does_not_make_a_loaded_target_stage_a_pass(bare: Session) -> None:
    """The agent declares its metric immune to the host's load and explains the loaded pairs
    itself: the flag made that a pass (``VerdictRecorded`` 10); now it is inconclusive, the
    flag noted as ignored, the remedy named."""
    _ready(bare, flag=True)
    sid = _loaded_target(bare)
    _own_review_and_typed_explanation(bare, sid)
    assert _decided_at(bare, sid, R17_FOREIGN_SHARE_BY_REVIEW_VERDICT - 1).status == "pass"
    verdict = bare.run("verdict.record", {"samples_id": sid})
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert any(n.startswith("ignored (R17)") for n in verdict["notes"])
    note = next(n for n in verdict["notes"] if n.startswith("R17: foreign activity touched"))
    assert "12 of 12 pairs" in note and "an actor other than the experiment's" in note


def test_cheat_a_review_by_the_experiments_own_actor_does_not_lift_the_limit(
    bare: Session,
) -> None:
    _ready(bare, flag=False)
    sid = _loaded_target(bare)
    _own_review_and_typed_explanation(bare, sid)
    verdict = bare.run("verdict.record", {"samples_id": sid})
    assert verdict["status"] == "inconclusive"
    assert not any(n.startswith("reviewed (R17)") for n in verdict["notes"])


def test_r17_honest_another_actors_review_of_the_samples_lifts_the_limit(bare: Session) -> None:
    _ready(bare, flag=False)
    sid = _loaded_target(bare)
    assert explain_by_review(bare.ledger, sid, "a backup job on another core") == list(range(12))
    verdict = bare.run("verdict.record", {"samples_id": sid})
    assert verdict["status"] == "pass"
    [note] = [n for n in verdict["notes"] if n.startswith("reviewed (R17)")]
    assert "12 of 12 pairs" in note and "'reviewer'" in note


def test_r17_readiness_that_sets_the_flag_is_recorded_with_a_warning(bare: Session) -> None:
    from perfledger.app.decisions import foreign_flag_warning, record_decision

    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    body = readiness()
    body["statistics"] = {**body["statistics"], "allow_explained_foreign_activity": True}
    warned: list[str] = []
    done = record_decision(bare.ledger, "readiness.record", body, actor=ACTOR, warn=warned.append)
    assert not done.dry_run and bare.state().targets["t1"].readiness is not None
    [line] = [w for w in warned if "allow_explained_foreign_activity" in w]
    assert "ignored (R17)" in line and "actor other than the experiment's" in line
    assert foreign_flag_warning(readiness()) is None  # not set: nothing to warn about


def test_r17_a_ledger_recorded_before_the_review_rule_audits_as_before(bare: Session) -> None:
    """A session an earlier perfledger wrote (``BaselineRecorded`` 2, ``VerdictRecorded`` 10):
    the readiness flag let its explained, loaded target stage pass; the audit re-derives that
    verdict by its own rule and finds nothing."""
    before = {"BaselineRecorded": 2, "VerdictRecorded": R17_FOREIGN_SHARE_BY_REVIEW_VERDICT - 1}
    with rules_at(before):
        _ready(bare, flag=True)
        sid = _loaded_target(bare)
        explain_by_review(bare.ledger, sid, "a backup job on another core")
        verdict = bare.run("verdict.record", {"samples_id": sid})
    assert verdict["status"] == "pass"
    assert any(n.startswith("allowed by the readiness (R17)") for n in verdict["notes"])
    assert not any(n.startswith(("reviewed (R17)", "ignored (R17)")) for n in verdict["notes"])
    report = audit(bare.ledger)
    assert report.ok, report.findings
