"""docs/knowledge.md's shell blocks run as written, in order, in one shell (the page cannot
drift), with their ``/tmp/...`` paths moved into the test's temporary directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "knowledge.md"


@pytest.mark.slow
def test_knowledge_page_shell_blocks_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    assert len(blocks) == 3
    script = "\n".join(blocks).replace("/tmp/", f"{tmp_path}/")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PERFLEDGER_"))}
    env.update(HOME=str(tmp_path), USER="tester", GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=os.devnull)  # fmt: skip
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "hopper.tma" in out and "no card matched" in out and "blocks nothing" in out
    assert "related      team.split_softmax" in out  # no --env: its sm_90 is unchecked
    assert "recorded as diagnostic evidence kq-graphs" in out
    assert "r1  other" in out and "dissent unresolved" in out
    assert "Traceback" not in done.stderr
