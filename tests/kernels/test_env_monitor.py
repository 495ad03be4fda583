"""Environment identity and the monitor's verdict logic without a GPU (R11, R17): missing items
are recorded as missing, the identity is stable and hashable, and foreign activity is judged
from observations."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from perfledger.kernels.env import Environment, collect
from perfledger.kernels.monitor.monitor import Monitor, Observation, Thresholds, window_verdict
from subprocess_env import perfledger_command as perfledger_cli


@pytest.mark.slow
def test_collect_without_gpu_records_missing_not_guessed() -> None:
    env = collect(tools=True)
    assert env.python and env.os
    if not env.has_gpu:
        for name in ("gpu_name", "gpu_uuid", "sm_count", "l2_bytes", "compute_capability"):
            assert name in env.missing
        assert "nvml" in env.errors or "cupy" in env.errors
    assert env.identity() == collect(tools=True).identity()  # stable across collections
    assert len(env.identity()) == 64
    json.dumps(env.to_json())


def test_identity_ignores_volatile_readings_but_not_identity_fields() -> None:
    a = Environment(gpu_name="G", driver_version="1", sm_clock_mhz_at_rest=300)
    b = Environment(gpu_name="G", driver_version="1", sm_clock_mhz_at_rest=1980)
    c = Environment(gpu_name="G", driver_version="2")
    assert a.identity() == b.identity() != c.identity()
    assert hash(a.identity()) == hash(b.identity())


def test_r11_readiness_environment_records_missing_as_none() -> None:
    env = Environment(gpu_name="NVIDIA H200", gpu_uuid="GPU-1", driver_version="580.1")
    r = env.readiness_environment()
    assert r["gpu"] == "NVIDIA H200 GPU-1" and r["driver"] == "580.1"
    assert r["cuda"] is None and r["toolkit"] is None and r["container_base"] is None


@pytest.mark.slow
def test_env_cli_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = subprocess.run(
        [*perfledger_cli(), "env", "--json"], capture_output=True, text=True, check=True
    )
    data = json.loads(out.stdout)
    assert len(data["identity"]) == 64 and isinstance(data["missing"], list)
    assert len(data["environment_id"]) == 64
    assert set(data["readiness_environment"]) >= {"gpu", "driver", "cuda", "toolkit"}
    text = subprocess.run([*perfledger_cli(), "env"], capture_output=True, text=True, check=True)
    assert "identity" in text.stdout


def _obs(t: float, **kw: object) -> Observation:
    return Observation(t_s=t, sm_clock_mhz=1980, power_w=300.0, **kw)  # type: ignore[arg-type]


def test_r17_foreign_process_in_window_is_contamination() -> None:
    obs = [_obs(0.0, pids=(10,)), _obs(0.1, pids=(10, 99)), _obs(0.2, pids=(10,))]
    v = window_verdict(obs, 0.05, 0.15, own_pids=frozenset({10}))
    assert v.observed and v.foreign_activity and v.reasons == ("foreign_process:99",)
    clean = window_verdict(obs, 0.15, 0.25, own_pids=frozenset({10}))
    assert clean.observed and not clean.foreign_activity
    assert clean.to_request() == {
        "observed": True, "foreign_activity": False, "explained": None, "flags": [],
    }  # fmt: skip


def test_r17_thermal_events_above_share_contaminate() -> None:
    hot = 0x20  # sw_thermal_slowdown
    obs = [_obs(i / 10, clock_events=hot if i < 3 else 0) for i in range(10)]
    v = window_verdict(obs, 0.0, 1.0)
    assert v.foreign_activity and "clock_event:sw_thermal_slowdown" in v.reasons
    assert not window_verdict(
        obs, 0.0, 1.0, thresholds=Thresholds(event_share=0.5)
    ).foreign_activity
    idle_bit = window_verdict([_obs(0.0, clock_events=0x1)], 0.0, 0.1)  # gpu_idle is not foreign
    assert not idle_bit.foreign_activity


def test_short_window_uses_bracketing_observations_and_empty_is_unobserved() -> None:
    obs = [_obs(0.0, pids=(5,)), _obs(0.1)]
    v = window_verdict(obs, 0.02, 0.03, own_pids=frozenset())
    assert v.observations == 2 and v.foreign_activity
    none = window_verdict([], 0.0, 1.0)
    assert not none.observed and none.reasons == ("no_observations",)


def test_monitor_thread_samples_a_source_at_its_rate() -> None:
    calls = []

    def source() -> Observation:
        calls.append(time.monotonic())
        return Observation(t_s=calls[-1], gpu_util_pct=0, pids=(os.getpid(),))

    with Monitor(source, hz=50.0) as monitor:
        time.sleep(0.5)
        own = monitor.calibrate()
        idle = monitor.idle_check(0.2)
    assert os.getpid() in own and idle.idle and idle.observations >= 5
    assert 15 <= len(monitor.observations()) <= 60
    start = monitor.observations()[0].t_s
    assert not monitor.verdict(start, start + 0.3).foreign_activity
    assert monitor.settings()["hz"] == 50.0


def test_idle_check_flags_busy_gpu_and_unknown_processes() -> None:
    m = Monitor(lambda: Observation(t_s=time.monotonic(), gpu_util_pct=80, pids=()), hz=100.0)
    idle = m.idle_check(0.05)
    assert not idle.idle and idle.reasons == ["gpu_util:80"] and idle.processes_unknown


def test_env_module_runs_without_cupy_or_nvml() -> None:
    code = "from perfledger.kernels.env import collect; print(collect(tools=False).identity())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert len(out.stdout.strip()) == 64


@pytest.mark.slow
def test_measurement_doc_env_block_runs(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "measurement.md").read_text()
    block = next(
        b for b in re.findall(r"```sh\n(.*?)```", page, flags=re.S) if "perfledger env" in b
    )
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()[0]) == 64
