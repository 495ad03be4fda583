"""The worker protocol's per-call overhead cuts (perfledger.kernels.workload.worker,
perfledger.subject): the measuring process polls for a call's answer only inside a bounded
window around when it is expected, the subject reads perfledger's call lines without the JSON
decoder where they are in their canonical form (the same call, any other line decoded as JSON),
and the call's closing CPU reading walks the worker's tree once."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.worker import ANSWER_POLL_NS, Worker, new_seed, tree_cpu_ns
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


#: A subject speaking the protocol by hand, without ``wake`` in its ready line: any line but a
#: call or exit ends it with an error (the protocol as it was before ``wake``).
BY_HAND = """
import json, os
calls_fd, answers_fd = (int(x) for x in os.environ["PERFLEDGER_WORKER_FDS"].split(","))
answers = os.fdopen(answers_fd, "wb", buffering=0)
answers.write(b'{"op": "ready", "protocol": "perfledger-worker/1"}\\n')
for line in os.fdopen(calls_fd, "rb"):
    message = json.loads(line)
    if message["op"] == "exit":
        break
    assert message["op"] == "call", message
    with open(message["output"], "w") as f:
        json.dump(message["case"], f)
    answers.write(b'{"op": "done", "id": %d}\\n' % message["id"])
"""


@pytest.mark.slow
def test_a_worker_that_does_not_say_wake_is_never_sent_one(tmp_path: Path) -> None:
    path = tmp_path / "by_hand.py"
    path.write_text(textwrap.dedent(BY_HAND))
    with Worker("ref", [sys.executable, str(path)], timeout_s=10.0) as worker:
        assert worker.wakes is False
        for case in ("a", "b", "a"):
            timing, _cpu = one_call(worker, case)
            assert json.loads(timing.output.data) == case
        worker.close()
    with Worker("ref", sleeper(tmp_path, 0.0), timeout_s=10.0) as served:
        assert served.wakes is True  # perfledger.subject.serve says it answers `wake`
        served.close()


@pytest.mark.slow
def test_a_wrong_answer_to_wake_is_out_of_protocol(tmp_path: Path) -> None:
    path = tmp_path / "bad_wake.py"
    path.write_text(
        textwrap.dedent(BY_HAND)
        .replace('"perfledger-worker/1"}', '"perfledger-worker/1", "wake": true}')
        .replace(
            "    message = json.loads(line)\n",
            "    message = json.loads(line)\n"
            "    if message['op'] == 'wake':\n"
            '        answers.write(b\'{"op": "done", "id": 1}\\n\')\n'
            "        continue\n",
        )
    )
    from perfledger.kernels.workload.worker import WorkerFailed

    with Worker("ref", [sys.executable, str(path)], timeout_s=10.0) as worker:
        assert worker.wakes is True
        with pytest.raises(WorkerFailed) as caught:
            one_call(worker)
    assert caught.value.reason == "protocol" and "wake" in caught.value.message


@pytest.mark.slow
def test_a_woken_worker_polls_for_its_call_only_within_its_bound(tmp_path: Path) -> None:
    """After answering ``awake``, serve() polls for the call's line for WAKE_POLL_NS at most,
    then sleeps: a call that comes late finds a worker that used almost no CPU meanwhile."""
    from perfledger.subject import WAKE_POLL_NS

    with Worker("ref", sleeper(tmp_path, 0.0), timeout_s=10.0) as worker:
        one_call(worker)
        os.write(worker._calls_w, b'{"op": "wake"}\n')
        assert worker._read_line(time.perf_counter() + 5, "awake") == b'{"op": "awake"}'
        cpu0 = tree_cpu_ns(worker.pid)
        time.sleep(0.3)  # far longer than the poll's bound
        used_s = (tree_cpu_ns(worker.pid) - cpu0) / 1e9
        assert used_s < 0.3 / 4, used_s
        assert WAKE_POLL_NS <= 1_000_000
        timing, _cpu = one_call(worker)  # the late call's line is still read
        assert json.loads(timing.output.data) == "c"
        worker.close()
