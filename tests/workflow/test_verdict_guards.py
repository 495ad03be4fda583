"""A formal stage is judged on the whole test set, by statistics declared before the data (R12,
R2; :mod:`perfledger.commands.workflow.verdict_guards`): attacks on a real ledger through the
deciders, honest controls beside them, and the re-decision of events recorded under the rules
before these."""

from __future__ import annotations

from typing import Any

import pytest
from wf_scenario import (
    CAND2,
    CASES,
    TEST_SET_HASH,
    Session,
    aa_rows,
    baseline,
    evidence,
    experiment,
    make_pairs,
    measured_resolution,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.commands.workflow import deciders
from perfledger.commands.workflow.requests import (
    FinalAuditRecord,
    ReadinessRecord,
    VerdictRecord,
)
from perfledger.commands.workflow.verdict_guards import missing_cases
from perfledger.events.workflow import (
    PER_CASE_V2,
    R5_FINAL_AUDIT_ACCURACY,
    R11_SUBJECT_OWED,
)
from perfledger.events.workflow import TestSet as CaseSet
from perfledger.projections.verdict_explain import explain_verdict


def _ctx(session: Session, op: str, schema: int | None) -> deciders.DecisionContext:
    """A decision context as a new request (``schema`` None) or as the auditor re-decides an
    event recorded under ``schema``."""
    return deciders.DecisionContext(
        op=op, actor="agent", ts=session.clock, payload_of=session.ledger.payload, schema=schema
    )


def _one_case_target(
    session: Session, samples_id: str = "e1-target", stage: str = "target", **over: Any
) -> None:
    """Record ``stage`` samples that measure only case ``small`` (20 % better) of the test set's
    two cases (``over``: other arguments of :func:`wf_scenario.samples`)."""
    pairs = make_pairs(0.2, cases=("small",), tag=samples_id)
    session.run("samples.record", samples(samples_id, stage, pairs=pairs, **over))


# ------------------------------------------------------------------------ every case (R12)


def test_cheat_target_stage_measuring_only_the_winning_case_cannot_pass(ready: Session) -> None:
    ready.screened()
    _one_case_target(ready)
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    # the derivation of what was measured passes; the stage does not
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert any("leave out test case(s) ['large']" in n for n in verdict["notes"])
    assert explain_verdict(verdict)["condition"] == "missing_cases"
    refusal = ready.refused(
        "champion.select",
        {"target_id": "t1", "samples_id": "e1-target", "expected_current": "original"},
        "R13",
    )
    assert "not pass" in refusal.message


def test_r12_a_target_stage_measuring_every_case_still_passes(ready: Session) -> None:
    assert ready.passed()["status"] == "pass"
    assert ready.champion()["decision"] == "select"


def test_cheat_final_audit_leaving_out_a_case_cannot_pass(ready: Session) -> None:
    ready.passed()
    ready.champion()
    _one_case_target(ready, "e1-final", "final_audit")
    audit = ready.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-final"})
    assert audit["primary"]["status"] == "pass" and audit["status"] == "inconclusive"
    assert any("leave out test case(s) ['large']" in n for n in audit["notes"])


def test_r12_a_screen_may_measure_some_cases_and_is_told_which_it_left_out(
    ready: Session,
) -> None:
    ready.run("experiment.create", experiment())
    pairs = make_pairs(-0.3, cases=("small",), tag="s")
    ready.run("samples.record", samples("e1-screen", "screen", pairs=pairs))
    verdict = ready.run("verdict.record", {"samples_id": "e1-screen"})
    # a screen can still reject on the cases it measured (R11)
    assert verdict["status"] == "fail"
    assert not any("leave out" in n for n in verdict["notes"])


def test_missing_cases_names_the_unmeasured_cases_or_counts_unnamed_ones() -> None:
    named = CaseSet(hash=TEST_SET_HASH, case_count=2, cases=CASES)
    assert missing_cases(named, ["small", "small"]) == ["large"]
    assert missing_cases(named, ["large", "small"]) == []
    unnamed = CaseSet(hash=TEST_SET_HASH, case_count=3)
    assert missing_cases(unnamed, ["a", "b"]) == ["<1 unnamed case(s)>"]
    assert missing_cases(unnamed, ["a", "b", "c"]) == []


def test_missing_cases_of_an_unnamed_test_set_are_the_ones_its_aa_measured() -> None:
    unnamed = CaseSet(hash=TEST_SET_HASH, case_count=2)
    # `small` measured twice, under a second name: two distinct names, one case left out
    assert missing_cases(unnamed, ["small", "small-again"], known=["small", "large"]) == ["large"]
    assert missing_cases(unnamed, ["small", "large"], known=["small", "large"]) == []
    assert missing_cases(unnamed, ["x"], known=["small"]) == ["small"]


@pytest.mark.slow
def test_cheat_renaming_a_winning_case_in_an_unnamed_test_set_cannot_pass(bare: Session) -> None:
    """The test set names no cases (only its count, 2); the A/A measured ``small`` and ``large``.
    Target samples of ``small`` twice, the second time named ``small-again``, leave ``large``
    out although they have two distinct case names."""
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    body = readiness()
    body["test_set"] = {"hash": TEST_SET_HASH, "case_count": 2}
    bare.run("readiness.record", body)
    bare.run("metric-audit.record", metric_audit())
    bare.run("baseline.record", baseline())
    bare.measure_aa()
    bare.screened()
    pairs = make_pairs(0.2, cases=("small",), tag="a")
    again = make_pairs(0.2, cases=("small",), tag="b")
    for pair in again:
        pair["case"] = "small-again"
    bare.run("samples.record", samples("e1-target", "target", pairs=pairs + again))
    verdict = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert any("leave out test case(s) ['large']" in n for n in verdict["notes"])


def test_r12_verdicts_and_final_audits_recorded_before_the_rule_are_re_derived_without_it(
    ready: Session,
) -> None:
    ready.screened()
    _one_case_target(ready)
    state = ready.state()
    request = VerdictRecord(samples_id="e1-target")
    [old] = deciders.decide_verdict_record(
        state, request, _ctx(ready, "verdict.record", PER_CASE_V2)
    )
    assert old.payload.status == "pass"
    ready.run("verdict.record", {"samples_id": "e1-target"})
    # a final audit of a champion chosen when the rule did not exist yet
    ready.passed("e2", candidate=CAND2)
    ready.champion("e2")
    _one_case_target(ready, "e2-final", "final_audit", experiment_id="e2", candidate=CAND2)
    ready_state = ready.state()
    audit_req = FinalAuditRecord(target_id="t1", samples_id="e2-final")
    ctx = _ctx(ready, "final-audit.record", R5_FINAL_AUDIT_ACCURACY)
    [old_audit] = deciders.decide_final_audit_record(ready_state, audit_req, ctx)
    assert old_audit.payload.status == "pass"


# --------------------------------------------------------- statistics before the data (R2)


def _allow_regression() -> dict[str, Any]:
    body = readiness()
    body["statistics"] = {**body["statistics"], "allow_case_regression": True}
    return body


def _losing_case_samples(session: Session) -> None:
    """Target samples: ``small`` 40 % better, ``large`` 8 % worse in every call."""
    session.screened()
    pairs = make_pairs(0.4, cases=("small",), tag="t") + make_pairs(
        -0.08, cases=("large",), tag="u"
    )
    session.run("samples.record", samples("e1-target", "target", pairs=pairs))


@pytest.mark.slow
def test_cheat_allowing_a_case_regression_after_seeing_the_samples_is_refused(
    ready: Session,
) -> None:
    _losing_case_samples(ready)
    refusal = ready.refused("readiness.record", _allow_regression(), "R2")
    assert "allow_case_regression: False -> True" in refusal.message
    assert "e1-target" in refusal.message
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] != "pass" and verdict["primary"]["blocking"] == ["large"]


