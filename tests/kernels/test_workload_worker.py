"""The worker protocol (perfledger.kernels.workload.worker): perfledger's clock, inputs and
judgement of every output, against real subject processes written into tmp_path, each cheat
beside an honest control."""

from __future__ import annotations

import statistics
import sys
import textwrap
import time
from pathlib import Path

import pytest

from perfledger.kernels.workload.worker import (
    Worker,
    WorkerFailed,
    WorkerSubject,
    run_pairs,
    tree_cpu_ns,
)

UNITS = {"wall_time": "ms", "cpu_time": "ms"}
EXACT = {"compare": "exact"}

#: A pure-Python workload: the inputs come from the seed, the output is a JSON number.
WORK = """
import json, random, sys, time
def work(case, seed):
    rng = random.Random(f"{case}:{seed}")
    n = 20000 if case == "small" else 40000
    return sum(rng.random() ** 2 for _ in range(n))
"""

HONEST = (
    WORK
    + """
from perfledger.subject import serve
def call(state, case, seed, output):
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
serve(lambda: None, call)
"""
)


def script(tmp_path: Path, name: str, body: str) -> WorkerSubject:
    """A subject process: ``python tmp_path/name.py``."""
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return WorkerSubject(name, [sys.executable, str(path)])


def run(ref: WorkerSubject, cand: WorkerSubject, **kw):
    kw.setdefault("cases", ["small"])
    kw.setdefault("pairs_per_case", 3)
    kw.setdefault("warmup_calls", 0)
    kw.setdefault("timeout_s", 10.0)
    return run_pairs(ref, cand, accuracy=EXACT, units=UNITS, **kw)


def cand_rows(result):
    return [c for _r, c in result.pairs()]


@pytest.mark.slow
def test_honest_pair_every_output_judged_and_timed_by_perfledger(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", HONEST)
    result = run(ref, cand, cases=["small", "large"])
    pairs = result.pairs()
    assert len(pairs) == 6
    for r, c in pairs:
        assert r["correct"] and c["correct"], (r["output"], c["output"])
        assert r["seed"] == c["seed"]  # one seed per pair
        assert r["metrics"]["wall_time"][0] == pytest.approx(r["wall_s"] * 1e3)
        assert r["cpu_s"] > 0 and c["cpu_s"] > 0
    assert len({r["seed"] for r, _c in pairs}) == 6  # fresh per pair
    assert result.settings["fresh_worker"] is False  # the outputs follow the seed
    assert result.settings["protocol"] == "worker/v1"


@pytest.mark.slow
def test_cheat_computes_once_then_answers_done_at_once(tmp_path: Path) -> None:
    """A worker that does the work on its first call only: every later call is fast, and
    wrong (its output is the first call's, or none)."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
from perfledger.subject import serve
memo = {}
def call(state, case, seed, output):
    if "v" not in memo:
        memo["v"] = work(case, seed)
    with open(output, "w") as f:
        json.dump(memo["v"], f)
serve(lambda: None, call)
""",
    )
    result = run(ref, cand, pairs_per_case=4)
    judged = [c["correct"] for c in cand_rows(result)]
    assert judged.count(False) >= 3, judged  # every call after the first is judged wrong
    assert all(r["correct"] for r, _c in result.pairs())


