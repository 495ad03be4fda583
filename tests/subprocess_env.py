"""Helpers shared by the suites that drive the real CLI and git as subprocesses."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

#: One cache of the Python installation's file digests for every test process (the
#: environment identity hashes the installation; an isolated HOME would hash it cold each time),
#: one per installation: the cache keeps only the files of the last installation that wrote it, so
#: the suites of two checkouts run side by side would otherwise rehash each other's away.
SHARED_CACHE = Path(tempfile.gettempdir()) / (
    f"perfledger-test-cache-{os.getuid()}-{hashlib.sha256(sys.prefix.encode()).hexdigest()[:12]}"
)


def perfledger_command() -> list[str]:
    """Return the argv prefix of the installed console script (``python -m`` as a fallback)."""
    script = Path(sys.executable).with_name("perfledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "perfledger"]


def quiet_monitor_command() -> list[str]:
    """The argv prefix of the CLI whose baseline and A/A monitor is a quiet stand-in
    (tests/quiet_monitor_cli.py): for tests of what they record that the shared host's other
    load must not refuse (R17)."""
    return [sys.executable, str(Path(__file__).with_name("quiet_monitor_cli.py"))]


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


#: Python source that runs the ``perfledger`` CLI (``sys.argv[1:]``) and then writes its own peak
#: resident set (``VmHWM`` of /proc/self/status, KiB) to the file named by ``PEAK_RSS_FILE``.
#: ``ru_maxrss`` of a child cannot stand in: Linux carries the spawning process's high-water mark
#: across ``exec``, so a child of a large pytest process "peaked" at pytest's size.
_PEAK_RSS_WRAPPER = """
import os, runpy, sys
try:
    runpy.run_module("perfledger", run_name="__main__", alter_sys=True)
finally:
    with open("/proc/self/status") as status:
        peak = next(l.split()[1] for l in status if l.startswith("VmHWM:"))
    with open(os.environ["PEAK_RSS_FILE"], "w") as out:
        out.write(peak)
"""


def peak_rss_command() -> list[str]:
    """The argv prefix that runs the CLI in this interpreter and records its own peak RSS in the
    file named by the ``PEAK_RSS_FILE`` environment variable (read it with :func:`peak_rss_mib`)."""
    return [sys.executable, "-c", _PEAK_RSS_WRAPPER]


def peak_rss_mib(path: Path) -> float:
    """The peak resident set (MiB) a process started by :func:`peak_rss_command` wrote to ``path``."""
    return int(path.read_text()) / 1024
