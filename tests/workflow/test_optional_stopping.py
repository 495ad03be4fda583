"""No optional stopping (SPEC.md R13, R14): the evidence for a champion accounts for every formal
result of its code.

An experiment has one formal target stage and a champion one final audit; a run started and
never finished is that stage's failed result; code whose formal result did not pass does not
come back through a new experiment, and a champion whose code has such a result (seen after a
sync) is a conflict. Each ``test_cheat_*`` plays the agent that wants a champion and measures
again until a run passes; an honest control stands beside it. Every request goes through the
real path (validate, decide on the folded state, append to a git ledger).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import (
    CAND1,
    CAND2,
    CAND3,
    T1,
    Session,
    evidence,
    experiment,
    make_pairs,
    measured,
    samples,
)

from perfledger.api import Ledger
from perfledger.app.next_steps import allowed_decisions
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.events.workflow import (
    R14_CODE_RESULTS_CHAMPION,
    R14_CODE_RESULTS_EXPERIMENT,
    R14_ONE_FORMAL_RUN,
    R14_ONE_RESULT_SAMPLES,
    SCHEMA_VERSIONS,
)
from perfledger.projections.champions import current_champions, final_audit_standing
from perfledger.projections.handoff import ResumeContext, derive_handoff, render_markdown

SELECT_E1 = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}
CHAMPION_E1 = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}
BUSY = {"observed": True, "foreign_activity": True, "flags": ["foreign_pid:4242"]}


def _start(session: Session, samples_id: str, stage: str = "target",
           experiment_id: str = "e1") -> dict[str, Any]:  # fmt: skip
    return session.run("formal-run.start", {"experiment_id": experiment_id, "stage": stage,
                                            "samples_id": samples_id,
                                            "protocol": "workload_abba"})  # fmt: skip


def _start_body(
    samples_id: str, stage: str = "target", experiment_id: str = "e1"
) -> dict[str, Any]:
    return {"experiment_id": experiment_id, "stage": stage, "samples_id": samples_id,
            "protocol": "workload_abba"}  # fmt: skip


def _redecide(session: Session, op: str, body: dict[str, Any], schema: int) -> None:
    """Decide ``body`` as the auditor re-decides an event of ``op`` recorded under ``schema``
    (raises the refusal, if any)."""
    starting = None
    if op == "samples.record" and "provenance" not in body:
        # as the scenario records samples: measured (R5), in the formal run it starts (R14)
        body, starting = measured(body)[0], body["samples_id"]
    ctx = DecisionContext(
        op=op, actor="auditor", ts=datetime(2026, 1, 2, tzinfo=UTC),
        request={"op": op, "body": body}, payload_of=session.ledger.payload, schema=schema,
        starting_run=starting,
    )  # fmt: skip
    operations.decider(op)(session.state(), operations.validate(op, body), ctx)


def _inconclusive_target(session: Session, experiment_id: str = "e1",
                         candidate: str = CAND1) -> dict[str, Any]:  # fmt: skip
    """Screen, then target samples of one pair per case (too few to decide): inconclusive."""
    session.screened(experiment_id, candidate)
    one = samples(f"{experiment_id}-target", "target", experiment_id=experiment_id,
                  candidate=candidate, pairs=make_pairs(0.2, per_case=1, tag=experiment_id))  # fmt: skip
    session.record_measured(one)
    verdict = session.run("verdict.record", {"samples_id": f"{experiment_id}-target"})
    assert verdict["status"] == "inconclusive" and not verdict["contradicts_claim"]
    return verdict


def test_r14_the_rule_versions_are_the_ones_assigned() -> None:
    assert SCHEMA_VERSIONS["FormalRunStarted"] >= R14_ONE_FORMAL_RUN == 2
    assert SCHEMA_VERSIONS["SamplesRecorded"] >= R14_ONE_RESULT_SAMPLES == 13
    assert SCHEMA_VERSIONS["ExperimentCreated"] >= R14_CODE_RESULTS_EXPERIMENT == 8
    assert SCHEMA_VERSIONS["ChampionSelected"] >= R14_CODE_RESULTS_CHAMPION == 6


# ------------------------------------------------------------- one formal target stage


def test_cheat_killing_its_own_run_and_starting_another_is_refused(ready: Session) -> None:
    ready.screened()
    _start(ready, "e1-target-1")  # killed after a look at its first figures
    error = ready.refused("formal-run.start", _start_body("e1-target-2"), "R14")
    assert "perfledger verdict record --samples e1-target-1" in error.hint
    verdict = ready.run("verdict.record", {"samples_id": "e1-target-1"})
    assert verdict["status"] == "fail"  # a run that never finished is the stage's failure
    error = ready.refused("formal-run.start", _start_body("e1-target-2"), "R14")
    assert "optional stopping" in error.message and "e1-target-1" in error.message
    assert "perfledger reject --experiment e1" in error.hint
    # what is left: reject it (the refusal's hint), and change the code
    ready.run("reject", {"experiment_id": "e1", "closes": "implementation",
                         "reason": "its target run was killed"})  # fmt: skip
    ready.refused("experiment.create", experiment("e2", candidate=CAND1), "R14")
    ready.passed("e2", CAND2)
    assert audit(ready.ledger).ok


def test_cheat_re_measuring_after_an_inconclusive_target_verdict_is_refused(
    ready: Session,
) -> None:
    _inconclusive_target(ready)
    error = ready.refused("formal-run.start", _start_body("e1-target-2"), "R14")
    assert "e1-target" in error.message and "inconclusive" in error.message
    again = samples("e1-target-2", "target", gain=0.3)
    ready.refused("samples.record", again, "R14")
    # not offered either: no next step measures the experiment's target stage again
    offered = allowed_decisions(ready.state(), T1, ready.ledger.payload)
    assert not [d for d in offered if d.op == "samples.record" and d.about == "e1"]
    # the rules before it took both
    _redecide(ready, "formal-run.start", _start_body("e1-target-2"), R14_ONE_FORMAL_RUN - 1)
    _redecide(ready, "samples.record", again, R14_ONE_RESULT_SAMPLES - 1)


def test_r14_honest_one_target_stage_passes_and_is_selected(ready: Session) -> None:
    verdict = ready.passed()
    assert verdict["status"] == "pass"
    assert ready.champion()["experiment_id"] == "e1"
    assert audit(ready.ledger).ok


def test_r14_a_stale_passed_result_is_measured_again_against_the_new_champion(
    ready: Session,
) -> None:
    # e1 and e2 both pass against the original; e2 becomes champion, e1's pass is stale (R11)
    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2)
    ready.champion("e2")
    champion_e2 = {"kind": "champion", "content_hash": CAND2, "experiment_id": "e2"}
    # honest: a new question (against e2), not the same one again
    ready.record_measured(samples("e1-target-2", "target", reference=champion_e2))
    ready.run("verdict.record", {"samples_id": "e1-target-2"})
    # but only once: that result is now e1's target stage against e2
    ready.refused("samples.record", samples("e1-target-3", "target", reference=champion_e2), "R14")


# ---------------------------------------------------------------- the same code again


def test_cheat_a_new_experiment_with_the_same_code_is_refused(ready: Session) -> None:
    _inconclusive_target(ready)
    error = ready.refused("experiment.create", experiment("e2", candidate=CAND1), "R14")
    assert "e1-target (inconclusive)" in error.message and "optional stopping" in error.message
    assert "change the code" in error.hint
    _redecide(ready, "experiment.create", experiment("e2", candidate=CAND1),
              R14_CODE_RESULTS_EXPERIMENT - 1)  # fmt: skip
    # honest control: changed code is a new experiment
    ready.passed("e2", CAND2)
    assert ready.champion("e2")["experiment_id"] == "e2"


def test_cheat_rejecting_and_re_creating_the_same_code_is_refused(ready: Session) -> None:
    _inconclusive_target(ready)
    ready.run("reject", {"experiment_id": "e1", "closes": "implementation",
                         "reason": "inconclusive"})  # fmt: skip
    ready.refused("experiment.create", experiment("e2", candidate=CAND1), "R14")
    # the same code with an unjudged (or unfinished) target result does not come back either
    ready.screened("e3", CAND3)
    _start(ready, "e3-target", experiment_id="e3")
    ready.refused("experiment.create", experiment("e4", candidate=CAND3), "R14")


def test_r14_code_whose_screen_only_was_measured_comes_back(ready: Session) -> None:
    # a screen is no formal result: an experiment closed after its screen leaves its code free
    ready.screened()
    ready.run("reject", {"experiment_id": "e1", "closes": "implementation",
                         "reason": "integration bug found"})  # fmt: skip
    ready.passed("e2", CAND1)


# ---------------------------------------------------------------- one final audit


def test_cheat_re_measuring_an_inconclusive_final_audit_is_refused(
    ready: Session, tmp_path: Path
) -> None:
    ready.passed()
    ready.champion()
    ready.record_measured(samples("e1-final", "final_audit", monitor=BUSY))
    audited = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert audited["status"] == "inconclusive"
    error = ready.refused("formal-run.start", _start_body("e1-final-2", "final_audit"), "R14")
    assert "one final audit" in error.message and "unconfirmed" in error.hint
    ready.refused("samples.record", samples("e1-final-2", "final_audit"), "R14")
    # the champion stands, not confirmed, and says so wherever it is shown
    state = ready.state()
    assert current_champions(state)[0].champion == "e1"
    standing = final_audit_standing(state, state.targets[T1])
    assert standing.status == "inconclusive" and "not confirmed" in standing.text()
    handoff = derive_handoff(state, T1, ResumeContext(head="0" * 40))
    assert not handoff.primary_achieved and "not confirmed" in render_markdown(handoff)
    # its code is the champion's: it does not come back through a new experiment either
    ready.refused("experiment.create", experiment("e2", candidate=CAND1), "R11")
    _redecide(ready, "samples.record", samples("e1-final-2", "final_audit"),
              R14_ONE_RESULT_SAMPLES - 1)  # fmt: skip
    assert audit(ready.ledger).ok


def test_r14_honest_final_audit_passes_once(ready: Session) -> None:
    ready.passed()
    ready.champion()
    ready.record_measured(samples("e1-final", "final_audit"))
    audited = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert audited["status"] == "pass"
    assert final_audit_standing(ready.state(), ready.state().targets[T1]).text() == "pass"


# ------------------------------------------------------------------------ after a sync


def _clones(tmp_path: Path) -> tuple[Session, Session]:
    origin = Ledger.init(tmp_path / "origin.git", name="wf", actor="agent")
    Session(origin).ready().screened()
    origin.close()
    url = str(tmp_path / "origin.git")
    a, b = (Session(Ledger.clone(url, tmp_path / name)[0]) for name in ("a", "b"))
    return a, b


def _padding(session: Session, n: int) -> None:
    """``n`` events that raise the clone's Lamport clock (its later events sort after)."""
    for i in range(n):
        session.run("evidence.add", evidence(f"ev-pad-{i}"))


