"""The adapters decide nothing (issue 33): no module of the click CLI (``commands/cli``) or of
the MCP server (``commands/mcp``) raises a bad request or a rule refusal of its own. Every such
check (a rule, a request's fields, which options go together, what ``--ledger`` may take, the
words of a ``cli`` tool call) is raised in ``perfledger.app`` or a decider, where a Python
caller, the CLI and the MCP server meet the same refusal (tests/contract/
test_adapter_refusals.py). The adapters may still turn a click usage error into the JSON error
object in the one place that does it (``commands.cli.app.main``) and re-raise a refusal the
application layer handed back (``raise done.refusal``)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import perfledger
from perfledger import errors
from source_trees import parsed

SRC = Path(perfledger.__file__).resolve().parent
ADAPTERS = ("commands/cli", "commands/mcp")
#: The perfledger errors that say "this request is refused": BadRequest, RuleRefused and every
#: subclass of either.
REFUSALS = frozenset(
    name
    for name, cls in vars(errors).items()
    if inspect.isclass(cls) and issubclass(cls, errors.BadRequest | errors.RuleRefused)
) | {"refuse"}
#: click's errors that carry a request check (what options a command takes is click's own).
CLICK_CHECKS = frozenset({"UsageError", "BadParameter", "BadOptionUsage", "MissingParameter"})
#: Sites allowed, each with its reason: ``path:function``.
ALLOWED = {
    # the adapter's own optional dependency (the MCP SDK), not a check of any request
    "commands/mcp/server.py:serve",
}


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else None


def refusal_sites(tree: ast.Module, where: str) -> list[str]:
    """``where:function:line`` of every ``raise`` of a refusal built in place (``raise
    BadRequest(...)``, ``raise refuse(...)``) and every click check built, in ``tree``, less
    :data:`ALLOWED`."""
    found = []
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    owner = {id(inner): f.name for f in functions for inner in ast.walk(f)}
    for node in ast.walk(tree):
        built = None
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            built = _name(node.exc) if _name(node.exc) in REFUSALS else None
        if isinstance(node, ast.Call) and _name(node) in CLICK_CHECKS:
            built = _name(node)
        if built is None:
            continue
        site = f"{where}:{owner.get(id(node), '<module>')}"
        if site not in ALLOWED:
            found.append(f"{site}:{node.lineno}: {built}")
    return found


def test_no_adapter_module_raises_a_refusal_of_its_own() -> None:
    found = []
    modules = 0
    for adapter in ADAPTERS:
        for path in sorted((SRC / adapter).rglob("*.py")):
            modules += 1
            found += refusal_sites(parsed(path), str(path.relative_to(SRC)))
    assert modules > 20  # the walk found the adapters
    assert found == [], "raise these in perfledger.app (or a decider):\n" + "\n".join(found)


def test_the_walk_finds_a_refusal_raised_in_an_adapter() -> None:
    """The honest control: each form the walk forbids is found in a module that has it."""
    source = (
        "import click\n"
        "from perfledger.errors import BadRequest, NotALedger, RuleRefused\n"
        "def a(x):\n    raise BadRequest('no', hint='h')\n"
        "def b(x):\n    raise errors.NotALedger('no', hint='h')\n"
        "def c(x):\n    raise refuse('R1', 'no', 'h')\n"
        "def d(x):\n    raise click.UsageError('no')\n"
        "def serve(x):\n    raise BadRequest('no SDK', hint='h')\n"
        "def e(x):\n    raise x.refusal\n"
    )
    sites = refusal_sites(ast.parse(source), "commands/mcp/server.py")
    assert [s.rsplit(":", 2)[0] for s in sites] == [
        "commands/mcp/server.py:a", "commands/mcp/server.py:b", "commands/mcp/server.py:c",
        "commands/mcp/server.py:d",
    ]  # fmt: skip
