"""A kernel spec for `perfledger measure kernel|aa --spec`: the scale kernel y = 2x over 2^24
float32 elements; REFERENCE is the original, CANDIDATE does 3 % more work (slower, same answer).

A spec defines PROBLEMS (case name -> perfledger.kernels.harness.harness.Problem) or PROBLEM, REFERENCE
and CANDIDATE (subjects), and optionally CONFIG (HarnessConfig). It runs only where CuPy and a GPU
are present (it is loaded by the command, not imported by perfledger).
"""

from perfledger.kernels.harness.examples import scale_problem, scale_subject
from perfledger.kernels.harness.harness import HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule

N = 1 << 24
PROBLEMS = {"n16M": scale_problem(N)}
REFERENCE = scale_subject(N, name="scale")
CANDIDATE = scale_subject(N, extra_share=0.03, name="scale+3%")
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.3, max_gpu_s=3.0))
