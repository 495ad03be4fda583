"""``perfledger env`` and ``perfledger measure workload|aa|kernel`` through the real CLI on a real
git ledger (R4, R5, R11, R17): what is measured is appended through ``samples.record`` and
``resolution.record`` with the raw table as an artifact. The kernel path runs only on a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_legacy import BEFORE_OBSERVED_DIRECTION, before_reported, rules_at
from wf_scenario import record_measured_aa

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.events.workflow import R4_MEASURED_BASELINE
from subprocess_env import isolated_env, quiet_monitor_command

ROOT = Path(__file__).resolve().parents[2]
SUMSQ = ROOT / "examples" / "workloads" / "sumsq.py"
ORIGINAL = "sha256:" + "0" * 16
CAND = "sha256:" + "1" * 16
#: These Targets' primaries are figures the subject reports: the self-timed driver measures them
#: only when asked for by name (the default is the worker protocol; R5, issue 34).
SELF = ("--protocol", "self")


def _readiness_body(
    env: dict[str, Any], cases: tuple[str, ...], statistics: dict[str, Any] | None
) -> dict[str, Any]:
    """The readiness of :func:`_setup`'s Target: the sumsq workload under the self-timed driver."""
    return {
        "target_id": "t1",
        # R11: one workload script for both subjects, told apart by options, not directories
        "original": {"content_hash": ORIGINAL, "unsnapshotted": "one script, options differ"},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": len(cases),
                     "cases": list(cases)},
        "accuracy_rule": "exact sum", "driver": {"argv": [sys.executable, str(SUMSQ)]},
        "environment": env["readiness_environment"],
        **({"statistics": statistics} if statistics is not None else {}),
    }  # fmt: skip


def _setup(
    path: Path,
    *,
    primary_unit: str = "ms",
    primary: str = "time_ms",
    cases: tuple[str, ...] = ("small", "large"),
    statistics: dict[str, Any] | None = None,
    direction: str = "lower_is_better",
    work_metric: str = "",
) -> dict[str, Any]:
    """A ledger with a Target (lower-is-better time unless told otherwise; ``work_metric``
    for a rate), readiness carrying this machine's environment, a test set of ``cases`` and
    ``statistics`` (the defaults when None), a metric audit and a baseline; no resolution
    yet."""
    env = machine_environment(tools=True)
    ledger = Ledger.init(path, name="m", actor="agent")
    try:
        run = lambda op, body: execute(ledger, op, body, actor="agent")  # noqa: E731
        # frozen as the older perfledger that made its readiness (below) froze it: a current
        # Target before the older readiness is a history no perfledger writes
        with rules_at({"TargetFrozen": BEFORE_OBSERVED_DIRECTION}):
            run("target.freeze", {
                "target_id": "t1", "title": "sum of squares",
                "primary": {"name": primary, "unit": primary_unit, "direction": direction,
                            "statistic": "median",
                            **({"work_metric": work_metric} if work_metric else {})},
                "min_effect": 0.05, "scope": ["src/*"], "risk_boundary": "none",
                "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
            })  # fmt: skip
        # the self-timed driver's Target (its primary the subject reports) is made ready as an
        # older perfledger did: R5 refuses such a readiness since ReadinessRecorded 6
        with before_reported("ReadinessRecorded"):
            run("readiness.record", _readiness_body(env, cases, statistics))
        run("metric-audit.record", {
            "target_id": "t1", "metric": primary, "numerator": "wall time", "denominator": "call",
            "unit": primary_unit, "source": "driver JSON", "reconstructed": False,
            "matches_target": True,
        })  # fmt: skip
        # typed, as that older perfledger took it (BaselineRecorded 1, before R4 took only a
        # measured baseline): tests record verdicts and champions of that perfledger after it
        with rules_at({"BaselineRecorded": R4_MEASURED_BASELINE - 1}):
            run("baseline.record", {
                "target_id": "t1", "original_hash": ORIGINAL, "metric": primary,
                "unit": primary_unit, "values": [1.0, 1.1, 0.9],
                "environment_id": env["environment_id"],
            })  # fmt: skip
    finally:
        ledger.close()
    return env


