"""docs/profilers.md's evidence blocks run as written (GUIDE.md: the docs cannot drift)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _block(language: str, needle: str) -> str:
    blocks = re.findall(
        rf"```{language}\n(.*?)```", (ROOT / "docs" / "profilers.md").read_text(), flags=re.S
    )
    return next(b for b in blocks if needle in b)


@pytest.mark.slow
def test_profilers_doc_evidence_block_runs(tmp_path: Path) -> None:
    script = _block("sh", "evidence add --kind").replace("/tmp/", f"{tmp_path}/")
    script = script.replace("F=tests/fixtures/profilers", f"F={ROOT}/tests/fixtures/profilers")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLEDGER_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PERFLEDGER_ACTOR"] = "docs"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sass-1" in done.stdout and "trace-1" in done.stdout
    shown = json.loads((tmp_path / "sol-1.json").read_text())
    assert shown["evidence"]["tool"]["version"] == "2025.3.1.0"
    assert shown["artifacts"]["report"]["size"] > 0


def test_profilers_doc_digest_block_runs(capsys: object, monkeypatch: object) -> None:
    monkeypatch.chdir(ROOT)  # type: ignore[attr-defined]
    exec(compile(_block("python", "top_metrics_per_axis"), "docs/profilers.md", "exec"), {})
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "saxpy(int, float, const float *, float *) latency" in out
    assert "fma_loop(int, int, float *) compute" in out
