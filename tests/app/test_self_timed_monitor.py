"""R17 for the self-timed driver's baseline and A/A (issue 34): they run under the monitor the
worker protocol's baseline and A/A run under (the one a formal stage of the Target uses), each
call's process adopted as perfledger's own while it runs, their windows recorded in the raw
table (``baseline.json``: one per call; ``resolution.json``: one per pair), and judged by the
same function as the worker protocol's (:func:`perfledger.app.measure_workload.foreign_windows_refusal`):
a baseline, or an A/A with ``--record``, whose windows saw foreign activity in more than 20 %
of them is refused, nothing recorded. Before, the self-timed driver measured them with no
monitor: a process an agent started to slow the original's calls (the reference watch's
yardstick, R11) went unseen.

The burner tests run a real process that keeps a core busy beside the measurement, which runs
as a user runs it (its own ``perfledger`` process). The tests of what is recorded use the
stand-in monitor of test_original_copies (quiet) or the real host monitor with a threshold no
host reaches, so that no assertion depends on the shared host's other load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_original_copies import (
    HONEST,
    SELF_TIMED,
    _aa,
    _head,
    _monitor,
    _ready,
    _record_baseline,
    private_tmp,
)

from perfledger.api import Ledger
from perfledger.app import measure_workload
from perfledger.app.baseline import MeasureBaseline, measure_baseline
from perfledger.app.measure_aa import RESOLUTION_ARTIFACT
from perfledger.kernels.monitor.hostmonitor import HostMonitor, HostThresholds
from subprocess_env import perfledger_command

__all__ = ["private_tmp"]  # the fixture, used by name

#: CPU seconds each call of the CPU-heavy original burns.
BURN_S = 0.3
#: A self-timed original that keeps a core busy for ``{burn_s}`` seconds of CPU per call and
#: reports what it burned as its figure (a figure that varies from call to call, as a time does).
TIMED = """
import json, time
t = time.process_time()
while time.process_time() - t < {burn_s}:
    pass
