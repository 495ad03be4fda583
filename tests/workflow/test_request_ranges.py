"""Ranges on numeric request fields (SPEC.md section 6, "Ranges"; ``requests.ranged``,
:mod:`perfledger.commands.workflow.ranges`): every numeric field of every request has a range
its JSON Schema shows; a value outside is a bad request (exit 2, nothing written); a value at
the boundary is accepted; a request recorded before its kind's range version is re-decided
without the range (an old ledger audits as it did)."""

from __future__ import annotations

import copy
import math
import sys
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import inspect as mi
from wf_scenario import T1, Session, experiment, handoff, samples, target_freeze

from perfledger.commands.loop import requests as loop_rq
from perfledger.commands.registry import operations
from perfledger.commands.registry.request_examples import example
from perfledger.commands.workflow import ranges
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest
from perfledger.events.kinds import get_kind

#: Numeric fields whose range is "any finite number" on purpose: measured values and reported
#: facts in their own units (how plausible they are is R12's, never the request's), and an
#: absolute output tolerance in the output's units. Path: model.field.
FINITE_BY_DESIGN = {
    "BaselineRecord.values",
    "SubjectSample.values",
    "Fact.value",
    "Accuracy.atol",
    "CorrectnessModel.max_error",
    "CorrectnessModel.tolerance",
    "LoopProfile.metrics",
}

#: (operation, dotted path in the wf_scenario body, first value out of range, boundary value).
OUT_OF_RANGE: list[tuple[str, str, float, float]] = [
    ("target.freeze", "budget.wall_s", 1e30, rq.MAX_BUDGET_WALL_S),
    ("target.freeze", "budget.wall_s", rq.MAX_BUDGET_WALL_S + 1.0, 0.0),
    ("target.freeze", "budget.gpu_s", 1.5e10, rq.MAX_BUDGET_GPU_S),
    ("target.freeze", "guardrails.0.allowed_regression", 100.5, rq.MAX_RATIO),
    ("target.freeze", "secondaries.0.threshold", 1e9, rq.MAX_RATIO),
    ("target.supersede", "new_target.budget.wall_s", 1e30, rq.MAX_BUDGET_WALL_S),
    ("experiment.create", "claim.local_speedup", 1e6 * 1.5, rq.MAX_SPEEDUP),
    ("experiment.create", "claim.added_cost", 101.0, rq.MAX_RATIO),
    ("experiment.create", "claim.stated_bound", 2e6, rq.MAX_SPEEDUP),
    ("experiment.create", "claim.expected_improvement.low", 1.5e6, rq.MAX_SPEEDUP),
    ("experiment.create", "claim.expected_improvement.high", 1e7, rq.MAX_SPEEDUP),
    ("reconcile", "corrected_model.local_speedup", 1e300, rq.MAX_SPEEDUP),
    ("reconcile", "corrected_model.added_cost", 1e3, rq.MAX_RATIO),
    ("handoff.record", "budget_used.wall_s", 1e30, rq.MAX_BUDGET_WALL_S),
    ("handoff.record", "budget_left.gpu_s", 1e11, rq.MAX_BUDGET_GPU_S),
    ("samples.record", "pairs.0.ref.wall_s", 1e7, rq.MAX_CALL_WALL_S),
    ("samples.record", "pairs.1.cand.wall_s", 2e6, rq.MAX_CALL_WALL_S),
    ("loop.setup", "dims.n", 2**60, loop_rq.MAX_DIM),
    ("loop.setup", "baseline_check.trials", 10**12, loop_rq.MAX_TRIALS),
    ("loop.setup", "baseline_timing.samples_ms.0", 1e12, loop_rq.MAX_SAMPLE_MS),
    ("loop.close-iter", "iteration", 101, loop_rq.MAX_ITERATIONS),
    ("loop.close-iter", "attempt", 10**15, loop_rq.MAX_ATTEMPT),
    ("loop.profile", "attempt", 1001, loop_rq.MAX_ATTEMPT),
]


def _body(op: str) -> dict[str, Any]:
    """A valid body of ``op`` (the scenario's where it has one, else the schema's example)."""
    reconcile = {"experiment_id": "e1", "premise": "coverage", "explanation": "x",
                 "corrected_model": {"description": "d", "coverage": 0.5, "local_speedup": 2.0}}  # fmt: skip
    made = {
        "target.freeze": lambda: target_freeze(),
        "target.supersede": lambda: {
            "target_id": T1,
            "reason": "r",
            "new_target": target_freeze("t2"),
        },
        "experiment.create": lambda: example("experiment.create"),
        "reconcile": lambda: reconcile,
        "handoff.record": lambda: handoff(),
        "samples.record": lambda: _timed(samples("e1-screen", "screen")),
        **{
            op: (lambda op=op: example(op))
            for op in ("loop.setup", "loop.close-iter", "loop.profile")
        },
    }
    return copy.deepcopy(made[op]())


