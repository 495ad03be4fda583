"""R1 at readiness (``ReadinessRecorded`` schema 5): a Target whose declared metrics include a
unit outside the closed vocabulary (frozen before ``TargetFrozen`` schema 2 checked units) is
not made ready; the refusal lists the known units. Readiness recorded before keeps its rule."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from wf_scenario import T1, Session, readiness, target_freeze

from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.workflow import R1_KNOWN_UNITS, R1_KNOWN_UNITS_READINESS, SCHEMA_VERSIONS
from perfledger.projections.workflow import evolve, initial_state


def _old_target_state(session: Session, unit: str) -> Any:
    """The state of ``session``'s ledger with its TargetFrozen as a perfledger before
    :data:`R1_KNOWN_UNITS` recorded it: the primary in ``unit`` (which that rule let through)."""
    state = initial_state()
    for event in session.ledger.events():
        if event.kind == "TargetFrozen":
            target = event.payload.target
            primary = msgspec.structs.replace(target.primary, unit=unit)
            payload = msgspec.structs.replace(
                event.payload, target=msgspec.structs.replace(target, primary=primary)
            )
            envelope = msgspec.structs.replace(event.envelope, schema=R1_KNOWN_UNITS - 1)
            event = msgspec.structs.replace(event, envelope=envelope, payload=payload)
        state = evolve(state, event)
    return state


def _decide_readiness(state: Any, schema: int | None = None) -> list[Any]:
    body = readiness()
    ctx = DecisionContext(op="readiness.record", actor="agent",
                          ts=datetime(2026, 1, 2, tzinfo=UTC),
                          request={"op": "readiness.record", "body": body}, schema=schema)  # fmt: skip
    return operations.decider("readiness.record")(
        state, operations.validate("readiness.record", body), ctx
    )


def test_r1_the_rule_version_is_the_one_assigned() -> None:
    assert SCHEMA_VERSIONS["ReadinessRecorded"] >= R1_KNOWN_UNITS_READINESS == 5


def test_cheat_an_old_target_with_an_unknown_unit_is_not_made_ready(bare: Session) -> None:
    """A Target frozen with ``msec`` (a spelling perfledger has no entry for, which took the
    metric out of the wall-clock check) cannot be made ready: the refusal names the metric and
    lists the known units."""
    bare.run("target.freeze", target_freeze())
    with pytest.raises(RuleRefused) as info:
        _decide_readiness(_old_target_state(bare, "msec"))
    error = info.value
    assert error.rule == "R1" and "'wall_time' in 'msec'" in error.message
    assert "known:" in error.message and "ms" in error.message.split("known:")[1]
    assert "target supersede" in error.hint
    # readiness recorded before the rule took it: an old ledger audits as it did
    [old] = _decide_readiness(_old_target_state(bare, "msec"), R1_KNOWN_UNITS_READINESS - 1)
    assert old.payload.target_id == T1
    # honest control: the same Target in a known unit is made ready
    [draft] = _decide_readiness(_old_target_state(bare, "ms"))
    assert draft.payload.target_id == T1


def test_r1_a_new_target_with_an_unknown_unit_is_refused_at_freeze(bare: Session) -> None:
    """The freeze itself refuses it (``TargetFrozen`` schema 2): readiness never sees one."""
    body = target_freeze()
    body["guardrails"][0]["unit"] = "megabytes"
    with pytest.raises(BadRequest, match="not one perfledger knows; known: "):
        bare.run("target.freeze", body)
