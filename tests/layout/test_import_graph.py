"""The package layout of SPEC.md section 1: events <- ledger <- projections <- commands, with
kernels beside them (importing at most events and errors), commands split into subpackages whose
import graph has no cycle, and the operation registry binding its deciders and request models
through functions, never through module names in strings."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import msgspec

import perfledger
from perfledger.commands.registry import operations

SRC = Path(perfledger.__file__).resolve().parent


def _unit(module: str) -> str:
    """``commands.<subpackage>`` for a command module, else the top-level package's name."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "commands":
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else parts[0]


def _imports(path: Path, module: str) -> set[str]:
    """Every perfledger module ``path`` imports, at its top or inside a function."""
    found: set[str] = set()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    tree = ast.parse(path.read_text("utf-8"))
    skip = {  # imports under `if TYPE_CHECKING:` never run
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for sub in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("perfledger.")}


def _graph() -> dict[str, set[str]]:
    """Unit -> the other units its modules import (``commands.cli``, ``kernels``, ``events``...)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        module = ".".join(rel.parts).removesuffix(".__init__")
        for target in _imports(path, module):
            if _unit(target) != _unit(module):
                edges[_unit(module)].add(_unit(target))
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str]:
    """One cycle of ``edges`` as a list of units, or [] when the graph is acyclic."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return []

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return []


def test_the_cycle_finder_reports_a_cycle_and_accepts_a_chain() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) == []


def test_command_subpackages_and_packages_import_each_other_without_a_cycle() -> None:
    edges = _graph()
    assert {"commands.cli", "commands.workflow", "commands.loop", "commands.audit"} <= set(edges)
    assert _cycle(edges) == []


def test_layers_import_only_what_spec_section_1_allows() -> None:
    edges = _graph()
    commands = {unit for unit in edges if unit.startswith("commands")}
    assert not edges["projections"] & ({"ledger", "kernels", "api"} | commands)
    assert edges["kernels"] <= {"derive", "events", "errors"}
    assert not edges["ledger"] & ({"projections", "kernels", "api"} | commands)
    assert edges["events"] <= {"errors"}
    # the workflow's deciders never reach up into the click skin or the loop
    assert not edges["commands.workflow"] & {"commands.cli", "commands.loop", "commands.audit"}


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    """An import cycle at module level fails here (a partially initialised module)."""
    probe = (
        "import importlib, pkgutil, perfledger\n"
        "for info in pkgutil.walk_packages(perfledger.__path__, 'perfledger.'):\n"
        "    if not info.name.endswith('__main__'):\n"
        "        importlib.import_module(info.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_operations_bind_request_models_and_deciders_through_functions() -> None:
    for name, operation in operations.OPERATIONS.items():
        assert callable(operation.models_module) and callable(operation.decider_module), name
        model = operations.request_model(name)
        assert isinstance(model, type) and issubclass(model, msgspec.Struct), name
        assert callable(operations.decider(name)), name


def test_no_command_module_imports_a_module_named_in_a_string() -> None:
    offenders = []
    for path in (SRC / "commands").rglob("*.py"):
        if path == SRC / "commands" / "cli" / "app.py":
            continue  # the CLI's LazyGroup: command name -> "module:attribute"
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in {"import_module", "__import__"}:
                    offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == []


def test_no_cli_module_keeps_a_forwarding_copy_of_the_shared_helpers() -> None:
    shared = {"_ctx", "_actor", "to_json_text", "command_context", "resolve_actor", "rate_text"}
    copies = []
    for path in (SRC / "commands" / "cli").glob("*.py"):
        if path.name == "common.py":
            continue
        tree = ast.parse(path.read_text("utf-8"))
        copies += [f"{path.name}:{node.name}" for node in tree.body
                   if isinstance(node, ast.FunctionDef) and node.name in shared]  # fmt: skip
    assert copies == []
