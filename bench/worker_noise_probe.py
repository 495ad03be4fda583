"""Where the noise of an isolated A/A comes from: one spec's reference against itself, in
process (:meth:`Harness.compare`) and in two workers (:func:`compare_spec`), ``--runs`` times
each; every call's event time is written to ``--out`` (JSON) in the order it ran, with the
calls per batch, so the structure of the noise (first call of a batch, one worker against the
other, drift) can be read after the run.

Needs CuPy and a GPU. Run on the device::

    python bench/worker_noise_probe.py --spec examples/subjects/torch_triton_spec.py \
        --case n16M --runs 3 --out /tmp/probe.json

Prints, per run and mode: the median ratio, the stdev of the block log ratios, each subject's
median call and, per position in a batch, the median call relative to the subject's median.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _summary(c: Any, calls: int) -> dict[str, Any]:
    ref = np.asarray(c.ref.samples_s) if c.ref else np.zeros(0)
    cand = np.asarray(c.cand.samples_s) if c.cand else np.zeros(0)
    out: dict[str, Any] = {
        "valid": c.valid,
        "flags": c.flags,
        "ratio": c.stats.median_ratio if c.stats else None,
        "log_ratio_std": c.stats.log_ratio_std if c.stats else None,
        "ref_median_s": float(np.median(ref)) if ref.size else None,
        "cand_median_s": float(np.median(cand)) if cand.size else None,
        "calls_per_batch": calls,
        "ref_s": ref.tolist(),
        "cand_s": cand.tolist(),
    }
    for name, samples in (("ref", ref), ("cand", cand)):
        whole = samples[: samples.size - samples.size % calls].reshape(-1, calls)
        if whole.size:
            med = float(np.median(samples))
            out[f"{name}_by_position"] = [round(float(x) / med, 4) for x in np.median(whole, 0)]
            out[f"{name}_batch_mean_cv"] = float(whole.mean(1).std() / whole.mean())
    return out


def main() -> int:
    """Run the probe; returns the exit status."""
    from perfledger.kernels.harness.harness import Harness, HarnessConfig
    from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec
    from perfledger.kernels.subjects.spec_loader import load_spec

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--calls", type=int, default=None, help="calls per batch (isolated)")
    parser.add_argument("--modes", default="in-process,isolated")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    for run in range(args.runs):
        for mode in args.modes.split(","):
            t0 = time.perf_counter()
            if mode == "in-process":
                loaded = load_spec(args.spec)
                config = loaded["config"] or HarnessConfig()
                h = Harness(loaded["problems"][args.case], config)
                c = h.compare(loaded["reference"], loaded["reference"])
                calls = config.batch
            else:
                iso = IsolationConfig(calls_per_batch=args.calls)
                c = compare_spec(args.spec, args.case, roles=("reference", "reference"), config=iso)
                calls = int(c.settings["isolation_settings"]["calls_per_batch"])
            s = _summary(c, calls)
            s.update(mode=mode, run=run, wall_s=time.perf_counter() - t0)
            s["stream_hold"] = {k: c.settings.get(k) for k in ("stream_hold", "stream_hold_counts")}
            results.append(s)
            short = {k: v for k, v in s.items() if k not in ("ref_s", "cand_s")}
            print(json.dumps(short), flush=True)
    Path(args.out).write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
