"""The workflow's figures: a 10,000-event optimization session recorded through the library, then
``perfledger state --json`` (warm cache) and one CLI append, each timed as a whole process.

Run: ``.venv/bin/python bench/workflow_bench.py [--events N] [--runs R] [--workdir DIR]``.
The session is the workflow tests' scenario (tests/workflow/wf_scenario.py): a frozen Target,
readiness, metric audit, baseline and resolution, then experiments, each with a screen's paired
samples and their derived verdict, and evidence. The ledger is built once per source version
and event count under ``--workdir`` and reused.

Goals: ``state`` <= 0.3 s with a warm cache; one CLI append <= 0.3 s. Two appends
are timed: ``perfledger note`` (an append with no decision) and ``perfledger evidence add
--request`` (a workflow decision: request validated, state read, decider run, event appended).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.3


def build(path: Path, events: int) -> int:
    """Record a session of about ``events`` events at ``path``; returns the event count."""
    sys.path.insert(0, str(ROOT))
    from tests.workflow import wf_scenario as wf

    from perfledger.api import Ledger

    with Ledger.init(path, name="workflow-bench", actor=wf.ACTOR) as ledger:
        session = wf.Session(ledger).ready()
        i = 0
        while ledger.store.count() < events:
            i += 1
            session.screened(f"e{i}", candidate=f"sha256:{i:016x}")
            session.run("evidence.add", wf.evidence(f"ev-{i}"))
        return ledger.store.count()


def cli(args: list[str], ledger: Path, stdin: bytes | None = None) -> float:
    """Run the installed ``perfledger`` once; returns its wall time in seconds."""
    exe = Path(sys.executable).with_name("perfledger")
    env = {**os.environ, "PERFLEDGER_DIR": str(ledger)}
    started = time.perf_counter()
    proc = subprocess.run([str(exe), *args], input=stdin, capture_output=True, env=env)
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"perfledger {' '.join(args)} exited {proc.returncode}: {proc.stderr!r}")
    return wall_s


def main() -> int:
    """Build (or reuse) the session, time the commands, print figures and goals."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "plbench-wf"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    path = Path(args.workdir) / f"session-{args.events}"
    if not (path / "refs" / "heads" / "ledger").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        count = build(path, args.events)
        print(
            f"recorded {count:,} events in {time.perf_counter() - started:.1f} s", file=sys.stderr
        )
    cli(["state", "--json"], path)  # warm the state cache
    state_s = [cli(["state", "--json"], path) for _ in range(args.runs)]
    append_s = [cli(["note", f"bench append {i}"], path) for i in range(args.runs)]
    decision_s = []
    for i in range(args.runs):
        body = {
            "evidence_id": f"bench-{time.time_ns()}-{i}",
            "layer": "kernel",
            "tool": {"name": "ncu", "version": "2025.3.1"},
            "facts": [{"name": "dram_throughput", "value": 2.1, "unit": "TB/s"}],
        }
        decision_s.append(
            cli(["evidence", "add", "--request", "-"], path, json.dumps(body).encode())
        )
    figures = {
        "events": args.events,
        "state_warm_s": statistics.median(state_s),
        "cli_append_s": statistics.median(append_s),
        "cli_decision_s": statistics.median(decision_s),
        "runs": args.runs,
    }
    if args.json:
        print(json.dumps(figures))
        return 0
    for name, key in (("perfledger state --json (warm)", "state_warm_s"),
                      ("one CLI append (perfledger note)", "cli_append_s"),
                      ("one CLI decision (evidence add)", "cli_decision_s")):  # fmt: skip
        value = figures[key]
        verdict = "PASS" if value <= GOAL_S else "MISS"
        print(f"{name:36s} {value:6.3f} s   goal <= {GOAL_S} s   {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
