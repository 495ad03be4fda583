"""CLI start-up stays lazy: commands that do not derive verdicts import neither numpy nor scipy
nor pyarrow (only the ncu raw page parser needs it), nor, for state and plain writes,
``statistics``; and no command imports pydantic (the
requests are msgspec Structs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfledger.api import Ledger

PROBE = """
import os, sys
from perfledger.commands.cli.app import main
modules = os.environ["HEAVY"].split()
heavy = sorted(m for m in modules if m in sys.modules)
assert not heavy, heavy
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted(m for m in modules if m in sys.modules)
assert not heavy, heavy
"""
#: Never imported by these commands; a write that takes no median does not import
#: ``statistics`` either (with ``fractions`` and ``decimal``, ~10 ms of a CLI decision).
HEAVY = "numpy scipy pydantic pyarrow"


@pytest.mark.slow
def test_state_and_writes_do_not_import_numpy_or_scipy(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    Ledger.init(path, name="lazy", actor="a").close()
    request = tmp_path / "advice.json"
    request.write_text('{"advice_id": "h1", "category": "clocks", "advice": "lock clocks"}')
    for argv, heavy in (
        (["--ledger", str(path), "state", "--json"], HEAVY + " statistics"),
        (["--ledger", str(path), "host-advice", "record", "--request", str(request)],
         HEAVY + " statistics"),
        (["--ledger", str(path), "experiment", "list"], HEAVY + " statistics"),
        (["--help"], HEAVY),
    ):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HEAVY": heavy},
        )
        assert done.returncode == 0, (argv, done.stdout, done.stderr)


def test_static_workflow_command_names_match_the_registry() -> None:
    """The CLI loads the workflow's commands lazily by name; the static list must name exactly
    the commands workflow_cli builds, or a command would be unreachable."""
    from perfledger.commands.cli.app import WORKFLOW_COMMANDS
    from perfledger.commands.cli.workflow import commands

    assert {command.name for command in commands()} == set(WORKFLOW_COMMANDS)
