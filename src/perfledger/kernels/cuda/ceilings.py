"""Device ceilings and the plausibility check (SPEC.md section 5, "Plausibility").

The ceilings are measured once per environment (keyed by :meth:`Environment.identity`) and cached
as JSON under ``$PERFLEDGER_CACHE`` (default ``~/.cache/perfledger``): the device-to-device copy
bandwidth (``cupy.copyto`` of 1 GiB, bytes read + written per second) and the rate of a large
matrix product (``cupy.matmul`` of 8192 x 8192 float16 and float32 matrices on random data,
2 n^3 FLOP per product), and a FLOP ceiling per unit and precision (:data:`FLOP_UNITS`):
CUDA-core float32 and float64 (a kernel of independent fused multiply-adds, the best of several
launches), tensor-core float16 (``cupy.matmul``) and, where PyTorch is importable, bfloat16,
tf32 and fp8 (``torch.matmul`` / ``torch._scaled_mm``). A measurement whose achieved bandwidth or
FLOP rate exceeds its ceiling by more than ``margin`` is a measurement error, refused; a problem
declares which unit does its FLOPs (a CUDA-core kernel checked against the tensor-core rate
could never trip the check); a speedup above 10x is flagged for review.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfledger.errors import MeasurementError

#: Bytes copied by the bandwidth ceiling (1 GiB).
COPY_BYTES = 1 << 30
#: Matrix size of the FLOP ceiling.
MATMUL_N = 8192
#: A measurement may exceed a ceiling by this share before it is refused (the ceiling is itself
#: a measurement).
DEFAULT_MARGIN = 0.05
#: A speedup above this is flagged for review.
REVIEW_SPEEDUP = 10.0
#: The units (and precisions) a problem may declare its FLOPs in.
FLOP_UNITS = (
    "cuda_fp32",
    "cuda_fp64",
    "tensor_fp16",
    "tensor_bf16",
    "tensor_tf32",
    "tensor_fp8",
)
#: Version of the measured ceilings: 2 added the per-unit FLOP ceilings (a cache without them
#: is measured again).
CEILINGS_VERSION = 2

#: CUDA source of the CUDA-core ceiling: each thread runs 8 independent FMA chains.
FMA_SOURCE = r"""
template <typename T>
__device__ void fma_chains(const T* seed, T* out, int iters) {
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    T a = seed[0], b = seed[1];
    T x0 = (T)t, x1 = x0 + 1, x2 = x0 + 2, x3 = x0 + 3, x4 = x0 + 4, x5 = x0 + 5,
      x6 = x0 + 6, x7 = x0 + 7;
    for (int i = 0; i < iters; ++i) {
        x0 = x0 * a + b; x1 = x1 * a + b; x2 = x2 * a + b; x3 = x3 * a + b;
        x4 = x4 * a + b; x5 = x5 * a + b; x6 = x6 * a + b; x7 = x7 * a + b;
    }
    T s = x0 + x1 + x2 + x3 + x4 + x5 + x6 + x7;
    if (s == (T)12345.678) out[t] = s;  // never true; keeps the chains alive
}
extern "C" __global__ void fma32(const float* seed, float* out, int iters) {
    fma_chains<float>(seed, out, iters);
}
extern "C" __global__ void fma64(const double* seed, double* out, int iters) {
    fma_chains<double>(seed, out, iters);
}
"""


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one environment.

    Attributes:
        copy_bytes_per_s: device-to-device copy bandwidth, bytes read + written per second.
        matmul_flops_per_s: best of the float16/float32 matrix products, FLOP per second.
        matmul_fp16_flops_per_s, matmul_fp32_flops_per_s: each (FLOP/s).
        environment_identity: the environment they were measured in.
        method: how (for the record).
        unit_flops_per_s: FLOP ceiling per unit of :data:`FLOP_UNITS` measured here (FLOP/s);
            a unit the device or its libraries lack is absent.
        version: :data:`CEILINGS_VERSION` when measured (1: before per-unit ceilings).
    """

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    matmul_fp16_flops_per_s: float
    matmul_fp32_flops_per_s: float
    environment_identity: str
    method: str = "cupy.copyto 1 GiB; cupy.matmul 8192^3 fp16/fp32; median of CUDA-event times"
    unit_flops_per_s: dict[str, float] = field(default_factory=dict)
    version: int = 1

    def flops_ceiling(self, unit: str | None) -> tuple[str, float]:
        """The FLOP ceiling a rate in ``unit`` is checked against: ``(unit checked, FLOP/s)``.
        None, or a unit not measured here: the fastest unit measured (``"any"``), so an
        undeclared problem is never refused wrongly."""
        if unit is not None and unit in self.unit_flops_per_s:
            return unit, self.unit_flops_per_s[unit]
        best = max([self.matmul_flops_per_s, *self.unit_flops_per_s.values()])
        return "any", best

    def to_json(self) -> dict[str, Any]:
        """JSON builtins."""
        return asdict(self)


