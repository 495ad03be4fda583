"""The worker protocol's per-call overhead cuts (perfledger.kernels.workload.worker,
perfledger.subject): the measuring process polls for a call's answer only inside a bounded
window around when it is expected, the subject reads perfledger's call lines without the JSON
decoder where they are in their canonical form (the same call, any other line decoded as JSON),
and the call's closing CPU reading walks the worker's tree once."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.worker import ANSWER_POLL_NS, Worker, new_seed
from perfledger.subject import _call_of

#: A subject whose call sleeps (no CPU) for the seconds named in the file ``sleep`` beside it,
#: then writes the case it was given as its output (JSON).
SLEEPER = """
import json, pathlib, time
from perfledger.subject import serve
HERE = pathlib.Path(__file__).parent
def call(state, case, seed, output):
    time.sleep(float((HERE / "sleep").read_text()))
    with open(output, "w") as f:
        json.dump(case, f)
serve(lambda: None, call)
"""


def sleeper(tmp_path: Path, seconds: float) -> list[str]:
    (tmp_path / "sleep").write_text(str(seconds))
    path = tmp_path / "sleeper.py"
    path.write_text(textwrap.dedent(SLEEPER))
    return [sys.executable, str(path)]


def one_call(worker: Worker, case: str = "c", escaped=None):
    """One call as run_pairs makes it (a fresh output place, read inside the clock); returns
    (the Timing, the measuring thread's CPU time over the call in seconds)."""
    place = outputs.OutputPlace()
    try:
        cpu0 = time.thread_time()
        timing = worker.call(
            case, new_seed(), place.path, collect=place.read_bytes, finish=place.finish,
            escaped=escaped,
        )  # fmt: skip
        return timing, time.thread_time() - cpu0
    finally:
        place.remove()


@pytest.mark.slow
def test_the_answer_poll_is_bounded_and_charged_to_nobody_but_perfledger(tmp_path: Path) -> None:
    """A call whose answer comes as expected, and one far later than expected: the measuring
    process polls for at most ANSWER_POLL_NS per call and sleeps otherwise (its CPU time over
    a call stays far below the call's length), and the subject, asleep, is charged no CPU for
    the poll."""
    argv = sleeper(tmp_path, 0.15)
    with Worker("ref", argv, timeout_s=10.0) as worker:
        for _ in range(2):  # the case's expected length becomes known
            one_call(worker)
        timing, polled_s = one_call(worker)
        assert timing.wall_s == pytest.approx(0.15, abs=0.1)
        assert polled_s < 0.15 / 3, polled_s  # not a poll over the whole call
        assert timing.cpu_s < 0.02, timing.cpu_s  # the sleeping subject's own CPU only
        assert json.loads(timing.output.data) == "c"
        # the answer comes far after its window: the poll ends and the measuring process sleeps
        (tmp_path / "sleep").write_text("0.4")
        late, polled_s = one_call(worker)
        assert late.wall_s >= 0.4
        assert polled_s < 0.4 / 4, polled_s
        assert late.cpu_s < 0.02, late.cpu_s
        worker.close()
    assert ANSWER_POLL_NS <= 1_000_000  # a bound of the measuring process's own CPU per call


@pytest.mark.parametrize(
    "case",
    ["wide", "", 'a"b', "back\\slash", "é-unicode", "with space, comma: colon", '1, "seed": 2'],
)
def test_a_call_line_reads_the_same_with_or_without_the_json_decoder(case: str) -> None:
    """Every line perfledger writes gives the call json.loads gives; lines with an escape
    (a quote or a backslash in a string, non-ASCII) go to the JSON decoder."""
    message = {"op": "call", "id": 7, "case": case, "seed": new_seed(), "output": "/tmp/x/output"}
    line = json.dumps(message).encode() + b"\n"
    fast = _call_of(line)
    assert (fast or json.loads(line)) == json.loads(line) == message
    if "\\" not in line.decode():
        assert fast == message  # the fast path took it


@pytest.mark.parametrize(
    "line",
    [
        b'{"op": "call", "id": 07, "case": "c", "seed": 1, "output": "/o"}',
        b'{"op": "call", "id": +7, "case": "c", "seed": 1, "output": "/o"}',
        b'{"op": "call", "id": 7, "case": "c", "seed": 1_0, "output": "/o"}',
        b'{"op": "call", "id": 7, "case": "c", "seed": 1 , "output": "/o"}',
        b'{"op":"call", "id": 7, "case": "c", "seed": 1, "output": "/o"}',
        b'{"op": "call", "id": 7, "case": "c", "seed": 1, "output": "/o", "x": 1}',
        b'{"op": "call", "id": 7, "output": "/o", "seed": 1, "case": "c"}',
        b'{"op": "call", "id": 7, "case": "\xff", "seed": 1, "output": "/o"}',
        b'{"op": "exit"}',
        b"",
    ],
)
def test_any_other_line_is_left_to_the_json_decoder(line: bytes) -> None:
    """Not byte for byte perfledger's form: no call is read from it without the decoder."""
    assert _call_of(line) is None


@pytest.mark.slow
def test_a_case_with_quotes_and_escapes_reaches_the_subject_intact(tmp_path: Path) -> None:
    argv = sleeper(tmp_path, 0.0)
    with Worker("ref", argv, timeout_s=10.0) as worker:
        for case in ("plain", 'q"uote', "back\\slash", "é"):
            timing, _cpu = one_call(worker, case)
            assert json.loads(timing.output.data) == case
        worker.close()


@pytest.mark.slow
def test_the_closing_cpu_reading_asks_for_escaped_processes_once(tmp_path: Path) -> None:
    """The call's closing reading walks the worker's tree and asks ``escaped`` once, for the
    CPU group's check and for the processes' own clocks both (two /proc readings saved)."""
    argv = sleeper(tmp_path, 0.0)
    asked: list[int] = []

    def escaped() -> list[int]:
        asked.append(1)
        return []

    with Worker("ref", argv, timeout_s=10.0) as worker:
        one_call(worker, escaped=escaped)
        assert len(asked) == 1, len(asked)
        worker.close()
