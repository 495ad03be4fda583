"""Correctness checks of the harness (SPEC.md section 5, "Correctness before timing"): tolerance
by the reference's dtype, relative L2 error against a float64 reference, NaN never passes, input
hashing and output poisoning.

The tolerance never follows the output being judged: an output must have the dtype and shape
the reference's side declares (``dtype``), and its tolerance is that dtype's (or the Target's
accuracy rule, :func:`compare`'s ``rule``). A subject that returned float16 where the reference
returns float32 would otherwise be held to float16's tolerance, loosening its own check
(issue 36, hole 5).

Works on NumPy and CuPy arrays alike (``cupy.get_array_module``); nothing here needs a GPU when
given NumPy arrays, so it is unit-tested on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np

#: Relative-L2 tolerances by dtype name (SPEC.md section 5). Integers and bools must match exactly.
TOLERANCES = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "complex64": 1e-4,
    "complex128": 1e-10,
}


def tolerance_for(dtype: Any) -> float:
    """Relative L2 tolerance of ``dtype`` (0.0 = exact for integer/bool dtypes).

    Raises: ValueError for a dtype without a defined tolerance (e.g. a float8 type).
    """
    name = np.dtype(dtype).name if not hasattr(dtype, "name") else dtype.name
    if name in TOLERANCES:
        return TOLERANCES[name]
    kind = np.dtype(dtype).kind
    if kind in "iub":
        return 0.0
    raise ValueError(f"no tolerance defined for dtype {name!r}; pass one explicitly")


def _xp(array: Any) -> Any:
    try:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        return cupy.get_array_module(array)
    except ImportError:
        return np


@dataclass(frozen=True)
class Check:
    """The result of comparing one output with its reference.

    Attributes:
        ok: True when it passes.
        rel_l2_error: ``||out - ref|| / ||ref||`` in float64 (absolute when ``||ref|| == 0``);
            None when it could not be computed (shape mismatch, non-finite output).
        tolerance: the tolerance applied.
        reason: why it failed (``shape``, ``dtype``, ``non_finite``, ``tolerance``) or None.
        non_finite: count of NaN/Inf output elements where the reference is finite.
        detail: what was found against what was expected (``dtype float16, the reference's
            float32``), for people; None when it passed.
    """

    ok: bool
    rel_l2_error: float | None
    tolerance: float
    reason: str | None
    non_finite: int = 0
    detail: str | None = None


#: CUDA source of the one-pass check of a float32 output against a float64 reference: the count
#: of non-finite outputs where the reference is finite, sum (out - ref)^2 and sum ref^2, in
#: float64 (per-warp partial sums added atomically). The squares of float32 values cannot
#: overflow float64, so the sums are the norms' squares exactly as far as rounding goes.
FUSED_CHECK_SOURCE = r"""
extern "C" __global__ void check_f32(const float* __restrict__ out,
                                     const double* __restrict__ ref, long long n, double* acc) {
    double bad = 0.0, d2 = 0.0, r2 = 0.0;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double o = (double)out[i];
        double r = ref[i];
        if (!isfinite(o) && isfinite(r)) bad += 1.0;
        double d = o - r;
        d2 += d * d;
        r2 += r * r;
    }
    for (int off = 16; off > 0; off >>= 1) {
        bad += __shfl_down_sync(0xffffffffu, bad, off);
        d2 += __shfl_down_sync(0xffffffffu, d2, off);
        r2 += __shfl_down_sync(0xffffffffu, r2, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(acc, bad);
        atomicAdd(acc + 1, d2);
        atomicAdd(acc + 2, r2);
    }
}
"""
_fused_kernel: Any = None


def _fused_check(output: Any, reference: Any, tol: float) -> Check:
    """:func:`compare` of a float32 CuPy output in one pass over the data (the general path
    makes several float64 temporaries: it cost milliseconds per re-check of a large output)."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    global _fused_kernel
    if _fused_kernel is None:
        _fused_kernel = cupy.RawKernel(FUSED_CHECK_SOURCE, "check_f32")
    out = cupy.ascontiguousarray(output)
    ref = cupy.ascontiguousarray(cupy.asarray(reference).astype(cupy.float64, copy=False))
    acc = cupy.zeros(3, dtype=cupy.float64)
    n = out.size
    blocks = max(1, min((n + 255) // 256, 132 * 8))
    _fused_kernel((blocks,), (256,), (out, ref, np.int64(n), acc))
    bad, d2, r2 = (float(v) for v in acc.get())
    if bad:
        return Check(False, None, tol, "non_finite", int(bad))
    err = math.sqrt(d2) / math.sqrt(r2) if r2 > 0 else math.sqrt(d2)
    if not math.isfinite(err):
        return Check(False, None, tol, "non_finite")
    return Check(err <= tol, err, tol, None if err <= tol else "tolerance")


#: The element-wise comparisons of a Target's accuracy rule (:class:`perfledger.events.workflow.
#: Accuracy`; ``self_reported`` compares nothing, so it is no rule here).
RULES = ("exact", "allclose")


def _dtype_name(dtype: Any) -> str:
    return dtype.name if hasattr(dtype, "name") else np.dtype(dtype).name


def compare(
    output: Any,
    reference: Any,
    *,
    tolerance: float | None = None,
    dtype: Any = None,
    rule: Mapping[str, Any] | None = None,
) -> Check:
    """Compare ``output`` with ``reference`` (NumPy or CuPy arrays).

    The output must have the reference's shape and the dtype ``dtype`` (default: the
    reference's own; pass the declared output dtype where the reference is a float64 exact
    answer): anything else fails (``shape``, ``dtype``, with :attr:`Check.detail`), whatever its
    values. The tolerance is never the output's: ``tolerance`` (a relative L2 bound) or
    :func:`tolerance_for` of ``dtype``. With ``rule`` (a Target's accuracy rule:
    ``{"compare": "exact"}`` or ``{"compare": "allclose", "rtol", "atol"}``) the values are
    compared element-wise instead: equal, or ``|out - ref| <= atol + rtol * |ref|``.

    NaN never passes: a non-finite output element where the reference is finite fails, and so
    does a NaN error; under ``rule`` NaN equals nothing. The error is computed in float64 (a
    float32 CuPy output in one fused pass).

    Raises: ValueError for a ``rule`` that compares nothing (not ``exact`` or ``allclose``) or a
    dtype without a defined tolerance.
    """
    xp = _xp(output)
    want = np.dtype(reference.dtype if dtype is None else dtype)
    if rule is not None and rule.get("compare") not in RULES:
        raise ValueError(f"an accuracy rule compares by one of {RULES}, not {rule!r}")
    tol = tolerance_for(want) if tolerance is None else tolerance
    if tuple(output.shape) != tuple(reference.shape):
        detail = f"shape {tuple(output.shape)}, the reference's {tuple(reference.shape)}"
        return Check(False, None, tol, "shape", detail=detail)
    if np.dtype(output.dtype) != want:  # the dtype's name and byte order: '>f4' is not '<f4'
        detail = f"dtype {np.dtype(output.dtype).str} ({_dtype_name(output.dtype)}), "
        detail += f"the reference's {want.str} ({want.name})"
        return Check(False, None, tol, "dtype", detail=detail)
    if rule is not None:
        return _by_rule(xp, output, reference, rule, tol)
    if xp is not np and output.dtype == np.float32 and reference.dtype.kind == "f" and tol > 0:
        return _fused_check(output, reference, tol)
    out = output.astype(xp.float64) if output.dtype.kind != "c" else output.astype(xp.complex128)
    ref = xp.asarray(reference)
    ref = ref.astype(xp.float64) if ref.dtype.kind != "c" else ref.astype(xp.complex128)
    bad = int(xp.count_nonzero(~xp.isfinite(out) & xp.isfinite(ref)))
    if bad:
        return Check(False, None, tol, "non_finite", bad)
    norm = float(xp.linalg.norm(ref.ravel()))
    diff = float(xp.linalg.norm((out - ref).ravel()))
    err = diff / norm if norm > 0 else diff
    if not np.isfinite(err):
        return Check(False, None, tol, "non_finite")
    if tol == 0.0:
        ok = bool(xp.array_equal(out, ref))
        return Check(ok, err, tol, None if ok else "tolerance")
    return Check(err <= tol, err, tol, None if err <= tol else "tolerance")


def _by_rule(xp: Any, output: Any, reference: Any, rule: Mapping[str, Any], tol: float) -> Check:
    """:func:`compare` by a Target's accuracy rule, element-wise (NaN equals nothing)."""
    ref = xp.asarray(reference)
    if rule["compare"] == "exact":
        same = output == ref  # NaN == NaN is False: never equal
    else:
        rtol, atol = float(rule.get("rtol", 0.0)), float(rule.get("atol", 0.0))
        same = xp.isclose(output, ref, rtol=rtol, atol=atol, equal_nan=False)
    differ = int(output.size - xp.count_nonzero(same))
    if differ == 0:
        return Check(True, 0.0, tol, None)
    what = "exactly" if rule["compare"] == "exact" else f"within rtol={rtol:g}, atol={atol:g}"
    detail = f"{differ} of {output.size} elements differ from the reference's {what}"
    return Check(False, None, tol, "tolerance", detail=detail)


def poison(array: Any) -> None:
    """Fill ``array`` in place with a value no correct kernel produces by accident: NaN for
    floating types, the dtype's maximum for integers, True for bools."""
    xp = _xp(array)
    kind = array.dtype.kind
    if kind in "fc":
        array.fill(xp.nan)
    elif kind in "iu":
        array.fill(np.iinfo(array.dtype).max)
    elif kind == "b":
        array.fill(True)
    else:
        raise ValueError(f"cannot poison dtype {array.dtype}")


def array_hash(array: Any) -> str:
    """blake3 hex of an array's dtype, shape and bytes (copied to the host when on a GPU)."""
    host = array.get() if hasattr(array, "get") else np.asarray(array)
    h = blake3.blake3(f"{host.dtype.str}{host.shape}".encode())
    h.update(np.ascontiguousarray(host).tobytes())
    return h.hexdigest()


__all__ = ["RULES", "TOLERANCES", "Check", "array_hash", "compare", "poison", "tolerance_for"]
