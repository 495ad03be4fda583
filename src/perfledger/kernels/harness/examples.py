"""Small CUDA problems and subjects used by the GPU tests, the benchmark and the docs: a
memory-bound scale kernel ``y = alpha * x`` (float32), an artificially slowed copy of it (extra
elements written to a scratch buffer: more work, the same answer), a vectorized copy kernel, and
``cupy.copyto`` as a subject, and a compute-bound CUDA-core problem: ``k`` steps of the affine
map ``x -> a x + b`` per element (float32 fused multiply-adds). Inputs come from a counter-based
generator (:func:`uniform`): a fresh input set per pair costs one memory-bound write. Needs CuPy on
use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfledger.kernels.harness.harness import CallableSubject, Problem, RawKernelSubject

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

#: Source of :func:`normal`: splitmix64 of (seed, index), then Box-Muller.
NORMAL_BODY = r"""
unsigned long long z = seed + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ULL;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
z = z ^ (z >> 31);
float u1 = (float)((z >> 40) + 1) * (1.0f / 16777217.0f);
float u2 = (float)(z & 0xFFFFFFULL) * (1.0f / 16777216.0f);
y = (T)(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2));
"""
_normal_kernel: Any = None


def normal(n: int, seed: int, dtype: Any = "float32") -> Any:
    """``n`` standard-normal values (CuPy array of ``dtype``) from a counter-based generator:
    deterministic in ``seed`` (an int), one memory-bound write on the current stream."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    global _normal_kernel
    if _normal_kernel is None:
        _normal_kernel = cupy.ElementwiseKernel("uint64 seed", "T y", NORMAL_BODY, "pl_normal")
    out = cupy.empty(n, dtype=dtype)
    _normal_kernel(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), out)
    return out


#: Source of :func:`uniform`: two rounds of murmur3's 32-bit finalizer over (seed, index); 32-bit
#: integer arithmetic only, so the generator runs at memory speed.
UNIFORM_BODY = r"""
unsigned int h = (unsigned int)i * 0x9E3779B9u + lo;
h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
h ^= hi;
h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
y = (T)((float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
"""
_uniform_kernel: Any = None


def uniform(n: int, seed: int, dtype: Any = "float32") -> Any:
    """``n`` values uniform in [-1, 1) (CuPy array of ``dtype``) from a counter-based hash:
    deterministic in ``seed`` (an int), one memory-bound write on the current stream."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    global _uniform_kernel
    if _uniform_kernel is None:
        _uniform_kernel = cupy.ElementwiseKernel(
            "uint32 lo, uint32 hi", "T y", UNIFORM_BODY, "pl_uniform"
        )
    out = cupy.empty(n, dtype=dtype)
    _uniform_kernel(np.uint32(seed & 0xFFFFFFFF), np.uint32((seed >> 32) & 0xFFFFFFFF), out)
    return out


#: CUDA source of the affine iteration: ``steps`` times ``x = A x + B`` per element.
ITERATE_SOURCE = r"""
extern "C" __global__ void iterate(const float* __restrict__ x, float* __restrict__ y,
                                   float A, float B, int steps, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    for (int s = 0; s < steps; ++s) v = fmaf(v, A, B);
    y[i] = v;
}
"""
#: The affine map of :func:`iterate_problem`.
ITER_A, ITER_B = 0.9995, 0.0005


def scale_problem(n: int) -> Problem:
    """``y = 2 x`` over ``n`` float32 elements (reads and writes 8 n bytes per call)."""

    def make_inputs(seed: int) -> dict[str, Any]:
        return {"x": uniform(n, seed)}

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
        return {"x": uniform(n, seed)}

    return Problem(
        name=f"copy-{n}",
        make_inputs=make_inputs,
        reference=lambda inputs: {"y": inputs["x"]},
        outputs={"y": ((n,), "float32")},
        bytes_per_call=8 * n,
    )


def iterate_problem(n: int, k: int) -> Problem:
    """``y = f^k(x)`` with ``f(x) = a x + b`` (:data:`ITER_A`, :data:`ITER_B`) over ``n``
    float32 elements: ``2 k n`` FLOP on CUDA cores (``flops_unit="cuda_fp32"``), 8 n bytes.
    Compute-bound for ``k`` in the hundreds; the float64 reference is the closed form."""

    a, b = float(np.float32(ITER_A)), float(np.float32(ITER_B))

    def make_inputs(seed: int) -> dict[str, Any]:
        return {"x": uniform(n, seed)}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        ak = a**k
        return {"y": ak * inputs["x"] + b * (1.0 - ak) / (1.0 - a)}

    return Problem(
        name=f"iterate-{n}x{k}",
        make_inputs=make_inputs,
        reference=reference,
        outputs={"y": ((n,), "float32")},
        bytes_per_call=8 * n,
        flops_per_call=2 * k * n,
        tolerances={"y": 1e-3},
        flops_unit="cuda_fp32",
    )


def iterate_subject(n: int, k: int, shortcut: int = 1, name: str | None = None) -> RawKernelSubject:
    """The affine iteration of :func:`iterate_problem`, ``k`` fused multiply-adds per element;
    ``shortcut`` > 1 composes that many steps into one (``f^s`` is affine too): the same answer
    with ``k / shortcut`` steps, fewer FLOPs than the problem declares (a cheat of the
    plausibility check, in the tests)."""
    if k % shortcut:
        raise ValueError("shortcut must divide k")
    a, b = np.float64(np.float32(ITER_A)), np.float64(np.float32(ITER_B))
    big_a = np.float32(a**shortcut)
    big_b = np.float32(b * (1.0 - a**shortcut) / (1.0 - a))
    return RawKernelSubject(
        name=name or ("iterate" if shortcut == 1 else f"iterate/{shortcut}"),
        source=ITERATE_SOURCE,
        entry="iterate",
        grid=((n + 255) // 256,),
        block=(256,),
        args=lambda i, o: (i["x"], o["y"], big_a, big_b, np.int32(k // shortcut), np.int64(n)),
    )


def _grid(n: int, sms: int = 132) -> tuple[int, ...]:
    return (min((n + 255) // 256, sms * 16),)


def scale_subject(n: int, extra_share: float = 0.0, name: str | None = None) -> RawKernelSubject:
    """The scale kernel over ``n`` elements, doing ``extra_share`` more work (e.g. 0.02 = 2 %
    more elements, written to a scratch buffer)."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

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
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    def run(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        cupy.copyto(outputs["y"], inputs["x"])

    return CallableSubject("cupy.copyto", run)


__all__ = [
    "COPY_SOURCE",
    "ITERATE_SOURCE",
    "SCALE_SOURCE",
    "copy_problem",
    "copy_subject",
    "copyto_subject",
    "iterate_problem",
    "iterate_subject",
    "normal",
    "scale_problem",
    "scale_subject",
    "uniform",
]
