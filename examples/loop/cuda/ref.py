"""Reference of the CUDA example: the transpose of an M x N float32 matrix (CuPy or NumPy).

The loop's CUDA harness contract: ``make_inputs(rng, dims)`` (host NumPy arrays from the
harness's hidden-seed generator), ``outputs(dims)`` (``{name: (shape, dtype)}``),
``reference(inputs, dims)`` (expected outputs; CuPy arrays on the GPU) and, for bandwidth
plausibility, ``bytes_per_call(dims)``. Kernel parameters bind by name: ``x`` (input), ``y``
(output), ``M``/``N`` (dims).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def make_inputs(rng: np.random.Generator, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """One input ``x``: standard normal float32, ``M x N``."""
    return {"x": rng.standard_normal((dims["M"], dims["N"]), dtype=np.float32)}


def outputs(dims: dict[str, int]) -> dict[str, tuple[tuple[int, ...], str]]:
    """One output ``y``: ``N x M`` float32."""
    return {"y": ((dims["N"], dims["M"]), "float32")}


def reference(inputs: dict[str, Any], dims: dict[str, int]) -> dict[str, Any]:
    """``y = x.T`` as a C-contiguous array (same array library as the input)."""
    return {"y": inputs["x"].T.copy()}


def bytes_per_call(dims: dict[str, int]) -> int:
    """Bytes read and written by one transpose."""
    return 2 * 4 * dims["M"] * dims["N"]
