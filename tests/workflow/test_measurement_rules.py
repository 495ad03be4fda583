"""What a measurement found decides what it may support (R5, R12, R13): a candidate that failed
its accuracy check on any call of a formal stage cannot be champion, whatever its other pairs say
(the reference's failures stay the reference's); samples whose self-reported times the driver's
wall clock does not bear out cannot pass nor support a champion. Real ledger, real deciders.

The wall-clock check is the self-timed driver's (``workload_abba``): its tests run on a Target
whose primary the subject reports (``wf_legacy``, made ready as an older perfledger did), and
since ``ChampionSelected`` 7 / ``FinalAuditRecorded`` 11 such samples make no champion and pass
no final audit whatever the check says (R5, issue 34); the accuracy rules run on the observed
scenario (``wf_scenario``, the worker protocol)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import wf_legacy as legacy
from wf_legacy import before_reported
from wf_scenario import Session, experiment, make_pairs, samples

from perfledger.api import Ledger

PRIMARY = legacy.PRIMARY

#: The primary's values are scaled to ~0.5 s per value so that savings exceed the wall clock's
#: resolution (``perfledger.derive.wall_check.FLOOR_S``).
SCALE = 50.0


SELECT_E1 = {"target_id": "t1", "samples_id": "e1-target", "expected_current": "original"}


@pytest.fixture
def self_timed(tmp_path: Path) -> Iterator[legacy.Session]:
    """The conftest's ``self_timed`` session, its A/A measured at the pairs' scale (the
    reference watch compares each formal stage's reference with the A/A's medians, R11)."""
    ledger = Ledger.init(tmp_path / "ledger", name="wf", actor="agent")
    try:
        session = legacy.Session(ledger)
        with legacy.rules_at({"ReadinessRecorded": legacy.BEFORE_REPORTED["ReadinessRecorded"]}):
            session.up_to_baseline()
        rows = legacy.target_aa_rows(ledger)
        for row in rows:
            row["metrics"] = {k: [v * SCALE for v in vs] for k, vs in row["metrics"].items()}
        session.measure_aa(rows=rows)
        yield session
    finally:
        ledger.close()


def _decide(session: Any, op: str, body: dict[str, Any], schema: int | None = None) -> Any:
    """``op``'s decision on ``session``'s state (appending nothing), by the rule of ``schema``
    (None: the current one), as the auditor re-decides an event; returns its payload."""
    from perfledger.commands.registry import operations
    from perfledger.commands.workflow.deciders import DecisionContext

    ctx = DecisionContext(op=op, actor="agent", ts=session.clock, request={"op": op, "body": body},
                          payload_of=session.ledger.payload, schema=schema)  # fmt: skip
    [draft] = operations.decider(op)(session.state(), operations.validate(op, body), ctx)
    return draft.payload


def _timed_pairs(tag: str, *, wall_saving: bool, gain: float = 0.2) -> list[dict[str, Any]]:
    """Pairs with a primary gain of ``gain`` and the driver's wall time per call: the reported
    total plus 0.1 s of start-up (jittered), the candidate's wall time saving what it reports
    (``wall_saving``) or nothing (it reports time it did not save)."""
    pairs = legacy.make_pairs(gain, tag=tag)
    for k, pair in enumerate(pairs):
        pair["same_process"] = False
        pair["cand"]["call_id"] = pair["cand"]["call_id"] + "-cand"
        for side in ("ref", "cand"):
            pair[side]["values"][PRIMARY] = [v * SCALE for v in pair[side]["values"][PRIMARY]]
        ref_total = sum(pair["ref"]["values"][PRIMARY]) / 1e3
        cand_total = sum(pair["cand"]["values"][PRIMARY]) / 1e3
        jitter = 0.002 * ((k * 5) % 3 - 1)
        pair["ref"]["wall_s"] = ref_total + 0.1 + jitter
        pair["cand"]["wall_s"] = (cand_total if wall_saving else ref_total) + 0.1 - jitter
    return pairs


def test_r12_wall_clock_flag_makes_a_target_stage_inconclusive_and_r13_refuses_it(
    self_timed: legacy.Session,
) -> None:
    ready = self_timed
    ready.screened()
    body = legacy.samples("e1-target", "target", pairs=_timed_pairs("t", wall_saving=False))
    recorded = ready.run("samples.record", body)
    check = recorded["wall_check"]
    assert check["method"] == "wall_v2" and check["flagged"]
    assert {c["status"] for c in check["cases"] if c["metric"] == PRIMARY} == {"flagged"}
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["primary"]["status"] == "pass"  # the reported numbers alone would pass
    assert verdict["status"] == "inconclusive"
    assert any(n.startswith("R12: wall clock") for n in verdict["notes"])
    error = ready.refused(
        "champion.select",
        {"target_id": "t1", "samples_id": "e1-target", "expected_current": "original"},
        "R13",
    )
    assert "wall-clock check" in error.message and "e1-target" in error.message


def test_r12_wall_clock_consistent_samples_pass_but_make_no_champion(
    self_timed: legacy.Session,
) -> None:
    """The check bears the reported times out and the verdict passes; the figures are still the
    subject's own (``reported``): they supported a champion only before ``ChampionSelected`` 7."""
    ready = self_timed
    ready.screened()
    body = legacy.samples("e1-target", "target", pairs=_timed_pairs("t", wall_saving=True))
    recorded = ready.record_measured(body)  # the self-timed driver's samples
    assert recorded["wall_check"]["flagged"] is False
    assert {c["status"] for c in recorded["wall_check"]["cases"]} == {"consistent"}
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass" and verdict["notes"] == []
    assert verdict["samples_provenance"] == "reported"
    error = ready.refused("champion.select", SELECT_E1, "R5")
    assert "figures the subject reported" in error.message
    with before_reported("ChampionSelected"):  # the rule before: an old ledger selected it
        assert ready.champion()["experiment_id"] == "e1"


