"""Obligations an auditor can trust (SPEC.md R13, R14, R17, R18): a final audit belongs to the
champion it audited, R14 reconciliations are owed and block, foreign activity can be explained
after the samples, and ``resume`` offers only decisions the rules accept.

Every request goes through the real path (validate, decide on the folded state, append to a git
ledger) in-process; the read models are the ones the CLI prints.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_scenario import BOUND_E1, CAND1, CAND2, CAND3, T1, Session, experiment, handoff, samples

from perfledger.app.next_steps import allowed_decisions
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import decider, execute, validate
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.requests import dump
from perfledger.events.workflow import R14_ONE_IMPROVEMENT, R17_EXPLAINED_BY_REVIEW
from perfledger.ledger.base import EventDraft
from perfledger.projections import amdahl
from perfledger.projections.champions import current_champions
from perfledger.projections.claims import claims, predicted_improvement
from perfledger.projections.handoff import ResumeContext, derive_handoff, render_markdown
from subprocess_env import isolated_env, perfledger_command

CHAMPION_E1 = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}


# ------------------------------------------------------------------------------------ R13


def test_r13_final_audit_belongs_to_the_champion_it_audited(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    shown = current_champions(ready.state())[0]
    assert shown.final_audit_status == "none"  # never audited: none, not null or a pass
    ready.record_measured(samples("e1-final", "final_audit", gain=0.2))
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert current_champions(ready.state())[0].final_audit_status == "pass"
    # e2 beats the champion e1 and becomes champion: e1's pass is not e2's
    ready.run("experiment.create", experiment("e2", candidate=CAND2))
    for stage in ("screen", "target"):
        ready.record_measured(samples(f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2,
                                      gain=0.1, reference=CHAMPION_E1))  # fmt: skip
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    ready.champion("e2", expected="e1")
    state = ready.state()
    shown = current_champions(state)[0]
    assert shown.champion == "e2" and shown.final_audit_status == "stale"
    assert shown.final_audit is not None and shown.final_audit.champion == "e1"
    handoff_now = derive_handoff(state, T1, ResumeContext(head=ready.ledger.head()))
    assert handoff_now.final_audit_status == "stale" and handoff_now.primary_achieved is False
    text = render_markdown(handoff_now)
    assert "final audit pass" not in text and "final audit stale" in text
    assert "Primary achieved: no" in text
    # the handoff may not claim the primary achieved on the predecessor's audit (R18)
    ready.refused("handoff.record", handoff(champion="e2", key_evidence=["ev-ncu"]), "R18")
    ready.record_measured(samples("e2-final", "final_audit", experiment_id="e2", candidate=CAND2,
                                  gain=0.25))  # fmt: skip
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e2-final"})
    state = ready.state()
    assert current_champions(state)[0].final_audit_status == "pass"
    assert derive_handoff(state, T1, ResumeContext(head="x")).primary_achieved is True


def test_r13_a_failed_final_audit_already_restored_what_restore_original_would(
    ready: Session,
) -> None:
    # from FinalAuditRecorded schema 6 the failed audit demotes e1 itself (R13): the original is
    # current again, so there is nothing left for `restore_original` to restore
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=-0.05))
    audit = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert audit["status"] == "fail"
    assert current_champions(ready.state())[0].champion == "original"
    error = ready.refused(
        "champion.select",
        {"target_id": T1, "decision": "restore_original", "expected_current": "original"},
        "R13",
    )
    assert "already the champion" in error.message


# ------------------------------------------------------------------------------------ R14


def _claimed(experiment_id: str, candidate: str, low: float, high: float, **claim: Any) -> dict:
    """An experiment body whose claim states ``[low, high]`` (the verdict's units: the fraction
    of time saved) and ``claim``."""
    body = experiment(experiment_id, candidate=candidate)
    body["claim"].update(claim)
    body["claim"]["expected_improvement"] = {"low": low, "high": high}
    return body


def test_r14_every_claim_states_its_expected_interval(ready: Session) -> None:
    body = experiment("e1", candidate=CAND1)
    del body["claim"]["expected_improvement"]
    error = ready.refused("experiment.create", body, "R14")
    assert "expected_improvement" in error.message and "expected_improvement" in error.hint
    # the claim's own bound as the fraction of time saved, as the upper end
    assert f"{1 - 1 / BOUND_E1:.6g}" in error.hint and "fraction of time saved" in error.hint


def test_r14_result_far_below_a_large_claim_owes_and_blocks_champion_selection(
    ready: Session,
) -> None:
    # f=0.99, s=1000: a 91x bound; the claim predicts 46x..91x and the target measures 9x
    bound = amdahl.amdahl_bound(0.99, 1000.0)
    ready.run("experiment.create", _claimed("e1", CAND1, 1 - 1 / 46, 1 - 1 / bound, coverage=0.99,
                                            local_speedup=1000.0, stated_bound=bound))  # fmt: skip
    ready.run("samples.record", samples("e1-screen", "screen", gain=1 - 1 / 9))
    ready.run("verdict.record", {"samples_id": "e1-screen"})
    ready.record_measured(samples("e1-target", "target", gain=1 - 1 / 9))
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass" and verdict["contradicts_claim"] is True
    assert any(n.startswith("R14") for n in verdict["notes"])
    error = ready.refused("champion.select", {"target_id": T1, "samples_id": "e1-target",
                                              "expected_current": "original"}, "R14")  # fmt: skip
    assert "'e1'" in error.message or "['e1']" in error.message
    ready.refused("experiment.create", experiment("e2", candidate=CAND2), "R14")
    ready.run("reconcile", {"experiment_id": "e1", "premise": "coverage", "explanation": "x",
                            "corrected_model": {"description": "f was 0.9", "coverage": 0.9}})  # fmt: skip
    assert ready.champion("e1")["experiment_id"] == "e1"


def test_r14_failed_screen_of_a_claim_predicting_the_minimum_effect_owes(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    # e2 predicts at least 10 % less latency (> the 5 % minimum effect); its screen fails: a
    # reconciliation is owed
    ready.run("experiment.create", _claimed("e2", CAND2, 0.10, 0.28))
    ready.run("samples.record", samples("e2-screen", "screen", experiment_id="e2",
                                        candidate=CAND2, gain=-0.05))  # fmt: skip
    verdict = ready.run("verdict.record", {"samples_id": "e2-screen"})
    assert verdict["status"] == "fail" and verdict["contradicts_claim"] is True
    assert "e2" in ready.state().targets[T1].pending
    (row,) = [r for r in claims(ready.state(), T1) if r.experiment_id == "e2"]
    assert row.reconciliation_owed is True  # `perfledger claims` shows it owed
    error = ready.refused("champion.select", {"target_id": T1, "samples_id": "e1-target",
                                              "expected_current": "original"}, "R14")  # fmt: skip
    assert "e2" in error.message
    ready.refused("experiment.create", experiment("e3", candidate=CAND3), "R14")
    ready.run("reconcile", {"experiment_id": "e2", "premise": "scope", "explanation": "x",
                            "corrected_model": {"description": "the copy stays"}})  # fmt: skip
    ready.champion("e1")


def test_r14_audit_finds_a_claim_without_interval_and_a_selection_while_owed(
    ready: Session,
) -> None:
    """Written around the deciders (raw store appends, schema 2): the auditor's replay re-checks
    R14 by the schema each event was recorded under."""
    ready.passed("e1", CAND1, gain=0.2)
    ready.passed("e2", CAND2, gain=-0.1)  # contradicts its claim: owes a reconciliation
    body = experiment("e3", candidate=CAND3)
    del body["claim"]["expected_improvement"]
    created = msgspec.to_builtins(ready.state().experiments["e2"].created)
    created.update(experiment_id="e3", candidate=body["candidate"])
    created["claim"]["expected_improvement"] = None
    request = {"op": "experiment.create", "body": dump(validate("experiment.create", body))}
    planted = ready.ledger.store.append(
        EventDraft("ExperimentCreated", created, "tampered-tool", request=request)
    )
    select = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}
    chosen = ready.ledger.store.append(
        EventDraft("ChampionSelected", {"target_id": T1, "decision": "select",
                   "experiment_id": "e1", "samples_id": "e1-target", "candidate_hash": CAND1,
                   "previous": "original"}, "tampered-tool",
                   request={"op": "champion.select", "body": select})
    )  # fmt: skip
    assert planted.schema >= 2 and chosen.schema >= 2  # the schemas R14 holds from
    report = audit(ready.ledger)
    found = {(f.event_id, f.rule) for f in report.findings}
    assert (planted.id, "R14") in found and (chosen.id, "R14") in found, report.findings


def test_r14_failed_screen_of_a_claim_admitting_less_owes_nothing(ready: Session) -> None:
    ready.run("experiment.create", _claimed("e1", CAND1, 0.0, 0.28))  # admits no gain at all
    ready.run("samples.record", samples("e1-screen", "screen", gain=-0.05))
    verdict = ready.run("verdict.record", {"samples_id": "e1-screen"})
    assert verdict["status"] == "fail" and verdict["contradicts_claim"] is False
    ready.run("experiment.create", experiment("e2", candidate=CAND2))


@pytest.mark.parametrize(("gain", "owes"), [(0.45, True), (0.2, False)],
                         ids=["above-the-claim", "inside-the-claim"])  # fmt: skip
def test_r14_a_final_audit_wholly_outside_the_claim_owes_a_reconciliation(
    ready: Session, gain: float, owes: bool
) -> None:
    """FinalAuditRecorded 10: e1 claimed [0, 0.3] and won inside it; its final audit above the
    whole interval is a prediction wrong (the other way) and owes a reconciliation like a
    target result outside it: no new experiment until reconciled. Inside: nothing owed."""
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.record_measured(samples("e1-final", "final_audit", gain=gain))  # R5: measured
    audit_payload = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert audit_payload["status"] == "pass"
    assert audit_payload["contradicts_claim"] is owes
    assert ("e1" in ready.state().targets[T1].pending) is owes
    if not owes:
        ready.run("experiment.create", experiment("e2", candidate=CAND2))
        return
    assert any("lies wholly above the claim's" in n for n in audit_payload["notes"])
    error = ready.refused("experiment.create", experiment("e2", candidate=CAND2), "R14")
    assert "reconcile" in error.hint
    assert ("reconcile", "e1") in _offered(ready)
    ready.run("reconcile", {"experiment_id": "e1", "premise": "coverage",
                            "explanation": "the loop was a larger share than profiled",
                            "corrected_model": {"description": "coverage 0.8"}})  # fmt: skip
    ready.run("experiment.create", experiment("e2", candidate=CAND2))
    assert audit(ready.ledger).ok


def test_r14_final_audits_recorded_before_schema_10_owe_nothing(ready: Session) -> None:
    """The same final audit decided under schema 9 (an auditor's replay of an old ledger):
    no contradiction recorded, nothing owed."""
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=0.45))
    body = {"target_id": T1, "samples_id": "e1-final"}
    ctx = DecisionContext(
        op="final-audit.record", actor="agent", ts=ready.clock, idempotency_key=None,
        request={"op": "final-audit.record", "body": body}, schema=9,
        payload_of=ready.ledger.payload,
    )  # fmt: skip
    (draft,) = decider("final-audit.record")(ready.state(), validate("final-audit.record", body),
                                              ctx)  # fmt: skip
    assert draft.payload.contradicts_claim is msgspec.UNSET
    assert not any(n.startswith("R14") for n in draft.payload.notes)


def test_r14_a_later_champions_final_audit_is_not_its_claim_and_owes_nothing(
    ready: Session,
) -> None:
    """e2 claimed its gain over e1 (its target stage measured against e1): its final audit
    against the original measures something else and owes nothing, however far above."""
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("experiment.create", experiment("e2", candidate=CAND2))
    against = {"kind": "champion", "experiment_id": "e1", "content_hash": CAND1}
    for stage in ("screen", "target"):
        body = samples(f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2,
                       reference=against, gain=0.2)  # fmt: skip
        if stage == "target":
            ready.record_measured(body)  # R5: a champion comes only from measured samples
        else:
            ready.run("samples.record", body)
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    ready.champion("e2", expected="e1")
    ready.record_measured(samples("e2-final", "final_audit", experiment_id="e2",
                                  candidate=CAND2, gain=0.5))  # fmt: skip
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e2-final"})
    assert final["contradicts_claim"] is False and not ready.state().targets[T1].pending


# ------------------------------------------------------------------------------------ R17


def _busy_target_samples(ready: Session, busy_pairs: tuple[int, ...]) -> None:
    """e1 screened; target samples whose pairs ``busy_pairs`` saw unexplained activity."""
    ready.screened()
    body = samples("e1-target", "target")
    for index in busy_pairs:
        body["pairs"][index]["monitor"] = {
            "observed": True, "foreign_activity": True, "flags": ["foreign_pid:4242"],
        }  # fmt: skip
    ready.run("samples.record", body)


def _reviewed(session: Session, samples_id: str, actor: str = "reviewer-b",
              dissent: bool = False) -> str:  # fmt: skip
    """A review of ``samples_id``'s event appended by ``actor``; returns its id (R17 evidence)."""
    review_id = f"rv-{actor.replace(' ', '-')}-{samples_id}"
    body = {"review_id": review_id, "reviewer": actor, "model_family": "human",
            "subject": "other", "subject_event": session.state().samples[samples_id].event_id,
            "challenge": "what was the other activity?", "response": "a job on another GPU",
            "dissent_remains": dissent}  # fmt: skip
    execute(session.ledger, "review.record", body, actor=actor)
    return review_id


def test_r17_foreign_activity_explained_after_the_samples_clears_the_attribution(
    ready: Session,
) -> None:
    _busy_target_samples(ready, (1, 4))
    # before the verdict: another actor's review first (an explanation cites one), and no
    # explanation is offered while no review exists (it would be refused)
    offered = _offered(ready)
    assert offered.index(("review.record", "e1-target")) < offered.index(
        ("verdict.record", "e1-target")
    )
    assert ("activity.explain", "e1-target") not in offered
    review = _reviewed(ready, "e1-target")
    offered = _offered(ready)
    assert ("review.record", "e1-target") not in offered
    assert offered.index(("activity.explain", "e1-target")) < offered.index(
        ("verdict.record", "e1-target")
    )
    explain = {"samples_id": "e1-target", "pairs": [1, 4],
               "explanation": "a backup job on GPU 1; GPU 0 clocks stayed at 1980 MHz",
               "review_id": review}  # fmt: skip
    recorded = ready.run("activity.explain", explain)
    assert recorded["pairs"] == [1, 4] and recorded["explained_by"] == "reviewer-b"
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass"
    assert any("backup job on GPU 1" in n and n.startswith("R17") for n in verdict["notes"])
    report = audit(ready.ledger)  # the explanation and the verdict that read it re-decide
    assert report.ok, report.findings


def test_r17_only_unexplained_windows_before_the_verdict_can_be_explained(
    ready: Session,
) -> None:
    _busy_target_samples(ready, (1, 4))
    why = "a backup job on GPU 1"
    review = _reviewed(ready, "e1-target")
    ready.refused("activity.explain", {"samples_id": "e1-target", "pairs": [0],
                                       "explanation": why, "review_id": review}, None)  # fmt: skip
    ready.refused("activity.explain", {"samples_id": "e1-target", "pairs": [99],
                                       "explanation": why, "review_id": review}, None)  # fmt: skip
    ready.refused("activity.explain", {"samples_id": "e1-target", "pairs": [1],
                                       "explanation": "unknown", "review_id": review}, "R17")  # fmt: skip
    ready.run("activity.explain", {"samples_id": "e1-target", "pairs": [1], "explanation": why,
                                   "review_id": review})  # fmt: skip
    ready.refused("activity.explain", {"samples_id": "e1-target", "pairs": [1],
                                       "explanation": why, "review_id": review}, None)  # fmt: skip
    # pair 4 is still unexplained: the attribution stays inconclusive
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "inconclusive"
    assert any("1 pair(s) overlap unexplained" in n for n in verdict["notes"])
    ready.refused("activity.explain", {"samples_id": "e1-target", "pairs": [4],
                                       "explanation": why, "review_id": review}, "R17")  # fmt: skip


def test_r17_explained_activity_counts_for_the_final_audit_too(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    busy = {"observed": True, "foreign_activity": True, "flags": ["clock_event:SW_POWER_CAP"]}
    body = samples("e1-final", "final_audit", gain=0.2)
    body["pairs"][3]["monitor"] = busy
    ready.record_measured(body)
    # the flagged window is explained before the final audit that it would leave
    # inconclusive: the review is offered first, not the audit alone
    offered = _offered(ready)
    assert offered.index(("review.record", "e1-final")) < offered.index(
        ("final-audit.record", "e1-final")
    )
    ready.run("activity.explain", {"samples_id": "e1-final", "pairs": [3],
                                   "explanation": "power cap set by the site for all jobs",
                                   "review_id": _reviewed(ready, "e1-final", "site admin")})  # fmt: skip
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["status"] == "pass"
    assert any("by site admin: power cap" in n for n in final["notes"])
    # shown where the verdict is: the handoff's gains and the claims read model
    shown = derive_handoff(ready.state(), T1, ResumeContext(head="x"))
    assert "by site admin: power cap" in render_markdown(shown)
    (row,) = [r for r in claims(ready.state(), T1) if r.experiment_id == "e1"]
    assert row.measured is not None and row.measured.samples_id == "e1-target"


@pytest.mark.slow
def test_r17_activity_explain_through_the_cli(ready: Session, tmp_path: Path) -> None:
    _busy_target_samples(ready, (2,))
    review = _reviewed(ready, "e1-target")
    ready.ledger.close()  # the CLI opens the ledger itself
    env = isolated_env(tmp_path / "home")
    path = str(tmp_path / "ledger")

    def cli(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*perfledger_command(), "--ledger", path, *args, "--json"],
                              input=stdin, capture_output=True, text=True, env=env, check=False)  # fmt: skip

    body = json.dumps({"pairs": [2], "explanation": "nightly backup on GPU 1",
                       "review_id": review})  # fmt: skip
    done = cli("activity", "explain", "--samples", "e1-target", "--request", "-", stdin=body)
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("verdict", "record", "--samples", "e1-target", "--request", "-", stdin="{}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nightly backup on GPU 1" in done.stdout
    done = cli("activity", "explain", "--samples", "e1-target", "--request", "-", stdin=body)
    assert done.returncode == 3 and json.loads(done.stdout)["error"]["rule"] == "R17"


def test_cheat_the_agent_explaining_foreign_activity_away_itself_is_refused(
    ready: Session,
) -> None:
    _busy_target_samples(ready, (1, 4))
    typed = {"samples_id": "e1-target", "pairs": [1, 4], "explanation": "nothing that matters"}
    assert "only by evidence" in ready.refused("activity.explain", typed, "R17").message
    ready.refused("activity.explain", {**typed, "explained_by": "site admin"}, "R17")
    own = _reviewed(ready, "e1-target", actor="agent")  # the experiment's own agent
    ready.refused("activity.explain", {**typed, "review_id": own}, "R17")
    dissenting = _reviewed(ready, "e1-target", actor="reviewer-c", dissent=True)
    ready.refused("activity.explain", {**typed, "review_id": dissenting}, "R17")
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] == "inconclusive"


def test_r17_typed_explanations_recorded_before_the_rule_re_decide_as_before(
    ready: Session,
) -> None:
    _busy_target_samples(ready, (1, 4))
    typed = {"samples_id": "e1-target", "pairs": [1, 4], "explanation": "a backup job on GPU 1"}
    ctx = DecisionContext(
        op="activity.explain", actor="agent", ts=ready.clock,
        request={"op": "activity.explain", "body": typed}, payload_of=ready.ledger.payload,
        schema=R17_EXPLAINED_BY_REVIEW - 1,
    )  # fmt: skip
    [draft] = decider("activity.explain")(ready.state(), validate("activity.explain", typed), ctx)
    assert draft.payload.explained_by == "agent"


# ------------------------------------------------------------------------------------ resume


def _offered(session: Session) -> list[tuple[str, str | None]]:
    """(op, about) of every decision ``resume`` offers on t1."""
    state = session.state()
    return [(d.op, d.about) for d in allowed_decisions(state, T1, session.ledger.payload)]


def test_resume_offers_no_stale_champion_selection(ready: Session) -> None:
    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2)  # against the original, like e1
    offered = _offered(ready)
    assert ("champion.select", "e1-target") in offered
    assert ("champion.select", "e2-target") in offered
    # the offered request is one the real path accepts: submit e1's as is
    (select,) = [d for d in allowed_decisions(ready.state(), T1, ready.ledger.payload)
                 if d.about == "e1-target"]  # fmt: skip
    assert select.request is not None
    assert ready.run(select.op, select.request)["experiment_id"] == "e1"
    offered = _offered(ready)
    # e2's pass was against the original, no longer the champion: stale (R11)
    assert ("champion.select", "e2-target") not in offered
    assert ("samples.record", "e2") in offered