def _experiment(path: Path) -> None:
    ledger = Ledger.open(path)
    try:
        execute(ledger, "evidence.add", {
            "evidence_id": "ev1", "layer": "workload", "tool": {"name": "manual", "version": "1"},
            "facts": [{"name": "share", "value": 0.9, "unit": "ratio"}],
        }, actor="agent")  # fmt: skip
        execute(ledger, "experiment.create", {
            "experiment_id": "e1", "target_id": "t1", "title": "faster loop",
            "candidate": {"content_hash": CAND, "changed_paths": ["src/loop.py"]},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev1", "applicability": "same_boundary", "used_for": "coverage"},
                    {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
                     "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": "loop", "execution_form": "python"},
                "replacement_boundary": "the loop", "coverage": 0.9, "local_speedup": 2.0,
                "stated_bound": 1.0 / (0.1 + 0.45),
                "expected_improvement": {"low": 0.0, "high": 1.0 - (0.1 + 0.45)},
            },
            "preregistration": {"rejects": "implementation"},
        }, actor="agent")  # fmt: skip
    finally:
        ledger.close()


def _record_resolution(path: Path) -> None:
    """Record a measured resolution (R4) as ``measure aa --record`` would, from an A/A table
    with little spread, for tests that go on to the target stage: an A/A measured on a loaded CI
    machine can be wide enough for R8 to refuse the target stage, which is not what those tests
    are about (``test_r4_measure_aa_records_the_resolution`` covers the A/A path)."""
    ledger = Ledger.open(path)
    try:
        record_measured_aa(ledger, "t1")
    finally:
        ledger.close()


def _cli(path: Path, tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # the original's baseline and A/A under a quiet stand-in monitor: what they record is under
    # test here, not the shared host's load (R17: tests/app/test_self_timed_monitor.py)
    proc = subprocess.run(
        [*quiet_monitor_command(), "--ledger", str(path), *args],
        capture_output=True, text=True, env=isolated_env(tmp), cwd=ROOT, timeout=600,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stdout}\n{proc.stderr}")
    return proc


def _cmd(*extra: str) -> str:
    return " ".join([sys.executable, str(SUMSQ), "--repeats", "2", *extra])


@pytest.mark.slow
def test_r4_measure_aa_records_the_resolution(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--cmd", _cmd(),
               "--runs", "3", "--record", "--accept-resolution", "--json", "--quiet")  # fmt: skip
    data = json.loads(out.stdout)
    assert data["recorded"] and data["kind"] == "ResolutionEstimated" and data["repeats"] == 6
    assert 0 <= data["resolution"] < 100
    with Ledger.open(ledger_path) as ledger:
        raw = json.loads(ledger.artifact(data["event_id"], "resolution.json"))
        assert raw["kind"] == "aa" and len(raw["table"]) == 2 * 2 + 12  # warm-up + pairs
        assert ledger.state().targets["t1"].resolution is not None


@pytest.mark.slow
def test_measure_workload_appends_samples_with_the_raw_table(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)  # the A/A path is test_r4_measure_aa_records_the_resolution's
    _experiment(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
               "screen", "--ref", _cmd(), "--cand", _cmd("--extra-work", "1.0"), "--pairs", "5",
               "--no-monitor", "--json", "--quiet")  # fmt: skip
    data = json.loads(out.stdout)
    assert data["kind"] == "SamplesRecorded" and data["pairs_recorded"] == 10
    # the driver declares no {subject} place: measure says that R11 is not enforced
    assert data["code_identity"]["enforced"] is False
    assert "R11 (code identity) is not enforced" in out.stderr
    assert f'{sys.executable}", "{{subject}}/{SUMSQ.name}"' in data["code_identity"]["note"]
    assert data["failed_calls"] == [] and data["samples_id"] == "e1-screen-1"
    with Ledger.open(ledger_path) as ledger:
        view = ledger.state().samples["e1-screen-1"]
        assert view.n_pairs == 10 and view.cand_failures == 0
        samples = ledger.payload(view.event_id)  # the pairs live in the event
        assert samples.samples_id == "e1-screen-1"
        assert all(not p.same_process and p.ref.call_id != p.cand.call_id for p in samples.pairs)
        raw = json.loads(ledger.artifact(data["event_id"], "samples.json"))
    assert raw["kind"] == "workload" and raw["settings"]["pairs_per_case"] == 5
    orders = [(r["subject"], r["case"]) for r in raw["table"] if not r["warmup"]]
    assert orders[:4] == [("ref", "small"), ("cand", "small"), ("ref", "large"), ("cand", "large")]
    assert orders[4:6] == [("cand", "small"), ("ref", "small")]  # ABBA
    # the verdict is derived from these samples by the ordinary operation (R12)
    verdict = _cli(ledger_path, tmp_path, "verdict", "record", "--samples", "e1-screen-1", "--json")
    assert json.loads(verdict.stdout)["kind"] == "VerdictRecorded"


@pytest.mark.slow
def test_r5_failed_and_incorrect_calls_are_kept_with_their_reason(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)  # the A/A path is test_r4_measure_aa_records_the_resolution's
    _experiment(ledger_path)
    # every call of the candidate prints garbage: nothing usable, a clear error, nothing appended
    bad = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
               "screen", "--ref", _cmd(), "--cand", _cmd("--mode", "garbage"), "--pairs", "5",
               "--no-monitor", "--json", "--quiet", check=False)  # fmt: skip
    assert bad.returncode == 1, bad.stderr
    err = json.loads(bad.stdout)["error"]
    assert err["code"] == "measurement_error" and "not_json" in err["message"]
    assert "Traceback" not in bad.stderr
    # a wrong answer is a valid call: recorded, flagged as a candidate failure (R5)
    out = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
               "screen", "--ref", _cmd(), "--cand", _cmd("--mode", "wrong"), "--pairs", "5",
               "--no-monitor", "--json", "--quiet")  # fmt: skip
    data = json.loads(out.stdout)
    with Ledger.open(ledger_path) as ledger:
        samples = ledger.payload(ledger.state().samples[data["samples_id"]].event_id)
    assert samples.cand_failures == len(samples.pairs) == 10


