"""Fixtures of the loop tests: the perfledger console script as a real subprocess on ledgers in
``tmp_path`` (no mocks), and the paths of the embedded examples (``examples/loop``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from subprocess_env import isolated_env, perfledger_command

Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def loop_cli(tmp_path: Path) -> Cli:
    """Run ``perfledger --ledger <tmp>/ledger ...`` (creating the ledger on first use); asserts
    that no traceback reaches the user."""
    env = isolated_env(tmp_path / "home")
    (tmp_path / "home").mkdir(exist_ok=True)
    ledger = tmp_path / "ledger"
    prefix = perfledger_command()
    subprocess.run([*prefix, "init", str(ledger)], env=env, check=True, capture_output=True)

    def run(
        *args: str | os.PathLike[str], timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*prefix, "--ledger", str(ledger), *map(os.fspath, args)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        return proc

    run.ledger = ledger  # type: ignore[attr-defined]
    return run