def test_resume_offers_no_selection_during_a_conflict(ready: Session) -> None:
    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2)
    ready.passed("e3", CAND3)
    ready.champion("e1")
    ready.ledger.store.append(
        EventDraft(
            "ChampionSelected",
            {"target_id": T1, "decision": "select", "experiment_id": "e2",
             "samples_id": "e2-target", "candidate_hash": CAND2, "previous": "original"},
            "other-agent",
        )
    )  # fmt: skip
    offered = _offered(ready)
    assert [op for op, _ in offered if op == "champion.select"] == []
    assert offered[0][0] == "conflict.resolve"


def test_resume_offers_no_selection_or_experiment_while_a_reconciliation_is_owed(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2, gain=-0.1)  # contradicts its claim: owes a reconciliation
    ops = [op for op, _ in _offered(ready)]
    assert "reconcile" in ops
    assert "champion.select" not in ops and "experiment.create" not in ops


def test_r14_a_claim_is_compared_with_the_verdict_in_the_verdicts_units(ready: Session) -> None:
    # [20 %, 30 %] of the time saved; 27 % measured lies inside. Read as speedup - 1 (claims
    # recorded before ExperimentCreated schema 7), the same numbers mean [16.7 %, 23.1 %] saved,
    # which the 27 % would contradict.
    ready.run("experiment.create", _claimed("e1", CAND1, 0.2, 0.3))
    for stage in ("screen", "target"):
        ready.run("samples.record", samples(f"e1-{stage}", stage, gain=0.27))
        verdict = ready.run("verdict.record", {"samples_id": f"e1-{stage}"})
    assert verdict["primary"]["ci_low"] > 0.2 and verdict["primary"]["ci_high"] < 0.3
    assert verdict["contradicts_claim"] is False
    view = ready.state().experiments["e1"]
    assert view.rules_schema >= R14_ONE_IMPROVEMENT
    assert predicted_improvement(view, "lower_is_better") == (0.2, 0.3)
    older = msgspec.structs.replace(view, rules_schema=R14_ONE_IMPROVEMENT - 1)
    low, high = predicted_improvement(older, "lower_is_better")
    assert (low, high) == (pytest.approx(0.2 / 1.2), pytest.approx(0.3 / 1.3))
    assert high < verdict["primary"]["ci_low"]  # what the old meaning would have owed


def test_r14_a_final_audit_of_a_claim_already_reconciled_owes_nothing_more(ready: Session) -> None:
    """e1's target stage lay above its claim and was reconciled: its final audit, above the
    same claim, repeats an error already on record and owes nothing more."""
    ready.passed("e1", CAND1, gain=0.45)
    assert "e1" in ready.state().targets[T1].pending
    ready.run("reconcile", {"experiment_id": "e1", "premise": "coverage",
                            "explanation": "the loop was a larger share than profiled",
                            "corrected_model": {"description": "coverage 0.8"}})  # fmt: skip
    ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=0.45))
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["contradicts_claim"] is False and not ready.state().targets[T1].pending
