"""The draws a champion came out of are shown where it is read (R14; the findings' O2): the
experiments that reached a formal target stage on its Target and how many of them did not pass,
in ``champion show`` (the read model), the handoff and the audit's notes. R14 keys a repeated
draw on the code's bytes (a comment is a new draw): the count makes every draw visible."""

from __future__ import annotations

from wf_scenario import CAND2, CAND3, Session, samples

from perfledger.app.handoff import current_handoff
from perfledger.app.readmodels import TargetQuery, champion_of
from perfledger.commands.audit.replay import audit
from perfledger.projections.draws import formal_draws
from perfledger.projections.handoff import render_markdown

NOTE = "champion e3 of Target t1 after 3 formal target stage(s) on this Target, 2 not passing"


def _failed_target(session: Session, experiment_id: str, candidate: str) -> None:
    """A screened experiment whose target stage fails (about 5 % slower), judged and
    reconciled (R14: its failed claim is owed a reconciliation before the next one)."""
    session.screened(experiment_id, candidate=candidate)
    session.record_measured(
        samples(f"{experiment_id}-target", "target", experiment_id=experiment_id,
                candidate=candidate, gain=-0.05),
    )  # fmt: skip
    verdict = session.run("verdict.record", {"samples_id": f"{experiment_id}-target"})
    assert verdict["status"] == "fail"
    if experiment_id in session.state().targets["t1"].pending:
        session.run("reconcile", {
            "experiment_id": experiment_id, "premise": "cost",
            "explanation": "the kernel was memory bound",
            "corrected_model": {"description": "memory bound"}})  # fmt: skip


def test_r14_a_champion_after_failed_draws_shows_their_count(ready: Session) -> None:
    assert formal_draws(ready.state(), "t1").experiments == 0
    _failed_target(ready, "e1", "sha256:" + "4" * 16)
    _failed_target(ready, "e2", CAND2)
    assert ready.passed("e3", candidate=CAND3)["status"] == "pass"
    ready.champion("e3")
    draws = formal_draws(ready.state(), "t1")
    assert (draws.experiments, draws.not_passing) == (3, 2)
    shown = champion_of(ready.ledger, TargetQuery(target_id="t1"), snapshot=False).to_json()
    assert shown["formal_draws"] == {
        "experiments": 3, "not_passing": 2,
        "text": "3 formal target stage(s) on this Target, 2 not passing",
    }  # fmt: skip
    _, handoff, _ = current_handoff(ready.ledger, "t1", no_target_hint="freeze one")
    assert "- Champion drawn after 3 formal target stage(s) on this Target, 2 not passing" in (
        render_markdown(handoff)
    )
    report = audit(ready.ledger)
    assert report.ok and NOTE in report.notes, report.notes


def test_r14_no_draws_line_while_the_original_is_champion(ready: Session) -> None:
    _failed_target(ready, "e1", CAND2)
    _, handoff, _ = current_handoff(ready.ledger, "t1", no_target_hint="freeze one")
    assert "Champion drawn after" not in render_markdown(handoff)
    assert not any("formal target stage" in n for n in audit(ready.ledger).notes)
    shown = champion_of(ready.ledger, TargetQuery(target_id="t1"), snapshot=False).to_json()
    assert shown["formal_draws"]["not_passing"] == 1


def test_r14_the_audit_notes_a_started_run_that_recorded_no_samples(ready: Session) -> None:
    ready.screened()
    ready.run("formal-run.start", {"experiment_id": "e1", "stage": "target",
                                   "samples_id": "e1-target", "protocol": "workload_abba"})  # fmt: skip
    (note,) = [n for n in audit(ready.ledger).notes if "e1-target" in n]
    assert "recorded no samples: it counts as failed" in note and "not yet recorded" in note
    ready.run("verdict.record", {"samples_id": "e1-target"})
    report = audit(ready.ledger)
    assert report.ok and any("e1-target" in n and "judged as failed" in n for n in report.notes)


def test_r14_a_finished_run_is_not_noted(ready: Session) -> None:
    ready.passed()
    assert not any("recorded no samples" in n for n in audit(ready.ledger).notes)