@pytest.mark.slow
def test_cheat_skips_the_output_on_later_calls(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
from perfledger.subject import serve
n = [0]
def call(state, case, seed, output):
    n[0] += 1
    if n[0] == 1:
        with open(output, "w") as f:
            json.dump(work(case, seed), f)
serve(lambda: None, call)
""",
    )
    result = run(ref, cand)
    rows = cand_rows(result)
    assert not any(c["correct"] for c in rows[1:])
    assert "wrote no output" in rows[1]["output"]["reason"]


@pytest.mark.slow
def test_cheat_reported_fast_times_decide_nothing(tmp_path: Path) -> None:
    """A subject that reports a tiny time: kept as `reported`, never the observed metric."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
from perfledger.subject import serve
def call(state, case, seed, output):
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
    return {"wall_time": 1e-6, "time_ms": 1e-6}
serve(lambda: None, call)
""",
    )
    result = run(ref, cand)
    for _r, c in result.pairs():
        assert c["reported"] == {"wall_time": 1e-6, "time_ms": 1e-6}
        assert c["metrics"]["wall_time"][0] == pytest.approx(c["wall_s"] * 1e3)
        assert c["metrics"]["wall_time"][0] > 1.0  # milliseconds of real work, not 1e-6
        assert c["correct"]


@pytest.mark.slow
def test_cheat_memoizes_by_case_seeded_inputs_are_wrong(tmp_path: Path) -> None:
    """Persistent worker, inputs from the seed: a remembered output is another pair's."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
from perfledger.subject import serve
memo = {}
def call(state, case, seed, output):
    if case not in memo:
        memo[case] = work(case, seed)
    with open(output, "w") as f:
        json.dump(memo[case], f)
serve(lambda: None, call)
""",
    )
    result = run(ref, cand, pairs_per_case=3)
    assert result.settings["fresh_worker"] is False
    assert [c["correct"] for c in cand_rows(result)][1:] == [False, False]


FIXED = """
import json, random
from perfledger.subject import serve
def work(case):
    rng = random.Random(case)                      # the seed is ignored: a fixed test set
    return sum(rng.random() ** 2 for _ in range(60000))
"""


@pytest.mark.slow
def test_cheat_memoizes_by_case_fixed_test_set_gets_fresh_workers(tmp_path: Path) -> None:
    """A fixed test set (the reference's output does not follow the seed): the probe sees it
    and every pair gets fresh workers, so a memoizing worker has nothing to remember and its
    calls take as long as the honest reference's."""
    ref = script(
        tmp_path,
        "ref",
        FIXED
        + """
def call(state, case, seed, output):
    json.dump(work(case), open(output, "w"))
serve(lambda: None, call)
""",
    )
    cand = script(
        tmp_path,
        "cand",
        FIXED
        + """
memo = {}
def call(state, case, seed, output):
    if case not in memo:
        memo[case] = work(case)
    json.dump(memo[case], open(output, "w"))
serve(lambda: None, call)
""",
    )
    result = run(ref, cand, pairs_per_case=4)
    assert result.settings["fresh_worker"] is True
    assert "did not change with the seed" in result.settings["fresh_reason"]
    pairs = result.pairs()
    assert all(r["correct"] and c["correct"] for r, c in pairs)
    ratio = sorted(c["wall_s"] / r["wall_s"] for r, c in pairs)[len(pairs) // 2]
    assert ratio > 0.3, ratio  # no 100x "win": each fresh worker computes


@pytest.mark.slow
def test_cheat_writes_the_output_late_from_a_thread(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
import threading
from perfledger.subject import serve
def late(case, seed, output):
    v = work(case, seed)
    with open(output, "w") as f:
        json.dump(v, f)
def call(state, case, seed, output):
    threading.Thread(target=late, args=(case, seed, output)).start()
serve(lambda: None, call)
""",
    )
    try:
        result = run(ref, cand, pairs_per_case=4, cases=["large"])
    except WorkerFailed as exc:  # its thread's work after `done` was seen
        assert exc.reason == "idle_cpu", exc.message
        return
    # the clock stops once the output is collected: a call whose output was there did its
    # work inside the clock, also where the measuring process waited for a core after `done`
    # while the thread wrote it (before, that gap let such a call pass at a fraction of its time)
    # (the median over the pairs whose output was collected: one reference call slowed by the
    # host's load is not the cheat)
    ratios = [c["wall_s"] / r["wall_s"] for r, c in result.pairs() if c["correct"]]
    assert not ratios or statistics.median(ratios) > 0.5, ratios


@pytest.mark.slow
def test_cheat_works_between_calls_is_refused(tmp_path: Path) -> None:
    """An idle worker that burns CPU while the other subject's call runs (slowing it, or
    working outside its own clock) makes the comparison invalid."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
import threading
from perfledger.subject import serve
def spin():
    while True:
        sum(range(1000))
def call(state, case, seed, output):
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
    if not state:
        state.append(threading.Thread(target=spin, daemon=True))
        state[0].start()
serve(lambda: [], call)
""",
    )
    # Under run_pairs the idle worker is stopped (SIGSTOP) while the other subject's call runs,
    # so its spinner gets only the moments between `done` and the stop, too few on a loaded
    # host to show every time. Here the worker is left running between its two calls, as it
    # would be if it could escape the stop: the parent's CPU reading of its tree finds the work.
    del ref
    worker = Worker("cand", cand.argv, timeout_s=10.0)
    try:
        worker.call("small", 1, str(tmp_path / "out-1"))
        time.sleep(0.3)  # the spinner runs: more than IDLE_CPU_FLOOR_S of CPU after `done`
        with pytest.raises(WorkerFailed) as caught:
            worker.call("small", 2, str(tmp_path / "out-2"))
    finally:
        worker.close()
    assert caught.value.reason == "idle_cpu"
    assert "must not work between its calls" in caught.value.message


def protocol_cheat(tmp_path: Path, body: str, **kw) -> WorkerFailed:
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", "import json, os, sys, time\n"
                  "r, w = (int(x) for x in os.environ['PERFLEDGER_WORKER_FDS'].split(','))\n"
                  "calls = os.fdopen(r, 'rb'); answers = os.fdopen(w, 'wb', buffering=0)\n"
                  "def say(m): answers.write(json.dumps(m).encode() + b'\\n')\n"
                  "say({'op': 'ready', 'protocol': 'perfledger-worker/1'})\n"
                  + textwrap.dedent(body))  # fmt: skip
    with pytest.raises(WorkerFailed) as caught:
        run(ref, cand, **kw)
    return caught.value


@pytest.mark.slow
def test_cheat_a_second_answer_is_out_of_protocol(tmp_path: Path) -> None:
    exc = protocol_cheat(
        tmp_path,
        """
for line in calls:
    m = json.loads(line)
    if m["op"] == "exit": break
    open(m["output"], "w").write("0")
    say({"op": "done", "id": m["id"]}); say({"op": "done", "id": m["id"]})
""",
    )
    # read before the next call is sent, the extra answer is one nobody asked for; read after
    # it (a loaded host), it answers the next call with the wrong id: a protocol failure either way
    assert exc.reason == "protocol"
    assert "nobody asked for" in exc.message or "answered id 1 to call 2" in exc.message


@pytest.mark.slow
def test_cheat_a_wrong_id_is_out_of_protocol(tmp_path: Path) -> None:
    exc = protocol_cheat(
        tmp_path,
        """
for line in calls:
    m = json.loads(line)
    say({"op": "done", "id": m["id"] + 1})
""",
    )
    assert exc.reason == "protocol" and "answered id" in exc.message


@pytest.mark.slow
def test_cheat_an_unknown_op_and_a_long_line_are_out_of_protocol(tmp_path: Path) -> None:
    exc = protocol_cheat(
        tmp_path,
        """
for line in calls:
    say({"op": "progress", "id": 1})
""",
    )
    assert exc.reason == "protocol"
    exc = protocol_cheat(
        tmp_path,
        """
for line in calls:
    answers.write(b"x" * 200000)
    time.sleep(5)
""",
    )
    assert exc.reason == "protocol" and "longer than" in exc.message


def test_cheat_dies_mid_run(tmp_path: Path) -> None:
    exc = protocol_cheat(
        tmp_path,
        """
print("dying now", file=sys.stderr)
for line in calls:
    os._exit(3)
""",
    )
    assert exc.reason == "died" and "dying now" in exc.message


@pytest.mark.slow
def test_cheat_hangs_past_its_limit(tmp_path: Path) -> None:
    t0 = time.monotonic()
    exc = protocol_cheat(
        tmp_path,
        """
for line in calls:
    time.sleep(60)
""",
        timeout_s=1.0,
    )
    assert exc.reason == "timeout"
    assert time.monotonic() - t0 < 10


@pytest.mark.slow
def test_prints_on_stdout_cannot_break_the_protocol(tmp_path: Path) -> None:
    """The honest control of the protocol cheats: a subject that prints JSON-looking lines,
    even a forged answer, on its stdout is measured as usual."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(
        tmp_path,
        "cand",
        WORK
        + """
from perfledger.subject import serve
def call(state, case, seed, output):
    print('{"op": "done", "id": 999}', flush=True)
    print("progress 50%", flush=True)
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
serve(lambda: print("loading", flush=True), call)
""",
    )
    result = run(ref, cand)
    assert all(c["correct"] for c in cand_rows(result))


def test_worker_not_ready_in_time_fails_with_its_stderr(tmp_path: Path) -> None:
    bad = script(
        tmp_path, "bad", "import sys\nprint('no such model', file=sys.stderr)\nsys.exit(1)\n"
    )
    with pytest.raises(WorkerFailed) as caught:
        Worker("ref", bad.argv, timeout_s=5.0)
    assert caught.value.reason == "died" and "no such model" in caught.value.message


@pytest.mark.slow
def test_tree_cpu_counts_a_child_process(tmp_path: Path) -> None:
    """CPU time comes from the kernel, for the whole process tree (a child doing the work)."""
    import subprocess

    child = tmp_path / "c.py"
    child.write_text(
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 't=time.process_time()\\n"
        "while time.process_time()-t < 0.3: pass\\nimport time as _; _.sleep(5)'])\n"
        "time.sleep(5)\n".replace("'-c', 't=", "'-c', 'import time\\nt=")
    )
    proc = subprocess.Popen([sys.executable, str(child)])
    try:
        deadline = time.monotonic() + 8
        while tree_cpu_ns(proc.pid) < 0.3e9 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tree_cpu_ns(proc.pid) >= 0.3e9
    finally:
        import os
        import signal

        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


COMMAND = (
    WORK
    + """
import os
out = os.environ["PERFLEDGER_OUTPUT"]
with open(out, "w") as f:
    json.dump(work(os.environ["PERFLEDGER_CASE"], int(sys.argv[1])), f)
"""
)


@pytest.mark.slow
def test_whole_command_mode_one_process_per_call(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", COMMAND)
    cand = script(tmp_path, "cand", COMMAND)
    ref = WorkerSubject("ref", [*ref.argv, "{seed}"])
    cand = WorkerSubject("cand", [*cand.argv, "{seed}"])
    result = run(ref, cand, mode="command")
    assert result.settings["protocol"] == "command/v1"
    for r, c in result.pairs():
        assert r["correct"] and c["correct"]
        assert r["cpu_s"] > 0 and r["wall_s"] >= r["cpu_s"] * 0.5


@pytest.mark.slow
def test_cheat_whole_command_constant_output_is_wrong(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", COMMAND)
    ref = WorkerSubject("ref", [*ref.argv, "{seed}"])
    cand = script(tmp_path, "cand", "import json, os\n"
                  "json.dump(0.5, open(os.environ['PERFLEDGER_OUTPUT'], 'w'))\n")  # fmt: skip
    result = run(ref, cand, mode="command")
    assert not any(c["correct"] for c in cand_rows(result))


def test_whole_command_exit_status_invalidates(tmp_path: Path) -> None:
    ref = script(tmp_path, "ref", COMMAND)
    ref = WorkerSubject("ref", [*ref.argv, "{seed}"])
    cand = script(tmp_path, "cand", "import sys\nprint('boom', file=sys.stderr)\nsys.exit(4)\n")
    with pytest.raises(WorkerFailed) as caught:
        run(ref, cand, mode="command")
    assert caught.value.reason == "exit_status" and "boom" in caught.value.message


#: A candidate whose thread watches the temporary directory for the reference's output of the
#: pair (same seed) and hands it back at once when its own call comes.
WATCHER = (
    WORK
    + """
import glob, os, tempfile, threading
from perfledger.subject import serve
seen = {}
def watch():
    while True:
        for path in glob.glob(os.path.join(tempfile.gettempdir(), "perfledger-out-*", "output*")):
            try:
                seen["last"] = open(path).read()
            except OSError:
                pass
        time.sleep(0.002)
def call(state, case, seed, output):
    copied = seen.pop("last", None)
    with open(output, "w") as f:
        f.write(copied if copied else "0.5")    # never computes: a copy, or a guess
serve(lambda: threading.Thread(target=watch, daemon=True).start(), call)
"""
)


@pytest.mark.slow
def test_cheat_idle_worker_copying_the_references_output_is_stopped(tmp_path: Path) -> None:
    """In a pair whose reference runs first, an idle candidate could copy the reference's
    output as it is written. The idle worker is stopped (SIGSTOP) during the other's call: it
    copies nothing, and every call it answers is wrong."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", WATCHER)
    try:
        result = run(ref, cand, pairs_per_case=4)
    except WorkerFailed as exc:  # its watcher's CPU after `done` is flagged instead
        assert exc.reason == "idle_cpu", exc.message
        return
    assert not any(c["correct"] for c in cand_rows(result)), [
        c["output"] for c in cand_rows(result)
    ]


@pytest.mark.slow
def test_cheat_double_forked_daemon_is_ended_before_every_call(tmp_path: Path) -> None:
    """A worker that leaves a daemon behind (double fork, new session): re-parented to the
    measuring process, it is killed before the next call, and counted."""
    ref = script(tmp_path, "ref", HONEST)
    marker = tmp_path / "daemon-alive"
    cand = script(
        tmp_path,
        "cand",
        WORK
        + f"""
import os
from perfledger.subject import serve
def setup():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                open({str(marker)!r}, "w").write(str(time.time()))
                time.sleep(0.05)
        os._exit(0)
def call(state, case, seed, output):
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
serve(setup, call)
""",
    )
    result = run(ref, cand)
    assert result.settings["ended_orphans"] >= 1
    stamp = marker.read_text() if marker.exists() else None
    time.sleep(0.3)
    assert (marker.read_text() if marker.exists() else None) == stamp  # nothing writes it now


#: A candidate that does the reference's work but, at setup (outside every clock), starts chains
#: worker -> P -> H where each H burns CPU, then idles; each call kills one P without reaping it,
#: so its H leaves the worker's tree (re-parented to the measuring process) with the CPU it
#: burned, which the call's opening reading counted.
TREE_SHRINK = (
    WORK
    + """
import os, signal
from perfledger.subject import serve
def chain(burn_s):
    r, w = os.pipe()
    p = os.fork()
    if p == 0:
        if os.fork() == 0:
            while time.process_time() < burn_s:
                pass
            os.write(w, b"x")
            while True:
                time.sleep(3600)
        os.execv("/bin/sleep", ["sleep", "infinity"])
    os.close(w)
    os.read(r, 1)
    return p
def setup():
    return [chain(0.3) for _ in range(4)]
def call(chains, case, seed, output):
    if chains:
        os.kill(chains.pop(), signal.SIGKILL)  # its H leaves the tree; P stays a zombie
    with open(output, "w") as f:
        json.dump(work(case, seed), f)
serve(setup, call)
"""
)


@pytest.mark.slow
def test_cheat_descendants_leaving_the_tree_take_no_cpu_time_out_of_a_call(tmp_path: Path) -> None:
    """The CPU clock of a process that leaves the worker's tree during a call (orphaned to the
    measuring process) still counts in the call's closing reading: the CPU it burned before the
    call cancels out instead of being subtracted from the call's own work (R5)."""
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", TREE_SHRINK)
    result = run(ref, cand, pairs_per_case=3)
    pairs = result.pairs()
    ref_cpu = sorted(r["cpu_s"] for r, _c in pairs)
    cand_cpu = sorted(c["cpu_s"] for _r, c in pairs)
    # each chain burned 0.3 s, far more than a call's work: a subtraction would leave 0
    assert cand_cpu[0] > 0.5 * ref_cpu[0], (ref_cpu, cand_cpu)
    assert max(cand_cpu) < 0.2, cand_cpu  # and nothing burned before the call is charged
