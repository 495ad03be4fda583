"""The process Nsight Compute profiles for the loop: one launch of a ``.cu`` kernel between
``cudaProfilerStart`` and ``cudaProfilerStop`` (ncu runs with ``--profile-from-start off``), so
that exactly the subject's launches are profiled: input preparation, compilation and CuPy's own
kernels stay outside the range, and no filter on a host function's name can miss the kernel.

Usage: ``python -m perfledger.kernels.loop.ncu_target KERNEL.cu REF.py DIMS_JSON ENTRY``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from perfledger.kernels.loop.measure import CudaBackend


def main(argv: list[str]) -> int:
    """Prepare inputs and outputs from ``REF.py``, compile ``KERNEL.cu``, launch it once inside
    the profiler range; returns the exit status."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    kernel, reference, dims_json, entry = argv
    dims = {str(k): int(v) for k, v in json.loads(dims_json).items()}
    backend = CudaBackend(Path(reference), dims, entry)
    ref = backend._module()
    host = ref.make_inputs(np.random.default_rng(12345), dims)
    inputs = {name: cupy.asarray(value) for name, value in host.items()}
    outputs = {
        name: cupy.empty(shape, dtype=dtype) for name, (shape, dtype) in ref.outputs(dims).items()
    }
    subject = backend.subject(Path(kernel))
    subject.kernel()  # compile outside the profiled range
    cupy.cuda.Device().synchronize()
    start, stop = _profiler_range(cupy)
    start()
    subject(inputs, outputs)
    cupy.cuda.Device().synchronize()
    stop()
    return 0


def _profiler_range(cupy: object) -> tuple[object, object]:
    """cudaProfilerStart/Stop as CuPy exposes them (runtime functions, else the profiler module)."""
    runtime = cupy.cuda.runtime  # type: ignore[attr-defined]
    if hasattr(runtime, "profilerStart"):
        return runtime.profilerStart, runtime.profilerStop
    from cupy.cuda import profiler  # noqa: PLC0415 (CuPy: optional, GPU only)

    return profiler.start, profiler.stop


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
