"""Row softmax on the GPU for the GPU session: the problem (float32 logits of scale 30, a float64
reference) and one harness subject per CUDA source in ``kernels/`` (``naive``, ``block``,
``warp``, ``unsafe``). Spec files for ``perfledger measure kernel|aa`` are two lines on top of
this module (``spec_text``). Needs CuPy on use (``problem``/``subject``); ``content_hash`` and
``launch`` shapes need nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KERNELS = HERE / "kernels"
#: case -> (rows, cols): the same 32 MiB of logits as many short rows or fewer long ones.
CASES = {"r8k_c1k": (8192, 1024), "r2k_c4k": (2048, 4096)}
#: Logit scale: large enough that exp() of an unshifted logit overflows float32.
SCALE = 30.0
OPTIONS = ("-std=c++17",)
ENTRY = "softmax"


def source(name: str) -> str:
    """The CUDA source of kernel ``name`` (``kernels/<name>.cu``)."""
    return (KERNELS / f"{name}.cu").read_text()


def content_hash(name: str) -> str:
    """``sha256:<hex>`` exactly as the harness's ``RawKernelSubject.content_hash`` computes it
    (source, entry and options), so the ledger's candidate hash is the measured code's."""
    text = "\x00".join([source(name), ENTRY, *OPTIONS])
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def launch(name: str, rows: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(grid, block) of kernel ``name`` for ``rows`` rows."""
    if name == "naive":
        return ((rows + 127) // 128,), (128,)
    if name == "block":
        return (rows,), (256,)
    return ((rows + 7) // 8,), (256,)  # warp, unsafe: one warp per row, 8 rows per block


def problem(rows: int, cols: int) -> Any:
    """The harness problem: ``y = softmax(x, axis=1)`` over float32 ``x`` (rows, cols); inputs
    from the harness's hidden seeds; reference in float64 (reference_float64)."""
    from perfledger.kernels.harness.harness import Problem

    def make_inputs(seed: int) -> dict[str, Any]:
        import cupy

        rng = cupy.random.RandomState(seed)
        return {"x": rng.standard_normal((rows, cols), dtype=cupy.float32) * cupy.float32(SCALE)}

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        import cupy

        x = inputs["x"]

        shifted = x - x.max(axis=1, keepdims=True)
        ex = cupy.exp(shifted)
        return {"y": ex / ex.sum(axis=1, keepdims=True)}

    return Problem(
        name=f"softmax-{rows}x{cols}",
        make_inputs=make_inputs,
        reference=reference,
        outputs={"y": ((rows, cols), "float32")},
        bytes_per_call=8 * rows * cols,
    )


def problems() -> dict[str, Any]:
    """Every case's problem (the session's test set)."""
    return {case: problem(rows, cols) for case, (rows, cols) in CASES.items()}


def subject(name: str) -> Any:
    """The harness subject of kernel ``name``; its launch shape follows the case's rows."""
    import numpy as np

    from perfledger.kernels.harness.harness import RawKernelSubject

    def grid(inputs: dict[str, Any], outputs: dict[str, Any]) -> tuple[int, ...]:
        return launch(name, inputs["x"].shape[0])[0]

    def block(inputs: dict[str, Any], outputs: dict[str, Any]) -> tuple[int, ...]:
        return launch(name, inputs["x"].shape[0])[1]

    return RawKernelSubject(
        name=name,
        source=source(name),
        entry=ENTRY,
        grid=grid,
        block=block,
        args=lambda i, o: (i["x"], o["y"], np.int32(i["x"].shape[0]), np.int32(i["x"].shape[1])),
        options=OPTIONS,
    )


def spec_text(reference: str, candidate: str | None) -> str:
    """The text of a spec file for ``perfledger measure kernel|aa --spec``."""
    lines = [
        "import sys",
        f"sys.path.insert(0, {str(HERE)!r})",
        "from softmax_kernels import problems, subject",
        "from perfledger.kernels.harness.harness import HarnessConfig",
        "from perfledger.kernels.harness.stopping import StoppingRule",
        "PROBLEMS = problems()",
        f"REFERENCE = subject({reference!r})",
        "CONFIG = HarnessConfig(stopping=StoppingRule(min_samples=96, min_gpu_s=0.2, max_gpu_s=3.0))",
    ]
    if candidate is not None:
        lines.append(f"CANDIDATE = subject({candidate!r})")
    return "\n".join(lines) + "\n"
