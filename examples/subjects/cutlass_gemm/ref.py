"""Reference of the CUTLASS GEMM example: ``C = A B`` for row-major float32 ``A`` (M x K) and
``B`` (K x N), computed in float64 (the harness gives float64 copies of the inputs).

``FLOPS_UNIT``: the CUTLASS kernel is a SIMT (CUDA-core) float32 GEMM, so its FLOP rate is
checked against the CUDA-core fp32 ceiling.
"""

ARGS = {
    "args": [
        ["A", "in", "float32*", ["M", "K"]],
        ["B", "in", "float32*", ["K", "N"]],
        ["C", "out", "float32*", ["M", "N"]],
        ["M", "int"],
        ["N", "int"],
        ["K", "int"],
        ["stream", "stream"],
    ]
}
FLOPS_UNIT = "cuda_fp32"


def reference(A, B, **dims):
    """``{"C": A @ B}``."""
    return {"C": A @ B}


def flops_per_call(M, N, K):
    """One multiply and one add per (m, n, k)."""
    return 2 * M * N * K


def bytes_per_call(M, N, K):
    """A and B read once, C written once (the least any GEMM moves)."""
    return 4 * (M * K + K * N + M * N)
