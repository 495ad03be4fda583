"""A measured ratio beyond the Target's plausible bound (SPEC.md R12,
:mod:`perfledger.commands.workflow.plausibility`): flagged on the samples (derived, so the
auditor re-derives it), shown with the claim, and no champion until a review by another actor
names and explains each flag; the agent that wants the result cannot explain it itself, and a
review about something else clears nothing (``ChampionSelected`` 8, ``ReviewRecorded`` 2)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from wf_legacy import rules_at
from wf_scenario import CAND1, T1, Session, experiment, samples

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest
from perfledger.events.workflow import (
    R1_OBSERVED_DIRECTION,
    R4_RESOLUTION_AT_RUN_VERDICT,
    R11_OBSERVED_CALLS_FROM_COPIES,
    R12_IMPLAUSIBLE_BLOCKS_CHAMPION,
    R12_IMPLAUSIBLE_FINAL_AUDIT,
    R12_NAMED_REVIEW_CLEARS,
    R12_REVIEW_NAMES_FLAG,
)
from perfledger.projections.claims import claims

#: A 20x gain (improvement 0.95 of a lower-is-better latency): beyond the default 10x bound.
TWENTY_X = 0.95
SELECT = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}


def _big_claim(session: Session) -> None:
    """e1 claims 19x-31x end to end (f=0.999, s=1000), screened with a 20x measurement."""
    body = experiment("e1", candidate=CAND1)
    claim = body["claim"]
    claim.update(coverage=0.999, local_speedup=1000.0)
    del claim["stated_bound"]
    claim["expected_improvement"] = {"low": 1 - 1 / 19, "high": 1 - 1 / 31}  # time saved
    session.run("experiment.create", body)
    session.run("samples.record", samples("e1-screen", "screen", gain=TWENTY_X))
    session.run("verdict.record", {"samples_id": "e1-screen"})


def _target(session: Session) -> Any:
    session.record_measured(samples("e1-target", "target", gain=TWENTY_X))
    return session.run("verdict.record", {"samples_id": "e1-target"})


#: Both cases of e1-target's flag, as ``explains`` names them.
BOTH = ("small", "large")


def _review(session: Session, actor: str, dissent: bool = False,
            cases: tuple[str, ...] = BOTH, review_id: str | None = None) -> None:  # fmt: skip
    """``actor`` reviews e1-target's samples event, naming the implausible flag of ``cases``."""
    event_id = session.state().samples["e1-target"].event_id
    body = {"review_id": review_id or f"rv-{actor}", "reviewer": actor, "model_family": "human",
            "subject": "other", "subject_event": event_id,
            "challenge": "20x on a decode step: is work skipped?",
            "response": "the kernel was replaced by a table lookup that is exact for this model",
            "dissent_remains": dissent,
            "explains": [{"samples_id": "e1-target", "flag": "implausible", "case": case}
                         for case in cases]}  # fmt: skip
    execute(session.ledger, "review.record", body, actor=actor)


def test_r12_a_ratio_beyond_the_plausible_bound_is_flagged_and_blocks_the_champion(
    ready: Session,
) -> None:
    _big_claim(ready)
    assert _target(ready)["status"] == "pass"
    state = ready.state()
    flagged = state.samples["e1-target"].implausible
    assert set(flagged) == {"small", "large"} and all(r < 0.1 for r in flagged.values())
    (row,) = [c for c in claims(state) if c.experiment_id == "e1"]
    assert row.measured is not None and set(row.measured.implausible) == {"small", "large"}
    error = ready.refused("champion.select", SELECT, "R12")
    assert "plausible" in error.message and state.samples["e1-target"].event_id in error.hint
    # another actor's review, its dissent settled, explains it
    _review(ready, "reviewer-b")
    assert ready.champion("e1")["experiment_id"] == "e1"
    report = audit(ready.ledger)
    assert report.ok, report.findings


def test_cheat_the_agent_explaining_its_own_implausible_gain_is_refused(ready: Session) -> None:
    _big_claim(ready)
    _target(ready)
    _review(ready, "agent")  # the experiment's creator and the samples' recorder
    ready.refused("champion.select", SELECT, "R12")
    _review(ready, "reviewer-c", dissent=True, cases=())  # another actor who still disagrees
    ready.refused("champion.select", SELECT, "R12")


def test_cheat_a_review_of_the_samples_that_names_no_flag_clears_nothing(ready: Session) -> None:
    """F10: another actor's settled review of the flagged samples, about something else (it
    names no flag), does not clear the plausibility flag; one naming only one of the two
    flagged cases clears that one, and the refusal names the other."""
    _big_claim(ready)
    _target(ready)
    _review(ready, "reviewer-b", cases=())  # "the seed list looks fine": no flag named
    error = ready.refused("champion.select", SELECT, "R12")
    assert '"case": "small"' in error.hint and '"case": "large"' in error.hint
    _review(ready, "reviewer-c", cases=("small",))
    error = ready.refused("champion.select", SELECT, "R12")
    assert "large" in error.message and "small" not in error.message
    _review(ready, "reviewer-d", cases=("large",))
    assert ready.champion("e1")["experiment_id"] == "e1"
    report = audit(ready.ledger)
    assert report.ok, report.findings


