"""Host-launched CUDA C++ (and CUTLASS) subjects: the loop playbook's standalone contract
(SPEC.md section 5, "Subjects").

A ``.cu`` file exports ``extern "C" void solve(...)``: host code that launches any number of
kernels on the stream it is given. perfledger builds it with ``nvcc -shared`` into a shared
library (:func:`nvcc_argv`, :func:`build_solve`; flags, nvcc version and the ``ptxas -v`` log
recorded, the library's blake3 hash is the subject's identity together with its sources' hashes)
and calls it through :mod:`ctypes` with device pointers and the harness's ``cudaStream_t``
(:class:`SolveSubject`).

The signature comes from a declared *argument spec* (:func:`parse_arg_spec`, in
:mod:`perfledger.kernels.subjects.solve_args` with the signature checks; compiler evidence in
:mod:`perfledger.kernels.subjects.solve_evidence`), e.g. for
``solve(const float* x, float* y, int n, cudaStream_t stream)``::

    {"args": [["x", "in", "float32*", ["n"]], ["y", "out", "float32*", ["n"]],
              ["n", "int"], ["stream", "stream"]]}

buffers carry a role (``in`` / ``out``), a pointer type and a shape of dims expressions; scalars
take their value from the dims JSON by name; the stream argument receives the harness's stream.
The spec is checked against the ``solve`` signature parsed from the source
(:func:`check_signature`): a mismatch would be a crash or silent garbage through ctypes.

The problem comes from ``ref.py`` (:func:`solve_problem`): ``reference(**kwargs)`` gets the
inputs (float64 copies) and the dims by name and returns the outputs (a dict, a tuple in the
order of the ``out`` buffers, or one array), or writes the output buffers it names as
parameters (zeroed; float64 for floating outputs) and returns None. Arrays are CuPy by default; ``ARRAYS = "torch"`` or ``"numpy"`` in ``ref.py``
converts (DLPack for torch, no copy). ``ref.py`` may also define ``ARGS`` (the argument spec),
``make_inputs(seed, **dims)``, ``bytes_per_call(**dims)``, ``flops_per_call(**dims)``,
``FLOPS_UNIT`` and ``TOLERANCES``.

Nothing here needs a GPU until a subject is called on device arrays or a device architecture is
asked for; argument specs, ``ref.py`` checks and the nvcc command line are unit-tested on the
CPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from perfledger.errors import BadRequest, MeasurementError
from perfledger.kernels.cuda.ceilings import FLOP_UNITS
from perfledger.kernels.harness.examples import uniform
from perfledger.kernels.harness.harness import Problem, Subject, require_cupy
from perfledger.kernels.profilers.compiler import parse_nvcc_version
from perfledger.kernels.subjects.solve_args import (
    ENTRY,
    SCALAR_TYPES,
    ArgSpec,
    SolveArg,
    check_signature,
    eval_dims,
    has_solve_entry,
    parse_arg_spec,
    parse_solve_signature,
    spec_from_signature,
)
from perfledger.kernels.subjects.torch_subject import as_cupy, as_torch, harness_stream

#: nvcc flags of every build (besides ``-arch``, includes and the user's extra flags).
BASE_FLAGS = ("-shared", "-Xcompiler", "-fPIC", "-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v")
#: Where built libraries are kept, keyed by what went into them.
CACHE_ENV = "PERFLEDGER_SOLVE_CACHE"


# --------------------------------------------------------------------------- building


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/subjects.md (the solve() contract) describes the reference file, the JSON spec's fields and the CUDA source a solve() subject needs"


def nvcc_argv(
    source: Path,
    output: Path,
    *,
    arch: str,
    nvcc: str = "nvcc",
    include_dirs: Sequence[str | Path] = (),
    extra_flags: Sequence[str] = (),
) -> list[str]:
    """The nvcc command line that builds ``source`` into the shared library ``output``:
    :data:`BASE_FLAGS` (position-independent shared library, -O3, C++17, line info, the
    ``ptxas -v`` resource report), ``-arch=<arch>`` (``sm_90``, ``sm_90a``, ...), ``-I`` per
    include directory, then ``extra_flags``.

    Raises: BadRequest for an architecture that is not ``sm_<digits>[a-z]``.
    """
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise BadRequest(f"{arch!r} is not a CUDA architecture (e.g. sm_90)", hint=_HINT)
    return [
        nvcc,
        *BASE_FLAGS,
        f"-arch={arch}",
        *(f"-I{d}" for d in include_dirs),
        *extra_flags,
        "-o",
        str(output),
        str(source),
    ]


def device_arch() -> str:
    """``sm_XY`` of the current CUDA device (needs CuPy).

    Raises: MeasurementError without CuPy or a device.
    """

    cupy = require_cupy()
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    return f"sm_{props['major']}{props['minor']}"


def cutlass_include_dirs() -> list[str]:
    """CUTLASS's C++ include directories from the ``nvidia-cutlass`` pip package
    (``cutlass_library/source/include`` and its ``tools/util/include``); empty when the package
    is not installed."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = Path(next(iter(spec.submodule_search_locations))) / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    return [str(d) for d in dirs if d.is_dir()]


