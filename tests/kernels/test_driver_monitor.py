"""R17: the self-timed driver's calls are perfledger's own processes. The driver runs a process
per call; the host monitor counts a process's CPU time as ours only once it is reaped, unless it
adopted the process, so a monitor observation taken while a call runs (or after it exited and
before it was reaped) read the call's work as another process's. ``run_call`` and ``run_pairs``
now hand each call's pid to ``on_spawn`` as it starts and to ``on_reaped`` once it is reaped
(the host monitor's ``adopt`` and ``disown``, :func:`perfledger.app.measure_driver.own_calls`).
Real processes and the real host monitor; the assertions are on CPU time the monitor counted as
ours, which the shared host's other load does not move."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from perfledger.app.measure_driver import own_calls
from perfledger.kernels.monitor.hostmonitor import HostMonitor, read_host
from perfledger.kernels.workload.driver import Subject, run_call, run_pairs

#: CPU seconds the subject burns before it sleeps.
BURN_S = 0.4
#: A subject that burns :data:`BURN_S` of CPU, then sleeps alive (an observation falls while it
#: is alive, its CPU already spent), then answers as the driver's protocol asks.
BURN_THEN_SLEEP = (
    "import json, time\n"
    "t = time.process_time()\n"
    f"while time.process_time() - t < {BURN_S}: pass\n"
    "time.sleep(0.8)\n"
    "print(json.dumps({'correct': True, 'metrics': {'time_ms': [1.0]}}))\n"
)
QUICK = "import json; print(json.dumps({'correct': True, 'metrics': {'time_ms': [1.0]}}))"


def _own_while_alive(adopt: bool) -> float:
    """Run one burning call under a host monitor (its process adopted or not) and return the
    CPU seconds the monitor counted as ours from before the call to its last observation while
    the call's process was still alive (sleeping, its burn done)."""
    monitor = HostMonitor().start()
    time.sleep(0.15)
    try:
        call = run_call(Subject("s", [sys.executable, "-c", BURN_THEN_SLEEP]), case="c",
                        call_id="c-0", **(own_calls(monitor) if adopt else {}))  # fmt: skip
    finally:
        monitor.stop()
    assert call.ok, call.message
    observations = monitor.observations()
    before = [o for o in observations if o.t_s <= call.start_s][-1]
    # the last observation at least 0.2 s before the exit was seen: the process slept, alive
    alive = [o for o in observations if before.t_s < o.t_s <= call.end_s - 0.2][-1]
    assert not monitor.adopted  # every pid adopted was disowned once reaped
    return alive.own_s - before.own_s


@pytest.mark.slow
def test_r17_a_driver_calls_process_is_the_host_monitors_own_while_it_runs() -> None:
    """The same burning call: adopted (``own_calls``), the CPU it burned is ours in an
    observation taken while it still runs; not adopted, it is not (it reaches our counters
    only once reaped): a window that such an observation brackets read it as foreign."""
    adopted = _own_while_alive(adopt=True)
    plain = _own_while_alive(adopt=False)
    assert adopted >= 0.9 * BURN_S, adopted
    assert plain < 0.5 * BURN_S, plain


def test_run_pairs_hands_every_calls_pid_to_on_spawn_and_on_reaped() -> None:
    """Every call (the warm-up's too) is announced as it starts and again once reaped, in
    that order, one pid per call."""
    events: list[tuple[str, int]] = []
    run = run_pairs(
        Subject("ref", [sys.executable, "-c", QUICK]),
        Subject("cand", [sys.executable, "-c", QUICK]),
        cases=["c"], pairs_per_case=2, warmup_calls=1,
        on_spawn=lambda pid: events.append(("spawn", pid)),
        on_reaped=lambda pid: events.append(("reaped", pid)),
    )  # fmt: skip
    calls = len(run.warmup) + 2 * len(run.pairs)
    assert calls == 6
    spawned = [pid for what, pid in events if what == "spawn"]
    assert len(set(spawned)) == calls
    assert events == [e for pid in spawned for e in (("spawn", pid), ("reaped", pid))]


def test_a_spawn_hook_that_fails_ends_the_calls_process() -> None:
    """A monitor that cannot adopt the call stops the measurement, and the call's process does
    not outlive it (a process left running would load the next call)."""
    seen: list[int] = []

    def refuse(pid: int) -> None:
        seen.append(pid)
        raise RuntimeError("cannot adopt")

    with pytest.raises(RuntimeError, match="cannot adopt"):
        run_call(Subject("s", [sys.executable, "-c", "import time; time.sleep(30)"]),
                 case="c", call_id="c-0", on_spawn=refuse)  # fmt: skip
    [pid] = seen
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    assert state.stdout.strip() in ("", "Z"), state.stdout  # gone (a zombie at most)


def test_read_host_counts_a_live_adopted_process_once() -> None:
    """An adopted process's CPU is in our time while it lives and stays there, counted once,
    once reaped (the reading retries when a child is reaped between its two reads of our
    counters)."""
    child = subprocess.Popen(
        [sys.executable, "-c", BURN_THEN_SLEEP.replace("time.sleep(0.8)", "input()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        start = read_host(adopted=()).own_s
        deadline = time.monotonic() + 30
        while read_host(adopted=[child.pid]).own_s - start < BURN_S * 0.9:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        alive = read_host(adopted=[child.pid]).own_s - start
    finally:
        out, _ = child.communicate("\n")
    assert json.loads(out)["correct"] is True
    reaped = read_host(adopted=[child.pid]).own_s - start
    assert BURN_S * 0.9 <= alive <= reaped < alive + 0.5 * BURN_S
