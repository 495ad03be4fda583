"""docs/sync.md's walkthrough runs, line by line, in one shell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "sync.md"


@pytest.mark.slow
def test_sync_doc_walkthrough_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```sh\n(.*?)```", PAGE.read_text(), flags=re.S)
    block = next(b for b in blocks if "perfledger clone" in b)
    script = block.replace("/tmp/", f"{tmp_path}/")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PERFLEDGER_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "pull first" in done.stderr  # the refused push
    assert json.loads(done.stdout.strip().splitlines()[-1])["action"] == "up_to_date"
