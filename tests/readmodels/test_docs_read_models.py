"""docs/workflow.md's read-model block runs as written on the scripted session's ledger."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rm_session import scripted_ledger

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workflow.md"


@pytest.mark.slow
def test_workflow_doc_read_model_block_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    block = next(b for b in blocks if "perfledger audit" in b)
    ledger = scripted_ledger(tmp_path / "ledger")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLEDGER_")}
    env.update(PERFLEDGER_DIR=str(ledger), PERFLEDGER_ACTOR="docs")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace("/tmp/", f"{tmp_path}/")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "ok: " in done.stdout and "# Handoff: t1" in done.stdout
    assert "HandoffRecorded" in done.stdout and "## Next decisions the rules allow" in done.stdout
    assert (tmp_path / "report.html").stat().st_size > 10_000


def test_static_read_model_command_names_match_the_module() -> None:
    """The CLI loads the read models lazily by name: the static list in cli.py must name exactly
    the top-level commands readmodels_cli adds, or one would be unreachable."""
    from perfledger.commands.cli.app import READMODEL_COMMANDS
    from perfledger.commands.cli.readmodels import READMODEL_COMMANDS as MODULE_COMMANDS

    assert READMODEL_COMMANDS == MODULE_COMMANDS
