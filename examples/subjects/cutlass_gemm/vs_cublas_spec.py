"""A kernel spec for ``perfledger measure kernel --spec``: the CUTLASS GEMM of ``gemm_cutlass.cu``
(built by nvcc with the nvidia-cutlass package's headers, called through ctypes on the
harness's stream) against cuBLAS (``cupy.matmul``, float32, no TF32) on 2048^3.

Needs CuPy, nvcc and ``pip install nvidia-cutlass`` (loaded by the command on a GPU machine).
"""

from pathlib import Path

import cupy

from perfledger.kernels.harness.harness import CallableSubject, HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule
from perfledger.kernels.subjects import solve

HERE = Path(__file__).resolve().parent
DIMS = {"M": 2048, "N": 2048, "K": 2048}
_ref = solve.load_ref(HERE / "ref.py")
_spec = solve.resolve_spec(_ref, (HERE / "gemm_cutlass.cu").read_text())


def cublas(inputs, outputs):
    """cuBLAS SGEMM through ``cupy.matmul`` into the output buffer."""
    cupy.matmul(inputs["A"], inputs["B"], out=outputs["C"])


PROBLEMS = {"2048cubed": solve.solve_problem(_ref, DIMS, _spec, name="gemm-2048")}
REFERENCE = CallableSubject("cublas sgemm", cublas)
CANDIDATE = solve.solve_subject(
    HERE / "gemm_cutlass.cu", _spec, DIMS, include_dirs=solve.cutlass_include_dirs()
)
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.3, max_gpu_s=3.0))