def test_r12_a_review_may_name_only_a_flag_the_reviewed_samples_record(ready: Session) -> None:
    """``explains`` is checked against the reviewed samples: an unflagged case, a dissenting
    review that claims to explain, and a flag named twice are bad requests."""
    _big_claim(ready)
    _target(ready)
    with pytest.raises(BadRequest, match="no implausible flag on case 'medium'"):
        _review(ready, "reviewer-b", cases=("medium",))
    with pytest.raises(BadRequest, match="dissent_remains must be false"):
        _review(ready, "reviewer-b", dissent=True)
    with pytest.raises(BadRequest, match="named twice"):
        _review(ready, "reviewer-b", cases=("small", "small"))
    screen = ready.state().samples["e1-screen"].event_id
    body = {"review_id": "rv-x", "reviewer": "b", "model_family": "human", "subject": "other",
            "subject_event": screen, "challenge": "c", "response": "r", "dissent_remains": False,
            "explains": [{"samples_id": "e1-target", "flag": "implausible", "case": "small"}]}  # fmt: skip
    with pytest.raises(BadRequest, match="not the reviewed event"):
        execute(ready.ledger, "review.record", body, actor="reviewer-b")


def test_r12_a_ledger_written_before_reviews_named_flags_audits_clean(bare: Session) -> None:
    """An older perfledger (``ReviewRecorded`` 1, ``ChampionSelected`` 7): any settled review of
    the samples by another actor cleared the flag; the auditor re-decides by that rule: clean,
    while the current rule refuses that selection."""
    # that perfledger froze it and measured its baseline (before R17 judged the windows)
    with rules_at({"TargetFrozen": R1_OBSERVED_DIRECTION - 1, "BaselineRecorded": 2}):
        ready = bare.ready()
    # as it wrote them (its verdicts before R4's resolution at the run's start)
    with rules_at({"SamplesRecorded": R11_OBSERVED_CALLS_FROM_COPIES - 1,
                   "VerdictRecorded": R4_RESOLUTION_AT_RUN_VERDICT - 1}):  # fmt: skip
        _big_claim(ready)
        _target(ready)
    with rules_at({"ReviewRecorded": R12_REVIEW_NAMES_FLAG - 1}):
        _review(ready, "reviewer-b", cases=())
    ready.refused("champion.select", SELECT, "R12")  # decided now: the review named no flag
    with rules_at({"ChampionSelected": R12_NAMED_REVIEW_CLEARS - 1}):
        assert ready.champion("e1")["experiment_id"] == "e1"
    versions = {e.kind: e.envelope.schema for e in ready.ledger.events()}
    assert versions["ReviewRecorded"] == R12_REVIEW_NAMES_FLAG - 1
    assert versions["ChampionSelected"] == R12_NAMED_REVIEW_CLEARS - 1
    report = audit(ready.ledger)
    assert report.ok, [f.to_json() for f in report.findings]


def test_r12_a_target_may_declare_a_wider_plausible_bound(bare: Session) -> None:
    from wf_scenario import baseline, evidence, metric_audit, readiness, target_freeze

    bare.run("target.freeze", target_freeze(plausible_ratio=50.0))
    for op, body in (("evidence.add", evidence()), ("readiness.record", readiness()),
                     ("metric-audit.record", metric_audit()), ("baseline.record", baseline())):  # fmt: skip
        bare.run(op, body)
    bare.measure_aa()
    _big_claim(bare)
    _target(bare)
    assert isinstance(bare.state().samples["e1-target"].implausible, msgspec.UnsetType)
    assert bare.champion("e1")["experiment_id"] == "e1"


def test_r12_selections_recorded_before_the_rule_re_decide_as_before(ready: Session) -> None:
    _big_claim(ready)
    _target(ready)
    ctx = DecisionContext(
        op="champion.select", actor="auditor", ts=datetime(2026, 1, 2, tzinfo=UTC),
        request={"op": "champion.select", "body": SELECT}, payload_of=ready.ledger.payload,
        schema=R12_IMPLAUSIBLE_BLOCKS_CHAMPION - 1,
        actor_of=lambda event_id: ready.ledger.get(event_id).actor,
    )  # fmt: skip
    operations.decider("champion.select")(
        ready.state(), operations.validate("champion.select", SELECT), ctx
    )


def test_cheat_a_final_audit_on_implausible_samples_without_a_review_naming_them_is_no_pass(
    ready: Session,
) -> None:
    """R12 (``FinalAuditRecorded`` 12): the champion's final audit measured 20x again; no
    review names that flag, so the audit is ``inconclusive`` with the refusal's figures in its
    note, where ``FinalAuditRecorded`` 11 passed it (an old ledger re-derives as it did)."""
    _big_claim(ready)
    _target(ready)
    _review(ready, "reviewer-b")
    ready.champion("e1")
    ready.record_measured(samples("e1-final", "final_audit", gain=TWENTY_X))
    assert set(ready.state().samples["e1-final"].implausible) == {"small", "large"}
    request = {"target_id": T1, "samples_id": "e1-final"}
    ctx = DecisionContext(
        op="final-audit.record", actor="agent", ts=datetime(2026, 1, 2, tzinfo=UTC),
        request={"op": "final-audit.record", "body": request},
        schema=R12_IMPLAUSIBLE_FINAL_AUDIT - 1, payload_of=ready.ledger.payload,
    )  # fmt: skip
    [old] = operations.decider("final-audit.record")(
        ready.state(), operations.validate("final-audit.record", request), ctx
    )
    assert old.payload.status == "pass"
    final = ready.run("final-audit.record", request)
    assert final["status"] == "inconclusive"
    assert any("plausible bound" in n and "e1-final" in n for n in final["notes"]), final
    report = audit(ready.ledger)
    assert report.ok, report.findings
