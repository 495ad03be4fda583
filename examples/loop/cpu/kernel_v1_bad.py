"""Iteration 1, attempt 1: vectorized per row, but the normalization is forgotten (incorrect)."""

import numpy as np


def kernel(x, M: int, N: int):
    out = np.empty_like(x)
    for i in range(M):
        out[i] = np.exp(x[i] - x[i].max())
    return out
