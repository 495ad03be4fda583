"""The GPU test modules' skip: CuPy and at least one CUDA device, else the whole module skips
with the reason (imported at the top of each ``*_gpu.py`` module of this folder)."""

from __future__ import annotations

from typing import Any

import pytest


def require_cuda_device() -> Any:
    """Return the ``cupy`` module when CuPy imports and sees a CUDA device; otherwise skip the
    calling module (``pytest.skip(..., allow_module_level=True)``) saying which is missing."""
    cupy = pytest.importorskip("cupy", reason="the kernel harness needs CuPy")
    try:
        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # no driver
        pytest.skip(f"no usable CUDA device: {exc}", allow_module_level=True)
    if gpus < 1:
        pytest.skip("no CUDA device", allow_module_level=True)
    return cupy
