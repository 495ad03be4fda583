"""Correctness checks of the harness (SPEC.md section 5, "Correctness before timing"): tolerance
by dtype, relative L2 error against a float64 reference, NaN never passes, input hashing and
output poisoning.

Works on NumPy and CuPy arrays alike (``cupy.get_array_module``); nothing here needs a GPU when
given NumPy arrays, so it is unit-tested on the CPU.
"""

from __future__ import annotations

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
        import cupy

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
        reason: why it failed (``shape``, ``non_finite``, ``tolerance``) or None.
        non_finite: count of NaN/Inf output elements where the reference is finite.
    """

    ok: bool
    rel_l2_error: float | None
    tolerance: float
    reason: str | None
    non_finite: int = 0


def compare(output: Any, reference: Any, *, tolerance: float | None = None) -> Check:
    """Compare ``output`` with ``reference`` (same shape; NumPy or CuPy).

    NaN never passes: a non-finite output element where the reference is finite fails, and so does
    a NaN error. The error is computed in float64.
    """
    xp = _xp(output)
    tol = tolerance_for(output.dtype) if tolerance is None else tolerance
    if tuple(output.shape) != tuple(reference.shape):
        return Check(False, None, tol, "shape")
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


__all__ = ["TOLERANCES", "Check", "array_hash", "compare", "poison", "tolerance_for"]
