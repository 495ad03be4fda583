"""The README's code blocks run as written (GUIDE.md: the README cannot drift).

The ``make`` block is not run here (``make test`` is what runs this file); the session block runs
in a shell with this interpreter's scripts first on PATH, its ``/tmp/...`` paths moved into the
test's temporary directory. The docs pages' blocks are run by ``tests/test_docs.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_cli_block_runs(tmp_path: Path) -> None:
    """Every line of the CLI walkthrough succeeds, in order, in one shell."""
    block = next(b for b in _blocks("sh") if "perfledger init" in b)
    script = block.replace("/tmp/", f"{tmp_path}/").replace(". .venv/bin/activate", "true")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env.pop("PERFLEDGER_DIR", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "state_hash" in done.stdout
    assert "Traceback" not in done.stderr
