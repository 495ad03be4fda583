"""``make demo``: run the GPU session when a GPU and CuPy are usable here, else the CPU session.

Both drive a whole optimization session through the ``perfledger`` CLI and finish with
``perfledger audit``; each prints where its ledger and its report are. Extra arguments are passed
to the session (``--dir DIR``, ``--quiet``). ``PERFLEDGER_DEMO=cpu`` (or ``gpu``) forces one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def gpu_usable() -> bool:
    """True when CuPy imports and sees at least one CUDA device (checked in a child process, so a
    broken CUDA install cannot take this one down)."""
    probe = "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def main() -> int:
    """Pick the session and run it; returns its exit status."""
    choice = os.environ.get("PERFLEDGER_DEMO") or ("gpu" if gpu_usable() else "cpu")
    if choice not in {"cpu", "gpu"}:
        print(f"PERFLEDGER_DEMO must be cpu or gpu, not {choice!r}", file=sys.stderr)
        return 2
    script = HERE / f"{choice}_session" / "session.py"
    print(f"perfledger demo: the {choice.upper()} session ({script.relative_to(HERE.parent)})",
          flush=True)  # fmt: skip
    return subprocess.run([sys.executable, str(script), *sys.argv[1:]], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
