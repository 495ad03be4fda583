"""The reference watched too (SPEC.md R11, ``SamplesRecorded`` schema 13): in a formal stage
whose reference is the original, a reference slower than its own baseline by more than the
bound makes the comparison invalid, with the figures in the reason.

These tests go through the real decide-and-append path on recorded pairs (the candidate that
slowed its reference is written as its pairs); ``tests/app/test_measure_workload.py`` holds the
honest control in real processes, and says why no real-process cheat is there.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from wf_scenario import (
    CASES,
    PRIMARY,
    T1,
    Session,
    aa_rows,
    baseline,
    evidence,
    make_pairs,
    metric_audit,
    readiness,
    samples,
    target_freeze,
)

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.reference_watch import baseline_bound
from perfledger.events.workflow import (
    R11_REFERENCE_WATCHED,
    R11_REFERENCE_WATCHED_VERDICT,
    R11_WATCHED_AGAINST_AA,
    R11_WATCHED_AGAINST_AA_SAMPLES,
    SCHEMA_VERSIONS,
)


def _per_case_baseline(session: Session) -> None:
    """Freeze, ready, audit, then a baseline per case at the level ``make_pairs`` gives the
    reference (case ``i``: 10 ms x (1 + 0.3 i)), then the A/A."""
    session.run("target.freeze", target_freeze())
    session.run("evidence.add", evidence())
    session.run("readiness.record", readiness())
    session.run("metric-audit.record", metric_audit())
    values, cases = [], []
    for index, case in enumerate(CASES):
        level = 10.0 * (1.0 + 0.3 * index)
        for jitter in (0.998, 1.0, 1.002, 1.004):
            values.append(level * jitter)
            cases.append(case)
    session.run("baseline.record", baseline(values=values, cases=cases))
    session.measure_aa()


@pytest.fixture
def watched(bare: Session) -> Session:
    _per_case_baseline(bare)
    return bare


def _slowed(pairs: list[dict[str, Any]], factor: float, case: str | None = None) -> list[Any]:
    """``pairs`` whose reference's primary is ``factor`` times slower (in ``case``, or all)."""
    out = copy.deepcopy(pairs)
    for pair in out:
        if case is None or pair["case"] == case:
            pair["ref"]["values"][PRIMARY] = [v * factor for v in pair["ref"]["values"][PRIMARY]]
    return out


def _redecide(session: Session, op: str, body: dict[str, Any], schema: int) -> Any:
    starting = None
    if op == "samples.record" and "provenance" not in body:
        # as the scenario records samples: measured (R5), in the formal run it starts (R14)
        body, starting = session.as_measured(body)[0], body["samples_id"]
    ctx = DecisionContext(
        op=op, actor="auditor", ts=datetime(2026, 1, 2, tzinfo=UTC),
        request={"op": op, "body": body}, payload_of=session.ledger.payload, schema=schema,
        starting_run=starting,
    )  # fmt: skip
    return operations.decider(op)(session.state(), operations.validate(op, body), ctx)


def test_r11_the_rule_versions_are_the_ones_assigned() -> None:
    assert R11_REFERENCE_WATCHED == 13 and R11_REFERENCE_WATCHED_VERDICT == 8
    assert R11_WATCHED_AGAINST_AA == 4 and R11_WATCHED_AGAINST_AA_SAMPLES == 14
    assert SCHEMA_VERSIONS["SamplesRecorded"] >= R11_WATCHED_AGAINST_AA_SAMPLES
    assert SCHEMA_VERSIONS["ResolutionEstimated"] >= R11_WATCHED_AGAINST_AA


