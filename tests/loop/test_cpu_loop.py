"""The whole kernel-iteration loop on the CPU: a workload-driver subject (examples/loop/cpu)
stands in for the kernel harness, through the real CLI on a real git ledger.

Three iterations: the first has an incorrect attempt (R25 records it) and then improves, the
second improves, the third is slower (a per-row loop) and is recorded not improved (its methods
ineffective, R21); finalize writes summary.md with a derived baseline-vs-best headline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from loop_paths import CPU_EXAMPLE, answer

DIMS = '{"M": 64, "N": 256}'
#: Paired blocks per comparison: R12's floor of 5 valid pairs; every comparison here is several
#: times its minimum effect (pure Python against NumPy, one pass against a loop per row).
PAIRS = "5"


def _close(loop_cli, iteration: int, kernel: str) -> dict:
    return answer(
        loop_cli(
            "loop", "close-iter", "--json", "--run", "cpu", "--iter", str(iteration),
            "--kernel", CPU_EXAMPLE / kernel,
            "--methods", CPU_EXAMPLE / f"iter{iteration}" / "methods.json",
            "--analysis", CPU_EXAMPLE / f"iter{iteration}" / "analysis.md", "--pairs", PAIRS,
        )
    )  # fmt: skip


@pytest.mark.slow
def test_cpu_loop_end_to_end(loop_cli, tmp_path: Path) -> None:
    driver = f"python3 {CPU_EXAMPLE / 'subject.py'} {{kernel}} {{ref}} {{dims}} {{entry}}"
    setup = answer(
        loop_cli(
            "loop", "setup", "--json", "--run", "cpu", "--baseline", CPU_EXAMPLE / "kernel_v0.py",
            "--ref", CPU_EXAMPLE / "ref.py", "--dims", DIMS, "--iterations", "3",
            "--ncu-num", "2", "--min-effect", "0.05", "--driver", driver,
            "--catalog", CPU_EXAMPLE / "catalog.toml", "--sm-arch", "sm_90",
        )
    )  # fmt: skip
    assert setup["run_id"] == "cpu" and setup["baseline_median_ms"] > 0
    first = _close(loop_cli, 1, "kernel_v1_bad.py")
    assert first["status"] == "correctness_failed" and first["attempt"] == 1
    second = _close(loop_cli, 1, "kernel_v1.py")
    assert second["attempt"] == 2 and second["status"] == "improved", second
    assert second["verdict"]["ci_low"] >= 0.05
    third = _close(loop_cli, 2, "kernel_v2.py")
    assert third["status"] == "improved", third
    fourth = _close(loop_cli, 3, "kernel_v3.py")
    assert fourth["status"] == "not_improved", fourth
    assert fourth["verdict"]["status"] in ("fail", "inconclusive")
    summary = tmp_path / "summary.md"
    final = answer(loop_cli("loop", "finalize", "--json", "--run", "cpu", "--out", summary,
                            "--pairs", PAIRS))  # fmt: skip
    assert final["headline"]["status"] == "pass"
    state = answer(loop_cli("loop", "state", "--json", "--run", "cpu"))
    v2 = (
        "blake3:"
        + __import__("blake3").blake3((CPU_EXAMPLE / "kernel_v2.py").read_bytes()).hexdigest()
    )
    assert state["best_hash"] == v2 and state["best_iteration"] == 2
    assert state["selected"] == [
        "compute.vectorize", "latency.threads", "memory.in_place",
        "compute.fuse_passes", "latency.preallocate", "memory.layout",
    ]  # fmt: skip
    assert state["ineffective"] == {
        "compute.fast_math": 3, "latency.warm_caches": 3, "memory.streaming": 3
    }  # fmt: skip
    # input and candidate profiles are separate events, keyed by (iteration, attempt, role)
    assert sorted(state["profiles"]) == sorted(
        ["1/0/input", "1/2/candidate", "2/0/input", "2/1/candidate", "3/0/input", "3/1/candidate"]
    )
    assert state["profiles"]["1/0/input"]["metrics"]["cpu__python_calls"] > 1000
    assert state["profiles"]["1/2/candidate"]["metrics"]["cpu__python_calls"] < 1000
    assert state["iterations"]["1"]["failed_attempts"] == [1]
    text = summary.read_text()
    for needle in ("## Headline", "## Iterations", "`compute.vectorize`", "improved",
                   "not_improved", "## Lineage", v2, "skip_condition", "coupled_group"):  # fmt: skip
        assert needle in text, needle
    rendered = loop_cli("loop", "summary", "--run", "cpu")
    assert rendered.stdout == text  # the summary re-renders from the ledger alone
    verify = answer(loop_cli("verify", "--json"))
    assert verify["ok"] is True
    fsck = subprocess.run(["git", "-C", str(loop_cli.ledger), "fsck", "--strict", "--full"],
                          capture_output=True, text=True)  # fmt: skip
    assert fsck.returncode == 0, fsck.stderr
    # a finalized run takes nothing more
    late = loop_cli("loop", "close-iter", "--json", "--run", "cpu", "--iter", "3", "--kernel",
                    CPU_EXAMPLE / "kernel_v1.py", "--methods", CPU_EXAMPLE / "iter3/methods.json",
                    "--analysis", CPU_EXAMPLE / "iter3/analysis.md")  # fmt: skip
    assert late.returncode == 2 and json.loads(late.stdout)["error"]["code"] == "bad_request"
