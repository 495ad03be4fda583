"""Paths of the loop examples and the JSON answer of a CLI call (a module with a unique name:
``conftest`` is ambiguous when several test directories are collected together)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CPU_EXAMPLE = ROOT / "examples" / "loop" / "cpu"
CUDA_EXAMPLE = ROOT / "examples" / "loop" / "cuda"


def answer(proc: subprocess.CompletedProcess[str]) -> Any:
    """The one JSON object a ``--json`` command printed (asserting exit 0)."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)
