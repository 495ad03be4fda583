"""NVIDIA's nvbench through its Python bindings (the ``cuda-bench`` package), as one more tool
beside perfledger's harness, ``triton.testing.do_bench`` and ``torch.utils.benchmark``: the cold
GPU time of one call (nvbench's ``nv/cold/time/gpu/mean``: L2 flushed before each sample, its
default stopping criterion), read from the JSON file nvbench writes.

nvbench runs its registered benchmarks once per process, so each run is a process of its own
(:func:`run_variants`): one benchmark of a kernel of ``bench/subjects_bench.py`` with three
variants, ``a``, ``a2`` (the same subject again: an A/A estimate ``a2 / a``) and ``b`` (the true
difference: ``b / a``).

``cuda-bench`` is not a dependency of perfledger: on the device it is carried as a wheel
(``.whl/``). Alone::

    python bench/nvbench_tool.py --kernel tiny --out /tmp/nvbench.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
VARIANTS = ("a", "a2", "b")


def available() -> str | None:
    """None where nvbench's bindings load, else why not (a line)."""
    try:
        import cuda.bench as bench

        bench.State  # noqa: B018  (loads the native module for this CUDA version)
    except Exception as exc:  # an ImportError, or no extension for this CUDA version
        return f"nvbench (cuda-bench) not available: {exc}"
    return None


def run_variants(kernel: str, quick: bool = False) -> dict[str, Any]:
    """One nvbench process timing ``kernel``'s three variants (module docstring).

    Returns ``{"a", "a2", "b"}`` (cold GPU mean per call, seconds), ``"rel_stdev"`` per
    variant, and ``"wall_s"``: the seconds nvbench ran (without the process's start-up).
    Raises RuntimeError when the process fails or reports no cold time.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "variants.json"
        argv = [
            sys.executable,
            str(HERE / "nvbench_tool.py"),
            "--kernel",
            kernel,
            "--out",
            str(out),
        ]
        proc = subprocess.run(
            [*argv, *(["--quick"] if quick else [])], capture_output=True, text=True
        )
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"nvbench run failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def _cold_by_variant(data: dict[str, Any]) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for b in data.get("benchmarks", []):
        for state in b.get("states", []):
            axes = {a.get("name"): a.get("value") for a in state.get("axis_values") or []}
            variant = str(axes.get("variant"))
            tags = {}
            for s in state.get("summaries") or []:
                values = {d["name"]: d["value"] for d in s.get("data", [])}
                if "value" in values:
                    tags[s["tag"]] = float(values["value"])
            found[variant] = tags
    return found


def main() -> int:
    """Time one kernel's variants with nvbench; write them to ``--out`` (JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    why = available()
    if why:
        print(why, file=sys.stderr)
        return 1
    import cuda.bench as bench
    import torch

    sys.path.insert(0, str(HERE))
    from subjects_bench import kernels

    k = kernels(torch, args.quick)[args.kernel]
    calls = {"a": k["fa"], "a2": k["fa"], "b": k["fb"]}

    def subject(state: Any) -> None:
        fn = calls[state.get_string("variant")]

        def launcher(launch: Any) -> None:
            stream = torch.cuda.ExternalStream(launch.get_stream().addressof())
            with torch.cuda.stream(stream):
                fn()

        state.exec(launcher)

    bench.register(subject).add_string_axis("variant", list(VARIANTS))
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "nvbench.json"
        t0 = time.perf_counter()
        bench.run_all_benchmarks(["nvbench", "--json", str(raw), "--quiet"])
        wall = time.perf_counter() - t0
        found = _cold_by_variant(json.loads(raw.read_text()))
    tag = "nv/cold/time/gpu/mean"
    missing = [v for v in VARIANTS if tag not in found.get(v, {})]
    if missing:
        print(f"nvbench reported no cold GPU time for {missing}: {found}", file=sys.stderr)
        return 1
    result: dict[str, Any] = {v: found[v][tag] for v in VARIANTS}
    result["rel_stdev"] = {v: found[v].get("nv/cold/time/gpu/stdev/relative") for v in VARIANTS}
    result["wall_s"] = wall
    Path(args.out).write_text(json.dumps(result))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
