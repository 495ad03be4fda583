"""A kernel spec for ``perfledger measure kernel|aa --spec``: ``y = 2 x`` over 2^24 float32, the
reference a PyTorch operator (``torch.mul`` on the harness's stream), the candidate a Triton
kernel launched through the PyTorch path (Triton launches on torch's current stream, which the
harness sets to its own). Inputs and the reference come from the CuPy problem of
``perfledger.kernels.harness.examples``: torch subjects see the same buffers through DLPack (no copy).

Needs CuPy, torch with CUDA and triton (loaded by the command on a GPU machine).
"""

import torch
import triton
import triton.language as tl

from perfledger.kernels.harness.examples import scale_problem
from perfledger.kernels.harness.harness import HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule
from perfledger.kernels.subjects.torch_subject import TorchSubject

N = 1 << 24
BLOCK = 1024


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """``y = 2 x`` over ``n`` elements, one block of ``BLOCK`` per program."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def triton_scale(inputs, outputs):
    """The Triton launcher: one program per ``BLOCK`` elements."""
    x, y = inputs["x"], outputs["y"]
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)


def torch_scale(inputs, outputs):
    """``torch.mul`` writing the output in place."""
    torch.mul(inputs["x"], 2.0, out=outputs["y"])


PROBLEMS = {"n16M": scale_problem(N)}
REFERENCE = TorchSubject("torch.mul", torch_scale)
CANDIDATE = TorchSubject("triton scale", triton_scale)
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.3, max_gpu_s=3.0))