def _median_time_s(call: Any, repeats: int) -> float:
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _best_time_s(call: Any, repeats: int) -> float:
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    call()
    best = math.inf
    for _ in range(repeats):
        start.record()
        call()
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return best


def _cuda_core_rates() -> dict[str, float]:
    """CUDA-core FMA rates (FLOP/s, an FMA = 2 FLOP), the best of several launches: a ceiling is
    the most the unit was seen to do."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    blocks, threads = int(props["multiProcessorCount"]) * 16, 256
    module = cupy.RawModule(code=FMA_SOURCE, options=("-std=c++17",))
    rates = {}
    for unit, entry, dtype, iters in (
        ("cuda_fp32", "fma32", cupy.float32, 8192),
        ("cuda_fp64", "fma64", cupy.float64, 2048),
    ):
        kernel = module.get_function(entry)
        seed = cupy.asarray([0.999, 0.001], dtype=dtype)
        out = cupy.empty(blocks * threads, dtype=dtype)
        launch = lambda k=kernel, s=seed, o=out, it=iters: k(  # noqa: E731
            (blocks,), (threads,), (s, o, np.int32(it))
        )
        rates[unit] = 2.0 * 8 * iters * blocks * threads / _best_time_s(launch, 10)
    return rates


def _torch_tensor_rates() -> dict[str, float]:
    """Tensor-core bf16, tf32 and fp8 matrix-product rates through PyTorch (FLOP/s); empty
    without PyTorch, each unit absent where it fails (no fp8 on the device, ...)."""
    try:
        import torch  # noqa: PLC0415 (torch: optional, torch subjects only)
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    n = MATMUL_N
    rates: dict[str, float] = {}
    a32 = torch.randn(n, n, device="cuda")
    b32 = torch.randn(n, n, device="cuda")
    flop = 2.0 * n**3

    def timed(call: Any) -> float:
        for _ in range(3):
            call()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = math.inf
        for _ in range(10):
            start.record()
            call()
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) / 1e3)
        return best

    a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
    rates["tensor_bf16"] = flop / timed(lambda: torch.matmul(a16, b16))
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
        rates["tensor_tf32"] = flop / timed(lambda: torch.matmul(a32, b32))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    try:
        a8 = a32.to(torch.float8_e4m3fn)
        b8 = b32.to(torch.float8_e4m3fn).t().contiguous().t()  # column-major, as cuBLASLt wants
        one = torch.ones((), device="cuda")
        rates["tensor_fp8"] = flop / timed(
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        )
    except Exception:  # no fp8 tensor cores or no such operation in this PyTorch
        pass
    return rates


def measure_ceilings(environment_identity: str) -> Ceilings:
    """Measure the ceilings on the current CUDA device (a few seconds, ~2.5 GiB of memory).

    Raises: MeasurementError when CuPy or a GPU is missing.
    """
    try:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
    except ImportError as exc:
        raise MeasurementError(f"ceilings need CuPy and a GPU: {exc}") from None
    src = cupy.ones(COPY_BYTES // 4, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    copy_s = _median_time_s(lambda src=src, dst=dst: cupy.copyto(dst, src), 20)
    del src, dst
    rates = {}
    for dtype in (cupy.float16, cupy.float32):
        a = cupy.random.standard_normal((MATMUL_N, MATMUL_N), dtype=cupy.float32).astype(dtype)
        b = cupy.random.standard_normal((MATMUL_N, MATMUL_N), dtype=cupy.float32).astype(dtype)
        out = cupy.empty_like(a)
        mm_s = _median_time_s(lambda a=a, b=b, out=out: cupy.matmul(a, b, out=out), 10)
        rates[cupy.dtype(dtype).name] = 2.0 * MATMUL_N**3 / mm_s
        del a, b, out
    cupy.get_default_memory_pool().free_all_blocks()
    units = {"tensor_fp16": rates["float16"], **_cuda_core_rates(), **_torch_tensor_rates()}
    return Ceilings(
        copy_bytes_per_s=2.0 * COPY_BYTES / copy_s,
        matmul_flops_per_s=max(rates.values()),
        matmul_fp16_flops_per_s=rates["float16"],
        matmul_fp32_flops_per_s=rates["float32"],
        environment_identity=environment_identity,
        method=(
            "cupy.copyto 1 GiB; cupy.matmul 8192^3 fp16/fp32 (median of CUDA-event times); "
            "CUDA-core FMA kernel fp32/fp64 and torch bf16/tf32/fp8 matmul 8192^3 (best of 10)"
        ),
        unit_flops_per_s=units,
        version=CEILINGS_VERSION,
    )


def cache_dir() -> Path:
    """Where ceilings are cached: ``$PERFLEDGER_CACHE/ceilings`` or ``~/.cache/perfledger/...``."""
    root = os.environ.get("PERFLEDGER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "perfledger"
    )
    return Path(root) / "ceilings"


def load_or_measure(environment_identity: str, *, remeasure: bool = False) -> Ceilings:
    """The cached ceilings of ``environment_identity``, measured (and cached) when absent."""
    path = cache_dir() / f"{environment_identity}.json"
    if not remeasure and path.exists():
        try:
            data = json.loads(path.read_text())
            fresh = data.get("version", 1) >= CEILINGS_VERSION
            if fresh and data.get("environment_identity") == environment_identity:
                return Ceilings(**data)
        except (ValueError, TypeError, OSError):
            pass  # a damaged cache is re-measured
    ceilings = measure_ceilings(environment_identity)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(ceilings.to_json(), sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass  # the cache only saves time
    return ceilings


def check_plausible(
    *,
    median_s: float,
    bytes_per_call: int | None,
    flops_per_call: int | None,
    ceilings: Ceilings | None,
    margin: float = DEFAULT_MARGIN,
    label: str = "subject",
    flops_unit: str | None = None,
) -> dict[str, float | None]:
    """Turn declared bytes/FLOPs per call into achieved bandwidth and rate and check them against
    the ceilings.

    Args:
        median_s: the subject's median time per call (seconds, > 0).
        bytes_per_call, flops_per_call: declared by the subject (None = not declared).
        ceilings: the environment's ceilings (None = unchecked).
        margin: allowed excess over a ceiling (ratio).
        label: the subject's name, for the error message.
        flops_unit: the unit the problem declares its FLOPs in (:data:`FLOP_UNITS`); the rate is
            checked against that unit's ceiling (None: the fastest unit measured).
    Returns: ``{"bytes_per_s": ..., "flops_per_s": ..., "bandwidth_share": ..., "flops_share": ...,
        "flops_ceiling": ...}`` (None where not declared; shares are fractions of the ceiling,
        ``flops_ceiling`` the FLOP/s checked against).
    Raises: MeasurementError when an achieved figure is above its ceiling x (1 + margin).
    """
    out: dict[str, float | None] = {
        "bytes_per_s": None,
        "flops_per_s": None,
        "bandwidth_share": None,
        "flops_share": None,
        "flops_ceiling": None,
    }
    if bytes_per_call:
        bw = bytes_per_call / median_s
        out["bytes_per_s"] = bw
        if ceilings is not None:
            out["bandwidth_share"] = bw / ceilings.copy_bytes_per_s
            if bw > ceilings.copy_bytes_per_s * (1.0 + margin):
                raise MeasurementError(
                    f"{label}: achieved {bw / 1e12:.2f} TB/s is above the device's measured copy "
                    f"ceiling {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s: a measurement error "
                    "(work not timed, outputs not written, or wrong bytes declared)",
                    hint="check the declared bytes_per_call and that the kernel does its work",
                )
    if flops_per_call:
        rate = flops_per_call / median_s
        out["flops_per_s"] = rate
        if ceilings is not None:
            unit, ceiling = ceilings.flops_ceiling(flops_unit)
            out["flops_share"] = rate / ceiling
            out["flops_ceiling"] = ceiling
            if rate > ceiling * (1.0 + margin):
                which = "fastest unit's" if unit == "any" else f"{unit}"
                raise MeasurementError(
                    f"{label}: achieved {rate / 1e12:.1f} TFLOP/s is above the device's measured "
                    f"{which} ceiling {ceiling / 1e12:.1f} TFLOP/s: a measurement error (work "
                    "not timed or not done, or wrong FLOPs or unit declared)",
                    hint="check the declared flops_per_call and flops_unit, and that the kernel "
                    "does its work",
                )
    return out


__all__ = [
    "CEILINGS_VERSION",
    "DEFAULT_MARGIN",
    "FLOP_UNITS",
    "FMA_SOURCE",
    "REVIEW_SPEEDUP",
    "Ceilings",
    "cache_dir",
    "check_plausible",
    "load_or_measure",
    "measure_ceilings",
]
