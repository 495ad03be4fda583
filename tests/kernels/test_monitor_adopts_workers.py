"""R17: the worker protocol's workers are perfledger's own processes. A long-lived worker's calls
were read by the host monitor as another process's work (its CPU reaches this process's counters
only once it is reaped) and by the NVML monitor as a foreign compute process; both monitors now
adopt each worker as it starts (``run_pairs(on_worker=...)``). A process that is not adopted (a
burner beside the measurement) stays foreign."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from perfledger.kernels.monitor.hostmonitor import HostMonitor, HostThresholds, tree_cpu_s
from perfledger.kernels.monitor.monitor import Monitor, Observation

#: A child that burns about ``BURN_S`` of CPU, says so on stdout, then waits to be told to exit
#: (alive, not reaped, as a worker is between calls).
BURN_S = 0.6
CHILD = (
    "import sys, time\n"
    "t = time.process_time()\n"
    f"while time.process_time() - t < {BURN_S}: pass\n"
    "sys.stdout.write('x'); sys.stdout.flush()\n"
    "sys.stdin.read()\n"
)


def _burn_window(monitor: HostMonitor, adopt: bool) -> tuple[float, float, float]:
    """Start the monitor and a burning child (adopted or not); return (own, foreign) cores of
    the window from the child's start to the end of its burn, and the cores the child burned
    over that window (by the kernel's count: on a loaded host it gets less than one)."""
    monitor.start()
    time.sleep(0.25)
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        if adopt:
            monitor.adopt(child.pid)
        start = time.monotonic()
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        end = time.monotonic()
        burned = tree_cpu_s([child.pid]) / (end - start)
        time.sleep(0.25)  # an observation after the window, the child still alive
        monitor.stop()
        verdict = monitor.verdict(start, end)
    finally:
        child.communicate(b"")
    assert verdict.own_cores is not None and verdict.foreign_cores is not None
    return verdict.own_cores, verdict.foreign_cores, burned


@pytest.mark.slow
def test_r17_an_adopted_workers_live_cpu_is_ours_and_an_unadopted_ones_is_foreign() -> None:
    """The same burning child: adopted, its CPU is in the window's own cores (at least half of
    what it burned over the window, whatever else the host runs); not adopted, it is not."""
    own_adopted, _, burned = _burn_window(HostMonitor(thresholds=HostThresholds()), adopt=True)
    assert own_adopted > 0.5 * burned, (own_adopted, burned)
    own_plain, foreign_plain, burned = _burn_window(HostMonitor(), adopt=False)
    # the measuring process's own CPU is ours too: the child's is not
    assert own_plain < own_adopted and foreign_plain > 0.5 * burned, (own_plain, foreign_plain)


def test_tree_cpu_counts_a_live_child_and_ignores_gone_pids() -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"
        assert tree_cpu_s([child.pid, 2**22 + 12345]) >= BURN_S * 0.8
    finally:
        child.communicate(b"")
    assert tree_cpu_s([]) == 0.0


def test_r17_the_gpu_monitor_counts_an_adopted_worker_as_ours() -> None:
    """NVML lists every compute process: a worker perfledger adopted is not foreign in a
    window's verdict; another process listed beside it still is."""
    worker_pid, other_pid = 4242, 4343
    monitor = Monitor(source=lambda: Observation(time.monotonic(), gpu_util_pct=90,
                                                 pids=(worker_pid, other_pid)))  # fmt: skip
    monitor.adopt(worker_pid)
    monitor.start()
    start = time.monotonic()
    time.sleep(0.35)
    end = time.monotonic()
    time.sleep(0.15)
    monitor.stop()
    verdict = monitor.verdict(start, end)
    assert f"foreign_process:{other_pid}" in verdict.reasons
    assert f"foreign_process:{worker_pid}" not in verdict.reasons
    assert worker_pid in monitor.settings()["own_pids"]
