"""PyTorch (and Triton) subjects of the kernel harness (SPEC.md section 5, "Subjects").

The harness keeps CuPy arrays and runs every subject under its own non-blocking stream. A
:class:`TorchSubject` is a callable ``fn(inputs, outputs)`` on ``torch`` tensors: the arrays are
handed over through DLPack (zero copy: the tensors alias the harness's buffers, so the harness
poisons, checks and hashes exactly what the subject reads and writes), and ``fn`` runs with
torch's current stream set to the harness's stream (:func:`harness_stream`:
``torch.cuda.ExternalStream`` of the current CuPy stream). Everything torch launches on its
current stream, and a Triton kernel launched from ``fn`` (Triton launches on torch's current
stream), is then timed by the harness's events; work put on another stream is side work, which
the harness catches as for CuPy subjects. CuPy and torch subjects of one problem can be compared
with each other.

:func:`torch_problem` builds a :class:`~perfledger.kernels.harness.harness.Problem` whose inputs and
reference are made with torch (run on the harness's stream, converted to CuPy by DLPack).

Needs torch with CUDA (``pip install 'perfledger[torch]'``), imported on use.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import math
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from perfledger.errors import BadRequest, MeasurementError
from perfledger.kernels.harness.examples import uniform
from perfledger.kernels.harness.harness import CallableSubject, Problem, Subject

Tensors = dict[str, Any]
#: Conversions kept per subject (arrays of the last few pairs): converting costs microseconds
#: of host time inside the timed window; a cached tensor keeps its array alive, so the cache is
#: small.
_CACHE_SIZE = 8
_streams: dict[int, Any] = {}


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/subjects.md (PyTorch and Triton) describes a subject file and its solve() signature"


def require_torch() -> Any:
    """Import torch and check that it sees a CUDA device.

    Returns: the ``torch`` module. Raises: MeasurementError naming what is missing.
    """
    try:
        import torch  # noqa: PLC0415 (torch: optional, torch subjects only)
    except ImportError as exc:
        raise MeasurementError(
            f"torch subjects need PyTorch: {exc}", hint="pip install 'perfledger[torch]'"
        ) from None
    if not torch.cuda.is_available():
        raise MeasurementError("torch sees no CUDA device (a CPU-only build of torch?)")
    return torch


def _external_stream(ptr: int) -> Any:
    import torch  # noqa: PLC0415 (torch: optional, torch subjects only)

    stream = _streams.get(ptr)
    if stream is None:
        stream = torch.cuda.ExternalStream(ptr)
        _streams[ptr] = stream
    return stream


@contextlib.contextmanager
def harness_stream() -> Iterator[Any]:
    """Run torch work on the current CuPy stream (the harness's, inside a subject call): torch's
    current stream is set to an ``ExternalStream`` of it for the duration.

    Yields: the torch stream.
    """
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
    import torch  # noqa: PLC0415 (torch: optional, torch subjects only)

    ptr = int(cupy.cuda.get_current_stream().ptr)
    if ptr == 0:  # CuPy's legacy default stream: torch's default stream is the same one
        yield torch.cuda.default_stream()
        return
    stream = _external_stream(ptr)
    with torch.cuda.stream(stream):
        yield stream


def as_torch(array: Any) -> Any:
    """A torch tensor aliasing ``array`` (CuPy or any DLPack producer; no copy). Call it under
    :func:`harness_stream` so that no cross-stream synchronisation is queued."""
    import torch  # noqa: PLC0415 (torch: optional, torch subjects only)

    return torch.from_dlpack(array)


def as_cupy(tensor: Any) -> Any:
    """A CuPy array aliasing a torch CUDA tensor (DLPack, no copy); other values through
    ``cupy.asarray``."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    if type(tensor).__module__.startswith("torch"):
        return cupy.from_dlpack(tensor.detach())
    return cupy.asarray(tensor)


@dataclass
class TorchSubject(Subject):
    """A callable ``fn(inputs, outputs)`` on torch tensors (module docstring): it launches on
    torch's current stream (the harness's) and writes every output tensor in place (``out=``,
    ``copy_``, a Triton kernel's output pointer).

    Attributes:
        name: a label.
        fn: the callable.
        source: text identifying what runs (default: ``fn``'s source, see
            :meth:`CallableSubject.content_hash`).
    """

    name: str
    fn: Callable[[Tensors, Tensors], None]
    source: str | None = None
    _cache: OrderedDict[int, tuple[Any, Any]] = field(
        default_factory=OrderedDict, init=False, repr=False
    )

    def _tensor(self, array: Any) -> Any:
        # Keyed by the array object (kept alive in the entry, so its id is not reused).
        key = id(array)
        hit = self._cache.get(key)
        if hit is not None and hit[0] is array:
            self._cache.move_to_end(key)
            return hit[1]
        tensor = as_torch(array)
        self._cache[key] = (array, tensor)
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return tensor

    def __call__(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        with harness_stream():
            tin = {k: self._tensor(v) for k, v in inputs.items()}
            tout = {k: self._tensor(v) for k, v in outputs.items()}
            self.fn(tin, tout)

    def content_hash(self) -> str:
        """``sha256:<hex>`` of ``source`` or of ``fn``'s source text."""

        if self.source is not None:
            return "sha256:" + hashlib.sha256(self.source.encode()).hexdigest()
        return CallableSubject(self.name, self.fn).content_hash()


def torch_problem(
    name: str,
    make_inputs: Callable[[int], Mapping[str, Any]],
    reference: Callable[[Tensors], Mapping[str, Any]],
    outputs: Mapping[str, tuple[tuple[int, ...], str]],
    **fields: Any,
) -> Problem:
    """A harness :class:`Problem` whose ``make_inputs(seed)`` and ``reference(inputs)`` use
    torch: both run on the harness's stream; inputs and results cross as DLPack (no copy).
    ``make_inputs`` must be deterministic in its seed (e.g. ``torch.Generator(device="cuda")``
    seeded with it) and every input must vary with the seed. Other ``Problem`` fields by keyword
    (``bytes_per_call``, ``flops_per_call``, ``flops_unit``, ``tolerances``, ...).

    Raises: ValueError for an unknown ``flops_unit`` (as :class:`Problem`).
    """

    def made(seed: int) -> dict[str, Any]:
        with harness_stream():
            return {k: as_cupy(v) for k, v in make_inputs(seed).items()}

    def expected(inputs: dict[str, Any]) -> dict[str, Any]:
        with harness_stream():
            given = {k: as_torch(v) for k, v in inputs.items()}
            return {k: as_cupy(v) for k, v in reference(given).items()}

    return Problem(name=name, make_inputs=made, reference=expected, outputs=outputs, **fields)


def python_solve_subject(
    path: str | Path, spec: Any, dims: Mapping[str, Any], *, name: str | None = None
) -> TorchSubject:
    """A Python file defining ``solve(...)`` on torch tensors (e.g. a Triton kernel's launcher)
    as a :class:`TorchSubject`: ``solve`` is called with the buffers of the argument spec
    (:class:`perfledger.kernels.subjects.solve.ArgSpec`) as tensors and its scalars from ``dims``, by
    name; the spec's stream parameter is not passed (torch's current stream is the harness's).
    The file's text identifies the subject.

    Raises: BadRequest when the file does not load, defines no ``solve``, or ``solve``'s
    parameters are not the spec's (stream aside).
    """

    file = Path(path)
    text = file.read_text(encoding="utf-8")
    check_python_solve(text, spec)
    module_name = f"perfledger_subject_{blake3.blake3(text.encode()).hexdigest()[:16]}"
    loader_spec = importlib.util.spec_from_file_location(module_name, file)
    if loader_spec is None or loader_spec.loader is None:
        raise BadRequest(f"cannot load {file.name}", hint=_HINT)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module  # Triton's JIT looks its function's module up
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise BadRequest(
            f"{file.name} failed to load: {type(exc).__name__}: {exc}", hint=_HINT
        ) from None
    solve = module.solve
    buffers = [a.name for a in spec.args if a.is_buffer]
    scalars = {a.name: dims[a.name] for a in spec.scalars}

    def run(inputs: Tensors, outputs: Tensors) -> None:
        tensors = {**inputs, **outputs}
        solve(**{k: tensors[k] for k in buffers}, **scalars)

    return TorchSubject(name or file.name, run, source=text)


def check_python_solve(text: str, spec: Any) -> None:
    """Check that Python ``text`` defines a top-level ``def solve(...)`` whose parameters are
    the spec's buffers and scalars in order (the stream parameter left out).

    Raises: BadRequest naming the difference.
    """

    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise BadRequest(f"the subject is not valid Python: {exc}", hint=_HINT) from None
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "solve"]
    if not found:
        raise BadRequest(
            "the Python subject defines no top-level def solve(...)",
            hint="def solve(x, y, n): launch on torch's current stream, write the outputs",
        )
    names = [a.arg for a in found[0].args.args]
    wanted = [a.name for a in spec.args if a.kind != "stream"]
    if names != wanted:
        raise BadRequest(
            f"solve({', '.join(names)}) in the subject, but the argument spec declares "
            f"({', '.join(wanted)}) (the stream is not passed to a Python subject)",
            hint=_HINT,
        )


def torch_uniform(shape: tuple[int, ...], seed: int, dtype: str = "float32") -> Any:
    """A torch tensor of values uniform in [-1, 1) from the counter-based generator of
    :func:`perfledger.kernels.harness.examples.uniform` (deterministic in ``seed``, made on the current
    CuPy stream at memory speed), reshaped to ``shape``."""

    return as_torch(uniform(math.prod(shape), seed, dtype).reshape(shape))


__all__ = [
    "TorchSubject",
    "as_cupy",
    "as_torch",
    "check_python_solve",
    "harness_stream",
    "python_solve_subject",
    "require_torch",
    "torch_problem",
    "torch_uniform",
]