@pytest.mark.parametrize("a_first", [True, False], ids=["selection-after", "result-after"])
def test_cheat_a_champion_from_a_clone_that_re_ran_the_stage_conflicts(
    tmp_path: Path, a_first: bool
) -> None:
    a, b = _clones(tmp_path)
    try:
        # a: e1's target stage is inconclusive
        if not a_first:
            _padding(a, 6)  # a's result sorts after b's selection
        one = samples("e1-target-a", "target", pairs=make_pairs(0.2, per_case=1, tag="a"))
        a.record_measured(one)
        assert a.run("verdict.record", {"samples_id": "e1-target-a"})["status"] == "inconclusive"
        # b, a clone that had not seen it, runs the same stage again; it passes; b selects e1
        if a_first:
            _padding(b, 3)  # b's selection sorts after a's result
        b.record_measured(samples("e1-target-b", "target", gain=0.2))
        b.run("verdict.record", {"samples_id": "e1-target-b"})
        b.run("champion.select", {"target_id": T1, "samples_id": "e1-target-b",
                                  "expected_current": "original"})  # fmt: skip
        a.ledger.sync()
        b.ledger.sync()
        a.ledger.pull()
        state = a.state()
        (conflict,) = state.conflicts.values()
        assert conflict.kind == "unaccounted_champion"
        assert conflict.options == ["original", "e1"]
        keep_e1 = {"target_id": T1, "conflict_id": conflict.conflict_id, "keep": "e1",
                   "reason": "it passed"}  # fmt: skip
        error = a.refused("conflict.resolve", keep_e1, "R14")
        assert "e1-target-a (inconclusive)" in error.message
        a.refused("champion.select", {"target_id": T1, "samples_id": "e1-target-b",
                                      "expected_current": "original"}, "R13")  # fmt: skip
        a.run("conflict.resolve", {**keep_e1, "keep": "original", "reason": "R14"})
        assert a.state().targets[T1].champion is None
        a.refused("champion.select", {"target_id": T1, "samples_id": "e1-target-b",
                                      "expected_current": "original"}, "R14")  # fmt: skip
        a.ledger.sync()
        b.ledger.pull()
        assert a.ledger.state_hash() == b.ledger.state_hash()
        assert audit(a.ledger).ok  # each decision was right against what its clone saw
    finally:
        a.ledger.close()
        b.ledger.close()


