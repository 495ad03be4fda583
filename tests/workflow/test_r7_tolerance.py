"""R7's bound: computed by the tool, so a claim may leave ``stated_bound`` out; a stated one is
accepted within the documented relative tolerance (``amdahl.STATED_BOUND_REL_TOLERANCE``, 1e-6),
refused beyond it with a value in the hint that is itself accepted. Claims recorded under the
earlier ``ExperimentCreated`` schema versions are re-checked by their own rule (bound required,
within 1e-9).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

import msgspec
import pytest
from wf_scenario import Session, experiment

from perfledger.commands.registry import operations
from perfledger.commands.registry.operations import json_schema
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import RuleRefused
from perfledger.events.workflow import R7_COMPUTED_BOUND
from perfledger.projections import amdahl


def _claim(f: float, s: float, bound: float | None) -> dict:
    exp = experiment()
    exp["claim"]["coverage"], exp["claim"]["local_speedup"] = f, s
    if bound is None:
        del exp["claim"]["stated_bound"]
    else:
        exp["claim"]["stated_bound"] = bound
    exp["claim"]["expected_improvement"] = {"low": 0.1, "high": 0.2}
    return exp


def test_r7_tolerance_is_a_documented_named_constant() -> None:
    assert amdahl.STATED_BOUND_REL_TOLERANCE == 1e-6
    assert amdahl.LEGACY_STATED_BOUND_REL_TOLERANCE == 1e-9
    assert amdahl.bound_matches(32.28931, amdahl.amdahl_bound(0.97, 1000.0))
    assert not amdahl.bound_matches(32.29, amdahl.amdahl_bound(0.97, 1000.0))


def test_r7_claim_without_a_stated_bound_records_the_computed_bound(ready: Session) -> None:
    created = ready.run("experiment.create", _claim(0.97, 1000.0, None))
    assert created["claim"]["stated_bound"] is None  # recorded as the request gave it
    assert created["figures"]["bound"] == amdahl.amdahl_bound(0.97, 1000.0)


def test_r7_bound_rounded_to_seven_digits_is_accepted(ready: Session) -> None:
    created = ready.run("experiment.create", _claim(0.97, 1000.0, 32.28931))
    assert created["claim"]["stated_bound"] == 32.28931


def test_r7_bound_beyond_tolerance_is_refused_and_the_hinted_value_is_accepted(
    ready: Session,
) -> None:
    error = ready.refused("experiment.create", _claim(0.97, 1000.0, 32.29), "R7")
    assert "relative tolerance 1e-06" in error.message
    hinted = re.search(r'"stated_bound": ([0-9.e+-]+)', error.hint or "")
    assert hinted is not None, error.hint
    created = ready.run("experiment.create", _claim(0.97, 1000.0, float(hinted.group(1))))
    assert created["claim"]["stated_bound"] == float(hinted.group(1))


def _replay_decide(ready: Session, body: dict, schema: int) -> None:
    """Decide ``body`` as the auditor re-decides an event recorded under ``schema``."""
    ctx = DecisionContext(
        op="experiment.create",
        actor="auditor",
        ts=datetime(2026, 1, 1, tzinfo=UTC),
        request={"op": "experiment.create", "body": body},
        payload_of=ready.ledger.payload,
        schema=schema,
    )
    request = operations.validate("experiment.create", body)
    operations.decider("experiment.create")(ready.state(), request, ctx)


def test_r7_claims_recorded_before_the_computed_bound_are_rechecked_by_their_own_rule(
    ready: Session,
) -> None:
    old = R7_COMPUTED_BOUND - 1
    with pytest.raises(RuleRefused, match="must state its end-to-end bound"):
        _replay_decide(ready, _claim(0.97, 1000.0, None), old)
    with pytest.raises(RuleRefused, match="relative tolerance 1e-09"):
        _replay_decide(ready, _claim(0.97, 1000.0, 32.28931), old)
    _replay_decide(ready, _claim(0.97, 1000.0, amdahl.amdahl_bound(0.97, 1000.0)), old)
    _replay_decide(ready, _claim(0.97, 1000.0, None), R7_COMPUTED_BOUND)


def test_r7_schema_says_the_bound_is_optional() -> None:
    schema = json_schema("experiment.create")
    claim = schema["$defs"]["OpportunityClaim"]["properties"]["stated_bound"]
    assert "Optional" in claim["description"] and "1e-6" in claim["description"]
    assert msgspec.json.encode(schema)  # still a valid schema document
