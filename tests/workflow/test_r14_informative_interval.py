"""R14: a claim's predicted interval must be narrow enough to be contradicted. A claim predicting
a gain may not include a loss, and its upper speedup is at most ``R14_MAX_SPAN`` times its lower
one (the upper end stays capped by the claim's own bound, R7). The interval is in the verdict's
units (R12: the fraction of time saved for the scenario's lower-is-better primary). Experiments
recorded under an earlier ``ExperimentCreated`` schema are re-decided by their own rule (the
interval in speedup - 1 before :data:`R14_ONE_IMPROVEMENT`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest
from wf_scenario import (
    CAND1,
    T1,
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.requests import dump
from perfledger.errors import RuleRefused
from perfledger.events.workflow import R14_INFORMATIVE_INTERVAL, R14_MAX_SPAN, R14_ONE_IMPROVEMENT
from perfledger.ledger.base import EventDraft
from perfledger.projections import amdahl

#: f=0.99, s=1000: a 91x bound.
BIG_BOUND = amdahl.amdahl_bound(0.99, 1000.0)
#: The same bound as the fraction of time saved (the verdict's units).
BIG_SAVED = 1.0 - 1.0 / BIG_BOUND


def _saved(speedup: float) -> float:
    """An end-to-end speedup as the fraction of time it saves (R12, lower-is-better)."""
    return 1.0 - 1.0 / speedup


def _claim(low: float, high: float, *, f: float = 0.99, s: float = 1000.0, c: float = 0.0) -> dict:
    """An ``experiment.create`` body whose claim has coverage ``f``, local speedup ``s``, added
    cost ``c`` (bound computed by the tool) and the interval ``[low, high]``."""
    body = experiment("e1", candidate=CAND1)
    claim = body["claim"]
    claim.update(coverage=f, local_speedup=s, added_cost=c)
    del claim["stated_bound"]
    claim["expected_improvement"] = {"low": low, "high": high}
    return body


def _replay_decide(ready: Session, body: dict, schema: int) -> None:
    """Decide ``body`` as the auditor re-decides an event recorded under ``schema``."""
    ctx = DecisionContext(
        op="experiment.create", actor="auditor", ts=datetime(2026, 1, 1, tzinfo=UTC),
        request={"op": "experiment.create", "body": body}, payload_of=ready.ledger.payload,
        schema=schema,
    )  # fmt: skip
    operations.decider("experiment.create")(
        ready.state(), operations.validate("experiment.create", body), ctx
    )


def test_r14_interval_from_no_gain_to_the_bound_is_refused_with_an_accepted_lower_end(
    ready: Session,
) -> None:
    error = ready.refused("experiment.create", _claim(0.0, BIG_SAVED), "R14")
    assert "too wide" in error.message
    hinted = re.search(r'"low": ([0-9.e+-]+)', error.hint or "")
    assert hinted is not None, error.hint
    low = float(hinted.group(1))
    assert BIG_BOUND * (1.0 - low) == pytest.approx(R14_MAX_SPAN)  # speedups BIG/4 .. BIG
    created = ready.run("experiment.create", _claim(low, BIG_SAVED))
    assert created["figures"]["predicted_low"] == low


def test_r14_a_result_an_order_of_magnitude_below_an_accepted_claim_owes_a_reconciliation(
    ready: Session,
) -> None:
    # the widest accepted claim up to a 91x bound starts at 22.8x: a measured 9x lies outside
    ready.run("experiment.create", _claim(_saved(BIG_BOUND / R14_MAX_SPAN), BIG_SAVED))
    ready.run("samples.record", samples("e1-screen", "screen", gain=1 - 1 / 9))
    ready.run("verdict.record", {"samples_id": "e1-screen"})
    ready.run("samples.record", samples("e1-target", "target", gain=1 - 1 / 9))
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["contradicts_claim"] is True
    ready.refused("champion.select", {"target_id": T1, "samples_id": "e1-target",
                                      "expected_current": "original"}, "R14")  # fmt: skip


def test_r14_a_claim_predicting_a_gain_may_not_include_a_loss(ready: Session) -> None:
    error = ready.refused("experiment.create", _claim(-0.05, 0.3, f=0.6, s=2.0), "R14")
    assert "may not include a loss" in error.message


def test_r14_an_interval_that_is_no_prediction_is_refused(ready: Session) -> None:
    body = _claim(float("nan"), 0.3, f=0.6, s=2.0)
    # NaN: JSON has none, so the request is refused before any rule (exit 2)
    ready.refused("experiment.create", body, None)


@pytest.mark.parametrize(("low", "high"), [(0.2, 1.0), (0.5, 2.0), (0.0, float("inf"))])
def test_r14_saving_all_of_the_time_or_more_is_no_prediction(low: float, high: float) -> None:
    # no bound caps a tail claim's interval: R14 itself refuses it (a time saved of 1 or more
    # is no speedup)
    with pytest.raises(RuleRefused) as info:
        rules.r14_interval_informative(low, high, "lower_is_better")
    assert info.value.rule == "R14" and "not a prediction" in info.value.message
    if high != float("inf"):  # a relative gain of 100 % or more is a prediction of throughput
        rules.r14_interval_informative(low, high, "higher_is_better")


@pytest.mark.parametrize("low", [-1.0, -2.0])
def test_r14_claims_before_one_improvement_keep_their_speedup_minus_one_floor(
    ready: Session, low: float
) -> None:
    with pytest.raises(RuleRefused) as info:
        _replay_decide(ready, _claim(low, 0.3, f=0.6, s=2.0), R14_ONE_IMPROVEMENT - 1)
    assert info.value.rule == "R14"


@pytest.mark.parametrize(
    ("low", "high", "cost"),
    [
        (0.2, 0.2, 0.0),  # a point prediction
        (0.0, 0.0, 0.0),  # no gain expected (a claim serving a secondary)
        (-0.3, -0.2, 0.5),  # a loss predicted by a claim whose added cost outweighs its gain
    ],
)
def test_r14_any_honest_prediction_can_be_stated(
    ready: Session, low: float, high: float, cost: float
) -> None:
    created = ready.run("experiment.create", _claim(low, high, f=0.6, s=2.0, c=cost))
    assert (created["figures"]["predicted_low"], created["figures"]["predicted_high"]) == (
        low,
        high,
    )


def test_r14_claims_recorded_before_the_rule_are_re_decided_by_their_own_rule(
    ready: Session,
) -> None:
    wide = _claim(0.0, BIG_BOUND - 1.0)  # speedup - 1, the units of claims of that time
    _replay_decide(ready, wide, R14_INFORMATIVE_INTERVAL - 1)  # accepted then
    with pytest.raises(RuleRefused) as info:
        _replay_decide(ready, wide, R14_INFORMATIVE_INTERVAL)
    assert info.value.rule == "R14"


def test_r14_claims_recorded_before_one_improvement_keep_speedup_minus_one_at_audit(
    ready: Session,
) -> None:
    # [BIG/4 - 1, BIG - 1] in speedup - 1 was the widest accepted claim; read as time saved it
    # would exceed the bound, and the same span in time saved is refused under the old rule
    old_units = _claim(BIG_BOUND / R14_MAX_SPAN - 1.0, BIG_BOUND - 1.0)
    _replay_decide(ready, old_units, R14_ONE_IMPROVEMENT - 1)
    with pytest.raises(RuleRefused) as info:
        _replay_decide(ready, old_units, R14_ONE_IMPROVEMENT)
    assert info.value.rule == "R7"
    _replay_decide(ready, _claim(_saved(BIG_BOUND / R14_MAX_SPAN), BIG_SAVED), R14_ONE_IMPROVEMENT)


def test_r14_audit_finds_a_wide_interval_written_around_the_decider(ready: Session) -> None:
    honest = ready.run("experiment.create", _claim(_saved(BIG_BOUND / 2), BIG_SAVED))
    body = _claim(0.0, BIG_SAVED)
    body["experiment_id"] = "e2"
    planted_payload = msgspec.to_builtins(honest)
    planted_payload.update(experiment_id="e2")
    planted_payload["claim"]["expected_improvement"] = {"low": 0.0, "high": BIG_SAVED}
    planted_payload["figures"]["predicted_low"] = 0.0
    request = {
        "op": "experiment.create",
        "body": dump(operations.validate("experiment.create", body)),
    }
    planted = ready.ledger.store.append(
        EventDraft("ExperimentCreated", planted_payload, "tampered-tool", request=request)
    )
    assert planted.schema >= R14_INFORMATIVE_INTERVAL
    report = audit(ready.ledger)
    assert (planted.id, "R14") in {(f.event_id, f.rule) for f in report.findings}, report.findings


def test_r14_a_tail_claim_without_a_bound_still_states_a_narrow_interval(bare: Session) -> None:
    primary = {"name": "wall_time", "unit": "ms", "direction": "lower_is_better",
               "statistic": "p99"}  # fmt: skip
    bare.run("target.freeze", target_freeze(primary=primary))
    bare.run("evidence.add", evidence())
    bare.run("readiness.record", readiness())
    bare.run("metric-audit.record", metric_audit())
    bare.run("baseline.record", baseline())
    bare.run("resolution.record", resolution())
    body = experiment()
    del body["claim"]["stated_bound"]
    body["claim"]["exposure"] = {"affected_share": 0.3, "critical_path": "prefill"}
    body["claim"]["expected_improvement"] = {"low": 0.0, "high": 0.98}  # no bound caps it
    assert "too wide" in bare.refused("experiment.create", body, "R14").message
    body["claim"]["expected_improvement"] = {"low": 0.05, "high": 0.2}
    assert bare.run("experiment.create", body)["figures"]["predicted_high"] == 0.2