def file_hash(path: Path) -> str:
    """blake3 hex of a file's bytes."""
    return blake3.blake3(path.read_bytes()).hexdigest()


def _nvcc_version(nvcc: str) -> str:

    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
        return parse_nvcc_version(out.stdout)
    except Exception as exc:
        raise MeasurementError(f"cannot run {nvcc} --version: {exc}") from None


def _local_sources(source: Path) -> dict[str, str]:
    """blake3 of the source and of the headers beside it (a local ``#include "x.cuh"`` is part
    of what is built)."""
    found = {source.name: file_hash(source)}
    for path in sorted(source.parent.iterdir()):
        if path != source and path.suffix in (".cuh", ".h", ".hpp", ".inl") and path.is_file():
            found[path.name] = file_hash(path)
    return found


@dataclass(frozen=True)
class SolveBuild:
    """A built ``solve`` library and what identifies it.

    Attributes:
        library: path of the shared library.
        library_blake3: blake3 hex of the library's bytes: the identity of what is measured.
        sources: file name -> blake3 hex of the source and the headers beside it.
        argv: the nvcc command line (paths as used).
        nvcc_version: the toolkit version (``13.0.88``).
        arch: the architecture built for.
        ptxas_log: what ``ptxas -v`` reported (nvcc's stderr of the build).
    """

    library: Path
    library_blake3: str
    sources: dict[str, str]
    argv: tuple[str, ...]
    nvcc_version: str
    arch: str
    ptxas_log: str

    def identity(self) -> dict[str, Any]:
        """JSON builtins recorded with the samples: hashes, flags, nvcc version, arch."""
        return {
            "kind": "solve",
            "library_blake3": self.library_blake3,
            "sources": dict(self.sources),
            "nvcc_argv": list(self.argv),
            "nvcc_version": self.nvcc_version,
            "arch": self.arch,
        }


def _cache_dir() -> Path:
    root = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "perfledger", "solve"
    )
    return Path(root)


