"""Honest workers in subject directories on a real GPU (marked ``gpu``, skipped without CuPy,
torch, Triton or a GPU): the environment those workers get (no bytecode cache, CuPy's kernel
cache in memory, the driver's JIT cache off, fresh build directories for Triton and
TorchInductor) must let real torch / Triton subjects load and run, and the checks made before
every batch (threads' nice values and policies, the autogroup, the pause check) must not flag
the threads that CUDA, torch and Triton start themselves. Nothing is mocked: real workers
(``python -m perfledger.kernels.isolation.subject_worker``) running real kernels."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()
pytest.importorskip("torch", reason="the torch / Triton subject needs torch")
pytest.importorskip("triton", reason="the torch / Triton subject needs Triton")

from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec, spec_facts  # noqa: E402

pytestmark = pytest.mark.gpu

EXAMPLE = Path(__file__).parents[2] / "examples" / "subjects" / "torch_triton_spec.py"


def test_honest_torch_and_triton_workers_in_subject_directories_are_not_flagged(
    tmp_path: Path,
) -> None:
    """An A/A of the Triton subject, each worker in the subject directory with the environment
    of :class:`~perfledger.kernels.isolation.isolated.WorkerProcess`: valid, no ``sched:`` or ``pause:``
    flag (CUDA's, torch's and Triton's own threads keep the worker's scheduling), nothing
    written into the directory; the start-up cost without bytecode or kernel caches printed."""
    d = tmp_path / "subject"
    d.mkdir()
    (d / "spec.py").write_text(EXAMPLE.read_text() + "\nSUBJECT = CANDIDATE\n")
    start = time.perf_counter()
    facts = spec_facts("spec.py", IsolationConfig(), directory=str(d))
    print(f"spec_facts (import torch, triton with no bytecode cache): "
          f"{time.perf_counter() - start:.1f} s")  # fmt: skip
    assert facts["cases"] == ["n16M"] and facts["has_subject"], facts
    start = time.perf_counter()
    c = compare_spec("spec.py", "n16M", directories=(str(d), str(d)))
    print(f"A/A in subject directories: {time.perf_counter() - start:.1f} s, flags {c.flags}, "
          f"ratio {c.stats.median_ratio if c.stats else None}")  # fmt: skip
    assert not [f for f in c.flags if f.startswith(("sched:", "pause:"))], (
        c.flags,
        c.ref.recheck_failures if c.ref else None,
    )
    assert c.valid, (c.flags, c.settings.get("clock"))
    assert sorted(os.listdir(d)) == ["spec.py"]  # no cache of the worker's in its directory
