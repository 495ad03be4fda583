"""The process Nsight Compute profiles for a ``solve`` run of the loop: one ``solve`` call
between ``cudaProfilerStart`` and ``cudaProfilerStop`` (ncu runs with ``--profile-from-start
off``), so that exactly the kernels that call launches are profiled: building, input preparation
and CuPy's own kernels stay outside the range.

Usage: ``python -m perfledger.kernels.loop.solve_target KERNEL.cu REF.py DIMS_JSON``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfledger.kernels.loop.ncu_target import _profiler_range


def main(argv: list[str]) -> int:
    """Build ``KERNEL.cu``, make inputs and outputs from ``REF.py``, call ``solve`` once inside
    the profiler range; returns the exit status."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    from perfledger.kernels.loop.solve import SolveBackend  # noqa: PLC0415 (numpy via perfledger.kernels.loop.solve)

    kernel, reference, dims_json = argv
    dims = json.loads(dims_json)
    backend = SolveBackend(Path(reference), dims)
    problem = backend.harness().problem
    subject = backend.subject(Path(kernel))
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        inputs = problem.make_inputs(12345)
        inputs = {k: cupy.ascontiguousarray(cupy.asarray(v)) for k, v in inputs.items()}
        outputs = {k: cupy.empty(s, dtype=d) for k, (s, d) in problem.outputs.items()}
    cupy.cuda.Device().synchronize()
    start, stop = _profiler_range(cupy)
    start()
    with stream:
        subject(inputs, outputs)
    cupy.cuda.Device().synchronize()
    stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
