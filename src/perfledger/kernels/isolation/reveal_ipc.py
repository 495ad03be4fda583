"""Revealed outputs through CUDA IPC memory (SPEC.md section 5, property 3): the worker copies a
call's outputs into one device buffer it exported at ``hello``; the measuring process maps that
buffer, copies it into memory of its own, and checks the digest and the cross-check on the
device. No copy to the host and back: revealing a 64 MiB output costs a device copy, not a trip
through a file.

Why this is safe against a worker that lies: the measuring process hashes the bytes it copied
(with its own :mod:`~perfledger.kernels.cuda.gpu_digest`, self-tested in this process) and compares
that digest with the one the worker committed before the call was drawn. A worker whose GPU
work still writes the buffer while it is read, or which exported a handle to other memory, can
only make the copied bytes differ from its commitment (flagged ``digest:``), never make
committed wrong bytes pass: that would need a BLAKE3 collision. A handle to an allocation
smaller than the outputs is refused before anything is read (``cuMemGetAddressRange``).

Where any step is unavailable (no CuPy or no device in the measuring process, IPC refused by the
driver), :mod:`perfledger.kernels.isolation.isolated` falls back to reveals through files.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from perfledger.kernels.cuda.gpu_digest import device_digest, self_test
from perfledger.kernels.isolation.subject_protocol import KEY_BYTES, combine_digests

#: Outputs in a reveal buffer: name -> (byte offset, shape, dtype), in sorted name order.
Layout = dict[str, tuple[int, tuple[int, ...], np.dtype]]


def layout(outputs: Mapping[str, tuple[Any, Any]]) -> tuple[Layout, int]:
    """The outputs' places in a reveal buffer (sorted by name, each 256-byte aligned) and the
    buffer's size in bytes.

    Args:
        outputs: name -> (shape, dtype).
    """
    out: Layout = {}
    offset = 0
    for name in sorted(outputs):
        shape, dtype = outputs[name]
        dt = np.dtype(dtype)
        out[name] = (offset, tuple(int(n) for n in shape), dt)
        nbytes = dt.itemsize * math.prod(int(n) for n in shape)
        offset += -(-nbytes // 256) * 256  # aligned, so each output can be digested as words
    return out, max(offset, 256)


def _device_bytes(ptr: int, nbytes: int, owner: Any) -> Any:
    """A CuPy ``uint8`` array over ``nbytes`` of device memory at ``ptr`` (not owned)."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    memory = cupy.cuda.UnownedMemory(ptr, nbytes, owner)
    return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(memory, 0))


class ExportedBuffer:
    """The worker's side: one device buffer for every reveal, exported for IPC.

    Args:
        outputs: name -> (shape, dtype) of the problem's outputs.
    Raises: whatever CuPy raises when the allocation or the export fails (the worker then
    offers no IPC, and reveals go through files).
    """

    def __init__(self, outputs: Mapping[str, tuple[Any, Any]]) -> None:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        self.layout, self.nbytes = layout(outputs)
        # its own allocation (not the pool's), so the handle maps exactly this buffer
        self.ptr = int(cupy.cuda.runtime.malloc(self.nbytes))
        try:
            self.handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(self.ptr))
        except Exception:
            # no export: the worker reveals through files, without this buffer for its life
            cupy.cuda.runtime.free(self.ptr)
            raise
        self.buffer = _device_bytes(self.ptr, self.nbytes, self)

    def offer(self) -> dict[str, Any]:
        """What ``hello`` tells the measuring process: the handle (hex) and the size."""
        return {"handle": self.handle.hex(), "bytes": self.nbytes}

    def fill(self, arrays: Mapping[str, Any]) -> None:
        """Copy one call's outputs (name -> CuPy array) into the buffer and wait for the copy."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        for name, (offset, _shape, _dtype) in self.layout.items():
            src = cupy.ascontiguousarray(arrays[name]).reshape(-1).view(cupy.uint8)
            self.buffer[offset : offset + src.size] = src
        cupy.cuda.runtime.deviceSynchronize()


def _allocation(ptr: int) -> tuple[int, int] | None:
    """``(base, size)`` of the device allocation holding ``ptr`` (the driver's
    ``cuMemGetAddressRange``), or None where the driver library cannot be asked."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemGetAddressRange_v2
    except (OSError, AttributeError):
        return None
    base, size = ctypes.c_uint64(0), ctypes.c_size_t(0)
    if fn(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) != 0:
        return None
    return int(base.value), int(size.value)


class MappedBuffer:
    """The measuring process's side: a worker's exported buffer, mapped.

    Args:
        offer: the worker's ``hello`` ``reveal_ipc`` entry.
        outputs: name -> (shape, dtype) as the measuring process knows them.
    Raises: ValueError when the offer is malformed, its size is not the outputs' layout, or the
    mapped allocation is smaller than that (the caller falls back to files); CuPy's errors
    when the mapping fails.
    """

    def __init__(self, offer: Mapping[str, Any], outputs: Mapping[str, tuple[Any, Any]]) -> None:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        self.layout, self.nbytes = layout(outputs)
        if int(offer.get("bytes", -1)) != self.nbytes:
            raise ValueError(
                f"the reveal buffer holds {offer.get('bytes')} bytes, not {self.nbytes}"
            )
        handle = bytes.fromhex(str(offer["handle"]))
        self.ptr = int(
            cupy.cuda.runtime.ipcOpenMemHandle(
                handle, cupy.cuda.runtime.cudaIpcMemLazyEnablePeerAccess
            )
        )
        found = _allocation(self.ptr)
        if found is None or found[0] != self.ptr or found[1] < self.nbytes:
            self.close()
            raise ValueError(
                f"the mapped reveal buffer is not one allocation of {self.nbytes} bytes"
            )
        self.buffer = _device_bytes(self.ptr, self.nbytes, self)

    def read(self) -> dict[str, Any]:
        """A copy, in this process's own device memory, of the outputs now in the buffer
        (name -> CuPy array of the output's shape and dtype)."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        own = self.buffer.copy()
        cupy.cuda.runtime.deviceSynchronize()
        out = {}
        for name, (offset, shape, dtype) in self.layout.items():
            nbytes = dtype.itemsize * math.prod(shape)
            out[name] = own[offset : offset + nbytes].view(dtype).reshape(shape)
        return out

    def close(self) -> None:
        """Unmap the buffer (once)."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            # already gone with a failed context: nothing left to release
            with contextlib.suppress(Exception):
                cupy.cuda.runtime.ipcCloseMemHandle(ptr)


def device_output_digest(arrays: Mapping[str, Any], key: bytes) -> str:
    """:func:`perfledger.kernels.isolation.subject_protocol.output_digest` of device arrays, computed on
    the device (the same digest). Raises: ValueError for a key of another length."""

    if len(key) != KEY_BYTES:
        raise ValueError(f"the digest key must be {KEY_BYTES} bytes")
    parts = [(name, a.dtype.str, a.shape, device_digest(a, key)) for name, a in arrays.items()]
    return combine_digests(parts, key)


@functools.cache
def parent_ready() -> bool:
    """Whether this (the measuring) process can check reveals on the device: CuPy works and its
    device BLAKE3 equals the ``blake3`` package (tested once per process: ``measure aa`` runs
    several comparisons)."""
    try:
        return bool(self_test())
    except Exception:  # no CuPy, no device, no compiler: reveals go through files
        return False


__all__ = [
    "ExportedBuffer",
    "Layout",
    "MappedBuffer",
    "device_output_digest",
    "layout",
    "parent_ready",
]
