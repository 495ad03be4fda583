"""The workload driver on the embedded CPU workload: ABBA order, failures recorded with their
reason (garbage, non-zero exit, hang, NaN), correctness and metrics of one call kept together
(R5, R11). Real processes, no mocks."""

from __future__ import annotations

import json
import statistics
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.kernels.workload.driver import (
    FAILURE_REASONS,
    Subject,
    abba_order,
    parse_output,
    run_call,
    run_pairs,
)


def test_correct_call_keeps_correctness_and_metrics_together(sumsq_argv: list[str]) -> None:
    out = run_call(Subject("ref", sumsq_argv), case="small", call_id="c0", timeout_s=60)
    assert out.ok and out.correct and out.reason is None
    assert len(out.metrics["time_ms"]) == 3 and all(v > 0 for v in out.metrics["time_ms"])
    assert out.detail == {"n": 20_000, "extra_work": 0.0}
    assert out.end_s >= out.start_s and out.wall_s > 0


def test_r5_wrong_answer_is_a_valid_call_that_is_not_correct(sumsq_argv: list[str]) -> None:
    out = run_call(Subject("cand", [*sumsq_argv, "--mode", "wrong"]), case="small", call_id="c")
    assert out.ok and not out.correct and out.metrics["time_ms"]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "not_json"),
        ("exit", "exit_status"),
        ("nan", "non_finite"),
        ("noshape", "bad_shape"),
    ],
)
def test_misbehaving_call_is_recorded_with_its_reason(
    sumsq_argv: list[str], mode: str, reason: str
) -> None:
    out = run_call(Subject("cand", [*sumsq_argv, "--mode", mode]), case="small", call_id="c")
    assert not out.ok and not out.correct and out.metrics == {}
    assert out.reason == reason and out.message
    if mode == "exit":
        assert out.returncode == 3 and "simulated crash" in out.stderr_tail


def test_hang_is_killed_at_the_timeout_with_its_process_group(sumsq_argv: list[str]) -> None:
    # the hang runs in a grandchild of a shell: killing only the shell would leave it running
    script = f"{sys.executable} {sumsq_argv[1]} --mode hang & wait"
    start = time.monotonic()
    out = run_call(Subject("cand", ["sh", "-c", script]), case="small", call_id="c", timeout_s=1.0)
    assert time.monotonic() - start < 10
    assert not out.ok and out.reason == "timeout" and out.returncode is None


def test_missing_command_is_a_spawn_error() -> None:
    out = run_call(Subject("ref", ["/nonexistent/perfledger-cmd"]), case="x", call_id="c")
    assert not out.ok and out.reason == "spawn_error"
    assert set(FAILURE_REASONS) >= {"spawn_error", "timeout", "exit_status", "not_json"}


def test_case_placeholder_and_environment(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # the case reaches the subject; its role (ref or cand) never does
    code = (
        "import json,os,sys; print(json.dumps({'correct': sys.argv[1] == os.environ['PERFLEDGER_CASE']"
        " and 'PERFLEDGER_SUBJECT' not in os.environ, 'metrics': {'m': 1}}))"
    )
    out = run_call(Subject("cand", [sys.executable, "-c", code, "{case}"]), case="big", call_id="c")
    assert out.ok and out.correct and out.metrics == {"m": [1.0]}


@pytest.mark.parametrize(
    ("stdout", "reason"),
    [
        ("", "not_json"),
        ("[1, 2]", "not_json"),
        ('{"correct": 1, "metrics": {"m": 1}}', "bad_shape"),
        ('{"correct": true, "metrics": {}}', "bad_shape"),
        ('{"correct": true, "metrics": {"m": []}}', "bad_shape"),
        ('{"correct": true, "metrics": {"m": "fast"}}', "bad_shape"),
        ('{"correct": true, "metrics": {"m": true}}', "bad_shape"),
        ('{"correct": true, "metrics": {"m": Infinity}}', "non_finite"),
        ('{"correct": true, "metrics": {"m": [1, NaN]}}', "non_finite"),
        ('{"correct": true, "metrics": {"m": 0}}', "non_positive"),
        ('{"correct": true, "metrics": {"m": -2.5}}', "non_positive"),
    ],
)
def test_parse_output_refuses_bad_shapes(stdout: str, reason: str) -> None:
    correct, metrics, _detail, got, message = parse_output(stdout)
    assert got == reason and not correct and metrics == {} and message


def test_parse_output_takes_the_last_line_after_logs() -> None:
    text = 'loading...\nwarming up\n{"correct": false, "metrics": {"ms": [2, 3]}}\n'
    assert parse_output(text)[:2] == (False, {"ms": [2.0, 3.0]})


@pytest.mark.slow
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8), st.floats(min_value=1e-9, max_value=1e9), min_size=1
    )
)
def test_parse_output_round_trips_valid_metrics(metrics: dict[str, float]) -> None:
    correct, parsed, _d, reason, _m = parse_output(
        json.dumps({"correct": True, "metrics": metrics})
    )
    assert reason is None and correct
    assert parsed == {k: [v] for k, v in metrics.items()}


