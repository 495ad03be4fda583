"""Iteration 3: the same passes as iteration 2 with a reciprocal multiply instead of a divide
(no measurable change is expected: the run should record it as not improved)."""

import numpy as np


def kernel(x, M: int, N: int):
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    out *= 1.0 / out.sum(axis=1, keepdims=True)
    return out
