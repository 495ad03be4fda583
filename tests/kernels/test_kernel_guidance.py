"""Guidance on a kernel Target (issue 38 item 9): every hint, ``status`` line and warning names
the kernel harness's commands, and ``measure kernel`` refuses before measuring what recording
would refuse. Through the real CLI on a real ledger, without a GPU (the refusals come before
the harness runs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from subprocess_env import isolated_env, perfledger_command

ORIGINAL = "sha256:" + "0" * 16
#: A kernel spec whose subjects leave a marker file when the harness calls them: a measurement
#: that started would leave it.
SPEC = """
from pathlib import Path
MARKER = Path(__file__).with_name("called")
class _Subject:
    def __call__(self, *args, **kwargs):
        MARKER.write_text("called")
PROBLEMS = {"small": object()}
REFERENCE = _Subject()
CANDIDATE = _Subject()
"""


def _readiness(env: dict[str, Any]) -> dict[str, Any]:
    return {
        "target_id": "t1",
        "original": {"content_hash": ORIGINAL, "label": "spec.py",
                     "unsnapshotted": "the spec holds REFERENCE and CANDIDATE in one file"},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["small"]},
        "accuracy_rule": "the harness's tolerances",
        "driver": {"argv": ["perfledger", "measure", "kernel", "--spec", "SPEC"]},
        "environment": env["readiness_environment"],
    }  # fmt: skip


class KernelTarget:
    """A kernel Target frozen, readiness recorded on this machine, and a CLI runner."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = {**isolated_env(tmp), "PERFLEDGER_ACTOR": "agent"}
        self.path = tmp / "ledger"
        self.spec = tmp / "spec.py"
        self.spec.write_text(SPEC)
        self.machine = machine_environment(tools=True)
        with Ledger.init(self.path, name="kg", actor="agent") as ledger:
            execute(ledger, "target.freeze", {
                "target_id": "t1", "title": "a kernel", "min_effect": 0.05,
                "primary": {"name": "time_us", "unit": "us", "direction": "lower_is_better",
                            "statistic": "mean"},
                "scope": ["spec.py"], "risk_boundary": "none",
                "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
            }, actor="agent")  # fmt: skip

    def run(self, op: str, body: dict[str, Any]) -> None:
        with Ledger.open(self.path) as ledger:
            execute(ledger, op, body, actor="agent")

    def audited(self) -> KernelTarget:
        """Readiness (by the CLI) and the metric audit: the baseline comes next."""
        request = self.tmp / "readiness.json"
        request.write_text(json.dumps(_readiness(self.machine)))
        out = self.cli("readiness", "record", "--request", str(request), json_flag=False)
        assert out.returncode == 0, out.stdout + out.stderr
        self.readiness_stderr = out.stderr
        self.run("metric-audit.record", {
            "target_id": "t1", "metric": "time_us", "numerator": "GPU time",
            "denominator": "call", "unit": "us", "source": "harness", "reconstructed": False,
            "matches_target": True,
        })  # fmt: skip
        return self

    def ready(self) -> KernelTarget:
        """:meth:`audited`, then baseline, resolution, evidence and experiment e1."""
        self.audited()
        with Ledger.open(self.path) as ledger:  # R4: as `measure baseline --spec` records it
            record_measured_baseline(ledger, {
                "target_id": "t1", "original_hash": ORIGINAL, "metric": "time_us", "unit": "us",
                "values": [100.0, 101.0, 99.0], "environment_id": self.machine["environment_id"],
            })  # fmt: skip
        self.run("resolution.record", {"target_id": "t1", "resolution": 0.005, "repeats": 12,
                                       "notes": "fixed by the test"})  # fmt: skip
        self.run("evidence.add", {
            "evidence_id": "ev1", "layer": "kernel", "tool": {"name": "manual", "version": "1"},
            "facts": [{"name": "share", "value": 0.9, "unit": "ratio"}],
        })  # fmt: skip
        self.run("experiment.create", {
            "experiment_id": "e1", "target_id": "t1", "title": "less work",
            "candidate": {"content_hash": "sha256:" + "1" * 16, "changed_paths": ["spec.py"]},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev1", "applicability": "same_boundary", "used_for": "coverage"},
                    {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
                     "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": "all", "execution_form": "cuda"},
                "replacement_boundary": "the kernel", "coverage": 0.9, "local_speedup": 2.0,
                "stated_bound": 1.0 / (0.1 + 0.45),
                "expected_improvement": {"low": 0.0, "high": 1.0 - (0.1 + 0.45)},  # 1 - 1/bound
            },
            "preregistration": {"rejects": "implementation"},
        })  # fmt: skip
        return self

    def cli(self, *args: str, json_flag: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*perfledger_command(), "--ledger", str(self.path), *args,
             *(["--json"] if json_flag else [])],
            capture_output=True, text=True, env=self.env, timeout=300, check=False,
        )  # fmt: skip


