"""Iteration 1: vectorized per row with NumPy, written into one preallocated output."""

import numpy as np


def kernel(x, M: int, N: int):
    out = np.empty_like(x)
    for i in range(M):
        e = np.exp(x[i] - x[i].max())
        out[i] = e / e.sum()
    return out