def test_cheat_a_candidate_that_slows_the_reference_is_not_a_pass(watched: Session) -> None:
    """The candidate runs at the original's baseline speed but left the reference 40 % slower
    (a burning child, a poisoned cache): measured against the slowed reference it "saves"
    29 %; the reference's own baseline shows the comparison is invalid."""
    watched.screened()
    pairs = _slowed(make_pairs(1.0 - 1.0 / 1.4, tag="slow"), 1.4)
    for pair in pairs:  # the candidate: the baseline's own speed (within 1 %)
        pair["cand"]["values"][PRIMARY] = [v * 1.4 for v in pair["cand"]["values"][PRIMARY]]
    recorded = watched.run("samples.record", samples("e1-target", "target", pairs=pairs))
    flagged = recorded["reference_slowed"]
    assert set(flagged) == set(CASES)
    # compared with the A/A's median of each case (SamplesRecorded 14), the baseline's level too
    assert all(f["aa_slower_by"] == pytest.approx(0.4, abs=0.01) for f in flagged.values())
    # the verdict recorded before the rule passed on the same samples
    old = _redecide(watched, "verdict.record", {"samples_id": "e1-target"},
                    R11_REFERENCE_WATCHED_VERDICT - 1)  # fmt: skip
    assert old[0].payload.status == "pass"
    verdict = watched.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["primary"]["status"] == "pass"  # the numbers alone would pass ...
    assert verdict["status"] == "inconclusive"  # ... the comparison is invalid
    (note,) = [n for n in verdict["notes"] if n.startswith("R11: the comparison is invalid")]
    assert "40." in note and "against its A/A" in note and "ms" in note
    assert audit(watched.ledger).ok


def _at_baseline(pairs: list[Any], factor: float, case: str | None = None) -> list[Any]:
    """``pairs`` whose candidate runs ``factor`` slower too (in ``case``, or all): with the
    reference slowed by ``factor``, the candidate is at the baseline's own speed there."""
    out = copy.deepcopy(pairs)
    for pair in out:
        if case is None or pair["case"] == case:
            pair["cand"]["values"][PRIMARY] = [v * factor for v in pair["cand"]["values"][PRIMARY]]
    return out


def test_cheat_slowing_the_reference_in_one_case_only_is_flagged(watched: Session) -> None:
    # in its last case the candidate has no gain of its own (the baseline's speed there), and
    # a reference slowed 30 % makes it look 23 % faster
    watched.screened()
    pairs = _slowed(make_pairs(1.0 - 1.0 / 1.3, tag="one"), 1.3, case=CASES[-1])
    pairs = _at_baseline(pairs, 1.3, case=CASES[-1])
    recorded = watched.run("samples.record", samples("e1-target", "target", pairs=pairs))
    assert set(recorded["reference_slowed"]) == {CASES[-1]}
    assert watched.run("verdict.record", {"samples_id": "e1-target"})["status"] != "pass"


def test_r11_a_drifted_reference_does_not_invalidate_a_gain_beyond_its_baseline(
    watched: Session,
) -> None:
    """Honest control: the reference ran 14 % slower than its baseline (a formal stage
    interleaves the subjects, the baseline's calls ran in a row: the CPU session's final audit
    drifted so on a quiet host), but the candidate beats the baseline itself by far more than
    the threshold: the slowing made nothing, the result stands."""
    watched.screened()
    pairs = _slowed(make_pairs(0.5, tag="drift"), 1.14)
    pairs = _at_baseline(pairs, 1.14)
    recorded = watched.run("samples.record", samples("e1-target", "target", pairs=pairs))
    assert "reference_slowed" not in recorded
    assert watched.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"


def test_r11_honest_reference_at_its_baseline_passes(watched: Session) -> None:
    watched.screened()
    recorded = watched.run("samples.record", samples("e1-target", "target", gain=0.2))
    assert "reference_slowed" not in recorded
    assert watched.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"


def test_r11_a_reference_faster_than_its_baseline_is_not_flagged(watched: Session) -> None:
    # a faster reference makes a candidate look worse, never better: not the cheat
    watched.screened()
    pairs = _slowed(make_pairs(0.2, tag="fast"), 0.8)
    recorded = watched.run("samples.record", samples("e1-target", "target", pairs=pairs))
    assert "reference_slowed" not in recorded