@pytest.fixture
def kernel(tmp_path: Path) -> KernelTarget:
    return KernelTarget(tmp_path).ready()


def _next_commands(kernel: KernelTarget) -> list[str]:
    out = kernel.cli("status")
    assert out.returncode == 0, out.stdout + out.stderr
    (target,) = json.loads(out.stdout)["targets"]
    assert target["kind"] == "kernel"
    return [d["command"] for d in target["next"]]


@pytest.mark.slow
def test_readiness_of_a_kernel_target_has_no_output_place_warning(kernel: KernelTarget) -> None:
    """The kernel harness judges every output itself (R5): no warning that the driver lacks an
    ``{output}`` place."""
    assert "{output}" not in kernel.readiness_stderr


@pytest.mark.slow
def test_status_of_a_kernel_target_offers_measure_kernel_for_the_screen(
    kernel: KernelTarget,
) -> None:
    commands = _next_commands(kernel)
    measuring = [c for c in commands if " measure " in c]
    assert measuring == ["perfledger measure kernel --experiment e1 --stage screen --spec SPEC"], (
        commands
    )


def test_r11_target_stage_before_the_screen_is_refused_before_the_harness_runs(
    kernel: KernelTarget,
) -> None:
    """Asked for a target stage before any screen, ``measure kernel`` used to run the harness
    (24 s on an H100) and then be refused by R11 with an empty hint: now the refusal comes
    first, with the command that is accepted."""
    out = kernel.cli("measure", "kernel", "--experiment", "e1", "--stage", "target", "--spec",
                     str(kernel.spec), "--quiet")  # fmt: skip
    error = json.loads(out.stdout)["error"]
    assert out.returncode == 3 and error["rule"] == "R11", out.stdout + out.stderr
    assert "screen before target" in error["message"]
    assert "measure kernel --experiment e1 --stage screen" in error["hint"]
    assert not (kernel.tmp / "called").exists()
    with Ledger.open(kernel.path) as ledger:  # nothing recorded, not even a run's start
        assert not ledger.state().samples


@pytest.mark.slow
def test_status_and_measure_baseline_of_a_kernel_target_name_the_harness(tmp_path: Path) -> None:
    """Before the baseline, ``status`` offers ``measure baseline --spec`` (not ``--cmd``); the
    workload form on a kernel Target is a bad request naming the kernel form, before anything
    runs (it used to try to execute the spec as a command)."""
    kernel = KernelTarget(tmp_path).audited()
    out = kernel.cli("status")
    (target,) = json.loads(out.stdout)["targets"]
    assert [d["command"] for d in target["next"] if d["op"] == "baseline.record"] == [
        "perfledger measure baseline --target t1 --spec SPEC"
    ]
    wrong = kernel.cli("measure", "baseline", "--target", "t1", "--cmd", f"python {kernel.spec}")
    error = json.loads(wrong.stdout)["error"]
    assert wrong.returncode == 2 and "kernel Target" in error["message"], wrong.stdout
    assert "--spec SPEC" in error["hint"]
    missing = kernel.cli("measure", "baseline", "--target", "t1")
    assert missing.returncode == 2 and "--spec" in json.loads(missing.stdout)["error"]["hint"]
    assert not (kernel.tmp / "called").exists()