def test_samples_without_driver_wall_times_carry_no_wall_check(ready: Session) -> None:
    ready.screened()
    recorded = ready.run("samples.record", samples("e1-target", "target"))
    assert recorded["wall_check"] is None  # not measured by the workload driver


def test_samples_mixing_driver_timed_and_untimed_calls_are_refused(
    self_timed: legacy.Session,
) -> None:
    ready = self_timed
    ready.screened()
    pairs = _timed_pairs("t", wall_saving=True)
    del pairs[0]["cand"]["wall_s"]
    body = legacy.samples("e1-target", "target", pairs=pairs)
    error = ready.refused("samples.record", body, None)
    assert "record all or none" in error.message


def test_r5_candidate_failing_one_formal_call_cannot_be_champion(ready: Session) -> None:
    ready.screened()
    pairs = make_pairs(0.2, per_case=7, tag="t")
    pairs[4]["cand"]["correct"] = False
    ready.run("samples.record", samples("e1-target", "target", pairs=pairs))
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass"  # its 13 other pairs pass...
    error = ready.refused(
        "champion.select",
        {"target_id": "t1", "samples_id": "e1-target", "expected_current": "original"},
        "R5",
    )
    # ...but one failed call disqualifies it, and the refusal names that call
    assert f"e1-target/{pairs[4]['cand']['call_id']}" in error.message


def test_r5_reference_failure_is_not_counted_against_the_candidate(ready: Session) -> None:
    ready.screened()
    pairs = make_pairs(0.2, per_case=7, tag="t")
    pairs[4]["ref"]["correct"] = False  # the reference's failure (R11)
    ready.record_measured(samples("e1-target", "target", pairs=pairs))
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"
    assert ready.champion()["experiment_id"] == "e1"


def test_r5_screen_failures_do_not_disqualify_a_candidate(ready: Session) -> None:
    pairs = make_pairs(0.2, tag="s")
    pairs[0]["cand"]["correct"] = False  # a screen is not a formal stage
    ready.run("experiment.create", experiment("e1"))
    ready.run("samples.record", samples("e1-screen", "screen", pairs=pairs))
    ready.run("verdict.record", {"samples_id": "e1-screen"})
    ready.record_measured(samples("e1-target", "target"))
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"
    assert ready.champion()["experiment_id"] == "e1"


def test_r12_wall_clock_flag_makes_a_final_audit_inconclusive(self_timed: legacy.Session) -> None:
    """On a champion an older perfledger selected from self-timed samples: a flagged final
    audit is inconclusive by the wall clock; an honest one is inconclusive too now (R5: the
    figures are reported), and passed before ``FinalAuditRecorded`` 11."""
    ready = self_timed
    ready.passed()
    with before_reported("ChampionSelected"):
        ready.champion()
    body = legacy.samples("e1-final", "final_audit", pairs=_timed_pairs("f", wall_saving=False))
    assert ready.record_measured(body)["wall_check"]["flagged"]
    audit = ready.run("final-audit.record", {"target_id": "t1", "samples_id": "e1-final"})
    assert audit["primary"]["status"] == "pass" and audit["status"] == "inconclusive"
    assert any(n.startswith("R12: wall clock") for n in audit["notes"])
    honest = legacy.samples("e1-final-2", "final_audit", pairs=_timed_pairs("g", wall_saving=True))
    ready.refused("samples.record", honest, "R14")  # a champion gets one final audit
    # honest control: another champion (other code, measured against e1) whose wall clock
    # sees its saving: not flagged, but its figures are the subject's own
    champion_e1 = {"kind": "champion", "content_hash": legacy.CAND1, "experiment_id": "e1"}
    ready.run("experiment.create", legacy.experiment("e2", candidate=legacy.CAND2))
    for stage in ("screen", "target"):
        body = legacy.samples(f"e2-{stage}", stage, experiment_id="e2", candidate=legacy.CAND2,
                              reference=champion_e1)  # fmt: skip
        if stage == "target":
            ready.record_measured(body)
        else:
            ready.run("samples.record", body)
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    with before_reported("ChampionSelected"):
        ready.champion("e2", expected="e1")
    honest = legacy.samples("e2-final", "final_audit", experiment_id="e2",
                            candidate=legacy.CAND2, pairs=_timed_pairs("g", wall_saving=True))  # fmt: skip
    assert ready.record_measured(honest)["wall_check"]["flagged"] is False
    request = {"target_id": "t1", "samples_id": "e2-final"}
    before = legacy.BEFORE_REPORTED["FinalAuditRecorded"]  # the rule before: it passed
    assert _decide(ready, "final-audit.record", request, before).status == "pass"
    audit = ready.run("final-audit.record", request)
    assert audit["status"] == "inconclusive" and audit["samples_provenance"] == "reported"
    assert any("figures the subject reported" in n for n in audit["notes"])


