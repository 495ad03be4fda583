"""Requests of the loop for the rule tests: a run on the default catalog with an input profile
whose metrics decide every trigger the tests rely on (values in ncu's base units)."""

from __future__ import annotations

from typing import Any

from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.events.catalog import default_catalog_text

RUN = "r1"
BASELINE = 'extern "C" __global__ void k(const float* x, float* y, int N) { }\n'

#: Input metrics: tensor cores skipped (compute SOL 20 % < 30), compute/memory overlap not
#: triggered (long scoreboard 0.5 <= 1), kernel fusion skipped (1 launch), coalescing triggered
#: (32 store sectors per request), no barrier stalls.
INPUT_METRICS = {
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 20.0,
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 5.0,
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 0.5,
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 0.0,
    "sm__warps_active.avg.pct_of_peak_sustained_active": 40.0,
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 32768.0,
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 1024.0,
    "perfledger__kernel_launches": 1.0,
}


def units(metrics: dict[str, float]) -> dict[str, str]:
    return {name: "%" if name.endswith("pct") else "count" for name in metrics}


def setup_body(run_id: str = RUN, sm_arch: str = "sm_90", **over: Any) -> dict[str, Any]:
    body = {
        "run_id": run_id,
        "subject_kind": "cuda",
        "baseline": {"name": "k.cu", "text": BASELINE},
        "reference": {"name": "ref.py", "text": "def reference(x):\n    return x\n"},
        "entry": "k",
        "params": [
            {"name": "x", "ctype": "const float*", "integer": False},
            {"name": "y", "ctype": "float*", "integer": False},
            {"name": "N", "ctype": "int", "integer": True},
        ],
        "dims": {"N": 1024},
        "iterations": 3,
        "ncu_num": 3,
        "min_effect": 0.02,
        "sm_arch": sm_arch,
        "environment": {"gpu": "test", "driver": None},
        "catalog_toml": default_catalog_text(),
        "baseline_check": {"correct": True, "trials": 5},
        "baseline_timing": {"samples_ms": [1.0, 1.01, 0.99]},
    }
    body.update(over)
    return body


def profile_body(
    iteration: int, kernel_hash: str, metrics: dict[str, float] | None = None, *,
    attempt: int = 0, role: str = "input", run_id: str = RUN, limitations: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    metrics = dict(INPUT_METRICS if metrics is None else metrics)
    return {
        "run_id": run_id, "iteration": iteration, "attempt": attempt, "role": role,
        "kernel_hash": kernel_hash, "tool": "ncu", "tool_version": "2025.3.1.0",
        "metrics": metrics, "units": units(metrics), "limitations": limitations or [],
    }  # fmt: skip


def selection(**over: Any) -> dict[str, Any]:
    """A valid iteration-1 selection on :data:`INPUT_METRICS` (sm_90), axes overridable."""
    sel = {
        "compute": {
            "chosen": "compute.launch_configuration",
            "skipped": [
                {"method": "compute.tensor_cores", "reason": "skip_condition"},
                {"method": "compute.compute_memory_overlap", "reason": "no_trigger"},
            ],
        },
        "memory": {
            "chosen": "memory.coalescing",
            "skipped": [{"method": "memory.kernel_fusion", "reason": "skip_condition"}],
        },
        "latency": {
            "chosen": "latency.async_pipeline",
            "skipped": [
                {"method": "latency.shuffle_sync_removal", "reason": "no_trigger"},
                {"method": "latency.fewer_barriers", "reason": "no_trigger"},
            ],
        },
    }
    sel.update(over)
    return sel


ANALYSIS = (
    "compute.tensor_cores: skip condition (compute SOL 20%). compute.compute_memory_overlap: "
    "no trigger. memory.kernel_fusion: one launch. latency.shuffle_sync_removal and "
    "latency.fewer_barriers: no barrier stalls.\n"
)


def kernel(n: int) -> dict[str, str]:
    return {"name": f"k{n}.cu", "text": BASELINE.replace("{ }", "{ /* v" + str(n) + " */ }")}


def pairs(ref_ms: float, cand_ms: float, n: int = 8) -> list[dict[str, list[float]]]:
    """``n`` pairs with a small alternating jitter (ms)."""
    out = []
    for i in range(n):
        jitter = 1 + (0.001 if i % 2 else -0.001) * (1 + i % 3)
        out.append({"ref_ms": [ref_ms * jitter], "cand_ms": [cand_ms / jitter]})
    return out


def close_body(
    iteration: int, n: int, cand_ms: float, attempt: int = 1, **over: Any
) -> dict[str, Any]:
    body = {
        "run_id": RUN, "iteration": iteration, "attempt": attempt, "kernel": kernel(n),
        "selection": selection(), "analysis": ANALYSIS,
        "correctness": {"correct": True, "trials": 5}, "pairs": pairs(1.0, cand_ms),
    }  # fmt: skip
    body.update(over)
    return body


def attempt_body(iteration: int, n: int, attempt: int, **over: Any) -> dict[str, Any]:
    body = {
        "run_id": RUN, "iteration": iteration, "attempt": attempt, "kernel": kernel(n),
        "selection": selection(), "analysis": ANALYSIS,
        "correctness": {"correct": False, "trials": 5, "detail": "max error 0.3"},
    }  # fmt: skip
    body.update(over)
    return body


def do(ledger: Ledger, op: str, body: dict[str, Any]) -> list[Any]:
    return execute(ledger, op, body, actor="agent")


def set_up(ledger: Ledger, sm_arch: str = "sm_90") -> str:
    """Set up run r1 with the input profile of iteration 1; returns the baseline's hash."""
    do(ledger, "loop.setup", setup_body(sm_arch=sm_arch))
    baseline = ledger.state().loop.runs[RUN].best_hash
    do(ledger, "loop.profile", profile_body(1, baseline))
    return baseline
