"""The README's code blocks run as written (GUIDE.md: the README cannot drift).

The ``make`` block is not run here (``make test`` is what runs this file); the CLI block runs in a
shell with this interpreter's scripts first on PATH, and the Python block runs in-process, both
with their ``/tmp/...`` paths moved into the test's temporary directory.
"""

from __future__ import annotations

import json
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


def test_readme_schema_block_runs(tmp_path: Path) -> None:
    """The schema example writes a JSON Schema that names the request's fields."""
    block = next(b for b in _blocks("sh") if "perfledger schema" in b)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    schema = json.loads((tmp_path / "target.schema.json").read_text())
    assert "min_effect" in json.dumps(schema)


def test_readme_python_block_runs(tmp_path: Path, capsys: object) -> None:
    """The library example runs and prints a passing verification."""
    block = next(b for b in _blocks("python") if "perfledger.init" in b)
    code = block.replace("/tmp/", f"{tmp_path}/")
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.startswith("True 2 ")


def test_readme_example_requests_block_runs(tmp_path: Path) -> None:
    """The loop over ``examples/requests/`` runs from the repository root and ends with the
    champion it should."""
    block = next(b for b in _blocks("sh") if "examples/requests" in b)
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["TMPDIR"] = str(tmp_path)
    env.pop("PERFLEDGER_DIR", None)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block],
        cwd=README.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "e1" in done.stdout and "t1" in done.stdout