@pytest.mark.parametrize(
    "change",
    [{"aggregation": "total"}, {"confidence": 0.6}, {"allow_outside_samples": False}],
)
def test_cheat_changing_any_statistic_after_samples_is_refused(
    ready: Session, change: dict[str, Any]
) -> None:
    ready.screened()  # screen samples are data too
    body = readiness()
    body["statistics"] = {**body["statistics"], **change}
    ready.refused("readiness.record", body, "R2")


def test_r2_statistics_may_change_before_any_samples_and_stay_the_same_after(
    ready: Session,
) -> None:
    ready.run("readiness.record", _allow_regression())  # no samples yet
    _losing_case_samples(ready)
    ready.run("readiness.record", _allow_regression())  # the same statistics: accepted
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"


def test_r2_readiness_recorded_before_the_rule_is_re_decided_without_it(ready: Session) -> None:
    _losing_case_samples(ready)
    import msgspec

    request = msgspec.convert(_allow_regression(), ReadinessRecord)
    ctx = _ctx(ready, "readiness.record", R11_SUBJECT_OWED)
    [draft] = deciders.decide_readiness_record(ready.state(), request, ctx)
    assert draft.payload.statistics.allow_case_regression


def test_cheat_narrowing_the_test_set_after_measuring_one_case_cannot_pass(
    ready: Session,
) -> None:
    """A readiness narrowed to the winning case is refused after samples (R2); one appended on a
    concurrent branch and merged (the R2 check ran where there were no samples) leaves samples
    of a test set the Target no longer names: they cannot pass either (R12)."""
    import msgspec

    ready.screened()
    _one_case_target(ready)
    body = readiness()
    body["test_set"] = {"hash": "sha256:" + "b" * 16, "case_count": 1, "cases": ["small"]}
    assert "test_set.hash" in ready.refused("readiness.record", body, "R2").message
    state = ready.state()
    target = state.targets["t1"]
    assert target.readiness is not None
    narrowed = msgspec.structs.replace(
        target.readiness, test_set=msgspec.convert(body["test_set"], CaseSet)
    )
    state.targets["t1"] = msgspec.structs.replace(target, readiness=narrowed)
    request = VerdictRecord(samples_id="e1-target")
    [draft] = deciders.decide_verdict_record(state, request, _ctx(ready, "verdict.record", None))
    verdict = msgspec.to_builtins(draft.payload)
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert any("measured another test set" in n for n in verdict["notes"])
    assert explain_verdict(verdict)["condition"] == "missing_cases"


