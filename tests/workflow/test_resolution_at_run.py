"""A formal stage is judged with the resolution in force when its run started (R4, R14;
:func:`perfledger.commands.workflow.verdict_guards.r4_stage_resolution`): a longer A/A recorded
after a look at the stage's CI lowers the bar of later stages only. The cheat on a real ledger,
the honest order beside it, and a ledger of the rule before, which audits as it did."""

from __future__ import annotations

from wf_legacy import rules_at
from wf_scenario import Session, aa_rows, samples

from perfledger.commands.audit.replay import audit
from perfledger.events.workflow import (
    R4_RESOLUTION_AT_RUN_FINAL_AUDIT,
    R4_RESOLUTION_AT_RUN_VERDICT,
)
from perfledger.projections.verdict_explain import explain_verdict


def _looked_then_lowered(session: Session) -> float:
    """Target samples about 8 % better under a resolution near 12 % (inconclusive: above the
    5 % minimum effect, below the resolution), then a longer A/A (22 repeats) that lowers the
    resolution below 8 %, as R4's guard allows. Returns the lowered resolution (ratio)."""
    session.measure_aa(rows=aa_rows(spread=0.2))
    session.screened()
    session.run("samples.record", samples("e1-target", "target", gain=0.08))
    lowered = session.measure_aa(rows=aa_rows(spread=0.01, pairs=11))
    assert lowered["repeats"] == 22 and lowered["resolution"] < 0.05
    return float(lowered["resolution"])


def test_cheat_lowering_the_resolution_between_the_run_and_its_verdict_does_not_pass(
    ready: Session,
) -> None:
    _looked_then_lowered(ready)
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "inconclusive"
    assert explain_verdict(verdict)["condition"] == "below_resolution"
    assert verdict["primary"]["resolution"] > 0.1  # the 11.81 % committed at the run's start
    assert any("in force when the formal run of 'e1-target' started" in n for n in verdict["notes"])
    assert audit(ready.ledger).ok


def test_r4_a_stage_started_after_a_longer_aa_is_judged_with_it(ready: Session) -> None:
    lowered = _looked_then_lowered(ready)
    ready.run("verdict.record", {"samples_id": "e1-target"})
    # a new experiment, its run started after the lower resolution: judged with it, and passes
    ready.screened("e2", candidate="sha256:" + "2" * 16)
    ready.run(
        "samples.record",
        samples("e2-target", "target", experiment_id="e2", candidate="sha256:" + "2" * 16,
                gain=0.08),
    )  # fmt: skip
    verdict = ready.run("verdict.record", {"samples_id": "e2-target"})
    assert verdict["primary"]["resolution"] == lowered
    assert verdict["status"] == "pass", verdict["notes"]
    assert not any("in force when the formal run" in n for n in verdict["notes"])
    assert audit(ready.ledger).ok


def test_r4_a_verdict_recorded_before_the_rule_audits_as_it_was(bare: Session) -> None:
    with rules_at({"BaselineRecorded": 2}):  # as that perfledger recorded it
        ready = bare.ready()
    with rules_at({"VerdictRecorded": R4_RESOLUTION_AT_RUN_VERDICT - 1}):
        _looked_then_lowered(ready)
        verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    # that perfledger judged with the resolution in force at the verdict (the finding's pass)
    assert verdict["status"] == "pass"
    assert audit(ready.ledger).ok


def _champion_audited_then_lowered(session: Session) -> None:
    """Champion e1 (about 20 % better) under a resolution near 12 %; its final audit measures
    about 8 % (inconclusive against that resolution), then a longer A/A lowers it."""
    session.measure_aa(rows=aa_rows(spread=0.2))
    assert session.passed()["status"] == "pass"
    session.champion("e1")
    session.record_measured(samples("e1-final", "final_audit", gain=0.08))
    assert session.measure_aa(rows=aa_rows(spread=0.01, pairs=11))["resolution"] < 0.05


def test_cheat_lowering_the_resolution_before_the_final_audit_record_does_not_pass(
    ready: Session,
) -> None:
    _champion_audited_then_lowered(ready)
    audited = ready.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-final"})
    assert audited["status"] == "inconclusive" and audited["primary"]["resolution"] > 0.1
    assert any("in force when the formal run of 'e1-final' started" in n for n in audited["notes"])
    assert audit(ready.ledger).ok


def test_r4_a_final_audit_recorded_before_the_rule_audits_as_it_was(bare: Session) -> None:
    with rules_at({"BaselineRecorded": 2}):  # as that perfledger recorded it
        ready = bare.ready()
    with rules_at({"VerdictRecorded": R4_RESOLUTION_AT_RUN_VERDICT - 1,
                   "FinalAuditRecorded": R4_RESOLUTION_AT_RUN_FINAL_AUDIT - 1}):  # fmt: skip
        _champion_audited_then_lowered(ready)
        audited = ready.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-final"})
    assert audited["status"] == "pass"  # that perfledger judged with the lowered resolution
    assert audit(ready.ledger).ok
