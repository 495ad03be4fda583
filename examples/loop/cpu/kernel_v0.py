"""Baseline stand-in kernel: row softmax in pure Python loops (one interpreted step per element)."""

import math


def kernel(x, M: int, N: int):
    rows = x.tolist()
    out = []
    for i in range(M):
        row = rows[i]
        m = row[0]
        for j in range(1, N):
            if row[j] > m:
                m = row[j]
        e = [math.exp(row[j] - m) for j in range(N)]
        s = 0.0
        for j in range(N):
            s += e[j]
        out.append([e[j] / s for j in range(N)])
    return out
