"""The declared signature of a host-launched ``solve()`` subject (SPEC.md section 5,
"Subjects"; used by :mod:`perfledger.kernels.subjects.solve`): the argument spec (buffers with their roles,
element types and shapes in dims, scalars from the dims, the stream), its shape expressions, and
the ``extern "C" void solve(...)`` signature parsed from a CUDA source and checked against the
spec (through ctypes a mismatch would be a crash or silent garbage). Pure Python: unit-tested on
the CPU.
"""

from __future__ import annotations

import ast
import ctypes
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfledger.errors import BadRequest

#: The exported host entry point of the contract.
ENTRY = "solve"

#: Buffer element types: spec spelling (a dtype name or a C type) -> NumPy/CuPy dtype name.
BUFFER_TYPES = {
    "float32": "float32", "float": "float32",
    "float64": "float64", "double": "float64",
    "float16": "float16", "half": "float16", "__half": "float16",
    "int8": "int8", "int8_t": "int8", "char": "int8", "signed char": "int8",
    "uint8": "uint8", "uint8_t": "uint8", "unsigned char": "uint8",
    "int16": "int16", "int16_t": "int16", "short": "int16",
    "uint16": "uint16", "uint16_t": "uint16",
    "int32": "int32", "int32_t": "int32", "int": "int32",
    "uint32": "uint32", "uint32_t": "uint32", "unsigned": "uint32", "unsigned int": "uint32",
    "int64": "int64", "int64_t": "int64", "long long": "int64",
    "uint64": "uint64", "uint64_t": "uint64", "unsigned long long": "uint64",
    "bool": "bool",
}  # fmt: skip
#: Scalar types: spec spelling -> (dtype name, ctypes type).
SCALAR_TYPES: dict[str, tuple[str, Any]] = {
    "int": ("int32", ctypes.c_int32), "int32": ("int32", ctypes.c_int32),
    "int32_t": ("int32", ctypes.c_int32),
    "unsigned": ("uint32", ctypes.c_uint32), "unsigned int": ("uint32", ctypes.c_uint32),
    "uint32": ("uint32", ctypes.c_uint32), "uint32_t": ("uint32", ctypes.c_uint32),
    "int64": ("int64", ctypes.c_int64), "int64_t": ("int64", ctypes.c_int64),
    "long long": ("int64", ctypes.c_int64), "long": ("int64", ctypes.c_int64),
    "uint64": ("uint64", ctypes.c_uint64), "uint64_t": ("uint64", ctypes.c_uint64),
    "size_t": ("uint64", ctypes.c_uint64), "unsigned long long": ("uint64", ctypes.c_uint64),
    "float32": ("float32", ctypes.c_float), "float": ("float32", ctypes.c_float),
    "float64": ("float64", ctypes.c_double), "double": ("float64", ctypes.c_double),
}  # fmt: skip
_ROLES = ("in", "out")
_NAME = re.compile(r"^[A-Za-z_]\w*$")


# --------------------------------------------------------------------------- argument spec


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/subjects.md (the solve() contract) describes the argument rows ([name, role or type, ...]), shapes as dims expressions and the dims"


@dataclass(frozen=True)
class SolveArg:
    """One parameter of ``solve``.

    Attributes:
        name: the parameter's name (an identifier).
        kind: ``in`` / ``out`` (a device buffer), ``scalar`` (a value from the dims) or
            ``stream`` (the harness's ``cudaStream_t``).
        dtype: the buffer's element dtype or the scalar's dtype (NumPy names); ``""`` for the
            stream.
        shape: a buffer's shape as dims expressions (``"M"``, ``"M*K"``, ``4096``); empty
            otherwise.
    """

    name: str
    kind: str
    dtype: str = ""
    shape: tuple[str, ...] = ()

    @property
    def is_buffer(self) -> bool:
        """True for an ``in`` or ``out`` buffer."""
        return self.kind in _ROLES


