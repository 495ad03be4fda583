"""Iteration 2: the whole matrix in a few NumPy passes, in place in one buffer."""

import numpy as np


def kernel(x, M: int, N: int):
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)
    return out
