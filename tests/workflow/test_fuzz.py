"""Hypothesis fuzzing of every write operation: random and mutated requests (wrong types, extra
fields, missing fields, huge strings, NaN/Infinity, negative coverage, unicode ids, non-objects)
are answered with a BadRequest (exit 2) or a RuleRefused (exit 3), never a traceback, never a
changed ledger.

Most examples drive the validate + decide + append path in-process (fast); a smaller number go
through the real CLI in subprocesses.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wf_scenario import (
    CAND3,
    T1,
    Session,
    baseline,
    evidence,
    experiment,
    handoff,
    make_pairs,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.api import Ledger
from perfledger.commands.registry.operations import OPERATIONS, execute, request_model
from perfledger.errors import PerfledgerError

#: A valid (or rule-refused) body of every operation, on the ``fuzz_ledger`` state.
BASES: dict[str, dict[str, Any]] = {
    "target.freeze": target_freeze("t-fuzz"),
    "target.supersede": {"target_id": T1, "reason": "r", "new_target": target_freeze("t9")},
    "readiness.record": readiness(),
    "metric-audit.record": metric_audit(),
    "baseline.record": baseline(),
    "resolution.record": resolution(),
    "evidence.add": evidence("ev-fuzz"),
    "upstream-check.record": {
        "check_id": "uc-fuzz", "component": "gemm", "component_kind": "kernel",
        "sources": [{"name": "cutlass", "version": "3.5.1"}], "equivalent_exists": False,
    },
    "experiment.create": experiment("e-fuzz", candidate=CAND3),
    "samples.record": samples("s-fuzz", "screen", pairs=make_pairs(0.2, per_case=5, tag="f")),
    "verdict.record": {"samples_id": "e1-screen"},
    "local-result.record": {"result_id": "lr", "samples_id": "e1-target", "metric": "cpu_time",
                            "scenario": "s"},
    "reject": {"experiment_id": "e1", "closes": "implementation", "reason": "r"},
    "reconcile": {"experiment_id": "e1", "premise": "scope", "explanation": "x",
                  "corrected_model": {"description": "d"}},
    "champion.select": {"target_id": T1, "samples_id": "e1-target", "expected_current": "e1"},
    "final-audit.record": {"target_id": T1, "samples_id": "e1-target"},
    "host-advice.record": {"advice_id": "h", "category": "clocks", "advice": "lock clocks"},
    "handoff.record": handoff(),
    "conflict.resolve": {"target_id": T1, "conflict_id": "c", "keep": "e1", "reason": "r"},
    "activity.explain": {"samples_id": "e1-target", "pairs": [0], "explanation": "backup"},
}  # fmt: skip
# The kernel-iteration loop: the fuzz ledger has no loop run, and a setup for an
# architecture the catalog does not map is refused by R23, so no mutation can append.
_SRC = {"name": "k.cu", "text": 'extern "C" __global__ void k(float* x, int N) {}'}
_SEL = {
    "compute": {"chosen": "compute.unrolling", "skipped": []},
    "memory": {"chosen": "memory.coalescing", "skipped": []},
    "latency": {"chosen": "latency.atomics", "skipped": []},
}
BASES.update({
    "loop.setup": {
        "run_id": "r-fuzz", "subject_kind": "cuda", "baseline": _SRC, "reference": _SRC,
        "entry": "k", "params": [{"name": "N", "ctype": "int", "integer": True}],
        "dims": {"N": 4}, "iterations": 2, "ncu_num": 3, "min_effect": 0.02, "sm_arch": "sm_42",
        "environment": {"gpu": "g"}, "catalog_toml": "catalog_id = 'x'\n",
        "baseline_check": {"correct": True, "trials": 5},
        "baseline_timing": {"samples_ms": [1.0, 1.5]},
    },
    "loop.profile": {"run_id": "r-fuzz", "iteration": 1, "attempt": 0, "role": "input",
                     "kernel_hash": "blake3:00112233", "tool": "ncu", "tool_version": "2025.3.1",
                     "metrics": {"m": 1.5}, "units": {"m": "%"}},
    "loop.attempt": {"run_id": "r-fuzz", "iteration": 1, "attempt": 1, "kernel": _SRC,
                     "selection": _SEL, "analysis": "a",
                     "correctness": {"correct": False, "trials": 5}},
    "loop.close-iter": {"run_id": "r-fuzz", "iteration": 1, "attempt": 1, "kernel": _SRC,
                        "selection": _SEL, "analysis": "a",
                        "correctness": {"correct": True, "trials": 5},
                        "pairs": [{"ref_ms": [1.0], "cand_ms": [0.5]}]},
    "loop.finalize": {"run_id": "r-fuzz", "stop_reason": "s"},
})  # fmt: skip
# A review of an event the fuzz ledger does not hold: refused, whatever the mutation.
BASES["review.record"] = {
    "review_id": "rv-fuzz", "reviewer": "model-x", "model_family": "family-y", "subject": "claim",
    "subject_event": "0" * 64, "challenge": "c", "response": "r", "dissent_remains": True,
    "resolves": ["rv-0"],
}  # fmt: skip
BASES["formal-run.start"] = {"experiment_id": "e-fuzz", "stage": "target",
                              "samples_id": "e-fuzz-target-1", "protocol": "workload_abba"}  # fmt: skip
#: Maps whose keys are data, not field names (an extra key there is not an unknown field).
FREE_MAPS = {"values", "units", "env"}
MUTATIONS = ("extra", "drop", "wrong_type", "nan", "huge", "unicode_id", "not_object")


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _leaves(sub, (*path, index))
    if path:
        yield path, value


def _objects(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        if not path or path[-1] not in FREE_MAPS:
            yield path
        for key, sub in value.items():
            yield from _objects(sub, (*path, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            yield from _objects(sub, (*path, index))


def _set(body: Any, path: tuple[Any, ...], value: Any) -> None:
    node = body
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value


def _wrong_types(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return ["true", 1, 0.5, [], {}]
    if isinstance(value, int):
        return ["7", 7.5, True, [], {}]
    if isinstance(value, float):
        return ["1.0", True, [], {}]
    if isinstance(value, str):
        return [12345, 1.5, True, [], {}]
    if isinstance(value, list):
        return ["x", 3, {}]
    if isinstance(value, dict):
        return ["x", 3, []]
    return ["x", 3]


@st.composite
def invalid_requests(draw: st.DrawFn) -> tuple[str, Any, str]:
    """(operation, mutated body, mutation) where the body can never be valid."""
    op = draw(st.sampled_from(sorted(BASES)))
    body = copy.deepcopy(BASES[op])
    kind = draw(st.sampled_from(MUTATIONS))
    leaves = list(_leaves(body))
    if kind == "extra":
        path = draw(st.sampled_from(list(_objects(body))))
        name = "zz" + draw(st.text(min_size=0, max_size=20))
        node = body
        for part in path:
            node = node[part]
        node[name] = draw(st.one_of(st.integers(), st.text(max_size=50), st.none()))
    elif kind == "drop":
        model = request_model(op)
        required = [f.name for f in msgspec.structs.fields(model) if f.required]
        del body[draw(st.sampled_from(required))]
    elif kind == "wrong_type":
        path, value = draw(st.sampled_from(leaves))
        _set(body, path, draw(st.sampled_from(_wrong_types(value))))
    elif kind == "nan":
        floats = [p for p, v in leaves if isinstance(v, float)]
        if not floats:
            return op, [body], "not_object"
        _set(body, draw(st.sampled_from(floats)),
             draw(st.sampled_from([float("nan"), float("inf"), float("-inf")])))  # fmt: skip
    elif kind == "huge":
        strings = [p for p, v in leaves if isinstance(v, str)]
        char = draw(st.sampled_from(["x", "é", "漢", "\U0001f680"]))
        _set(body, draw(st.sampled_from(strings)), char * 20_001)
    elif kind == "unicode_id":
        ids = [p for p, v in leaves if isinstance(p[-1], str) and p[-1].endswith("_id")
               and isinstance(v, str)]  # fmt: skip
        garbage = draw(st.text(min_size=1, max_size=30).filter(lambda s: not s.isascii()))
        _set(body, draw(st.sampled_from(ids)), garbage)
    else:
        return op, draw(st.one_of(st.lists(st.integers(), max_size=3), st.text(), st.none(),
                                  st.floats())), kind  # fmt: skip
    return op, body, kind


@pytest.fixture(scope="module")
def fuzz_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    """A ledger where e1 passed its target stage and is the champion of t1."""
    ledger = Ledger.init(tmp_path_factory.mktemp("fuzz") / "ledger", name="fuzz", actor="a")
    session = Session(ledger)
    session.ready()
    session.passed()
    session.champion()
    try:
        yield ledger
    finally:
        ledger.close()


def test_every_operation_has_a_fuzz_base() -> None:
    assert set(BASES) == set(OPERATIONS)


@pytest.mark.slow
@settings(
    max_examples=int(os.environ.get("PERFLEDGER_FUZZ_EXAMPLES", "2500")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=invalid_requests())
def test_fuzzed_requests_are_refused_in_process(
    fuzz_ledger: Ledger, case: tuple[str, Any, str]
) -> None:
    op, body, kind = case
    head = fuzz_ledger.head()
    with pytest.raises(PerfledgerError) as info:
        execute(fuzz_ledger, op, body, actor="fuzzer")
    assert info.value.exit_code in (2, 3), (op, kind, info.value.message)
    assert fuzz_ledger.head() == head


@pytest.mark.parametrize("coverage", [-0.5, 0.0, 1.0000001, -1e300, 1e300])
def test_negative_or_excessive_coverage_is_refused_by_r7(
    fuzz_ledger: Ledger, coverage: float
) -> None:
    body = copy.deepcopy(BASES["experiment.create"])
    body["claim"]["coverage"] = coverage
    head = fuzz_ledger.head()
    with pytest.raises(PerfledgerError) as info:
        execute(fuzz_ledger, "experiment.create", body, actor="fuzzer")
    assert info.value.rule == "R7" and fuzz_ledger.head() == head


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("PERFLEDGER_CLI_FUZZ_EXAMPLES", "25")),
          deadline=None, suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    case=st.one_of(
        invalid_requests().map(lambda c: (c[0], c[1])),
        st.tuples(st.sampled_from(sorted(BASES)), st.binary(max_size=200)),
    )
)
def test_fuzzed_requests_through_the_cli(fuzz_ledger: Ledger, case: tuple[str, Any]) -> None:
    op, body = case
    operation = OPERATIONS[op]
    data = body if isinstance(body, bytes) else json.dumps(body, allow_nan=True).encode()
    args = [operation.group, operation.verb] if operation.group else [operation.verb]
    head = fuzz_ledger.head()
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", fuzz_ledger.path, *args, "--json",
         "--request", "-"],
        input=data, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode in (2, 3), (op, done.stdout, done.stderr)
    assert b"Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] in ("bad_request", "refused", "not_canonical")
    with Ledger.open(fuzz_ledger.path) as again:
        assert again.head() == head


@pytest.mark.slow
def test_fuzz_examples_exercise_every_mutation(tmp_path: Path) -> None:
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None)
    @given(case=invalid_requests())
    def collect(case: tuple[str, Any, str]) -> None:
        seen.add(case[2])

    collect()
    assert seen == set(MUTATIONS)


@pytest.mark.parametrize(
    ("literal", "said"),
    [("NaN", "NaN is not a number"), ("-Infinity", "-Infinity is not a number"),
     ("1e999", "1e999 is beyond the range of a double")],
)  # fmt: skip
def test_non_finite_json_literals_are_named_in_the_refusal(
    fuzz_ledger: Ledger, literal: str, said: str
) -> None:
    """Python's json reads NaN, Infinity and 1e999 as floats; a request holding one is refused
    (exit 2) with the literal named, before any validation or decision."""
    body = json.dumps(BASES["resolution.record"]).replace(
        '"resolution": 0.01', f'"resolution": {literal}'
    )
    assert literal in body
    head = fuzz_ledger.head()
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", fuzz_ledger.path, "resolution",
         "record", "--json", "--request", "-"],
        input=body.encode(), capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 2 and said in error["message"], done.stdout
    assert f"resolution: {said}" in error["message"]  # where it is, as a field path
    with Ledger.open(fuzz_ledger.path) as again:
        assert again.head() == head