def _timed(body: dict[str, Any]) -> dict[str, Any]:
    for pair in body["pairs"]:
        pair["ref"]["wall_s"] = pair["cand"]["wall_s"] = 0.01
    return body


def _set(body: dict[str, Any], path: str, value: float) -> dict[str, Any]:
    node: Any = body
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[int(last) if isinstance(node, list) else last] = value
    return body


@pytest.mark.parametrize(("op", "path", "bad", "boundary"), OUT_OF_RANGE)
def test_out_of_range_field_is_a_bad_request_and_nothing_is_written(
    bare: Session, op: str, path: str, bad: float, boundary: float
) -> None:
    head = bare.ledger.head()
    error = bare.refused(op, _set(_body(op), path, bad), None)
    assert isinstance(error, BadRequest), error
    assert f"{path}: {bad!r} is outside its range" in error.message, error.message
    assert error.hint is not None and f"perfledger schema {op}" in error.hint
    assert bare.ledger.head() == head
    # the boundary passes the range check (whatever the rules then say about the state)
    request = operations.validate(op, _set(_body(op), path, boundary))
    assert list(ranges.out_of_range(request)) == []


def test_boundary_values_are_frozen_end_to_end(bare: Session) -> None:
    body = target_freeze(budget={"wall_s": rq.MAX_BUDGET_WALL_S, "gpu_s": rq.MAX_BUDGET_GPU_S})
    body["guardrails"][0]["allowed_regression"] = rq.MAX_RATIO
    body["secondaries"][0]["threshold"] = rq.MAX_RATIO
    target = bare.run("target.freeze", body)["target"]
    assert target["budget"] == {"wall_s": rq.MAX_BUDGET_WALL_S, "gpu_s": rq.MAX_BUDGET_GPU_S}


@pytest.mark.parametrize(
    ("path", "value", "rule"),
    [("claim.coverage", 1.5, "R7"), ("claim.coverage", 0.0, "R7"),
     ("claim.local_speedup", 0.0, "R7"), ("claim.added_cost", -0.5, "R7"),
     ("claim.expected_improvement.low", -2.0, "R14")],
)  # fmt: skip
def test_ranges_owned_by_a_rule_are_refused_by_that_rule(
    ready: Session, path: str, value: float, rule: str
) -> None:
    """Coverage outside (0, 1], a speedup <= 0, a negative cost stay R7's refusals and an
    interval reaching -1 R14's (exit 3 naming the rule), not the generic range check's."""
    body = _set(experiment(), path, value)
    assert list(ranges.out_of_range(operations.validate("experiment.create", body))) == []
    ready.refused("experiment.create", body, rule)


def _numeric_fields(
    info: mi.Type, model: str, field: str, seen: set[type]
) -> list[tuple[str, mi.Type]]:
    """``(model.field, its type)`` of every int or float reachable in ``info``."""
    found: list[tuple[str, mi.Type]] = []
    under = info
    while isinstance(under, mi.Metadata):
        under = under.type
    if isinstance(under, mi.IntType | mi.FloatType):
        return [(f"{model}.{field}", info)]
    if isinstance(under, mi.StructType):
        if under.cls in seen:
            return []
        seen.add(under.cls)
        for f in under.fields:
            found += _numeric_fields(f.type, under.cls.__name__, f.name, seen)
    elif isinstance(under, mi.UnionType):
        for member in under.types:
            found += _numeric_fields(member, model, field, seen)
    elif isinstance(under, mi.ListType | mi.VarTupleType):
        found += _numeric_fields(under.item_type, model, field, seen)
    elif isinstance(under, mi.DictType):
        found += _numeric_fields(under.value_type, model, field, seen)
    return found


def _bounds(info: mi.Type) -> tuple[float, float]:
    """The tightest (low, high) that decoding or a declared range puts on a numeric type."""
    low, high = -math.inf, math.inf
    while isinstance(info, mi.Metadata):
        declared = (info.extra or {}).get("range")
        if isinstance(declared, rq.Range):
            low, high = max(low, declared.low), min(high, declared.high)
        info = info.type
    for name in ("ge", "gt"):
        if getattr(info, name, None) is not None:
            low = max(low, getattr(info, name))
    for name in ("le", "lt"):
        if getattr(info, name, None) is not None:
            high = min(high, getattr(info, name))
    return low, high


def test_every_numeric_request_field_has_a_range() -> None:
    """Walks every request model of the registry: each number has a lower and an upper bound
    tighter than the finite doubles, unless it is a measured value (FINITE_BY_DESIGN), which
    is still bounded to finite numbers."""
    unbounded = []
    for op in sorted(operations.OPERATIONS):
        model = operations.request_model(op)
        for where, info in _numeric_fields(mi.type_info(model), model.__name__, "", set()):
            low, high = _bounds(info)
            if where in FINITE_BY_DESIGN:
                assert low >= -rq.MAX_FINITE and high <= rq.MAX_FINITE, where
            elif not (low > -rq.MAX_FINITE and high < rq.MAX_FINITE):
                unbounded.append((op, where, low, high))
    assert unbounded == []


