"""Plain ``pytest`` works from the repository root (issue 33): the console script, unlike
``python -m pytest``, does not put the working directory on ``sys.path``, so test modules that
import helpers from ``tests.<dir>.conftest`` modules failed at collection until pyproject.toml's pytest
configuration named the root in ``pythonpath``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Test modules that import helpers from ``tests.conftest`` and ``tests.git.conftest``.
IMPORTERS = ("tests/ledger/test_refcas.py", "tests/git/test_ref_lock.py")


@pytest.mark.slow
def test_plain_pytest_from_the_root_collects_modules_importing_from_tests() -> None:
    script = Path(sys.executable).with_name("pytest")
    if not script.exists():
        pytest.skip("no pytest console script beside this interpreter")
    for module in IMPORTERS:
        assert "from tests." in (ROOT / module).read_text(), module
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    done = subprocess.run(
        [str(script), "--collect-only", "-q", "-p", "no:cacheprovider", *IMPORTERS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "error" not in done.stdout.lower(), done.stdout