@dataclass(frozen=True)
class ArgSpec:
    """The declared signature of ``solve`` (:func:`parse_arg_spec`), parameters in order."""

    args: tuple[SolveArg, ...]

    @property
    def inputs(self) -> tuple[SolveArg, ...]:
        """The ``in`` buffers, in order."""
        return tuple(a for a in self.args if a.kind == "in")

    @property
    def outputs(self) -> tuple[SolveArg, ...]:
        """The ``out`` buffers, in order."""
        return tuple(a for a in self.args if a.kind == "out")

    @property
    def scalars(self) -> tuple[SolveArg, ...]:
        """The scalar parameters (values from the dims), in order."""
        return tuple(a for a in self.args if a.kind == "scalar")

    def shapes(self, dims: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
        """Every buffer's shape evaluated with ``dims`` (elements per axis).

        Raises: BadRequest for an expression that uses a name not in ``dims`` or that is not a
        positive integer.
        """
        numeric = {k: v for k, v in dims.items() if isinstance(v, int) and not isinstance(v, bool)}
        shapes: dict[str, tuple[int, ...]] = {}
        for arg in self.args:
            if not arg.is_buffer:
                continue
            axes = []
            for expression in arg.shape:
                try:
                    value = eval_dims(expression, numeric)
                except BadRequest as exc:
                    raise BadRequest(
                        f"buffer {arg.name!r}: shape {expression!r}: {exc.message}",
                        hint='a shape names integer dims, e.g. ["M", "K"] or "M*K"',
                    ) from None
                if value < 1:
                    raise BadRequest(
                        f"buffer {arg.name!r}: shape {expression!r}: {value} is not a positive int",
                        hint=_HINT,
                    )
                axes.append(value)
            shapes[arg.name] = tuple(axes)
        return shapes

    def check_dims(self, dims: Mapping[str, Any]) -> None:
        """Every scalar parameter has a value of its kind in ``dims`` and every shape evaluates.

        Raises: BadRequest naming what is missing or wrong.
        """
        for arg in self.scalars:
            if arg.name not in dims:
                raise BadRequest(
                    f"the dims give no value for the scalar parameter {arg.name!r}",
                    hint=f"add {arg.name!r} to the dims JSON",
                )
            value = dims[arg.name]
            integer = arg.dtype.startswith(("int", "uint"))
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise BadRequest(f"dims[{arg.name!r}] is {value!r}, not a number", hint=_HINT)
            if integer and not isinstance(value, int):
                raise BadRequest(
                    f"dims[{arg.name!r}] is {value!r}; {arg.dtype} needs an integer", hint=_HINT
                )
            if integer:
                info = np.iinfo(arg.dtype)
                if not int(info.min) <= value <= int(info.max):
                    raise BadRequest(
                        f"dims[{arg.name!r}] = {value} does not fit {arg.dtype}", hint=_HINT
                    )
        self.shapes(dims)

    def to_json(self) -> dict[str, Any]:
        """The spec in its declared list form (``{"args": [...]}``)."""
        rows: list[list[Any]] = []
        for a in self.args:
            if a.is_buffer:
                rows.append([a.name, a.kind, f"{a.dtype}*", list(a.shape)])
            elif a.kind == "scalar":
                rows.append([a.name, a.dtype])
            else:
                rows.append([a.name, "stream"])
        return {"args": rows}


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def eval_dims(expression: str, dims: Mapping[str, int]) -> int:
    """Evaluate an integer shape expression (``"M"``, ``"M*K"``, ``"(n + 3) // 4"``) over
    ``dims``: names of dims, integers and ``+ - * // %`` only (an AST walk, never ``eval``).

    Raises: BadRequest for anything else, an unknown name or a division by zero.
    """

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in dims:
                raise BadRequest(f"{node.id!r} is not an integer in the dims", hint=_HINT)
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            try:
                return _OPS[type(node.op)](walk(node.left), walk(node.right))
            except ZeroDivisionError:
                raise BadRequest(f"{expression!r} divides by zero", hint=_HINT) from None
        raise BadRequest(
            f"{ast.unparse(node)!r} is not allowed (dims, integers, + - * // %)", hint=_HINT
        )

    try:
        tree = ast.parse(str(expression).strip(), mode="eval").body
    except SyntaxError as exc:
        raise BadRequest(f"{expression!r} is not an expression: {exc.msg}", hint=_HINT) from None
    return walk(tree)


def _pointer_dtype(text: str, where: str) -> str:
    base = " ".join(text.replace("*", " ").replace("const", " ").split())
    if text.count("*") != 1 or base not in BUFFER_TYPES:
        raise BadRequest(
            f"{where}: {text!r} is not a supported buffer type",
            hint=f"one pointer to one of {', '.join(sorted(set(BUFFER_TYPES.values())))}",
        )
    return BUFFER_TYPES[base]


def _shape(raw: Any, where: str) -> tuple[str, ...]:
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        raise BadRequest(
            f"{where}: a buffer needs a shape (a list of dims expressions)",
            hint='e.g. ["x", "in", "float32*", ["n"]]',
        )
    out = []
    for axis in raw:
        if isinstance(axis, bool) or not isinstance(axis, str | int):
            raise BadRequest(
                f"{where}: shape axis {axis!r} is neither a dims name nor an integer", hint=_HINT
            )
        out.append(str(axis))
    return tuple(out)


def _row_of(item: dict[str, Any]) -> list[Any]:
    """The list form of an object entry ``{"name", "role", "type", "shape"}``."""
    name, role, ctype = item.get("name"), item.get("role"), item.get("type")
    if role in _ROLES:
        return [name, role, ctype, item.get("shape")]
    if role == "stream":
        return [name, "stream"]
    if role in (None, "scalar"):
        return [name, "scalar", ctype]
    return [name, role]


def parse_arg_spec(data: Any, source: str = "the argument spec") -> ArgSpec:
    """Parse a declared argument spec: ``{"args": [...]}`` or the bare list. Each entry is
    ``[name, role, "T*", shape]`` for a buffer (role ``in`` or ``out``), ``[name, T]`` or
    ``[name, "scalar", T]`` for a scalar, ``[name, "stream"]`` for the stream; or an object
    ``{"name", "role", "type", "shape"}`` with the same meaning.

    Returns: the :class:`ArgSpec`.
    Raises: BadRequest (what is wrong, where, and an example) for anything malformed: an unknown
    role or type, a buffer without a shape, duplicate names, no output, no or several stream
    parameters (``solve`` must launch on the harness's stream, or its work would not be timed).
    """
    rows = data.get("args") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not rows:
        raise BadRequest(
            f'{source} must be a list of parameters or an object with one ("args")',
            hint='e.g. {"args": [["x","in","float32*",["n"]], ["y","out","float32*",["n"]], '
            '["n","int"], ["stream","stream"]]}',
        )
    args: list[SolveArg] = []
    for i, row in enumerate(rows):
        where = f"{source}, parameter {i + 1}"
        if isinstance(row, dict):
            row = _row_of(row)
        if (
            not isinstance(row, list)
            or len(row) < 2
            or not all(isinstance(x, str) for x in row[:2])
        ):
            raise BadRequest(f"{where}: {row!r} is not [name, role or type, ...]", hint=_HINT)
        name, role = row[0], row[1].strip()
        if not _NAME.match(name):
            raise BadRequest(f"{where}: {name!r} is not an identifier", hint=_HINT)
        where = f"{source}, parameter {name!r}"
        if role in _ROLES:
            if len(row) != 4 or not isinstance(row[2], str):
                raise BadRequest(
                    f"{where}: a buffer is [name, {role!r}, type, shape]",
                    hint=f'e.g. ["{name}", "{role}", "float32*", ["n"]]',
                )
            args.append(SolveArg(name, role, _pointer_dtype(row[2], where), _shape(row[3], where)))
        elif role == "stream":
            if len(row) != 2:
                raise BadRequest(f'{where}: the stream is [name, "stream"]', hint=_HINT)
            args.append(SolveArg(name, "stream"))
        elif role in ("inout", "in_out"):
            raise BadRequest(
                f"{where}: in-place (inout) buffers are not supported",
                hint="the harness checks that inputs are never written: declare an in and an "
                "out buffer",
            )
        else:
            ctype = row[2] if role == "scalar" and len(row) == 3 else role
            if (role == "scalar" and len(row) != 3) or (role != "scalar" and len(row) != 2):
                raise BadRequest(
                    f'{where}: a scalar is [name, type] or [name, "scalar", type]', hint=_HINT
                )
            if not isinstance(ctype, str) or ctype.strip() not in SCALAR_TYPES:
                raise BadRequest(
                    f"{where}: unknown role or scalar type {ctype!r}",
                    hint="roles: in, out, stream; scalar types: " + ", ".join(sorted(SCALAR_TYPES)),
                )
            args.append(SolveArg(name, "scalar", SCALAR_TYPES[ctype.strip()][0]))
    names = [a.name for a in args]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BadRequest(f"{source}: duplicate parameter names {duplicates}", hint=_HINT)
    streams = [a for a in args if a.kind == "stream"]
    if len(streams) != 1:
        raise BadRequest(
            f"{source}: solve must take exactly one cudaStream_t parameter (found {len(streams)})",
            hint="add `cudaStream_t stream` and launch every kernel on it (<<<grid, block, smem, "
            "stream>>>): work on another stream is not what the harness times",
        )
    if not any(a.kind == "out" for a in args):
        raise BadRequest(f'{source}: no output buffer (role "out")', hint=_HINT)
    return ArgSpec(tuple(args))


# --------------------------------------------------------------------------- the source's signature

_SOLVE = re.compile(
    r'extern\s+"C"\s+((?:[\w:()"]+\s+)*?)void\s+(?:__\w+__\s+)*([A-Za-z_]\w*)\s*\(([^)]*)\)',
    re.S,
)


def parse_solve_signature(source: str, entry: str = ENTRY) -> list[tuple[str, str]]:
    """The ``(ctype, name)`` parameters of the host function ``extern "C" void <entry>(...)`` in
    CUDA ``source`` (comments ignored).

    Raises: BadRequest when there is no such host function (a ``__global__`` entry is the other
    contract: a kernel with a ``// perfledger-launch:`` line).
    """
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
    for match in _SOLVE.finditer(text):
        if match.group(2) != entry or "__global__" in match.group(1):
            continue
        params = []
        for raw in match.group(3).split(","):
            item = " ".join(raw.replace("__restrict__", " ").replace("*", " * ").split())
            if not item or item == "void":
                continue
            found = re.match(r"^(.*?)\s*([A-Za-z_]\w*)$", item)
            if found is None or not found.group(1):
                raise BadRequest(
                    f"cannot parse the parameter {raw.strip()!r} of {entry}", hint=_HINT
                )
            params.append((found.group(1).replace(" *", "*").strip(), found.group(2)))
        return params
    raise BadRequest(
        f'no host function extern "C" void {entry}(...) in the source',
        hint=f'export the host entry point as extern "C" void {entry}(..., cudaStream_t stream)',
    )


def has_solve_entry(source: str, entry: str = ENTRY) -> bool:
    """True when CUDA ``source`` exports the host function ``extern "C" void <entry>(...)``."""
    try:
        parse_solve_signature(source, entry)
    except BadRequest:
        return False
    return True


def _describe(ctype: str) -> tuple[str, str]:
    """(kind, dtype) of a C parameter type: ``in``/``out`` buffers, scalars, the stream."""
    bare = " ".join(ctype.replace("*", " * ").split())
    if bare.replace(" ", "") in ("cudaStream_t", "constcudaStream_t", "CUstream"):
        return "stream", ""
    if "*" in bare:
        # const before the "*" makes the pointee read-only (an input); `float* const y` is not
        kind = "in" if "const" in bare.split("*")[0].split() else "out"
        base = " ".join(w for w in bare.split() if w not in ("const", "*"))
        return kind, BUFFER_TYPES.get(base, f"?{base}")
    base = " ".join(w for w in bare.split() if w != "const")
    return "scalar", SCALAR_TYPES[base][0] if base in SCALAR_TYPES else f"?{base}"


def check_signature(spec: ArgSpec, source: str, entry: str = ENTRY) -> None:
    """Check the declared ``spec`` against the ``solve`` signature in ``source``: the same
    names in the same order, pointers where buffers are declared with the same element type
    (``const`` for inputs, non-const for outputs), scalars of the same type, the stream where
    declared.

    Raises: BadRequest listing every mismatch (ctypes would pass what the spec says, whatever
    the function expects).
    """
    params = parse_solve_signature(source, entry)
    problems: list[str] = []
    if [n for _, n in params] != [a.name for a in spec.args]:
        problems.append(
            f"parameters are ({', '.join(n for _, n in params)}) in the source but "
            f"({', '.join(a.name for a in spec.args)}) in the spec"
        )
    for (ctype, name), arg in zip(params, spec.args, strict=False):
        kind, dtype = _describe(ctype)
        if kind != arg.kind or dtype != arg.dtype:
            problems.append(f"{name}: `{ctype}` in the source is {kind} {dtype or ''}".rstrip()
                            + f", the spec says {arg.kind} {arg.dtype}".rstrip())  # fmt: skip
    if problems:
        raise BadRequest(
            f"the argument spec does not match {entry}'s signature: " + "; ".join(problems),
            hint="inputs are const pointers, outputs non-const pointers, the stream a cudaStream_t",
        )


def spec_from_signature(source: str, shapes: Mapping[str, Any], entry: str = ENTRY) -> ArgSpec:
    """An argument spec from the ``solve`` signature in ``source`` (const pointers are inputs,
    other pointers outputs) and the buffers' ``shapes`` (``{name: [dims expressions]}``).

    Raises: BadRequest for an unsupported parameter type or a buffer without a shape.
    """
    rows: list[list[Any]] = []
    for ctype, name in parse_solve_signature(source, entry):
        kind, dtype = _describe(ctype)
        if dtype.startswith("?"):
            raise BadRequest(
                f"{entry}: parameter {name!r} has an unsupported type {ctype!r}", hint=_HINT
            )
        if kind in _ROLES:
            if name not in shapes:
                raise BadRequest(
                    f"no shape for the buffer {name!r}",
                    hint=f'declare it in ref.py: SHAPES = {{"{name}": ["n"], ...}}',
                )
            rows.append([name, kind, f"{dtype}*", shapes[name]])
        elif kind == "stream":
            rows.append([name, "stream"])
        else:
            rows.append([name, dtype])
    return parse_arg_spec(rows, f"{entry}'s signature")


__all__ = [
    "BUFFER_TYPES",
    "ENTRY",
    "SCALAR_TYPES",
    "ArgSpec",
    "SolveArg",
    "check_signature",
    "eval_dims",
    "has_solve_entry",
    "parse_arg_spec",
    "parse_solve_signature",
    "spec_from_signature",
]