def test_r14_a_champion_selected_under_the_rule_before_is_applied_after_a_sync(
    ready: Session,
) -> None:
    # the selection recorded before ChampionSelected 6 is re-decided (and folded) as before
    _inconclusive_target(ready)
    ready.screened("e2", CAND2)
    ready.record_measured(samples("e2-target", "target", experiment_id="e2",
                                        candidate=CAND2))  # fmt: skip
    ready.run("verdict.record", {"samples_id": "e2-target"})
    select = {"target_id": T1, "samples_id": "e2-target", "expected_current": "original"}
    _redecide(ready, "champion.select", select, R14_CODE_RESULTS_CHAMPION - 1)
    ready.run("champion.select", select)  # other code: nothing to account for


@pytest.mark.parametrize("pass_first", [True, False], ids=["pass-first", "pass-last"])
def test_cheat_a_passing_final_audit_from_a_clone_does_not_replace_an_inconclusive_one(
    tmp_path: Path, pass_first: bool
) -> None:
    origin = Ledger.init(tmp_path / "origin.git", name="wf", actor="agent")
    session = Session(origin).ready()
    session.passed()
    session.champion()
    origin.close()
    url = str(tmp_path / "origin.git")
    a, b = (Session(Ledger.clone(url, tmp_path / name)[0]) for name in ("a", "b"))
    try:
        _padding(a if pass_first else b, 3)  # the other clone's audit sorts first
        a.record_measured(samples("e1-final-a", "final_audit", monitor=BUSY))
        a.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final-a"})
        b.record_measured(samples("e1-final-b", "final_audit"))
        assert b.run("final-audit.record",
                     {"target_id": T1, "samples_id": "e1-final-b"})["status"] == "pass"  # fmt: skip
        a.ledger.sync()
        b.ledger.sync()
        a.ledger.pull()
        for clone in (a, b):
            target = clone.state().targets[T1]
            assert target.champion == "e1" and target.final_audit_status == "inconclusive"
        assert a.ledger.state_hash() == b.ledger.state_hash()
    finally:
        a.ledger.close()
        b.ledger.close()