def _padded_pairs() -> list[dict[str, Any]]:
    """The same work on both sides (the same values, the same wall time), the candidate's list
    padded with four values that never ran: its reported total is unchanged (the wall clock
    sees no saving to doubt), its median and mean collapse."""
    pairs = _timed_pairs("t", wall_saving=True, gain=0.0)
    for pair in pairs:
        pair["cand"]["values"][PRIMARY] = pair["ref"]["values"][PRIMARY] + [1e-4] * 4
    return pairs


def test_cheat_candidate_padding_its_values_with_ones_that_never_ran_is_flagged(
    self_timed: legacy.Session,
) -> None:
    ready = self_timed
    ready.screened()
    body = legacy.samples("e1-target", "target", pairs=_padded_pairs())
    recorded = ready.run("samples.record", body)
    check = recorded["wall_check"]
    assert check["method"] == "wall_v2" and check["flagged"]
    assert {c["status"] for c in check["cases"] if c["metric"] == PRIMARY} == {"flagged"}
    assert any("different numbers of values" in r for r in check["reasons"])
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["primary"]["status"] == "pass"  # the padded median alone would pass
    assert verdict["status"] == "inconclusive"
    if verdict.get("contradicts_claim"):  # R14 owes a reconciliation first; not under test
        ready.run("reconcile", {"experiment_id": "e1", "premise": "coverage", "explanation": "x",
                                "corrected_model": {"description": "y"}})  # fmt: skip
    error = ready.refused(
        "champion.select",
        {"target_id": "t1", "samples_id": "e1-target", "expected_current": "original"},
        "R13",
    )
    assert "wall-clock check" in error.message


def test_r12_samples_recorded_before_the_value_count_rule_are_rechecked_by_wall_v1(
    self_timed: legacy.Session,
) -> None:
    """The auditor re-decides samples by the schema they were recorded under: schema 4 by
    ``wall_v1`` (no value-count rule), schema 5 on by ``wall_v2``."""
    import msgspec

    from perfledger.commands.workflow import deciders
    from perfledger.commands.workflow.requests import SamplesRecord

    ready = self_timed
    ready.screened()
    state = ready.state()
    body = legacy.samples("e1-target", "target", pairs=_padded_pairs())
    request = msgspec.convert(body, SamplesRecord)

    def decide(schema: int | None) -> Any:
        ctx = deciders.DecisionContext(
            op="samples.record", actor="agent", ts=ready.clock, payload_of=ready.ledger.payload,
            schema=schema,
        )  # fmt: skip
        [draft] = deciders.decide_samples_record(state, request, ctx)
        return draft.payload.wall_check

    old, new = decide(4), decide(None)
    assert old.method == "wall_v1" and not old.flagged
    assert new.method == "wall_v2" and new.flagged and decide(5) == new


def test_cheat_candidate_moving_its_time_into_one_repeat_is_flagged(
    self_timed: legacy.Session,
) -> None:
    """Equal counts and equal totals (the wall clock sees nothing), but the candidate reports
    its three repeats as 1 %, 1 % and 298 % of their mean: its per-call median collapses."""
    pairs = _timed_pairs("t", wall_saving=True, gain=0.0)
    for pair in pairs:
        a, b = pair["ref"]["values"][PRIMARY]
        pair["ref"]["values"][PRIMARY] = [a / 2, a / 2, b]  # the same total
        mean = sum(pair["cand"]["values"][PRIMARY]) / 3
        pair["cand"]["values"][PRIMARY] = [0.01 * mean, 0.01 * mean, 2.98 * mean]
    ready = self_timed
    ready.screened()
    recorded = ready.run("samples.record", legacy.samples("e1-target", "target", pairs=pairs))
    check = recorded["wall_check"]
    assert check["flagged"], check
    assert any("per-call median improves" in r for r in check["reasons"]), check["reasons"]
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] != "pass"  # this Target's mean is not fooled; a median would be
    assert any(n.startswith("R12: wall clock") for n in verdict["notes"])


def test_honest_candidate_with_a_true_gain_and_equal_counts_is_not_flagged(
    self_timed: legacy.Session,
) -> None:
    ready = self_timed
    ready.screened()
    body = legacy.samples("e1-target", "target", pairs=_timed_pairs("t", wall_saving=True))
    recorded = ready.run("samples.record", body)
    assert recorded["wall_check"]["method"] == "wall_v2"
    assert recorded["wall_check"]["flagged"] is False, recorded["wall_check"]["reasons"]