@given(st.integers(min_value=0, max_value=200))
def test_abba_order_balances_who_runs_first(rounds: int) -> None:
    order = abba_order(rounds)
    assert len(order) == rounds
    firsts = [o[0] for o in order]
    assert abs(firsts.count("ref") - firsts.count("cand")) <= 1
    for k in range(0, rounds - 1, 2):  # each AB is followed by BA
        assert order[k] == ("ref", "cand") and order[k + 1] == ("cand", "ref")


@pytest.mark.slow
def test_run_pairs_interleaves_abba_across_cases(sumsq_argv: list[str]) -> None:
    seen: list[tuple[str, str]] = []
    # 5x the work, median of 3 repeats per call: a 1-2 ms call with twice the work flipped 3 of
    # 6 pairs on an idle CI machine (scheduling jitter), and this test is about the order
    ref = Subject("ref", [*sumsq_argv, "--repeats", "3"])
    cand = Subject("cand", [*sumsq_argv, "--repeats", "3", "--extra-work", "4.0"])
    run = run_pairs(
        ref, cand, cases=["small", "large"], pairs_per_case=3, warmup_calls=1,
        on_call=lambda c: seen.append((c.subject, c.case)),
    )  # fmt: skip
    assert [(p.case, p.index, p.order) for p in run.pairs] == [
        ("small", 0, ("ref", "cand")), ("large", 0, ("ref", "cand")),
        ("small", 1, ("cand", "ref")), ("large", 1, ("cand", "ref")),
        ("small", 2, ("ref", "cand")), ("large", 2, ("ref", "cand")),
    ]  # fmt: skip
    assert seen[:4] == [("ref", "small"), ("cand", "small"), ("ref", "large"), ("cand", "large")]
    assert seen[4:8] == [("ref", "small"), ("cand", "small"), ("ref", "large"), ("cand", "large")]
    assert seen[8:10] == [("cand", "small"), ("ref", "small")]  # round 1 is BA
    # calls really ran in that order (monotonic stamps) and each pair's calls are adjacent
    for p in run.pairs:
        first, second = (p.ref, p.cand) if p.order[0] == "ref" else (p.cand, p.ref)
        assert first.end_s <= second.start_s
    assert all(p.usable and p.ref.correct and p.cand.correct for p in run.pairs)
    table = run.table()
    assert len(table) == 4 + 12 and sum(r["warmup"] for r in table) == 4
    assert len({r["call_id"] for r in table}) == len(table)
    json.dumps(table)  # the raw table is JSON
    # five times the work is measurably slower (not a timing assertion of a threshold)
    slower = sum(
        statistics.median(p.cand.metrics["time_ms"]) > statistics.median(p.ref.metrics["time_ms"])
        for p in run.pairs
    )
    assert slower >= 4


def test_failed_calls_inside_a_run_do_not_crash_it(sumsq_argv: list[str]) -> None:
    ref = Subject("ref", [*sumsq_argv, "--repeats", "1"])
    cand = Subject("cand", [*sumsq_argv, "--mode", "garbage"])
    run = run_pairs(ref, cand, cases=["small"], pairs_per_case=2, warmup_calls=0)
    assert [p.usable for p in run.pairs] == [False, False]
    assert [c.reason for c in run.failed_calls] == ["not_json", "not_json"]


def test_run_pairs_rejects_bad_arguments(sumsq_argv: list[str]) -> None:
    s = Subject("ref", sumsq_argv)
    with pytest.raises(ValueError):
        run_pairs(s, s, cases=[])
    with pytest.raises(ValueError):
        run_pairs(s, s, cases=["a", "a"])
    with pytest.raises(ValueError):
        run_pairs(s, s, cases=["a"], pairs_per_case=0)
    with pytest.raises(ValueError):
        Subject("x", [])