def test_every_declared_range_is_checked_from_a_rule_version() -> None:
    """A model holding a declared range belongs only to operations whose kind checks ranges
    (else the schema would show a bound nothing enforces), and those versions are current."""
    for op, operation in operations.OPERATIONS.items():
        declared = list(ranges.declared_ranges(operations.request_model(op)))
        if declared:
            assert operation.kind in ranges.RANGED_KINDS, (op, declared)
    for kind, version in ranges.RANGED_KINDS.items():
        assert get_kind(kind).version >= version


def test_schema_shows_the_declared_range() -> None:
    schema = operations.json_schema("target.freeze")
    wall = schema["$defs"]["Budget"]["properties"]["wall_s"]
    assert wall["minimum"] == 0.0 and wall["maximum"] == rq.MAX_BUDGET_WALL_S
    claim = operations.json_schema("experiment.create")["$defs"]["OpportunityClaim"]
    speedup = claim["properties"]["local_speedup"]["anyOf"][0]
    assert speedup["exclusiveMinimum"] == 0.0 and speedup["maximum"] == rq.MAX_SPEEDUP


@pytest.mark.parametrize(
    ("op", "kind", "path"),
    [("target.freeze", "TargetFrozen", "budget.wall_s"),
     ("handoff.record", "HandoffRecorded", "budget_used.wall_s"),
     ("experiment.create", "ExperimentCreated", "claim.expected_improvement.high"),
     ("samples.record", "SamplesRecorded", "pairs.0.ref.wall_s"),
     ("loop.setup", "RunSetUp", "baseline_check.trials")],
)  # fmt: skip
def test_a_request_recorded_before_the_range_is_re_decided_without_it(
    bare: Session, op: str, kind: str, path: str
) -> None:
    body = _set(_body(op), path, 10**15 if "trials" in path else 1e30)
    request = operations.validate(op, body)  # decoding never refused it: old events decode
    since = ranges.RANGED_KINDS[kind]
    for schema, refused in ((since - 1, False), (since, True)):
        ctx = DecisionContext(
            op=op, actor="auditor", ts=datetime(2026, 1, 1, tzinfo=UTC),
            request={"op": op, "body": body}, payload_of=bare.ledger.payload, schema=schema,
        )  # fmt: skip
        try:
            operations.decider(op)(bare.state(), request, ctx)
            outcome = None
        except Exception as exc:  # the old rule may refuse on the empty state: not the range
            outcome = exc
        is_range = isinstance(outcome, BadRequest) and "outside its range" in outcome.message
        assert is_range is refused, (schema, outcome)


_DECLARED = [
    (op, path, bounds)
    for op in (
        "target.freeze",
        "experiment.create",
        "reconcile",
        "handoff.record",
        "loop.setup",
        "loop.close-iter",
        "loop.profile",
    )
    for path, bounds in ranges.declared_ranges(operations.request_model(op))
    if "[]" not in path and "{}" not in path
]


@settings(max_examples=200, deadline=None)
@given(
    which=st.sampled_from(_DECLARED),
    value=st.one_of(
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(min_value=-2.0, max_value=200.0),
        st.sampled_from([0.0, -0.0, 1.0, -1.0, 100.0, 1e6, 31_622_400.0, 1e10]),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.integers(min_value=-2, max_value=1_002),
    ),
)
def test_property_a_value_is_refused_exactly_when_outside_its_declared_range(
    which: tuple[str, str, rq.Range], value: float
) -> None:
    op, path, bounds = which
    body = _set(_body(op), path, value)
    try:
        request = operations.validate(op, body)
    except BadRequest:  # outside a decode bound (finite, or a bound the field always had)
        return
    found = [p for p, _, _ in ranges.out_of_range(request)]
    assert (path in found) is (not bounds.contains(value)), (path, value, bounds)
    assert all(p == path for p in found)


def test_a_huge_request_walks_without_recursion_and_fast() -> None:
    body = _timed(samples("e1-screen", "screen"))
    body["pairs"] = body["pairs"] * 1_000
    # ten times the recursion limit shows that the walk does not recurse per item (five times
    # as many pairs showed nothing more and cost five times as long)
    assert len(body["pairs"]) > 10 * sys.getrecursionlimit()
    body["pairs"][-1] = copy.deepcopy(body["pairs"][-1])
    body["pairs"][-1]["cand"]["wall_s"] = 1e30
    request = msgspec.convert(body, rq.SamplesRecord)
    found = list(ranges.out_of_range(request))
    assert [p for p, _, _ in found] == [f"pairs.{len(body['pairs']) - 1}.cand.wall_s"]
