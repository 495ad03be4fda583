"""Reference of the CPU stand-in: a numerically stable row softmax in float64 (NumPy).

``make_inputs(rng, dims)`` draws the input the subject script feeds every kernel;
``reference(x)`` is the expected output.
"""

from __future__ import annotations

import numpy as np


def make_inputs(rng: np.random.Generator, dims: dict[str, int]) -> np.ndarray:
    """An ``M x N`` float64 matrix with values in [-4, 4)."""
    return rng.uniform(-4.0, 4.0, size=(dims["M"], dims["N"]))


def reference(x: np.ndarray) -> np.ndarray:
    """Row softmax of ``x`` (float64)."""
    shifted = x - x.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=1, keepdims=True)
