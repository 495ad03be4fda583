"""A subject that keeps its own constant table in L2 through the harness's flush (issue 36,
hole 4): it sets a persisting L2 carve-out (``cuCtxSetLimit``) and a stream access-policy window
over the table (``cuStreamSetAttribute``, ``hitProp`` persisting), both through the driver
library, as a kernel library that pins its weights in L2 would. The flush writes a buffer, which
evicts normal lines only. Imported by the GPU tests and by the specs they write."""

from __future__ import annotations

import ctypes
from typing import Any

from perfledger.kernels.harness.examples import uniform
from perfledger.kernels.harness.harness import CallableSubject, Problem

#: ``cuda.h``: ``CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW``, ``CU_LIMIT_PERSISTING_L2_CACHE_SIZE``
#: and the ``CUaccessProperty`` values.
STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
ACCESS_PROPERTY_STREAMING, ACCESS_PROPERTY_PERSISTING = 1, 2
TABLE_SEED = 12345


class _Window(ctypes.Structure):
    """``CUaccessPolicyWindow``."""

    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class _AttrValue(ctypes.Union):
    """``CUstreamAttrValue`` (``CUlaunchAttributeValue``: 64 bytes)."""

    _fields_ = [("window", _Window), ("pad", ctypes.c_char * 64)]


def persist(ptr: int, nbytes: int, stream_ptr: int) -> None:
    """Set a carve-out of ``nbytes`` and a persisting window over ``[ptr, ptr + nbytes)`` on the
    stream ``stream_ptr``. Raises: RuntimeError with the driver's code."""
    lib = ctypes.CDLL("libcuda.so.1")
    code = lib.cuCtxSetLimit(ctypes.c_int(LIMIT_PERSISTING_L2_CACHE_SIZE), ctypes.c_size_t(nbytes))
    if code != 0:
        raise RuntimeError(f"cuCtxSetLimit: CUresult {code}")
    value = _AttrValue()
    value.window = _Window(ptr, nbytes, 1.0, ACCESS_PROPERTY_PERSISTING, ACCESS_PROPERTY_STREAMING)
    code = lib.cuStreamSetAttribute(
        ctypes.c_void_p(stream_ptr), ctypes.c_int(STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW),
        ctypes.byref(value),
    )  # fmt: skip
    if code != 0:
        raise RuntimeError(f"cuStreamSetAttribute: CUresult {code}")


def table_problem(n: int) -> Problem:
    """``y = x * T`` over ``n`` float32 elements, ``T`` a fixed table (the subject's own data,
    like weights; 12 n bytes a call)."""
    table = uniform(n, TABLE_SEED)

    def make_inputs(seed: int) -> dict[str, Any]:
        return {"x": uniform(n, seed)}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        return {"y": inputs["x"] * table.astype("float64")}

    return Problem(
        name=f"table-{n}",
        make_inputs=make_inputs,
        reference=reference,
        outputs={"y": ((n,), "float32")},
        bytes_per_call=12 * n,
    )


def table_subject(n: int, persisting: bool, name: str | None = None) -> CallableSubject:
    """``y = x * T``; with ``persisting`` it sets the carve-out and the window over its table at
    its first call (once: both outlive the call)."""
    import cupy

    table = uniform(n, TABLE_SEED)
    state = {"set": False}

    def call(inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if persisting and not state["set"]:
            persist(table.data.ptr, table.nbytes, cupy.cuda.get_current_stream().ptr)
            state["set"] = True
        cupy.multiply(inputs["x"], table, out=outputs["y"])

    return CallableSubject(name or ("table+persisting" if persisting else "table"), call)
