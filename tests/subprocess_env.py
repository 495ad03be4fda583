"""Helpers shared by the suites that drive the real CLI and git as subprocesses."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

#: One cache of the Python installation's file digests for every test process (the
#: environment identity hashes the installation; an isolated HOME would hash it cold each time).
SHARED_CACHE = Path(tempfile.gettempdir()) / f"perfledger-test-cache-{os.getuid()}"


def perfledger_command() -> list[str]:
    """Return the argv prefix of the installed console script (``python -m`` as a fallback)."""
    script = Path(sys.executable).with_name("perfledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "perfledger"]


def isolated_env(home: Path) -> dict[str, str]:
    """Return an environment with no user/system git config, no GIT_* and no PERFLEDGER_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PERFLEDGER_"))}
    env.update(
        HOME=str(home),
        USER="tester",
        LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        PERFLEDGER_CACHE_DIR=str(SHARED_CACHE),
    )
    return env