print(json.dumps({{"correct": True, "metrics": {{"time_ms": [1e3 * (time.process_time() - t)]}}}}))
"""
CPU_HEAVY = TIMED.format(burn_s=BURN_S)
#: A process of the agent's beside the measurement: it keeps one core busy.
BURNER = [sys.executable, "-c", "while True: pass"]


def _cli(path: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*perfledger_command(), "--ledger", str(path), *args, "--json"],
                          capture_output=True, text=True, cwd=cwd)  # fmt: skip


def _error(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 3, done.stdout + done.stderr
    error: dict[str, Any] = json.loads(done.stdout)["error"]
    return error


@pytest.mark.slow
def test_cheat_self_timed_baseline_measured_while_a_cpu_burner_runs_is_refused(
    private_tmp: Path,
) -> None:
    """As the worker protocol's (test_original_copies): the real host monitor sees the burner
    in every call's window (a core and more; the threshold is a quarter of one) and the
    baseline is refused with the figures (R17, exit 3), nothing recorded."""
    path, cmd = _ready(private_tmp, SELF_TIMED.format(cheat=HONEST), primary="time_ms")
    head = _head(path)
    burner = subprocess.Popen(BURNER)
    try:
        done = _cli(path, private_tmp, "measure", "baseline", "--target", "t1", "--cmd", cmd,
                    "--calls", "2", "--actor", "agent")  # fmt: skip
    finally:
        burner.kill()
        burner.wait()
    error = _error(done)
    message = error["message"]
    assert error["rule"] == "R17" and "of 2 baseline call windows" in message, message
    assert "foreign_cpu:" in message and "nothing was recorded" in message
    assert _head(path) == head


@pytest.mark.slow
def test_cheat_self_timed_aa_measured_while_a_cpu_burner_runs_is_not_recorded(
    private_tmp: Path,
) -> None:
    """The A/A's medians are the reference watch's yardstick (R11): measured beside a burner,
    ``--record`` is refused (R17, exit 3, nothing recorded) and measuring alone says what
    ``--record`` would do."""
    path, cmd = _ready(private_tmp, SELF_TIMED.format(cheat=HONEST), primary="time_ms")
    _record_baseline(path)
    head = _head(path)
    aa = ("measure", "aa", "--target", "t1", "--cmd", cmd, "--runs", "2")
    burner = subprocess.Popen(BURNER)
    try:
        recorded = _cli(path, private_tmp, *aa, "--record", "--accept-resolution", "--actor",
                        "agent")  # fmt: skip
        measured = _cli(path, private_tmp, *aa)
    finally:
        burner.kill()
        burner.wait()
    error = _error(recorded)
    assert error["rule"] == "R17" and "of 2 A/A pair windows" in error["message"]
    assert "nothing was recorded" in error["message"]
    assert _head(path) == head
    assert measured.returncode == 0, measured.stdout + measured.stderr
    answer = json.loads(measured.stdout)
    assert not answer["recorded"]
    assert any("R17" in w and "with --record" in w for w in answer["warnings"]), answer


@pytest.mark.slow
def test_honest_self_timed_baseline_records_one_monitor_window_per_call(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cmd = _ready(private_tmp, SELF_TIMED.format(cheat=HONEST), primary="time_ms")
    monitor = _monitor(monkeypatch, foreign=False)
    with Ledger.open(path) as ledger:
        done = measure_baseline(
            ledger, MeasureBaseline(target_id="t1", cmd=cmd, calls=2, actor="agent")
        )
        table = json.loads(ledger.artifact(done.event_id, "baseline.json"))
    assert monitor.stopped
    windows = table["monitor"]["windows"]
    assert [w["call_ids"] for w in windows] == [[row["call_id"]] for row in table["table"]]
    assert len(windows) == 2 and not any(w["foreign_activity"] for w in windows)
    assert table["monitor"]["settings"] == {"source": "stand-in"}


@pytest.mark.slow
def test_honest_self_timed_aa_records_one_monitor_window_per_pair(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, cmd = _ready(private_tmp, TIMED.format(burn_s=0.01), primary="time_ms")
    _record_baseline(path)
    _monitor(monkeypatch, foreign=False)
    done = _aa(path, cmd, record=True)
    assert done.recorded
    with Ledger.open(path) as ledger:
        table = json.loads(ledger.artifact(done.event_id, RESOLUTION_ARTIFACT))
    paired: dict[int, list[str]] = {}
    for row in table["table"]:
        if not row["warmup"]:
            paired.setdefault(row["pair"], []).append(row["call_id"])
    windows = table["monitor"]["windows"]
    assert len(windows) == len(paired) == 2
    assert [sorted(w["call_ids"]) for w in windows] == [sorted(c) for c in paired.values()]


@pytest.mark.slow
def test_r17_a_cpu_heavy_self_timed_originals_calls_are_its_own_not_foreign(
    private_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real host monitor over a baseline of an original that keeps a core busy in every
    call: each call's CPU is in its window's own time (at least what the call burned), not in
    the foreign time, and every call's process was disowned once reaped. The threshold is one
    no host reaches, so that the shared host's other load does not refuse the baseline: what
    is under test is where the calls' CPU is counted."""
    path, cmd = _ready(private_tmp, CPU_HEAVY, primary="time_ms")
    started: list[HostMonitor] = []

    def real_host_monitor(*_a: Any, **_k: Any) -> tuple[HostMonitor, None]:
        started.append(HostMonitor(thresholds=HostThresholds(foreign_cores=1e6)).start())
        return started[-1], None

    monkeypatch.setattr(measure_workload, "start_monitor", real_host_monitor)
    with Ledger.open(path) as ledger:
        done = measure_baseline(
            ledger, MeasureBaseline(target_id="t1", cmd=cmd, calls=3, actor="agent")
        )
        table = json.loads(ledger.artifact(done.event_id, "baseline.json"))
    [monitor] = started
    assert not monitor.adopted
    observations = monitor.observations()
    rows = {row["call_id"]: row for row in table["table"]}
    windows = table["monitor"]["windows"]
    assert len(windows) == 3 and table["monitor"]["settings"]["source"] == "host"
    for window in windows:
        [call_id] = window["call_ids"]
        burned_s = rows[call_id]["metrics"]["time_ms"][0] / 1e3
        assert burned_s >= BURN_S
        start_s, end_s = rows[call_id]["start_s"], rows[call_id]["end_s"]
        first = [o for o in observations if o.t_s <= start_s][-1]
        last = next(o for o in observations if o.t_s >= end_s)
        own_s = last.own_s - first.own_s
        assert own_s >= burned_s - 0.02, (call_id, own_s, burned_s)  # a clock tick or two
        assert window["own_cores"] == pytest.approx(own_s / (last.t_s - first.t_s), abs=1e-3)
