"""What running subjects in worker processes of their own costs (property 3 of SPEC.md section 5):
A/A comparisons of one kernel in-process under the first round's protocol (``before``: input sets
rotated, no stream hold), in-process under today's (``Harness.compare``) and isolated
(``perfledger.kernels.isolation.isolated.compare_spec``, the reference in two workers), rounds
interleaved, under the default stopping rule; and the per-call price of the output digest at
the kernel's output size: keyed BLAKE3 on the device (what a worker uses), and the host path it
falls back to (copy into pinned memory + keyed blake3).

Needs CuPy and a GPU. Run on the device::

    .venv/bin/python bench/isolated_cost_bench.py --runs 4 --json /tmp/isolated_cost.json

Prints one table: per mode, the median wall seconds per comparison, wall microseconds per timed
call (of either subject), timed GPU seconds, the A/A spread of the median ratios, spread^2 x
seconds (the statistical efficiency at equal precision), the RMS error of the A/A ratios from 1
(bias included) and its square x seconds, and, isolated, the clock check's limit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SPECS = {
    "scale": "from perfledger.kernels.harness.examples import scale_problem as P, scale_subject as S\n"
    "PROBLEMS = {{'scale': P({n})}}\nREFERENCE = S({n})\nCANDIDATE = S({n}, name='again')\n",
    "iterate": "from perfledger.kernels.harness.examples import iterate_problem as P, iterate_subject as S\n"
    "PROBLEMS = {{'iterate': P({n}, 2048)}}\nREFERENCE = S({n}, 2048)\n"
    "CANDIDATE = S({n}, 2048, name='again')\n",
}


def digest_cost(nbytes: int, repeats: int = 20) -> dict[str, float]:
    """Median seconds of the copy into pinned memory and of the keyed blake3, per call."""
    import cupy
    import cupyx

    from perfledger.kernels.cuda.gpu_digest import device_digest
    from perfledger.kernels.isolation.subject_protocol import output_digest

    out = cupy.ones(nbytes // 4, dtype=cupy.float32)
    host = cupyx.empty_pinned(out.shape, dtype=out.dtype)
    copy, hashing, device = [], [], []
    for _ in range(repeats):
        cupy.cuda.runtime.deviceSynchronize()
        t0 = time.perf_counter()
        out.get(out=host)
        t1 = time.perf_counter()
        output_digest({"y": host}, bytes(32))
        t2 = time.perf_counter()
        device_digest(out, bytes(32))
        t3 = time.perf_counter()
        copy.append(t1 - t0)
        hashing.append(t2 - t1)
        device.append(t3 - t2)
    return {
        "copy_s": statistics.median(copy),
        "blake3_s": statistics.median(hashing),
        "device_s": statistics.median(device),
    }


def one(mode: str, kind: str, n: int, spec: Path) -> dict[str, Any]:
    """One A/A comparison; returns its figures."""
    from perfledger.kernels.harness.harness import Harness, HarnessConfig

    if mode == "do_bench":
        return do_bench_aa(spec)
    t0 = time.perf_counter()
    if mode in ("before", "in-process"):
        from perfledger.kernels.subjects.spec_loader import load_spec

        loaded = load_spec(str(spec))
        problem = next(iter(loaded["problems"].values()))
        config = loaded["config"] or HarnessConfig()
        if mode == "before":  # the first round's protocol: inputs rotated, no stream hold
            config = dataclasses.replace(config, protocol=1, hold_stream=False)
        h = Harness(problem, config)
        c = h.compare(loaded["reference"], loaded["candidate"])
    else:
        from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec

        # "isolated": the default batches; "isolated-32": 32 calls a batch (fewer requests,
        # stops and reveals per call)
        config = IsolationConfig(calls_per_batch=32) if mode == "isolated-32" else IsolationConfig()
        c = compare_spec(str(spec), kind, roles=("reference", "reference"), config=config)
    wall = time.perf_counter() - t0
    calls = len(c.ref.samples_s) if c.ref else 0
    return {
        "valid": c.valid,
        "flags": c.flags,
        "ratio": c.stats.median_ratio if c.stats else None,
        "wall_s": wall,
        "wall_s_per_call": wall / (2 * calls) if calls else None,
        "timed_gpu_s": (c.ref.gpu_s + c.cand.gpu_s) if c.ref and c.cand else None,
        # the reference's limit (an A/A: both subjects' are alike)
        "clock_limit_s": ((c.settings.get("clock") or {}).get("limit_s") or {}).get("reference"),
        "call_median_s": c.stats.ref_median_s if c.stats else None,
    }


def _median(values: list[Any]) -> float:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else float("nan")


def do_bench_aa(spec: Path) -> dict[str, Any]:
    """One A/A estimate with ``triton.testing.do_bench`` (median, its defaults) of the spec's
    reference on one input set: the ratio of two runs, and the wall time of both."""
    from triton.testing import do_bench

    from perfledger.kernels.harness.harness import require_cupy
    from perfledger.kernels.subjects.spec_loader import load_spec

    cp = require_cupy()
    loaded = load_spec(str(spec))
    problem = next(iter(loaded["problems"].values()))
    inputs = {k: cp.asarray(v) for k, v in problem.make_inputs(1).items()}
    outs = {k: cp.empty(shape, dtype=dtype) for k, (shape, dtype) in problem.outputs.items()}
    subject = loaded["reference"]
    t0 = time.perf_counter()
    a = float(do_bench(lambda: subject(inputs, outs), return_mode="median"))
    b = float(do_bench(lambda: subject(inputs, outs), return_mode="median"))
    wall = time.perf_counter() - t0
    return {"valid": True, "flags": [], "ratio": b / a, "wall_s": wall, "wall_s_per_call": None,
            "timed_gpu_s": None, "clock_limit_s": None, "call_median_s": a * 1e-3}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(SPECS), default="scale")
    parser.add_argument("--n", type=int, default=1 << 24, help="elements (float32)")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.py"
        spec.write_text(SPECS[args.kind].format(n=args.n))
        rows: dict[str, list[dict[str, Any]]] = {
            "before": [],
            "in-process": [],
            "isolated": [],
            "isolated-32": [],
        }
        try:
            import triton.testing  # noqa: F401

            rows["do_bench"] = []
        except ImportError:
            pass
        for r in range(args.runs):
            for mode in rows:
                row = one(mode, args.kind, args.n, spec)
                rows[mode].append(row)
                print(f"{mode} run {r + 1}: {row}", flush=True)
    cost = digest_cost(4 * args.n)
    print(f"\n{args.kind} n={args.n}: output {4 * args.n / 2**20:.0f} MiB; per call: device "
          f"blake3 {1e3 * cost['device_s']:.3f} ms (used), or copy to pinned "
          f"{1e3 * cost['copy_s']:.3f} ms + host blake3 {1e3 * cost['blake3_s']:.3f} ms")  # fmt: skip
    print(f"{'mode':12s} {'wall s/cmp':>10s} {'wall us/call':>12s} {'GPU s':>7s} "
          f"{'A/A spread':>10s} {'spread^2*s':>10s} {'A/A RMS':>8s} {'RMS^2*s':>9s} "
          f"{'clock limit us':>14s} {'invalid':>7s}")  # fmt: skip
    summary: dict[str, Any] = {"digest": cost, "kind": args.kind, "n": args.n}
    for mode, got in rows.items():
        ok = [x for x in got if x["ratio"] is not None and x["valid"]]
        spread = float(np.std([x["ratio"] for x in ok], ddof=1)) if len(ok) > 1 else float("nan")
        # the error of an A/A from 1, bias included (a tool whose second run of the same kernel
        # always reads slower has a small spread and a large error)
        rms = float(np.sqrt(np.mean([(x["ratio"] - 1) ** 2 for x in ok]))) if ok else float("nan")
        wall = statistics.median(x["wall_s"] for x in got)
        per_call = _median([x["wall_s_per_call"] for x in ok])
        gpu = _median([x["timed_gpu_s"] for x in ok])
        limits = [x["clock_limit_s"] for x in ok if x["clock_limit_s"] is not None]
        limit = 1e6 * statistics.median(limits) if limits else float("nan")
        print(f"{mode:12s} {wall:10.3f} {1e6 * per_call:12.1f} {gpu:7.3f} {spread:10.5f} "
              f"{spread**2 * wall:10.3e} {rms:8.5f} {rms**2 * wall:9.2e} {limit:14.1f} "
              f"{len(got) - len(ok):7d}")  # fmt: skip
        summary[mode] = {"runs": got, "wall_s": wall, "wall_s_per_call": per_call,
                         "aa_spread": spread, "aa_rms_error": rms, "timed_gpu_s": gpu}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
