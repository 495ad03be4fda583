"""The host monitor (R17 for CPU workloads): the window verdict from host counters, and the real
monitor over a real child process."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perfledger.kernels.monitor.hostmonitor import (
    HostMonitor,
    HostObservation,
    HostThresholds,
    host_window_verdict,
    read_host,
)


def _obs(t: float, busy: float, own: float) -> HostObservation:
    return HostObservation(t_s=t, busy_s=busy, own_s=own, load1=0.5)


def test_r17_host_window_with_foreign_cpu_is_flagged() -> None:
    obs = [_obs(0.0, 100.0, 1.0), _obs(1.0, 101.5, 1.9), _obs(2.0, 103.0, 2.8)]
    v = host_window_verdict(obs, 0.0, 2.0)
    # 3.0 busy seconds over 2 s, 1.8 of them ours: 0.6 foreign cores
    assert v.observed and v.foreign_activity
    assert v.foreign_cores == pytest.approx(0.6) and v.own_cores == pytest.approx(0.9)
    assert v.reasons == ("host_monitor", "foreign_cpu:0.60")
    request = v.to_request()  # R17: never a typed explanation (another actor's review explains)
    assert request == {"observed": True, "foreign_activity": True, "explained": None,
                       "flags": ["host_monitor", "foreign_cpu:0.60"]}  # fmt: skip


def test_r17_host_window_of_our_own_work_is_clean() -> None:
    obs = [_obs(0.0, 10.0, 1.0), _obs(1.0, 11.0, 1.95)]
    v = host_window_verdict(obs, 0.05, 0.95)
    assert v.observed and not v.foreign_activity and v.reasons == ("host_monitor",)
    assert v.to_request()["explained"] is None


def test_r17_unbracketed_window_is_not_observed() -> None:
    obs = [_obs(1.0, 10.0, 1.0), _obs(2.0, 11.0, 1.5)]
    assert not host_window_verdict(obs, 0.5, 1.5).observed  # nothing before the start
    assert not host_window_verdict(obs, 1.5, 2.5).observed  # nothing after the end


@given(
    st.floats(0.01, 10.0), st.floats(0.0, 8.0), st.floats(0.0, 8.0), st.floats(0.01, 4.0)
)  # fmt: skip
def test_host_verdict_threshold_property(span: float, busy: float, own: float, thr: float) -> None:
    obs = [_obs(0.0, 0.0, 0.0), _obs(span, busy * span, own * span)]
    v = host_window_verdict(obs, 0.0, span, HostThresholds(foreign_cores=thr))
    assert v.foreign_cores is not None and v.foreign_cores >= 0.0
    assert v.foreign_activity == (max(busy - own, 0.0) > thr + 1e-9) or abs(busy - own - thr) < 1e-6


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/stat (Linux)")
def test_host_monitor_counts_a_child_process_as_ours() -> None:
    read_host()  # the counters are readable here
    monitor = HostMonitor(hz=20.0).start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    end = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    monitor.stop()
    v = monitor.verdict(start, end)
    assert v.observed and v.observations >= 2
    # the child's CPU time is ours: at least half of what the kernel charged the child shows in
    # the window's own cores (the observations bracketing it span a little more than it); not a
    # fixed share of a core, which a loaded host does not give the child
    child_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    assert child_s > 0.05
    assert v.own_cores is not None and v.own_cores * (end - start) >= 0.5 * child_s, (v, child_s)
    assert monitor.settings()["source"] == "host"


def test_host_monitor_refuses_unreadable_counters(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RuntimeError, match="cannot read"):
        HostMonitor(proc_stat=str(tmp_path / "missing"))
