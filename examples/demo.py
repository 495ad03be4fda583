"""The main job until the workflow exists: create a ledger in a temporary directory, append a few
events through the CLI (as an agent would), verify them, and check the result with the real git.

Run with ``make demo``. Prints where the ledger is; exits non-zero if anything fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile


def run(*args: str, ledger: str) -> str:
    """Run ``perfledger --ledger LEDGER ARGS`` and return its stdout; exit on failure."""
    cmd = [sys.executable, "-m", "perfledger", "--ledger", ledger, *args]
    print("$ perfledger " + " ".join(args), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.stdout:
        print(done.stdout.rstrip())
    if done.returncode != 0:
        print(done.stderr.rstrip(), file=sys.stderr)
        sys.exit(done.returncode)
    return done.stdout


def main() -> None:
    """Create, append, verify, and cross-check with git."""
    workdir = tempfile.mkdtemp(prefix="perfledger-demo-")
    ledger = os.path.join(workdir, "ledger.git")
    os.environ.setdefault("PERFLEDGER_ACTOR", "demo-agent")
    run("init", ledger, "--name", "demo", ledger=ledger)
    run(
        "note",
        "Baseline kernel is memory-bound (first look at the profile).",
        "--tag",
        "triage",
        ledger=ledger,
    )
    run("note", "Retry-safe note", "--idempotency-key", "demo-note-1", ledger=ledger)
    run(
        "note", "Retry-safe note", "--idempotency-key", "demo-note-1", ledger=ledger
    )  # no duplicate
    run("log", ledger=ledger)
    report = json.loads(run("verify", "--json", ledger=ledger))
    if not report["ok"] or report["events"] != 3:
        sys.exit(f"demo: unexpected verify report {report}")
    if shutil.which("git"):
        print("$ git fsck --strict --full")
        subprocess.run(["git", "--git-dir", ledger, "fsck", "--strict", "--full"], check=True)
        print("$ git log --oneline ledger")
        subprocess.run(["git", "--git-dir", ledger, "log", "--oneline", "ledger"], check=True)
    print(f"\nledger: {ledger}")
    print(f"verified: {report['events']} events, state_hash {report['state_hash']}")


if __name__ == "__main__":
    main()
