"""Obligations an auditor can trust (SPEC.md R13, R14, R17, R18): a final audit belongs to the
champion it audited, R14 reconciliations are owed and block, foreign activity can be explained
after the samples, and ``resume`` offers only decisions the rules accept.

Every request goes through the real path (validate, decide on the folded state, append to a git
ledger) in-process; the read models are the ones the CLI prints.
"""

from __future__ import annotations

from wf_scenario import CAND1, CAND2, T1, Session, handoff, samples

from perfledger.projections.champions import current_champions
from perfledger.projections.handoff import ResumeContext, derive_handoff, render_markdown

CHAMPION_E1 = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}


# ------------------------------------------------------------------------------------ R13


def test_r13_final_audit_belongs_to_the_champion_it_audited(ready: Session) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    shown = current_champions(ready.state())[0]
    assert shown.final_audit_status == "none"  # never audited: none, not null or a pass
    ready.run("samples.record", samples("e1-final", "final_audit", gain=0.2))
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert current_champions(ready.state())[0].final_audit_status == "pass"
    # e2 beats the champion e1 and becomes champion: e1's pass is not e2's
    ready.run("experiment.create", _experiment_e2())
    for stage in ("screen", "target"):
        ready.run("samples.record", samples(f"e2-{stage}", stage, experiment_id="e2",
                                            candidate=CAND2, gain=0.1, reference=CHAMPION_E1))  # fmt: skip
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
    ready.run("samples.record", samples("e2-final", "final_audit", experiment_id="e2",
                                        candidate=CAND2, gain=0.25))  # fmt: skip
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e2-final"})
    state = ready.state()
    assert current_champions(state)[0].final_audit_status == "pass"
    assert derive_handoff(state, T1, ResumeContext(head="x")).primary_achieved is True


def test_r13_restore_original_needs_the_current_champions_own_failed_audit(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=-0.05))
    assert (
        ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})["status"]
        == "fail"
    )
    ready.run("experiment.create", _experiment_e2())
    for stage in ("screen", "target"):
        ready.run("samples.record", samples(f"e2-{stage}", stage, experiment_id="e2",
                                            candidate=CAND2, gain=0.1, reference=CHAMPION_E1))  # fmt: skip
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    ready.champion("e2", expected="e1")
    # e1's failed audit is not e2's: restoring the original needs e2's own failed audit
    ready.refused(
        "champion.select",
        {"target_id": T1, "decision": "restore_original", "expected_current": "e2"},
        "R13",
    )


def _experiment_e2() -> dict[str, object]:
    from wf_scenario import experiment

    return experiment("e2", candidate=CAND2)
