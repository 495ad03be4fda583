"""R14 applies to what was measured, not to what was recorded; a failed final audit demotes its
champion (SPEC.md R13, R14; :mod:`perfledger.commands.workflow.formal_runs`).

Every request goes through the real path (validate, decide on the folded state, append to a git
ledger) in-process. The ``test_cheat_*`` tests play the agent that wants a champion; each has an
honest control beside it.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_scenario import CAND1, CAND2, CAND3, T1, Session, experiment, measured, samples

from perfledger.app.next_steps import allowed_decisions
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import RuleRefused
from perfledger.events.workflow import (
    R13_FAILED_AUDIT_DEMOTES,
    R14_CODE_RESULTS_EXPERIMENT,
    R14_MEASURED_OBLIGATION,
    R14_ONE_FORMAL_RUN,
    R14_ONE_RESULT_SAMPLES,
    R14_UNJUDGED_BLOCKS_CHAMPION,
)
from perfledger.projections.champions import current_champions, lineage
from perfledger.projections.claims import claims
from perfledger.projections.workflow import evolve, initial_state
from subprocess_env import isolated_env, perfledger_command

MEASURED = {"source": "perfledger", "protocol": "workload_abba", "raw_table": "samples.json"}
CHAMPION_E1 = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}


def _start(session: Session, samples_id: str, stage: str = "target", experiment_id: str = "e1",
           protocol: str = "workload_abba") -> Any:  # fmt: skip
    return session.run("formal-run.start", {"experiment_id": experiment_id, "stage": stage,
                                            "samples_id": samples_id, "protocol": protocol})  # fmt: skip


def _measured_refusal(session: Session, body: dict[str, Any]) -> RuleRefused:
    """The refusal of measured ``samples.record`` ``body`` by its decider on the head (its raw
    table is checked before deciding, by ``execute``; the rule under test is the decider's)."""
    with pytest.raises(RuleRefused) as info:
        _redecide(session, "samples.record", body, None)
    return info.value


def _redecide(session: Session, op: str, body: dict[str, Any], schema: int | None) -> None:
    """Decide ``body`` as the auditor re-decides an event of ``op`` recorded under ``schema``
    (None: as a new decision; raises the refusal, if any)."""
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


# ------------------------------------------------------------------------ R14: what was measured


def test_r14_target_samples_owe_their_verdict_before_the_next_target_samples(
    ready: Session,
) -> None:
    ready.screened()
    ready.record_measured(samples("e1-target-1", "target", gain=0.2))
    error = ready.refused("samples.record", samples("e1-target-2", "target", gain=0.2), "R14")
    assert "e1-target-1" in error.message
    assert "perfledger verdict record --samples e1-target-1" in error.hint
    # judged, the result is the experiment's one target stage (R14: no optional stopping) ...
    ready.run("verdict.record", {"samples_id": "e1-target-1"})
    ready.refused("samples.record", samples("e1-target-2", "target", gain=0.2), "R14")
    # ... while the rule before it accepted the next target samples once the verdict was in
    _redecide(ready, "samples.record", samples("e1-target-2", "target", gain=0.2),
              R14_ONE_RESULT_SAMPLES - 1)  # fmt: skip


def test_cheat_rerunning_the_target_stage_without_verdicts_until_a_run_is_liked(
    ready: Session,
) -> None:
    # the claim predicts a 0-43 % gain; the first target run measures a loss (it would owe a
    # reconciliation once judged): the agent leaves it unjudged and runs again
    ready.screened()
    ready.run("samples.record", samples("e1-target-1", "target", gain=-0.3))
    ready.refused("samples.record", samples("e1-target-2", "target", gain=0.2), "R14")
    # nor is any champion selected on the Target while a target result has no verdict, even
    # from another experiment's passing one
    ready.screened("e2", CAND2)
    error = ready.refused("champion.select", {"target_id": T1, "samples_id": "e2-screen",
                                              "expected_current": "original"}, "R14")  # fmt: skip
    assert "e1-target-1" in error.message
    # judged, the loss is on the record (and owes its reconciliation, R14)
    verdict = ready.run("verdict.record", {"samples_id": "e1-target-1"})
    assert verdict["status"] == "fail" and verdict["contradicts_claim"] is True
    assert ready.state().targets[T1].pending


def test_r14_old_samples_and_champion_rules_re_decide_as_before(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.screened("e2", CAND2)
    ready.run("samples.record", samples("e2-target-1", "target", experiment_id="e2",
                                        candidate=CAND2, gain=0.2))  # fmt: skip
    second = samples("e2-target-2", "target", experiment_id="e2", candidate=CAND2, gain=0.2)
    # recorded under the version before the rule, a second unjudged target samples was accepted
    _redecide(ready, "samples.record", second, R14_MEASURED_OBLIGATION - 1)
    select = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}
    _redecide(ready, "champion.select", select, R14_UNJUDGED_BLOCKS_CHAMPION - 1)
    ready.refused("champion.select", select, "R14")  # the current rule


def test_r14_a_started_run_without_samples_counts_as_failed_and_owes_its_verdict(
    ready: Session,
) -> None:
    ready.screened()
    started = _start(ready, "e1-target-1")
    assert started["samples_id"] == "e1-target-1" and started["stage"] == "target"
    # killed before recording: the next run of the stage is refused, naming the run
    error = ready.refused("formal-run.start", {"experiment_id": "e1", "stage": "target",
                                               "samples_id": "e1-target-2",
                                               "protocol": "workload_abba"}, "R14")  # fmt: skip
    assert "e1-target-1" in error.message
    assert "perfledger verdict record --samples e1-target-1" in error.hint
    # `resume` offers its verdict, ready to submit, and nothing it would refuse
    offered = allowed_decisions(ready.state(), T1, ready.ledger.payload)
    (owed,) = [d for d in offered if d.about == "e1-target-1"]
    assert owed.op == "verdict.record" and owed.request == {"samples_id": "e1-target-1"}
    # its verdict is derived: fail, and the experiment's target result is a failure
    verdict = ready.run("verdict.record", {"samples_id": "e1-target-1"})
    assert verdict["status"] == "fail" and verdict["primary"]["n_pairs"] == 0
    assert "never recorded its samples" in verdict["primary"]["reason"]
    state = ready.state()
    assert state.experiments["e1"].status == "failed"
    (claim,) = [c for c in claims(state) if c.experiment_id == "e1"]
    assert claim.status == "failed"
    # the samples of a run judged failed are no longer recorded under its id
    late = {**samples("e1-target-1", "target", gain=0.2), "provenance": MEASURED}
    assert _measured_refusal(ready, late).rule == "R14"
    # judged, it is the experiment's one target stage, failed (R14: no optional stopping); the
    # rule before it let the experiment measure its target stage again
    again = {"experiment_id": "e1", "stage": "target", "samples_id": "e1-target-2",
             "protocol": "workload_abba"}  # fmt: skip
    error = ready.refused("formal-run.start", again, "R14")
    assert "optional stopping" in error.message and "reject" in error.hint
    _redecide(ready, "formal-run.start", again, R14_ONE_FORMAL_RUN - 1)


def test_cheat_a_formal_run_judged_pass_by_claim_is_refused(ready: Session) -> None:
    ready.screened()
    _start(ready, "e1-target-1")
    ready.refused("verdict.record", {"samples_id": "e1-target-1", "claimed_status": "pass"}, "R12")


def test_cheat_measured_target_samples_without_a_started_run_are_refused(ready: Session) -> None:
    # measured in a dry run (or by a script around the library), recorded only if liked
    ready.screened()
    body = {**samples("e1-target-1", "target", gain=0.2), "provenance": MEASURED}
    error = _measured_refusal(ready, body)
    assert error.rule == "R14" and "no started formal run" in error.message


def test_cheat_outside_samples_under_a_killed_runs_id_are_refused(ready: Session) -> None:
    # the run was killed after a look at its figures; hand-written samples would close it
    ready.screened()
    _start(ready, "e1-target-1")
    ready.refused("samples.record", samples("e1-target-1", "target", gain=0.2), "R14")
    # judged failed, the run is the experiment's one target stage (R14): no samples under a
    # fresh id either; honest control: other code in a new experiment, outside samples (the
    # readiness allows them) under its own id
    ready.run("verdict.record", {"samples_id": "e1-target-1"})
    ready.refused("samples.record", samples("e1-target-2", "target", gain=0.2), "R14")
    ready.screened("e2", CAND2)
    ready.run("samples.record", samples("e2-target-1", "target", experiment_id="e2",
                                        candidate=CAND2, gain=0.2))  # fmt: skip


def test_r14_formal_run_start_checks_the_stage_like_its_samples(ready: Session) -> None:
    ready.run("experiment.create", experiment("e1", candidate=CAND1))
    start = {"experiment_id": "e1", "stage": "target", "samples_id": "e1-target-1",
             "protocol": "workload_abba"}  # fmt: skip
    ready.refused("formal-run.start", start, "R11")  # screen before target
    ready.refused("formal-run.start", {**start, "stage": "final_audit"}, "R11")  # not champion
    ready.refused("formal-run.start", {**start, "stage": "screen"}, None)  # not a formal stage


def test_r14_audit_re_decides_started_runs_and_their_failed_verdicts(ready: Session) -> None:
    ready.screened()
    _start(ready, "e1-target-1")
    ready.run("verdict.record", {"samples_id": "e1-target-1"})
    report = audit(ready.ledger)
    assert report.ok, report.findings


# ------------------------------------------------------------- R13: a failed final audit demotes


def _champion_e1_then_e2(ready: Session) -> None:
    """e1 champion with a passing final audit, then e2 (measured against e1) champion."""
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.record_measured(samples("e1-final", "final_audit", gain=0.2))
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    ready.run("experiment.create", experiment("e2", candidate=CAND2))
    for stage in ("screen", "target"):
        ready.record_measured(samples(f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2,
                                      gain=0.1, reference=CHAMPION_E1))  # fmt: skip
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    ready.champion("e2", expected="e1")


def test_r13_failed_final_audit_makes_the_previous_champion_current_again(ready: Session) -> None:
    _champion_e1_then_e2(ready)
    ready.run("samples.record", samples("e2-final", "final_audit", experiment_id="e2",
                                        candidate=CAND2, gain=-0.05))  # fmt: skip
    audit_e2 = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e2-final"})
    assert audit_e2["status"] == "fail"
    state = ready.state()
    shown = current_champions(state)[0]
    # e1 is current again, with its own passing final audit
    assert shown.champion == "e1" and shown.final_audit_status == "pass"
    steps = lineage(state, T1)
    assert [(s.decision, s.champion) for s in steps] == [
        ("select", "e1"),
        ("select", "e2"),
        ("demotion", "e1"),
    ]
    assert steps[-1].samples_id == "e2-final" and steps[-1].demoted == "e2"
    assert state.final_audits["e2-final"].status == "fail"  # the failed audit stays
    assert audit(ready.ledger).ok


def test_cheat_re_running_the_final_audit_until_it_passes_is_refused(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.record_measured(samples("e1-final-1", "final_audit", gain=-0.05))
    assert ready.run("final-audit.record",
                     {"target_id": T1, "samples_id": "e1-final-1"})["status"] == "fail"  # fmt: skip
    assert current_champions(ready.state())[0].champion == "original"
    # its audit lies below its claim's interval: a reconciliation is owed (R14, FinalAudit 10)
    ready.run("reconcile", {"experiment_id": "e1", "premise": "scope",
                            "explanation": "the gain did not hold against the original",
                            "corrected_model": {"description": "no gain"}})  # fmt: skip
    error = ready.refused("samples.record", samples("e1-final-2", "final_audit", gain=0.2), "R13")
    assert "demoted" in error.message and "new experiment" in error.hint
    ready.refused("formal-run.start", {"experiment_id": "e1", "stage": "final_audit",
                                       "samples_id": "e1-final-2",
                                       "protocol": "workload_abba"}, "R13")  # fmt: skip
    # nor does the old passing target verdict make it champion again
    ready.refused("champion.select", {"target_id": T1, "samples_id": "e1-target",
                                      "expected_current": "original"}, "R13")  # fmt: skip
    # nor does the same code come back through a new experiment (R14: its failed final audit
    # is a formal result of that code); the rule before it let it
    error = ready.refused("experiment.create", experiment("e3", candidate=CAND1), "R14")
    assert "e1-final-1 (fail)" in error.message and "change the code" in error.hint
    _redecide(ready, "experiment.create", experiment("e3", candidate=CAND1),
              R14_CODE_RESULTS_EXPERIMENT - 1)  # fmt: skip
    # honest control: changed code comes back through a new experiment's target stage
    ready.passed("e3", CAND3, gain=0.2)
    assert ready.champion("e3")["experiment_id"] == "e3"


def test_r13_a_final_audit_run_that_recorded_nothing_fails_and_demotes(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    _start(ready, "e1-final-1", stage="final_audit")
    ready.refused("formal-run.start", {"experiment_id": "e1", "stage": "final_audit",
                                       "samples_id": "e1-final-2",
                                       "protocol": "workload_abba"}, "R14")  # fmt: skip
    audit_e1 = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final-1"})
    assert audit_e1["status"] == "fail"
    assert current_champions(ready.state())[0].champion == "original"


def test_r13_failed_final_audits_recorded_before_the_rule_leave_the_champion(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=-0.05))
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    # the same events, the final audit recorded under the schema before the rule
    state = initial_state()
    for event in ready.ledger.events():
        if event.kind == "FinalAuditRecorded":
            old = msgspec.structs.replace(event.envelope, schema=R13_FAILED_AUDIT_DEMOTES - 1)
            event = msgspec.structs.replace(event, envelope=old)
        state = evolve(state, event)
    target = state.targets[T1]
    assert target.champion == "e1" and target.final_audit_status == "fail"
    assert isinstance(target.demoted, msgspec.UnsetType)  # not encoded: old states hash as before


def test_cheat_a_dry_run_of_the_target_stage_is_refused(ready: Session, tmp_path: Path) -> None:
    # a dry run would show the target figures without a trace; the screen keeps its dry run
    ready.screened()
    head = ready.ledger.head()
    args = [*perfledger_command(), "--ledger", str(tmp_path / "ledger"), "measure", "workload",
            "--experiment", "e1", "--ref", "true", "--cand", "true", "--dry-run", "--json"]  # fmt: skip
    env = isolated_env(tmp_path / "home")
    done = subprocess.run([*args, "--stage", "target"], capture_output=True, text=True, env=env,
                          check=False)  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "R14" in done.stdout + done.stderr and "no dry run" in done.stdout + done.stderr
    assert ready.ledger.head() == head
