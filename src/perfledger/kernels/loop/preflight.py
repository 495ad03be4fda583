"""Preflight of the kernel-iteration loop: the baseline/reference/dims contract, checked before
anything runs (the seed's ``preflight.py``).

- The kernel's entry point and parameters are parsed from its source: a CUDA file's
  ``extern "C" __global__ void NAME(...)`` (C++ name mangling would hide the entry from the
  profiler's kernel filter, so it must be ``extern "C"``), or a Python stand-in's ``def NAME(...)``
  (an ``int`` annotation marks an integer parameter).
- Every integer parameter must be given in ``dims``.
- The reference must define the callables the subject kind needs.
- A CUDA kernel's launch configuration is a directive comment in its source, so that each
  candidate carries its own: ``// perfledger-launch: grid=(ceil(N/32), ceil(M/32)) block=(32, 8)``;
  its expressions use dims names, integers, ``+ - * / // %``, ``ceil``, ``min`` and ``max`` and
  are evaluated by :func:`eval_launch` (an AST walk, never ``eval``).
"""

from __future__ import annotations

import ast
import math
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass

from perfledger.errors import BadRequest

_CUDA_ENTRY = re.compile(
    r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+'
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\(([^)]*)\)",
    re.S,
)
_LAUNCH = re.compile(r"//\s*perfledger-launch:\s*grid=(.+?)\s+block=(.+?)\s*$", re.M)
_INTEGER_TYPES = frozenset(
    {"int", "unsigned", "unsigned int", "long", "long long", "size_t", "int32_t", "int64_t",
     "uint32_t", "uint64_t", "const int", "const long", "const size_t", "const unsigned int"}
)  # fmt: skip


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/loop.md describes the kernel file, its entry point, --dims and the launch expressions the loop's preflight accepts"


@dataclass(frozen=True)
class EntryPoint:
    """A parsed entry point: its name and ``(name, ctype, integer)`` parameters."""

    name: str
    params: tuple[tuple[str, str, bool], ...]


def parse_cuda_entry(source: str, entry: str | None = None) -> EntryPoint:
    """Parse the ``extern "C" __global__`` entry point of CUDA ``source``.

    Args:
        source: the kernel's text.
        entry: the entry's name when the file has several (default: the only one).
    Raises: BadRequest when none (or not the named one) is found, or when several are found
        and none is named.
    """
    found = {m.group(1): m.group(2) for m in _CUDA_ENTRY.finditer(source)}
    if not found:
        raise BadRequest(
            'preflight: no extern "C" __global__ void entry point in the kernel',
            hint='declare the entry as extern "C" __global__ void NAME(...) so that the '
            "harness and the profiler find it by its unmangled name",
        )
    if entry is None:
        if len(found) > 1:
            raise BadRequest(
                f"preflight: several entry points ({', '.join(found)}); pass --entry", hint=_HINT
            )
        entry = next(iter(found))
    if entry not in found:
        raise BadRequest(
            f"preflight: no entry point {entry!r} (found: {', '.join(found)})", hint=_HINT
        )
    params = []
    for raw in found[entry].split(","):
        text = " ".join(raw.replace("__restrict__", "").split())
        if not text:
            continue
        match = re.match(r"^(.*?)([A-Za-z_]\w*)$", text)
        if match is None:
            raise BadRequest(
                f"preflight: cannot parse parameter {raw.strip()!r} of {entry}", hint=_HINT
            )
        ctype, name = match.group(1).strip(), match.group(2)
        params.append((name, ctype, ctype in _INTEGER_TYPES))
    return EntryPoint(entry, tuple(params))


def parse_python_entry(source: str, entry: str) -> EntryPoint:
    """Parse ``def entry(...)`` of a Python stand-in kernel (``int`` annotation = integer).

    Raises: BadRequest for a syntax error or a missing function.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise BadRequest(f"preflight: the kernel is not valid Python: {exc}", hint=_HINT) from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            params = []
            for arg in node.args.args:
                ctype = ast.unparse(arg.annotation) if arg.annotation is not None else "object"
                params.append((arg.arg, ctype, ctype == "int"))
            return EntryPoint(entry, tuple(params))
    raise BadRequest(f"preflight: the kernel defines no function {entry!r}", hint=_HINT)


def parse_reference_names(source: str) -> set[str]:
    """Return the top-level function names a reference module defines.

    Raises: BadRequest for a syntax error."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise BadRequest(
            f"preflight: the reference is not valid Python: {exc}", hint=_HINT
        ) from None
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def check_dims(entry: EntryPoint, dims: Mapping[str, int]) -> None:
    """Every integer parameter of ``entry`` has a positive integer in ``dims``.

    Raises: BadRequest naming what is missing or not a positive integer."""
    for key, value in dims.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadRequest(
                f"preflight: dims[{key!r}] must be a positive integer, got {value!r}", hint=_HINT
            )
    missing = [name for name, _, integer in entry.params if integer and name not in dims]
    if missing:
        raise BadRequest(
            f"preflight: integer parameter(s) {', '.join(missing)} of {entry.name} have no value "
            "in --dims",
            hint=_HINT,
        )


def parse_launch(source: str) -> dict[str, str]:
    """Return the ``grid``/``block`` expressions of a CUDA kernel's launch directive.

    Raises: BadRequest when the directive is missing."""
    match = _LAUNCH.search(source)
    if match is None:
        raise BadRequest(
            "preflight: the kernel has no launch directive",
            hint="add a comment: // perfledger-launch: grid=(ceil(N/32), ceil(M/32)) block=(32, 8)",
        )
    return {"grid": match.group(1), "block": match.group(2)}


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_FUNCS = {"ceil": math.ceil, "min": min, "max": max}


def eval_launch(expression: str, dims: Mapping[str, int]) -> tuple[int, ...]:
    """Evaluate a launch tuple expression (``(ceil(N/32), M)``) over ``dims``.

    Returns: a tuple of 1 to 3 positive ints.
    Raises: BadRequest for anything but names of dims, numbers, arithmetic and ceil/min/max.
    """

    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.Name) and node.id in dims:
            return dims[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](walk(node.left), walk(node.right))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
            and not node.keywords
        ):
            return _FUNCS[node.func.id](*(walk(a) for a in node.args))
        raise BadRequest(
            f"launch expression {expression!r}: {ast.unparse(node)} is not allowed", hint=_HINT
        )

    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as exc:
        raise BadRequest(f"launch expression {expression!r}: {exc}", hint=_HINT) from None
    items = tree.elts if isinstance(tree, ast.Tuple) else [tree]
    values = []
    for item in items:
        value = walk(item)
        if value != int(value) or value < 1:
            raise BadRequest(
                f"launch expression {expression!r}: {value!r} is not a positive int", hint=_HINT
            )
        values.append(int(value))
    if not 1 <= len(values) <= 3:
        raise BadRequest(f"launch expression {expression!r}: 1 to 3 dimensions", hint=_HINT)
    return tuple(values)