# ------------------------------------------------------ the resolution after the data (R4)


def _below_resolution_target(session: Session) -> None:
    """A measured resolution near 12 % (the cases' about 20 %: a wide A/A), then target samples
    about 8 % better: above the 5 % minimum effect, below the resolution (inconclusive)."""
    session.measure_aa(rows=aa_rows(spread=0.2))
    session.screened()
    session.run("samples.record", samples("e1-target", "target", gain=0.08))


def test_cheat_lowering_the_resolution_after_seeing_the_samples_is_refused(
    ready: Session,
) -> None:
    _below_resolution_target(ready)
    body, table = measured_resolution(ready.ledger, rows=aa_rows(spread=0.002))  # as many pairs
    refusal = ready.refused("resolution.record", body, "R4", table)
    assert "11.59 % -> 0.13 %" in refusal.message and "e1-target" in refusal.message
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "inconclusive"
    assert explain_verdict(verdict)["condition"] == "below_resolution"


def test_cheat_lowering_one_cases_resolution_after_samples_is_refused(ready: Session) -> None:
    _below_resolution_target(ready)
    lowered = aa_rows(spread=0.2, spreads={"large": 0.002})
    body, table = measured_resolution(ready.ledger, rows=lowered)
    assert (
        "case large 18.95 % -> 0.22 %"
        in ready.refused("resolution.record", body, "R4", table).message
    )
    # a record that leaves a case out is refused all the same when it lowers the one it holds
    body, table = measured_resolution(ready.ledger, rows=aa_rows(("small",), spread=0.15))
    assert "case small" in ready.refused("resolution.record", body, "R4", table).message


def test_r4_a_longer_aa_may_lower_the_resolution_after_samples(ready: Session) -> None:
    _below_resolution_target(ready)  # in force: 20 repeats
    assert ready.measure_aa(rows=aa_rows(spread=0.01, pairs=11))["repeats"] == 22
    # and the next, at those 22 repeats, may not lower it again
    body, table = measured_resolution(ready.ledger, rows=aa_rows(spread=0.002, pairs=11))
    assert "22 repeats" in ready.refused("resolution.record", body, "R4", table).message


def test_r4_a_resolution_may_be_raised_after_samples_and_lowered_before_any(
    ready: Session,
) -> None:
    ready.measure_aa(rows=aa_rows(spread=0.001))  # no samples yet: lower is fine
    _below_resolution_target(ready)
    raised = ready.measure_aa(rows=aa_rows(spread=0.3))
    assert raised["resolution"] > 0.15


def test_r4_a_resolution_recorded_before_the_rule_is_re_decided_without_it(
    ready: Session,
) -> None:
    import msgspec

    from perfledger.commands.workflow.requests import ResolutionRecord

    _below_resolution_target(ready)
    request = msgspec.convert(resolution(resolution=0.01), ResolutionRecord)
    ctx = _ctx(ready, "resolution.record", 1)
    [draft] = deciders.decide_resolution_record(ready.state(), request, ctx)
    assert draft.payload.resolution == 0.01


def test_cheat_verdict_rewritten_to_the_schema_before_the_every_case_rule_is_found() -> None:
    """A forger who rewrites a verdict to ``VerdictRecorded`` schema 3 (re-decided without the
    every-case rule) leaves it below what the Target's readiness (schema 4, same code) shows:
    the auditor's schema floor names that readiness."""
    from perfledger.commands.audit import schema_floor
    from perfledger.events.workflow import R2_STATISTICS_FROZEN, R12_EVERY_CASE

    floor = schema_floor.after(schema_floor.EMPTY, "ev-ready", "ReadinessRecorded", 4)
    assert R2_STATISTICS_FROZEN == 4
    shown = schema_floor.check(floor, "VerdictRecorded", R12_EVERY_CASE - 1)
    assert shown is not None and shown.event_id == "ev-ready"
    assert schema_floor.check(floor, "VerdictRecorded", R12_EVERY_CASE) is None
    assert schema_floor.check(floor, "FinalAuditRecorded", 4) is not None


def test_cheat_narrowing_the_test_set_under_the_same_hash_after_samples_is_refused(
    ready: Session,
) -> None:
    ready.screened()
    _one_case_target(ready)
    body = readiness()
    body["test_set"] = {"hash": TEST_SET_HASH, "case_count": 1, "cases": ["small"]}
    refusal = ready.refused("readiness.record", body, "R2")
    assert "test_set" in refusal.message
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "inconclusive"
