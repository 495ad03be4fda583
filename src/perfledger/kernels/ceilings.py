"""Device ceilings and the plausibility check (SPEC.md section 5, "Plausibility").

The ceilings are measured once per environment (keyed by :meth:`Environment.identity`) and cached
as JSON under ``$PERFLEDGER_CACHE`` (default ``~/.cache/perfledger``): the device-to-device copy
bandwidth (``cupy.copyto`` of 1 GiB, bytes read + written per second) and the rate of a large
matrix product (``cupy.matmul`` of 8192 x 8192 float16 and float32 matrices on random data,
2 n^3 FLOP per product). A measurement whose achieved bandwidth or FLOP rate exceeds its ceiling
by more than ``margin`` is a measurement error, refused; a speedup above 10x is flagged for
review.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class Ceilings:
    """Measured ceilings of one environment.

    Attributes:
        copy_bytes_per_s: device-to-device copy bandwidth, bytes read + written per second.
        matmul_flops_per_s: best of the float16/float32 matrix products, FLOP per second.
        matmul_fp16_flops_per_s, matmul_fp32_flops_per_s: each (FLOP/s).
        environment_identity: the environment they were measured in.
        method: how (for the record).
    """

    copy_bytes_per_s: float
    matmul_flops_per_s: float
    matmul_fp16_flops_per_s: float
    matmul_fp32_flops_per_s: float
    environment_identity: str
    method: str = "cupy.copyto 1 GiB; cupy.matmul 8192^3 fp16/fp32; median of CUDA-event times"

    def to_json(self) -> dict[str, Any]:
        """JSON builtins."""
        return asdict(self)


def _median_time_s(call: Any, repeats: int) -> float:
    import cupy

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


def measure_ceilings(environment_identity: str) -> Ceilings:
    """Measure the ceilings on the current CUDA device (a few seconds, ~2.5 GiB of memory).

    Raises: MeasurementError when CuPy or a GPU is missing.
    """
    try:
        import cupy
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
    return Ceilings(
        copy_bytes_per_s=2.0 * COPY_BYTES / copy_s,
        matmul_flops_per_s=max(rates.values()),
        matmul_fp16_flops_per_s=rates["float16"],
        matmul_fp32_flops_per_s=rates["float32"],
        environment_identity=environment_identity,
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
            if data.get("environment_identity") == environment_identity:
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
) -> dict[str, float | None]:
    """Turn declared bytes/FLOPs per call into achieved bandwidth and rate and check them against
    the ceilings.

    Args:
        median_s: the subject's median time per call (seconds, > 0).
        bytes_per_call, flops_per_call: declared by the subject (None = not declared).
        ceilings: the environment's ceilings (None = unchecked).
        margin: allowed excess over a ceiling (ratio).
        label: the subject's name, for the error message.
    Returns: ``{"bytes_per_s": ..., "flops_per_s": ..., "bandwidth_share": ..., "flops_share": ...}``
        (None where not declared; shares are fractions of the ceiling).
    Raises: MeasurementError when an achieved figure is above its ceiling x (1 + margin).
    """
    out: dict[str, float | None] = {
        "bytes_per_s": None,
        "flops_per_s": None,
        "bandwidth_share": None,
        "flops_share": None,
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
            out["flops_share"] = rate / ceilings.matmul_flops_per_s
            if rate > ceilings.matmul_flops_per_s * (1.0 + margin):
                raise MeasurementError(
                    f"{label}: achieved {rate / 1e12:.1f} TFLOP/s is above the device's measured "
                    f"matrix-product ceiling {ceilings.matmul_flops_per_s / 1e12:.1f} TFLOP/s",
                    hint="check the declared flops_per_call and that the kernel does its work",
                )
    return out


__all__ = [
    "DEFAULT_MARGIN",
    "REVIEW_SPEEDUP",
    "Ceilings",
    "cache_dir",
    "check_plausible",
    "load_or_measure",
    "measure_ceilings",
]
