"""perfledger's modules parsed once per test process, for the tests that read its source (the
import graph, the refusal sites): each parse of the whole package took most of a second."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the Python file at ``path``, shared by every caller in this process
    (read it, do not change it). Raises: SyntaxError as :func:`ast.parse`."""
    return _parsed(path.resolve())


@functools.cache
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text("utf-8"), str(path))
