"""NVIDIA's nvbench through its Python bindings (the ``cuda-bench`` package), as one more tool
beside perfledger's harness, ``triton.testing.do_bench`` and ``torch.utils.benchmark``: the cold
GPU time of one call of a torch operator (nvbench's ``nv/cold/time/gpu/mean``: L2 flushed
before each sample, its own stopping criterion), read from the JSON file nvbench writes.

``cuda-bench`` is not a dependency of perfledger: on the device it is carried as a wheel
(``.whl/``). Run alone as a smoke test::

    python bench/nvbench_tool.py        # a torch.mul over 2^15 float32
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def available() -> str | None:
    """None where nvbench's bindings load, else why not (a line)."""
    try:
        import cuda.bench as bench

        bench.State  # noqa: B018  (loads the native module for this CUDA version)
    except Exception as exc:  # an ImportError, or no extension for this CUDA
        return f"nvbench (cuda-bench) not available: {exc}"
    return None


#: The callable the one registered nvbench benchmark runs (nvbench keeps every benchmark
#: registered in the process and runs them all on each ``run_all_benchmarks``: one benchmark
#: that dispatches to the callable of the moment is timed alone).
_CURRENT: dict[str, Any] = {}
NAME = "perfledger_subject"


def _register() -> None:
    import cuda.bench as bench
    import torch

    if _CURRENT.get("registered"):
        return

    def perfledger_subject(state: Any) -> None:
        fn = _CURRENT["fn"]

        def launcher(launch: Any) -> None:
            stream = torch.cuda.ExternalStream(launch.get_stream().addressof())
            with torch.cuda.stream(stream):
                fn()

        state.exec(launcher)

    bench.register(perfledger_subject)
    _CURRENT["registered"] = True


def cold_time_s(fn: Callable[[], None], args: tuple[str, ...] = ()) -> dict[str, Any]:
    """Time ``fn`` (a torch operator launching on torch's current stream) with nvbench.

    Each sample runs ``fn`` on nvbench's stream (``torch.cuda.ExternalStream``); ``args`` are
    nvbench's command-line options (e.g. ``("--min-time", "0.1")``; none: its defaults).
    Returns ``{"cold_mean_s", "cold_rel_stdev", "samples", "wall_s"}``: nvbench's cold GPU
    mean per call (seconds), its relative stdev, its sample count and the wall seconds of the
    run. Raises RuntimeError when nvbench reports no cold time.
    """
    import cuda.bench as bench

    _register()
    _CURRENT["fn"] = fn
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nvbench.json"
        t0 = time.perf_counter()
        bench.run_all_benchmarks(["nvbench", "--json", str(out), "--quiet", *args])
        wall = time.perf_counter() - t0
        data = json.loads(out.read_text())
    found: dict[str, float] = {}
    for b in data.get("benchmarks", []):
        for state in b.get("states", []):
            for s in state.get("summaries") or []:
                values = {d["name"]: d["value"] for d in s.get("data", [])}
                if "value" in values:
                    found[s["tag"]] = float(values["value"])
    if "nv/cold/time/gpu/mean" not in found:
        raise RuntimeError(f"nvbench reported no cold GPU time: {sorted(found)}")
    return {
        "cold_mean_s": found["nv/cold/time/gpu/mean"],
        "cold_rel_stdev": found.get("nv/cold/time/gpu/stdev/relative"),
        "samples": found.get("nv/cold/sample_size"),
        "wall_s": wall,
    }


def main() -> int:
    """Smoke test: a tiny torch.mul; prints the figures."""
    why = available()
    if why:
        print(why)
        return 1
    import torch

    x = torch.rand(1 << 15, device="cuda")
    y = torch.empty_like(x)
    print(cold_time_s(lambda: torch.mul(x, 2.0, out=y)))
    print(cold_time_s(lambda: torch.mul(x, 2.0, out=y), ("--min-time", "0.05")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
