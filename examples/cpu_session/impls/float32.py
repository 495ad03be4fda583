"""Candidate e3: the vectorized softmax computed in float32 (half the bytes moved), cast back."""

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax computed in float32; returns float64 (precision is lost on the way)."""
    y = x.astype(np.float32)
    y -= y.max(axis=1, keepdims=True)
    np.exp(y, out=y)
    y /= y.sum(axis=1, keepdims=True)
    return y.astype(np.float64)