@pytest.mark.slow
def test_r17_formal_stage_without_monitor_is_refused(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
         "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--no-monitor", "--quiet")  # fmt: skip
    target = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
                  "target", "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--no-monitor",
                  "--json", "--quiet", check=False)  # fmt: skip
    assert target.returncode == 3
    assert json.loads(target.stdout)["error"]["rule"] == "R17"


@pytest.mark.slow
def test_r17_host_monitor_observes_a_cpu_workloads_target_stage(tmp_path: Path) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
         "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--no-monitor", "--quiet")  # fmt: skip
    head = _head(ledger_path)
    gpu = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
               "target", "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--monitor", "host",
               "--json", "--quiet", "--no-monitor", check=False)  # fmt: skip
    assert gpu.returncode == 3 and json.loads(gpu.stdout)["error"]["rule"] == "R17"
    # R17: a typed explanation is refused before anything runs, with what to do instead
    typed = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
                 "target", "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--monitor", "host",
                 "--explain-foreign", "other tenants", "--json", "--quiet", check=False)  # fmt: skip
    assert typed.returncode == 2
    error = json.loads(typed.stdout)["error"]
    assert "--explain-foreign was removed" in error["message"] and "review" in error["message"]
    assert _head(ledger_path) == head  # unchanged
    done = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
                "target", "--ref", _cmd(), "--cand", _cmd(), "--pairs", "5", "--monitor", "host",
                "--json", "--quiet")  # fmt: skip
    answer = json.loads(done.stdout)
    assert answer["monitor"] == "host"
    ledger = Ledger.open(ledger_path)
    try:
        samples = ledger.payload(answer["event_id"])
        artifact = json.loads(ledger.artifact(answer["event_id"], "samples.json"))
    finally:
        ledger.close()
    assert len(samples.pairs) == 10
    for pair in samples.pairs:  # every formal window observed, nothing explained by a text
        assert pair.monitor is not None and pair.monitor.observed
        assert "host_monitor" in pair.monitor.flags
        assert pair.monitor.explained is None
    assert artifact["monitor"]["settings"]["source"] == "host"
    assert len(artifact["monitor"]["windows"]) == 10


@pytest.mark.slow
def test_measure_kernel_without_gpu_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("click")
    try:
        import cupy  # noqa: F401

        pytest.skip("a GPU machine: the kernel path is tested by test_measure_kernel_on_gpu")
    except ImportError:
        pass
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)  # the A/A path is test_r4_measure_aa_records_the_resolution's
    _experiment(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "screen", "--spec", str(ROOT / "examples" / "kernels" / "scale_spec.py"), "--json",
               check=False)  # fmt: skip
    error = json.loads(out.stdout)["error"]
    assert out.returncode == 2 and "spec" in error["message"]
    assert "needs an NVIDIA GPU with CuPy" in error["hint"]


def _head(path: Path, tmp: Path | None = None) -> str:
    """The head commit of the ledger at ``path``, read in-process: a test that a command recorded
    nothing is not a test of ``log`` (``tmp``, the CLI's home, is not needed)."""
    with Ledger.open(path) as ledger:
        return str(ledger.head())


