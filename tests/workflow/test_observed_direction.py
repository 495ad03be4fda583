"""R1 (``TargetFrozen``/``TargetSuperseded`` schema 4): a metric named after one of perfledger's
observed figures (``wall_time``, ``cpu_time``: a call's elapsed and CPU time as perfledger
measures them) is ``lower_is_better`` in a time unit. A declared ``higher_is_better`` made every
slowdown an "improvement" (hostile review red36, D1). Targets frozen before keep their rule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from wf_scenario import T1, Session, target_freeze

from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest
from perfledger.events.workflow import R1_OBSERVED_DIRECTION, SCHEMA_VERSIONS
from perfledger.projections.workflow import initial_state


def _decide_freeze(body: dict, schema: int | None = None) -> list:
    ctx = DecisionContext(op="target.freeze", actor="agent",
                          ts=datetime(2026, 1, 2, tzinfo=UTC),
                          request={"op": "target.freeze", "body": body}, schema=schema)  # fmt: skip
    return operations.decider("target.freeze")(
        initial_state(), operations.validate("target.freeze", body), ctx
    )


def test_r1_observed_direction_is_the_rule_version_assigned() -> None:
    assert SCHEMA_VERSIONS["TargetFrozen"] >= R1_OBSERVED_DIRECTION == 4
    assert SCHEMA_VERSIONS["TargetSuperseded"] >= R1_OBSERVED_DIRECTION


@pytest.mark.parametrize("metric", ["wall_time", "cpu_time"])
def test_cheat_an_observed_time_declared_higher_is_better_is_refused_at_freeze(
    bare: Session, metric: str
) -> None:
    """The attack: ``cpu_time`` declared ``higher_is_better`` and a candidate that runs the
    original three times "improves" it. The freeze is refused, naming the metric; nothing is
    recorded; the same Target lower-is-better freezes (honest control)."""
    body = target_freeze(guardrails=[], secondaries=[])
    body["primary"] = {**body["primary"], "name": metric, "unit": "ms",
                       "direction": "higher_is_better"}  # fmt: skip
    before = len(list(bare.ledger.events()))
    with pytest.raises(BadRequest, match=f"{metric!r} is perfledger's own measured time"):
        bare.run("target.freeze", body)
    assert len(list(bare.ledger.events())) == before
    body["primary"]["direction"] = "lower_is_better"
    bare.run("target.freeze", body)
    assert [e.kind for e in bare.ledger.events()][-1] == "TargetFrozen"


def test_cheat_an_observed_time_as_a_guardrail_or_secondary_is_checked_too() -> None:
    """A guardrail named ``cpu_time`` that is higher-is-better (a regression then reads as a
    gain) and a secondary ``wall_time`` in a rate unit are refused alike."""
    body = target_freeze()
    body["guardrails"] = [{"metric": "cpu_time", "unit": "ms", "direction": "higher_is_better",
                           "allowed_regression": 0.05}]  # fmt: skip
    with pytest.raises(BadRequest, match="'cpu_time' is perfledger's own measured time"):
        _decide_freeze(body)
    body = target_freeze()
    body["secondaries"] = [{"name": "wall_time", "unit": "tokens/s",
                            "direction": "lower_is_better", "threshold": 0.05}]  # fmt: skip
    if body["primary"]["name"] == "wall_time":
        body["primary"]["name"] = "latency"
    with pytest.raises(BadRequest, match="its unit is one of"):
        _decide_freeze(body)


def test_r1_a_target_frozen_before_the_rule_audits_as_it_did() -> None:
    """Re-deciding an old ``TargetFrozen`` (schema 3) with a higher-is-better observed time
    gives the event it recorded: old ledgers audit as before."""
    body = target_freeze(guardrails=[], secondaries=[])
    body["primary"] = {**body["primary"], "name": "cpu_time", "unit": "ms",
                       "direction": "higher_is_better"}  # fmt: skip
    [draft] = _decide_freeze(body, R1_OBSERVED_DIRECTION - 1)
    assert draft.payload.target.primary.direction == "higher_is_better"
    assert draft.payload.target.target_id == T1
