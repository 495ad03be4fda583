"""R1: a Target's metrics are in units perfledger knows (``TargetFrozen``/``TargetSuperseded``
schema 2, :mod:`perfledger.events.units`): an unknown spelling of milliseconds took a time
metric out of the wall-clock check (R12). Targets frozen before are re-decided by their rule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from wf_scenario import T1, Session, target_freeze

from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest


@pytest.mark.parametrize("unit", ["msec", "millis", "milliseconds", "tokens/sec", "ms/"])
def test_r1_unknown_unit_is_refused_at_freeze_with_the_known_ones(bare: Session, unit: str) -> None:
    body = target_freeze(primary={"name": "latency", "unit": unit,
                                  "direction": "lower_is_better", "statistic": "mean"})  # fmt: skip
    error = bare.refused("target.freeze", body, None)
    assert isinstance(error, BadRequest)
    assert repr(unit) in error.message and "ms" in error.message and "tokens/s" in error.message


def test_r1_unknown_guardrail_unit_is_refused_at_supersede(ready: Session) -> None:
    new = target_freeze("t2", guardrails=[{"metric": "memory", "unit": "megs",
                                           "direction": "lower_is_better",
                                           "allowed_regression": 0.02}])  # fmt: skip
    error = ready.refused(
        "target.supersede", {"target_id": T1, "reason": "r", "new_target": new}, None
    )
    assert "'megs'" in error.message


@pytest.mark.parametrize("unit", ["ms", "us", "µs", "tokens/s", "ms/token", "GB/s", "%", "MB"])
def test_r1_known_units_are_frozen(bare: Session, unit: str) -> None:
    body = target_freeze(primary={"name": "m", "unit": unit, "direction": "lower_is_better",
                                  "statistic": "mean"})  # fmt: skip
    assert bare.run("target.freeze", body)["target"]["primary"]["unit"] == unit


def test_r1_a_target_frozen_under_schema_1_is_re_decided_without_the_vocabulary(
    bare: Session,
) -> None:
    body: dict[str, Any] = target_freeze(primary={"name": "latency", "unit": "msec",
                                                  "direction": "lower_is_better",
                                                  "statistic": "mean"})  # fmt: skip
    ctx = DecisionContext(
        op="target.freeze", actor="auditor", ts=datetime(2026, 1, 1, tzinfo=UTC),
        request={"op": "target.freeze", "body": body}, payload_of=bare.ledger.payload, schema=1,
    )  # fmt: skip
    drafts = operations.decider("target.freeze")(
        bare.state(), operations.validate("target.freeze", body), ctx
    )
    assert drafts[0].payload.target.primary.unit == "msec"
