"""Small CUDA problems and subjects used by the GPU tests, the benchmark and the README: a
memory-bound scale kernel ``y = alpha * x`` (float32), an artificially slowed copy of it (extra
elements written to a scratch buffer: more work, the same answer), a vectorized copy kernel, and
``cupy.copyto`` as a subject. Needs CuPy on use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfledger.kernels.harness import CallableSubject, Problem, RawKernelSubject

#: CUDA source of the scale kernel; ``extra`` more elements are written to ``scratch``.
SCALE_SOURCE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y,
                                 float* __restrict__ scratch, float alpha,
                                 long long n, long long extra) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (; i < n + extra; i += stride) {
        if (i < n) {
            y[i] = alpha * x[i];
        } else {
            scratch[i - n] = alpha * x[i - n];
        }
    }
}
"""

#: CUDA source of a vectorized copy kernel: each thread moves four float4 (64 bytes) with all
#: loads issued before the stores, one pass over the data (no grid-stride loop).
COPY_SOURCE = r"""
extern "C" __global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y,
                                 long long n4) {
    long long base = (long long)blockIdx.x * blockDim.x * 4 + threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        long long i = base + (long long)u * blockDim.x;
        if (i < n4) v[u] = x[i];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        long long i = base + (long long)u * blockDim.x;
        if (i < n4) y[i] = v[u];
    }
}
"""

ALPHA = 2.0


def scale_problem(n: int) -> Problem:
    """``y = 2 x`` over ``n`` float32 elements (reads and writes 8 n bytes per call)."""

    def make_inputs(seed: int) -> dict[str, Any]:
        import cupy

        return {"x": cupy.random.RandomState(seed).standard_normal(n, dtype=cupy.float32)}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"y": ALPHA * inputs["x"]}

    return Problem(
        name=f"scale-{n}",
        make_inputs=make_inputs,
        reference=reference,
        outputs={"y": ((n,), "float32")},
        bytes_per_call=8 * n,
    )


def copy_problem(n: int) -> Problem:
    """``y = x`` over ``n`` float32 elements (``n`` a multiple of 4; 8 n bytes per call)."""
    if n % 4:
        raise ValueError("n must be a multiple of 4")

    def make_inputs(seed: int) -> dict[str, Any]:
        import cupy

        return {"x": cupy.random.RandomState(seed).standard_normal(n, dtype=cupy.float32)}

    return Problem(
        name=f"copy-{n}",
        make_inputs=make_inputs,
        reference=lambda inputs: {"y": inputs["x"]},
        outputs={"y": ((n,), "float32")},
        bytes_per_call=8 * n,
    )


def _grid(n: int, sms: int = 132) -> tuple[int, ...]:
    return (min((n + 255) // 256, sms * 16),)


def scale_subject(n: int, extra_share: float = 0.0, name: str | None = None) -> RawKernelSubject:
    """The scale kernel over ``n`` elements, doing ``extra_share`` more work (e.g. 0.02 = 2 %
    more elements, written to a scratch buffer)."""
    import cupy

    extra = round(n * extra_share)
    scratch = cupy.empty(max(extra, 1), dtype=cupy.float32)
    label = name or (f"scale+{extra_share:.0%}" if extra else "scale")
    return RawKernelSubject(
        name=label,
        source=SCALE_SOURCE,
        entry="scale",
        grid=_grid(n + extra),
        block=(256,),
        args=lambda i, o: (
            i["x"],
            o["y"],
            scratch,
            np.float32(ALPHA),
            np.int64(n),
            np.int64(extra),
        ),
    )


def copy_subject(n: int) -> RawKernelSubject:
    """The vectorized copy kernel over ``n`` float32 elements."""
    return RawKernelSubject(
        name="copy4",
        source=COPY_SOURCE,
        entry="copy4",
        grid=((n // 4 + 1023) // 1024,),
        block=(256,),
        args=lambda i, o: (i["x"], o["y"], np.int64(n // 4)),
    )


def copyto_subject() -> CallableSubject:
    """``cupy.copyto(y, x)`` as a subject."""
    import cupy

    def run(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        cupy.copyto(outputs["y"], inputs["x"])

    return CallableSubject("cupy.copyto", run)


__all__ = [
    "COPY_SOURCE",
    "SCALE_SOURCE",
    "copy_problem",
    "copy_subject",
    "copyto_subject",
    "scale_problem",
    "scale_subject",
]
