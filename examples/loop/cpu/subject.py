"""The CPU stand-in subject of the kernel-iteration loop, run by perfledger's workload driver.

Usage: ``python subject.py KERNEL.py REF.py DIMS_JSON ENTRY`` with ``$PERFLEDGER_LOOP_MODE`` one of
``check``, ``time``, ``profile``. Prints one JSON object (the driver's protocol):

- ``check``: 5 trials on fresh inputs from a seed the kernel cannot see (``os.urandom``), the
  relative L2 error against the float64 reference (tolerance 1e-9), NaN never passes; the output
  buffer of a NumPy kernel is poisoned before each call by giving it a fresh input copy.
- ``time``: one warm-up call, then 7 timed calls (``time.perf_counter``, ms) on a fixed input;
  the last output is re-checked.
- ``profile``: the stand-in's own counters of one call, measured, not invented:
  ``cpu__python_calls`` (Python and C function calls seen by ``sys.setprofile``),
  ``cpu__peak_alloc_bytes`` (``tracemalloc`` peak), ``cpu__input_bytes`` and
  ``perfledger__kernel_launches`` (1: the kernel is called once per call).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import tracemalloc

import numpy as np

TOLERANCE = 1e-9


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _error(out, expected: np.ndarray) -> float:
    got = np.asarray(out, dtype=np.float64)
    if got.shape != expected.shape or not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.linalg.norm(got - expected) / np.linalg.norm(expected))


def main() -> None:
    kernel_path, ref_path, dims_json, entry = sys.argv[1:5]
    dims = json.loads(dims_json)
    kernel = getattr(_load(kernel_path, "kernel_under_test"), entry)
    ref = _load(ref_path, "reference")
    mode = os.environ.get("PERFLEDGER_LOOP_MODE", "time")
    M, N = dims["M"], dims["N"]
    if mode == "check":
        rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        errors = []
        for _ in range(5):
            x = ref.make_inputs(rng, dims)
            t0 = time.perf_counter()
            out = kernel(x.copy(), M, N)
            elapsed = (time.perf_counter() - t0) * 1e3
            errors.append(_error(out, ref.reference(x)))
        worst = max(errors)
        correct = bool(worst <= TOLERANCE)
        print(
            json.dumps(
                {
                    "correct": correct,
                    "metrics": {"time_ms": [max(elapsed, 1e-6)]},
                    "detail": {
                        "trials": 5,
                        "max_error": worst if worst != float("inf") else 1e300,
                        "tolerance": TOLERANCE,
                        "detail": "relative L2 error against the float64 reference",
                    },
                }
            )
        )
        return
    x = ref.make_inputs(np.random.default_rng(7), dims)
    if mode == "profile":
        calls = [0]

        def count(frame, event, arg):
            if event in ("call", "c_call"):
                calls[0] += 1

        sys.setprofile(count)
        kernel(x.copy(), M, N)
        sys.setprofile(None)
        tracemalloc.start()
        kernel(x.copy(), M, N)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        metrics = {
            "cpu__python_calls": float(calls[0]),
            "cpu__peak_alloc_bytes": float(peak),
            "cpu__input_bytes": float(x.nbytes),
            "perfledger__kernel_launches": 1.0,
        }
        units = {
            "cpu__python_calls": "calls",
            "cpu__peak_alloc_bytes": "byte",
            "cpu__input_bytes": "byte",
            "perfledger__kernel_launches": "launches",
        }
        print(
            json.dumps(
                {
                    "correct": True,
                    "metrics": {"time_ms": [1.0]},
                    "detail": {
                        "profile": {
                            "tool": "perfledger-cpu-standin",
                            "version": "1",
                            "metrics": metrics,
                            "units": units,
                            "limitations": [],
                        }
                    },
                }
            )
        )
        return
    expected = ref.reference(x)
    kernel(x.copy(), M, N)  # warm-up
    samples = []
    out = None
    for _ in range(7):
        xc = x.copy()
        t0 = time.perf_counter()
        out = kernel(xc, M, N)
        samples.append((time.perf_counter() - t0) * 1e3)
    correct = bool(_error(out, expected) <= TOLERANCE)
    print(json.dumps({"correct": correct, "metrics": {"time_ms": samples}}))


if __name__ == "__main__":
    main()
