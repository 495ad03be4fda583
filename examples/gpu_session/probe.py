"""Helpers of the GPU session that run outside the measurement protocol:

- ``probe.py baseline NAME``: times kernel NAME on each case with ``cupyx.profiler.benchmark``
  (GPU times, ms) and prints ``{"times_ms": {case: [...]}, "bytes": {case: n}, "achieved_Bps":
  {...}, "ceiling_Bps": copy ceiling, "roofline_speedup": {case: ceiling/achieved}}``; the copy
  ceiling is perfledger's measured one (cached per environment).
- ``probe.py launch NAME``: launches kernel NAME once on the first case with inputs made on the
  host (so that the only kernel launched is NAME's: the target of ``perfledger evidence ncu``).
"""

from __future__ import annotations

import json
import sys

import numpy as np
from softmax_kernels import CASES, SCALE, launch, source


def _kernel(name: str):  # type: ignore[no-untyped-def]
    import cupy

    return cupy.RawModule(code=source(name), options=("-std=c++17",)).get_function("softmax")


def _inputs(rows: int, cols: int):  # type: ignore[no-untyped-def]
    import cupy

    host = (np.random.default_rng(7).standard_normal((rows, cols)) * SCALE).astype(np.float32)
    return cupy.asarray(host), cupy.empty((rows, cols), dtype=cupy.float32)


def baseline(name: str) -> dict[str, object]:
    """GPU times of kernel ``name`` per case and its achieved bandwidth against the ceiling."""
    from cupyx.profiler import benchmark

    from perfledger.kernels.cuda.ceilings import load_or_measure
    from perfledger.kernels.env import collect

    fn = _kernel(name)
    ceiling = load_or_measure(collect(tools=False).identity()).copy_bytes_per_s
    out: dict[str, object] = {"times_ms": {}, "bytes": {}, "achieved_Bps": {}}
    for case, (rows, cols) in CASES.items():
        x, y = _inputs(rows, cols)
        grid, block = launch(name, rows)
        args = (x, y, np.int32(rows), np.int32(cols))
        result = benchmark(lambda g=grid, b=block, a=args: fn(g, b, a), n_repeat=20, n_warmup=3)
        times = [float(t) * 1e3 for t in result.gpu_times[0]]
        nbytes = 8 * rows * cols
        out["times_ms"][case] = times  # type: ignore[index]
        out["bytes"][case] = nbytes  # type: ignore[index]
        out["achieved_Bps"][case] = nbytes / (float(np.median(times)) / 1e3)  # type: ignore[index]
    out["ceiling_Bps"] = ceiling
    out["roofline_speedup"] = {
        case: ceiling / bps
        for case, bps in out["achieved_Bps"].items()  # type: ignore[union-attr]
    }
    return out


def launch_once(name: str) -> dict[str, object]:
    """Launch kernel ``name`` once on the first case."""
    import cupy

    case, (rows, cols) = next(iter(CASES.items()))
    x, y = _inputs(rows, cols)
    grid, block = launch(name, rows)
    _kernel(name)(grid, block, (x, y, np.int32(rows), np.int32(cols)))
    cupy.cuda.Device().synchronize()
    return {"launched": name, "case": case}


if __name__ == "__main__":
    mode, kernel = sys.argv[1], sys.argv[2]
    print(json.dumps(baseline(kernel) if mode == "baseline" else launch_once(kernel)))