def test_cheat_a_slowed_reference_in_the_final_audit_is_not_a_pass(watched: Session) -> None:
    watched.passed()
    watched.champion()
    # no gain of its own: the candidate at the baseline's speed, the reference 50 % slower
    pairs = _at_baseline(_slowed(make_pairs(1.0 - 1.0 / 1.5, tag="fa"), 1.5), 1.5)
    recorded = watched.record_measured(samples("e1-final", "final_audit", pairs=pairs))
    assert set(recorded["reference_slowed"]) == set(CASES)
    audited = watched.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert audited["status"] == "inconclusive"
    assert any(n.startswith("R11: the comparison is invalid") for n in audited["notes"])


def test_r11_samples_recorded_before_the_rule_carry_no_flag(watched: Session) -> None:
    watched.screened()
    body = samples("e1-target", "target", pairs=_slowed(make_pairs(0.2, tag="old"), 1.4))
    [draft] = _redecide(watched, "samples.record", body, R11_REFERENCE_WATCHED - 1)
    assert draft.payload.reference_slowed is msgspec.UNSET


def test_r11_a_baseline_without_cases_is_not_compared(ready: Session) -> None:
    # what is compared is per case: a baseline recorded without cases says nothing of any
    ready.screened()
    pairs = _slowed(make_pairs(0.2, tag="nc"), 1.4)
    recorded = ready.run("samples.record", samples("e1-target", "target", pairs=pairs))
    assert "reference_slowed" not in recorded


def test_r11_the_baseline_bound_widens_with_its_own_spread() -> None:
    assert baseline_bound([10.0]) == 0.0
    tight = baseline_bound([9.99, 10.0, 10.01, 10.0])
    loose = baseline_bound([9.0, 10.0, 11.0, 10.0])
    assert 0.0 < tight < 0.01 < loose


def test_cheat_a_baseline_inflated_when_measured_does_not_switch_the_watch_off(
    bare: Session,
) -> None:
    """The agent measured the baseline under its own load (3x slower: calls in a row, in place),
    the A/A without it, then slowed only the reference in the target stage: the reference
    matches the inflated baseline, but the A/A (two workers of the original, interleaved as a
    formal stage is) shows it 2x slower than itself, so the comparison is invalid (R11,
    ``SamplesRecorded`` schema 14); recorded before the rule, the same samples were not
    flagged."""
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    bare.run("readiness.record", readiness())
    bare.run("metric-audit.record", metric_audit())
    values, cases = [], []
    for index, case in enumerate(CASES):
        for jitter in (0.998, 1.0, 1.002, 1.004):
            values.append(3.0 * 10.0 * (1.0 + 0.3 * index) * jitter)
            cases.append(case)
    bare.run("baseline.record", baseline(values=values, cases=cases))
    resolution = bare.measure_aa(rows=aa_rows())  # the A/A without the load: the original's level
    assert set(resolution["per_case_median"]) == set(CASES)
    assert resolution["per_case_median"][CASES[0]] == pytest.approx(10.0, rel=0.01)
    bare.screened()
    pairs = _at_baseline(_slowed(make_pairs(0.0, tag="hog"), 2.0), 1.0)  # no gain of its own
    body = samples("e1-target", "target", pairs=pairs)
    before = _redecide(bare, "samples.record", body, R11_WATCHED_AGAINST_AA_SAMPLES - 1)
    assert before[0].payload.reference_slowed is msgspec.UNSET  # under the inflated baseline
    recorded = bare.run("samples.record", body)
    flagged = recorded["reference_slowed"]
    assert set(flagged) == set(CASES)
    assert all(f["aa_slower_by"] == pytest.approx(1.0, abs=0.02) for f in flagged.values())
    assert all("slower_by" not in f for f in flagged.values())  # the baseline saw nothing
    verdict = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] != "pass"
    (note,) = [n for n in verdict["notes"] if n.startswith("R11: the comparison is invalid")]
    assert "against its A/A" in note
    assert audit(bare.ledger).ok
