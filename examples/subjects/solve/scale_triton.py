"""A Triton candidate on the solve() contract of this directory: ``solve(x, y, n)`` gets the
buffers of ``ref.py``'s ARGS as torch tensors and the scalars from the dims (the stream is not
passed: Triton launches on torch's current stream, which the harness sets to its own).

``perfledger loop setup --baseline scale_triton.py --ref ref.py --dims '{"n": 16777216}'`` runs a
loop with it as the baseline; ``loop close-iter --kernel scale_v1.cu`` compares a CUDA candidate
against it (the same contract).
"""

import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def solve(x, y, n):
    """``y = 2 x`` over ``n`` float32 elements."""
    _scale[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
