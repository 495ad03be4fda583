"""The original: row softmax one row at a time (a Python loop over rows, NumPy inside a row)."""

import numpy as np


def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax of a 2-D float64 array; returns a new array of the same shape."""
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        row = x[i]
        e = np.exp(row - row.max())
        out[i] = e / e.sum()
    return out