def _refused_r11(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["rule"] == "R11" and all(name in error["message"] for name in names)
    return str(error["message"])


@pytest.mark.slow
def test_r11_kernel_spec_cases_outside_the_test_set_are_refused_before_measuring(
    tmp_path: Path,
) -> None:
    """The spec's cases are checked against the Target's test set before any GPU time is spent:
    the spec's subjects are plain objects here, so running the harness would fail otherwise."""
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    spec = tmp_path / "spec.py"
    spec.write_text("PROBLEMS = {'n16M': object()}\nREFERENCE = object()\nCANDIDATE = object()\n")
    head = _head(ledger_path, tmp_path)
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "screen", "--spec", str(spec), "--json", "--quiet", check=False)  # fmt: skip
    _refused_r11(out, "'n16M'", "'large'", "'small'", "spec.py")
    aa = _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--spec", str(spec),
              "--record", "--json", "--quiet", check=False)  # fmt: skip
    _refused_r11(aa, "'n16M'")
    assert _head(ledger_path, tmp_path) == head  # nothing appended


def test_r11_workload_cases_outside_the_test_set_are_refused_before_measuring(
    tmp_path: Path,
) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    head = _head(ledger_path, tmp_path)
    marker = tmp_path / "ran"
    cmd = f"touch {marker} && " + _cmd()
    out = _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
               "screen", "--ref", cmd, "--cand", cmd, "--case", "small", "--case", "huge",
               "--no-monitor", "--json", "--quiet", check=False)  # fmt: skip
    assert _refused_r11(out).startswith("R11: the cases ['huge'] of --case are not cases")
    aa = _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--cmd", cmd, "--case",
              "huge", "--record", "--json", "--quiet", check=False)  # fmt: skip
    _refused_r11(aa, "'huge'")
    assert not marker.exists()  # refused before any call ran
    assert _head(ledger_path, tmp_path) == head


@pytest.mark.gpu
def test_measure_kernel_on_gpu(tmp_path: Path) -> None:
    pytest.importorskip("cupy", reason="the kernel harness needs CuPy")
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, primary="kernel_time_us", primary_unit="us", cases=("n16M",))
    spec = str(ROOT / "examples" / "kernels" / "scale_spec.py")
    aa = _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--spec", spec, "--runs",
              "3", "--record", "--accept-resolution", "--json", "--quiet")  # fmt: skip
    print("measure aa:", aa.stdout)
    _experiment(ledger_path)
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "screen", "--spec", spec, "--json", "--quiet")  # fmt: skip
    data = json.loads(out.stdout)
    print("measure kernel:", json.dumps(data["stats"]), data["monitor"])
    assert data["kind"] == "SamplesRecorded" and data["pairs_recorded"] >= 2
    assert data["stats"]["n16M"]["direction"] == "slower"
    with Ledger.open(ledger_path) as ledger:
        samples = ledger.payload(ledger.state().samples[data["samples_id"]].event_id)
        assert all(
            p.same_process and p.monitor is not None and p.monitor.observed for p in samples.pairs
        )
        raw = json.loads(ledger.artifact(data["event_id"], "samples.json"))
    assert raw["kind"] == "kernel" and raw["cases"][0]["rows"]


@pytest.mark.gpu
def test_cheat_raised_ceilings_in_the_cache_are_measured_again_in_a_formal_stage(
    tmp_path: Path,
) -> None:
    """The ceilings cache is a file a subject's worker (same user) can write: raised ceilings
    would switch the plausibility check off. An exploration stage reads it; a formal stage
    measures the ceilings again and rewrites it."""
    pytest.importorskip("cupy", reason="the kernel harness needs CuPy")
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, primary="kernel_time_us", primary_unit="us", cases=("n16M",))
    spec = str(ROOT / "examples" / "kernels" / "scale_spec.py")
    _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--spec", spec, "--runs", "3",
         "--record", "--accept-resolution", "--json", "--quiet")  # fmt: skip
    _experiment(ledger_path)
    _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage", "screen",
         "--spec", spec, "--json", "--quiet")  # fmt: skip
    (cache,) = (tmp_path / ".cache" / "perfledger" / "ceilings").glob("*.json")
    honest = json.loads(cache.read_text())
    raised = dict(honest, copy_bytes_per_s=honest["copy_bytes_per_s"] * 1000)
    raised["unit_flops_per_s"] = {k: v and v * 1000 for k, v in honest["unit_flops_per_s"].items()}
    cache.write_text(json.dumps(raised))
    out = _cli(ledger_path, tmp_path, "measure", "kernel", "--experiment", "e1", "--stage",
               "target", "--spec", spec, "--json", "--quiet", check=False)  # fmt: skip
    print("target:", out.returncode, out.stdout[-600:], out.stderr[-600:])
    now = json.loads(cache.read_text())
    assert now["copy_bytes_per_s"] < 2 * honest["copy_bytes_per_s"]
    assert now["unit_flops_per_s"]["tensor_fp16"] < 2 * honest["unit_flops_per_s"]["tensor_fp16"]
