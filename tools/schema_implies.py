"""Derive ``schema_floor.IMPLIES`` from the repository's history (SPEC.md section 2).

An event of kind ``K`` at schema ``v`` shows that its writer recorded every other kind at least
at the version that kind had in every perfledger commit whose code records ``K`` at exactly
``v``. This script reads ``SCHEMA_VERSIONS`` of :mod:`perfledger.events.workflow` at every
commit that changed that file (branches merged into ``HEAD`` included) and at the working tree,
and prints the element-wise minimum per ``(kind, schema)``, as the Python literal that
``src/perfledger/commands/audit/schema_floor.py`` holds.

Usage (from the repository root): ``python tools/schema_implies.py [--check]``. ``--check``
exits 1 when a row of the table asks for more than the history shows (an honest ledger written
by one of those commits would be a finding) or a version in the history has no row.
``tests/audit/test_schema_implies_history.py`` runs the same check.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PATH = "src/perfledger/events/workflow.py"


def versions_of(source: str) -> dict[str, int] | None:
    """``SCHEMA_VERSIONS`` of one version of events/workflow.py, evaluated from its module-level
    integer constants (``max(...)`` of them), or None when the file has no such table."""
    env: dict[str, int] = {}
    table: ast.expr | None = None
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        if not isinstance(target, ast.Name):
            continue
        value = node.value
        assert value is not None
        if target.id == "SCHEMA_VERSIONS":
            table = value
            continue
        try:
            result = eval(  # integer constants and max() only, no builtins
                compile(ast.Expression(value), PATH, "eval"),
                {"__builtins__": {}},
                {**env, "max": max},
            )
        except Exception:  # not an integer constant: skipped
            continue
        if isinstance(result, int) and not isinstance(result, bool):
            env[target.id] = result
    if table is None:
        return None
    return eval(
        compile(ast.Expression(table), PATH, "eval"), {"__builtins__": {}}, {**env, "max": max}
    )


def history(root: Path) -> list[dict[str, int]]:
    """``SCHEMA_VERSIONS`` at every commit of ``HEAD``'s history that changed events/workflow.py,
    and at the working tree. Raises: subprocess.CalledProcessError outside a git checkout."""
    git = ["git", "-C", str(root)]
    commits = subprocess.run(
        [*git, "log", "--format=%H", "--", PATH], capture_output=True, text=True, check=True
    ).stdout.split()
    sources = [
        subprocess.run([*git, "show", f"{c}:{PATH}"], capture_output=True, text=True).stdout
        for c in commits
    ]
    sources.append((root / PATH).read_text(encoding="utf-8"))
    return [v for v in map(versions_of, sources) if v]


def derive(tables: list[dict[str, int]]) -> dict[tuple[str, int], dict[str, int]]:
    """(kind, schema) -> the smallest version of every other kind over the tables that record
    ``kind`` at exactly ``schema`` (kinds at version 1 left out: 1 implies nothing)."""
    kinds = sorted({k for t in tables for k in t})
    rows: dict[tuple[str, int], dict[str, int]] = {}
    for key in sorted({(k, v) for t in tables for k, v in t.items() if v > 1}):
        writers = [t for t in tables if t.get(key[0], 1) == key[1]]
        floors = {o: min(t.get(o, 1) for t in writers) for o in kinds if o != key[0]}
        rows[key] = {o: f for o, f in floors.items() if f > 1}
    return rows


def excess(
    table: dict[tuple[str, int], dict[str, int]], derived: dict[tuple[str, int], dict[str, int]]
) -> list[str]:
    """What ``table`` asks beyond ``derived`` (rows for versions absent from the history are
    not judged), and the versions of the history without a row."""
    problems = [f"no row for {key}" for key in derived if key not in table]
    for key, row in table.items():
        if key not in derived:
            continue
        for other, floor in row.items():
            if floor > derived[key].get(other, 1):
                problems.append(
                    f"{key} asks {other} >= {floor}, history shows {derived[key].get(other, 1)}"
                )
    return problems


def render(rows: dict[tuple[str, int], dict[str, int]]) -> str:
    """The table as the Python literal of schema_floor.py."""
    lines = ["IMPLIES: dict[tuple[str, int], dict[str, int]] = {"]
    for (kind, version), row in sorted(rows.items()):
        body = ", ".join(f'"{o}": {f}' for o, f in sorted(row.items()))
        lines.append(f'    ("{kind}", {version}): {{{body}}},')
    lines.append("}  # fmt: skip")
    return "\n".join(lines)


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    derived = derive(history(root))
    if "--check" in sys.argv:
        sys.path.insert(0, str(root / "src"))
        from perfledger.commands.audit.schema_floor import IMPLIES  # noqa: PLC0415 (the table under check)

        problems = excess(IMPLIES, derived)
        print("\n".join(problems) or "ok")
        return 1 if problems else 0
    sys.path.insert(0, str(root / "src"))
    from perfledger.commands.audit.schema_floor import IMPLIES  # noqa: PLC0415 (the table it replaces)

    # a row for a version no commit of the history wrote (a number a branch left unused) stays
    print(render({**{k: v for k, v in IMPLIES.items() if k not in derived}, **derived}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
