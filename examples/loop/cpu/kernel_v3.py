"""Iteration 3: the passes of iteration 2 with the divide replaced by a reciprocal multiply,
applied row by row. No gain is expected, and the per-row Python loop makes it clearly slower:
the run records it as not improved, its methods ineffective (R21). The slowdown is deliberate: a
candidate that changes nothing measurable can come out ahead by chance on a loaded machine, and
this example must end the same way on every machine."""

import numpy as np


def kernel(x, M: int, N: int):
    out = x - x.max(axis=1, keepdims=True)
    np.exp(out, out=out)
    scale = 1.0 / out.sum(axis=1)
    for row in range(M):
        out[row] *= scale[row]
    return out