def build_solve(
    source: str | Path,
    *,
    arch: str | None = None,
    nvcc: str | None = None,
    include_dirs: Sequence[str | Path] = (),
    extra_flags: Sequence[str] = (),
    cache_dir: str | Path | None = None,
    timeout_s: float = 900.0,
) -> SolveBuild:
    """Build ``source`` (a ``.cu`` exporting ``solve``) into a shared library with
    :func:`nvcc_argv`, or reuse the library built earlier from the same sources, flags and
    nvcc version (kept under ``$PERFLEDGER_SOLVE_CACHE``, default ``~/.cache/perfledger/solve``).

    Args:
        arch: ``sm_XY`` (default: the current device's, which needs CuPy).
        nvcc: the compiler (default: ``nvcc`` on PATH, else ``$CUDA_HOME/bin/nvcc``).
    Raises: BadRequest when the source is missing or does not compile (nvcc's message in the
        hint); MeasurementError when no nvcc is found.
    """
    path = Path(source)
    if not path.is_file():
        raise BadRequest(f"no CUDA source {str(path)!r}", hint=_HINT)
    exe = nvcc or shutil.which("nvcc")
    if exe is None:
        home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        exe = str(Path(home) / "bin" / "nvcc") if (Path(home) / "bin" / "nvcc").exists() else None
    if exe is None:
        raise MeasurementError(
            "nvcc not found", hint="install the CUDA toolkit or put nvcc on PATH"
        )
    arch = arch or device_arch()
    version = _nvcc_version(exe)
    sources = _local_sources(path)
    template = nvcc_argv(Path("SOURCE"), Path("LIB"), arch=arch, nvcc="nvcc",
                         include_dirs=include_dirs, extra_flags=extra_flags)  # fmt: skip
    key = blake3.blake3(repr((sorted(sources.items()), template, version)).encode()).hexdigest()
    folder = Path(cache_dir) if cache_dir is not None else _cache_dir()
    target = folder / key[:32] / f"{path.stem}.so"
    log_path = target.with_suffix(".ptxas.log")
    argv = nvcc_argv(path, target, arch=arch, nvcc=exe, include_dirs=include_dirs,
                     extra_flags=extra_flags)  # fmt: skip
    if not (target.is_file() and log_path.is_file()):
        target.parent.mkdir(parents=True, exist_ok=True)
        # Built under a temporary name and renamed: a concurrent build never loads half a file.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        run_argv = nvcc_argv(path, Path(tmp), arch=arch, nvcc=exe, include_dirs=include_dirs,
                             extra_flags=extra_flags)  # fmt: skip
        try:
            proc = subprocess.run(run_argv, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.unlink(tmp)
            raise BadRequest(
                f"nvcc took more than {timeout_s:.0f} s on {path.name}", hint=_HINT
            ) from None
        if proc.returncode != 0:
            os.unlink(tmp)
            raise BadRequest(
                f"nvcc failed on {path.name} (exit {proc.returncode})",
                hint=(proc.stderr or proc.stdout)[-1500:],
            )
        log_path.write_text(proc.stderr, encoding="utf-8")
        os.replace(tmp, target)
    return SolveBuild(
        library=target,
        library_blake3=file_hash(target),
        sources=sources,
        argv=tuple(argv),
        nvcc_version=version,
        arch=arch,
        ptxas_log=log_path.read_text(encoding="utf-8"),
    )


# --------------------------------------------------------------------------- the subject


def data_ptr(array: Any) -> int:
    """The address of an array's first element: CuPy / any ``__cuda_array_interface__`` array,
    a torch tensor, or a NumPy array (host memory, for CPU tests of host-only libraries).

    Raises: BadRequest for an object that is none of these or is not C-contiguous.
    """
    memory = getattr(array, "data", None)
    if hasattr(memory, "ptr"):  # CuPy: the cheap path (this runs inside the timed window)
        if not array.flags.c_contiguous:
            raise BadRequest("a solve() buffer must be C-contiguous", hint=_HINT)
        return int(memory.ptr)
    if hasattr(array, "data_ptr") and callable(array.data_ptr):  # torch
        if not array.is_contiguous():
            raise BadRequest("a solve() buffer must be contiguous", hint=_HINT)
        return int(array.data_ptr())
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(
        array, "__array_interface__", None
    )
    if interface is None:
        raise BadRequest(f"{type(array).__name__} is not an array solve() can be given", hint=_HINT)
    flags = getattr(array, "flags", None)
    if flags is not None and not flags["C_CONTIGUOUS"]:
        raise BadRequest("a solve() buffer must be C-contiguous", hint=_HINT)
    return int(interface["data"][0])


def current_stream_ptr() -> int:
    """The current CuPy stream's ``cudaStream_t`` (the harness runs subjects under its own)."""
    import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

    return int(cupy.cuda.get_current_stream().ptr)


@dataclass
class SolveSubject(Subject):
    """A built ``solve`` library as a harness subject: ``subject(inputs, outputs)`` calls
    ``solve`` through ctypes with the buffers' device pointers, the scalars from ``dims`` and the
    current stream (the harness's), in the order of ``spec``.

    Attributes:
        name: a label.
        build: the :class:`SolveBuild` (its library is loaded once).
        spec: the argument spec.
        dims: the scalars' values by name.
        stream_ptr: returns the ``cudaStream_t`` to pass (default: the current CuPy stream).
    Raises: BadRequest when the library has no ``solve`` or a scalar is missing from ``dims``.
    """

    name: str
    build: SolveBuild
    spec: ArgSpec
    dims: Mapping[str, Any]
    stream_ptr: Callable[[], int] = current_stream_ptr
    _fn: Any = field(default=None, init=False, repr=False)
    _scalars: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.spec.check_dims(self.dims)
        try:
            library = ctypes.CDLL(str(self.build.library))
            fn = getattr(library, ENTRY)
        except (OSError, AttributeError) as exc:
            raise BadRequest(
                f"{self.build.library.name} exports no callable {ENTRY}: {exc}",
                hint=f'declare it extern "C" void {ENTRY}(...) so that its name is not mangled',
            ) from None
        types: list[Any] = []
        for arg in self.spec.args:
            if arg.kind == "scalar":
                ctype = next(t for n, t in SCALAR_TYPES.values() if n == arg.dtype)
                types.append(ctype)
                self._scalars[arg.name] = ctype(self.dims[arg.name])
            else:
                types.append(ctypes.c_void_p)
        fn.argtypes = types
        fn.restype = None
        self._fn = fn

    def __call__(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> None:
        values: list[Any] = []
        for arg in self.spec.args:
            if arg.kind == "in":
                values.append(data_ptr(inputs[arg.name]))
            elif arg.kind == "out":
                values.append(data_ptr(outputs[arg.name]))
            elif arg.kind == "scalar":
                values.append(self._scalars[arg.name])
            else:
                values.append(self.stream_ptr())
        self._fn(*values)

    def content_hash(self) -> str:
        """``blake3:<hex>`` over the library's hash, the sources' hashes and the nvcc argv."""
        ident = self.build.identity()
        text = repr((ident["library_blake3"], sorted(ident["sources"].items()), ident["nvcc_argv"]))
        return "blake3:" + blake3.blake3(text.encode()).hexdigest()

    def identity(self) -> dict[str, Any]:
        """The build's identity plus the argument spec (recorded with the samples)."""
        return {**self.build.identity(), "args": self.spec.to_json()["args"]}


# --------------------------------------------------------------------------- ref.py


@dataclass(frozen=True)
class RefModule:
    """A loaded ``ref.py``: ``reference`` and the optional declarations of the module
    docstring."""

    path: Path
    reference: Callable[..., Any]
    arrays: str
    args: Any
    shapes: Any
    make_inputs: Callable[..., Any] | None
    bytes_per_call: Callable[..., Any] | None
    flops_per_call: Callable[..., Any] | None
    flops_unit: str | None
    tolerances: dict[str, float]


def load_ref(path: str | Path) -> RefModule:
    """Load ``ref.py`` and check its contract (module docstring).

    Raises: BadRequest when the file is missing, fails to import (the error in the message), has
    no callable ``reference``, or declares something of the wrong kind.
    """
    file = Path(path)
    if not file.is_file():
        raise BadRequest(f"no reference file {str(file)!r}", hint=_HINT)
    name = f"perfledger_ref_{blake3.blake3(str(file.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise BadRequest(f"cannot load the reference {str(file)!r}", hint=_HINT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling in ref.py look the module up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise BadRequest(
            f"the reference {file.name} failed to load: {type(exc).__name__}: {exc}", hint=_HINT
        ) from None
    reference = getattr(module, "reference", None)
    if not callable(reference):
        raise BadRequest(
            f"the reference {file.name} defines no callable reference(**kwargs)",
            hint="def reference(**kwargs): return {output name: array} (inputs and dims by name)",
        )
    arrays = getattr(module, "ARRAYS", "cupy")
    if arrays not in ("cupy", "torch", "numpy"):
        raise BadRequest(
            f"{file.name}: ARRAYS is {arrays!r}; one of cupy, torch, numpy", hint=_HINT
        )
    tolerances = getattr(module, "TOLERANCES", {}) or {}
    if not isinstance(tolerances, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in tolerances.values()
    ):
        raise BadRequest(f"{file.name}: TOLERANCES must map output names to numbers", hint=_HINT)
    flops_unit = getattr(module, "FLOPS_UNIT", None)
    if flops_unit is not None and flops_unit not in FLOP_UNITS:
        raise BadRequest(
            f"{file.name}: FLOPS_UNIT is {flops_unit!r}", hint="one of " + ", ".join(FLOP_UNITS)
        )
    optional = {}
    for attr in ("make_inputs", "bytes_per_call", "flops_per_call"):
        value = getattr(module, attr, None)
        if value is not None and not callable(value):
            raise BadRequest(f"{file.name}: {attr} must be a function of the dims", hint=_HINT)
        optional[attr] = value
    return RefModule(
        path=file,
        reference=reference,
        arrays=arrays,
        args=getattr(module, "ARGS", None),
        shapes=getattr(module, "SHAPES", None),
        flops_unit=flops_unit,
        tolerances={str(k): float(v) for k, v in tolerances.items()},
        **optional,
    )


def resolve_spec(ref: RefModule, source_text: str | None, args: Any = None) -> ArgSpec:
    """The argument spec of a problem: ``args`` if given, else ``ref.ARGS``, else the ``solve``
    signature of ``source_text`` with ``ref.SHAPES``; checked against ``source_text``'s
    signature when there is one.

    Raises: BadRequest when no spec can be had or it does not match the source.
    """
    declared = args if args is not None else ref.args
    if declared is not None:
        spec = parse_arg_spec(declared, f"the argument spec of {ref.path.name}")
    elif source_text is not None and ref.shapes is not None:
        if not isinstance(ref.shapes, dict):
            raise BadRequest(f"{ref.path.name}: SHAPES must map buffer names to shapes", hint=_HINT)
        spec = spec_from_signature(source_text, ref.shapes)
    else:
        raise BadRequest(
            f"{ref.path.name} declares neither ARGS (the argument spec) nor SHAPES",
            hint='ARGS = {"args": [["x","in","float32*",["n"]], ["y","out","float32*",["n"]], '
            '["n","int"], ["stream","stream"]]}',
        )
    if source_text is not None:
        check_signature(spec, source_text)
    return spec


def _accepts(fn: Callable[..., Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A filter of keyword arguments down to what ``fn`` accepts (all with ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return lambda kw: kw
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return lambda kw: kw
    names = {p.name for p in params}
    return lambda kw: {k: v for k, v in kw.items() if k in names}


def _named_parameters(fn: Callable[..., Any]) -> set[str]:
    """The names ``fn`` takes as explicit parameters (not through ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name for p in params if p.kind in kinds}


def _convert_in(arrays: str) -> Callable[[Any], Any]:
    if arrays == "torch":
        return as_torch
    if arrays == "numpy":
        return lambda a: a.get()
    return lambda a: a


def _on_torch_stream(arrays: str) -> Any:
    """A context manager running torch work on the current CuPy stream (nothing for others)."""

    if arrays != "torch":
        return contextlib.nullcontext()

    return harness_stream()


def default_make_inputs(spec: ArgSpec, dims: Mapping[str, Any]) -> Callable[[int], dict[str, Any]]:
    """Inputs from a counter-based hash on the device, one stream of values per buffer (each
    varies with the seed): floats uniform in [-1, 1), integers in [-64, 64) (unsigned: [0, 64)),
    bools half true."""

    shapes = spec.shapes(dims)

    def make(seed: int) -> dict[str, Any]:

        made: dict[str, Any] = {}
        for arg in spec.inputs:
            shape = shapes[arg.name]
            count = math.prod(shape)
            own = (seed + zlib.crc32(arg.name.encode()) * 0x9E3779B97F4A7C15) % (1 << 63)
            if arg.dtype.startswith("float"):
                values = uniform(count, own, arg.dtype)
            else:
                base = uniform(count, own, "float32")
                if arg.dtype == "bool":
                    values = base > 0
                elif arg.dtype.startswith("u"):
                    values = (abs(base) * 64).astype(arg.dtype)
                else:
                    values = (base * 64).astype(arg.dtype)
            made[arg.name] = values.reshape(shape)
        return made

    return make


def solve_problem(
    ref: str | Path | RefModule,
    dims: Mapping[str, Any],
    spec: ArgSpec,
    *,
    name: str | None = None,
) -> Any:
    """The harness :class:`~perfledger.kernels.harness.harness.Problem` of a ``ref.py`` and dims:
    inputs from ``ref.make_inputs(seed, **dims)`` (or :func:`default_make_inputs`), checked
    against the spec's dtypes and shapes; outputs as the spec declares; the reference called as
    ``reference(**inputs, **dims)`` (and the output buffers, zeroed, that it names as
    parameters).

    Raises: BadRequest for dims that do not fit the spec.
    """

    module = ref if isinstance(ref, RefModule) else load_ref(ref)
    dims = dict(dims)
    spec.check_dims(dims)
    shapes = spec.shapes(dims)
    outputs = {a.name: (shapes[a.name], a.dtype) for a in spec.outputs}
    given_make = module.make_inputs
    dims_for_make = _accepts(given_make) if given_make else None

    def make_inputs(seed: int) -> dict[str, Any]:
        if given_make is None or dims_for_make is None:
            return default_make_inputs(spec, dims)(seed)
        with _on_torch_stream(module.arrays):
            made = given_make(**dims_for_make({"seed": seed, **dims}))
            arrays = {k: as_cupy(v) for k, v in dict(made).items()}
        for arg in spec.inputs:
            got = arrays.get(arg.name)
            if got is None or got.dtype.name != arg.dtype or tuple(got.shape) != shapes[arg.name]:
                raise MeasurementError(
                    f"{module.path.name}: make_inputs gave {arg.name!r} as "
                    f"{None if got is None else (got.dtype.name, tuple(got.shape))}; the spec "
                    f"declares {arg.dtype} {shapes[arg.name]}"
                )
        return {a.name: arrays[a.name] for a in spec.inputs}

    convert = _convert_in(module.arrays)
    keep = _accepts(module.reference)
    # output buffers are given only to a reference that names them (it then writes them and
    # may return None): zero-filling large float64 buffers for one that does not is waste
    named = _named_parameters(module.reference)
    given_outputs = [a for a in spec.outputs if a.name in named]

    def reference(inputs: dict[str, Any]) -> dict[str, Any]:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        with _on_torch_stream(module.arrays):
            buffers = {
                a.name: convert(
                    cupy.zeros(
                        shapes[a.name], "float64" if a.dtype.startswith("float") else a.dtype
                    )
                )
                for a in given_outputs
            }
            kwargs = {**{k: convert(v) for k, v in inputs.items()}, **dims, **buffers}
            result = module.reference(**keep(kwargs))
            names = [a.name for a in spec.outputs]
            if result is None:
                missing = [n for n in names if n not in buffers]
                if missing:
                    raise MeasurementError(
                        f"{module.path.name}: reference returned None but takes no output "
                        f"parameter {missing}",
                        hint="return the outputs, or name the output buffers as parameters",
                    )
                got = {k: as_cupy(v) for k, v in buffers.items()}
            elif isinstance(result, dict):
                got = {k: as_cupy(v) for k, v in result.items()}
            elif isinstance(result, tuple | list):
                if len(result) != len(names):
                    raise MeasurementError(
                        f"reference returned {len(result)} arrays for outputs {names}"
                    )
                got = {k: as_cupy(v) for k, v in zip(names, result, strict=True)}
            elif len(names) == 1:
                got = {names[0]: as_cupy(result)}
            else:
                raise MeasurementError(f"reference returned one array for outputs {names}")
        return got

    def declared(attr: Callable[..., Any] | None) -> int | None:
        if attr is None:
            return None
        try:
            value = attr(**_accepts(attr)(dims))
            if isinstance(value, bool) or int(value) != value or value < 0:
                raise ValueError(f"{value!r} is not a non-negative integer")
        except Exception as exc:
            raise BadRequest(
                f"{module.path.name}: {attr.__name__}(**dims) failed: {type(exc).__name__}: {exc}",
                hint=_HINT,
            ) from None
        return int(value)

    return Problem(
        name=name or f"{module.path.stem}{sorted(dims.items())}",
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        bytes_per_call=declared(module.bytes_per_call),
        flops_per_call=declared(module.flops_per_call),
        tolerances=module.tolerances,
        flops_unit=module.flops_unit,
    )


def solve_subject(
    source: str | Path,
    spec: ArgSpec,
    dims: Mapping[str, Any],
    *,
    name: str | None = None,
    arch: str | None = None,
    include_dirs: Sequence[str | Path] = (),
    extra_flags: Sequence[str] = (),
) -> SolveSubject:
    """Check ``source`` against ``spec``, build it (:func:`build_solve`) and wrap it as a
    :class:`SolveSubject`.

    Raises: BadRequest for a signature mismatch or a failed build.
    """
    path = Path(source)
    if not path.is_file():
        raise BadRequest(f"no CUDA source {str(path)!r}", hint=_HINT)
    check_signature(spec, path.read_text(encoding="utf-8", errors="replace"))
    build = build_solve(path, arch=arch, include_dirs=include_dirs, extra_flags=extra_flags)
    return SolveSubject(name or path.name, build, spec, dict(dims))


#: Keys of a JSON kernel spec (:func:`load_solve_spec`).
SPEC_KEYS = ("ref", "reference", "candidate", "dims", "case", "args", "arch", "nvcc_flags",
             "include_dirs", "cutlass")  # fmt: skip


def load_solve_spec(path: str | Path) -> dict[str, Any]:
    """Load a JSON kernel spec for ``perfledger measure kernel|aa --spec`` (host-launched
    ``solve`` subjects)::

        {"ref": "ref.py", "reference": "v0.cu", "candidate": "v1.cu",
         "dims": {"n": 16777216}, "case": "n16M",
         "args": {"args": [...]}, "arch": "sm_90a", "nvcc_flags": [...],
         "include_dirs": [...], "cutlass": true}

    Paths are relative to the spec file; ``args`` defaults to ``ref.py``'s ``ARGS`` (or
    ``SHAPES`` with the signature); ``case`` defaults to ``default``; ``cutlass`` adds the
    ``nvidia-cutlass`` package's include directories. Everything is checked (files, ``ref.py``,
    the argument spec against both sources' signatures, the dims) before anything is built.

    Returns: ``{"problems": {case: Problem}, "reference", "candidate": SolveSubject,
    "config": None}`` (the shape of ``perfledger.kernels.subjects.spec_loader.load_spec``'s answer).
    Raises: BadRequest for anything malformed (nothing is built or run then).
    """

    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadRequest(f"cannot read the spec {str(file)!r}: {exc}", hint=_HINT) from None
    except ValueError as exc:
        raise BadRequest(f"the spec {str(file)!r} is not valid JSON: {exc}", hint=_HINT) from None
    if not isinstance(data, dict):
        raise BadRequest(f"the spec {str(file)!r} must be a JSON object", hint=_HINT)
    unknown = sorted(set(data) - set(SPEC_KEYS))
    missing = [k for k in ("ref", "reference", "dims") if k not in data]
    if unknown or missing:
        raise BadRequest(
            f"the spec {file.name}: "
            + "; ".join(
                ([f"unknown keys {unknown}"] if unknown else [])
                + ([f"missing keys {missing}"] if missing else [])
            ),
            hint="keys: " + ", ".join(SPEC_KEYS),
        )
    base = file.parent

    def local(key: str) -> Path:
        value = data[key]
        if not isinstance(value, str) or not value:
            raise BadRequest(f"the spec {file.name}: {key!r} must be a file name", hint=_HINT)
        found = base / value
        if not found.is_file():
            raise BadRequest(f"the spec {file.name}: no file {str(found)!r} ({key})", hint=_HINT)
        return found

    dims = data["dims"]
    if not isinstance(dims, dict) or not all(isinstance(k, str) for k in dims):
        raise BadRequest(
            f"the spec {file.name}: dims must be an object of numbers by name", hint=_HINT
        )
    case = data.get("case", "default")
    if not isinstance(case, str) or not case:
        raise BadRequest(f"the spec {file.name}: case must be a non-empty string", hint=_HINT)
    flags = data.get("nvcc_flags", [])
    includes = data.get("include_dirs", [])
    for key, value in (("nvcc_flags", flags), ("include_dirs", includes)):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise BadRequest(f"the spec {file.name}: {key} must be a list of strings", hint=_HINT)
    arch = data.get("arch")
    if arch is not None and (not isinstance(arch, str) or not re.fullmatch(r"sm_\d+[a-z]?", arch)):
        raise BadRequest(f"the spec {file.name}: arch {arch!r} is not like sm_90", hint=_HINT)
    ref = load_ref(local("ref"))
    sources = {"reference": local("reference")}
    if data.get("candidate") is not None:
        sources["candidate"] = local("candidate")
    texts = {k: p.read_text(encoding="utf-8", errors="replace") for k, p in sources.items()}
    spec = resolve_spec(ref, texts["reference"], data.get("args"))
    for role, text in texts.items():
        try:
            check_signature(spec, text)
        except BadRequest as exc:
            raise BadRequest(f"{role} {sources[role].name}: {exc.message}", hint=exc.hint) from None
    spec.check_dims(dims)
    include_dirs = [str(base / d) for d in includes]
    if data.get("cutlass"):
        found = cutlass_include_dirs()
        if not found:
            raise BadRequest(
                "the spec asks for CUTLASS but the nvidia-cutlass package is not installed",
                hint="pip install nvidia-cutlass (its headers are used, nothing else)",
            )
        include_dirs += found
    problem = solve_problem(ref, dims, spec, name=f"{ref.path.stem}:{case}")
    subjects = {
        role: solve_subject(
            path, spec, dims, arch=arch, include_dirs=include_dirs, extra_flags=flags
        )
        for role, path in sources.items()
    }
    return {
        "problems": {case: problem},
        "reference": subjects["reference"],
        "candidate": subjects.get("candidate"),
        "config": None,
    }


__all__ = [
    "BASE_FLAGS",
    "ENTRY",
    "ArgSpec",
    "RefModule",
    "SolveArg",
    "SolveBuild",
    "SolveSubject",
    "build_solve",
    "check_signature",
    "cutlass_include_dirs",
    "data_ptr",
    "default_make_inputs",
    "device_arch",
    "eval_dims",
    "has_solve_entry",
    "load_ref",
    "load_solve_spec",
    "nvcc_argv",
    "parse_arg_spec",
    "parse_solve_signature",
    "resolve_spec",
    "solve_problem",
    "solve_subject",
    "spec_from_signature",
]
