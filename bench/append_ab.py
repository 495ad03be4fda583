"""Durable appends of two source trees, alternated in one run (an A/B comparison).

Why: this machine's speed varies a lot over a session (the host slows its CPUs, and the disk,
an ext4 mounted with ``discard``, is slower for seconds after files are deleted), so figures
from different runs of ``ledger_bench.py`` compare badly. Here the same workload, the bench's
``pl_single`` (``Ledger.append`` of 2,000 ``NoteRecorded`` events on a fresh ledger), runs in a
fresh process for each tree in turn (``--workload batched``: the bench's ``pl_batched``,
batches of 1,000), ``--runs`` times, with the bench's CPU check before each
run, and the medians are compared. ``--workload verify``: a ledger of ``--events`` built in
batches (untimed), then verified after its derived directory is dropped (the bench's
``child_verify``); ``--workload floor``: the disk's floor for one durable append.

Usage: ``python bench/append_ab.py --a OLD_TREE --b NEW_TREE --workdir DIR [--runs 5]
[--workload single|batched|verify|floor] [--events N]``
where each tree is a checkout of perfledger (its ``src/`` is put first on ``sys.path``; a
``git worktree add`` of an older commit, say). Prints one line per run, then the medians and
the ratio B/A.
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

_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.path.join(sys.argv[1], "src"))
sys.path.insert(0, os.path.join(sys.argv[2]))
import ledger_bench as lb
import perfledger
assert perfledger.__file__.startswith(os.path.join(sys.argv[1], "src")), perfledger.__file__
check = lb.cpu_check_ms()
workload, path, n = sys.argv[5], sys.argv[3], int(sys.argv[4])
if workload == "verify":  # built untimed with this tree, then verified with the derived dir dropped
    lb.pl_batched(path, n)
    result = lb.child_verify(path)
elif workload == "floor":  # the disk's floor (the same system calls whichever tree)
    result = lb.fs_floor(path, n)
else:
    result = (lb.pl_single if workload == "single" else lb.pl_batched)(path, n)
print(json.dumps({"eps": result["eps"], "cpu_eps": result["cpu_eps"], "cpu_check_ms": check}))
"""


def run_one(tree: str, workdir: str, events: int, workload: str) -> dict[str, float]:
    """One fresh process appending ``events`` events (``workload``: ``single`` appends or
    ``batched``, batches of 1,000) with ``tree``'s perfledger."""
    target = tempfile.mkdtemp(prefix="ab-", dir=workdir)
    bench_dir = os.path.dirname(os.path.abspath(__file__))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            os.path.abspath(tree),
            bench_dir,
            target + "/l",
            str(events),
            workload,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Parse the arguments, alternate the two trees, print the runs and the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="source tree A (the baseline)")
    parser.add_argument("--b", required=True, help="source tree B")
    parser.add_argument("--workdir", required=True, help="where the ledgers are made (kept)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument(
        "--workload", choices=["single", "batched", "verify", "floor"], default="single"
    )
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between runs")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    print(
        f"A = {args.a}\nB = {args.b}\n{args.events:,} {args.workload} appends per run, alternated"
    )
    for i in range(args.runs):
        for name, tree in (
            (("A", args.a), ("B", args.b))
            if i % 2 == 0
            else (
                ("B", args.b),
                ("A", args.a),
            )
        ):
            r = run_one(tree, args.workdir, args.events, args.workload)
            results[name].append(r)
            print(
                f"run {i + 1} {name}: {r['eps']:7.0f} events/s  {r['cpu_eps']:7.0f} per CPU-s  "
                f"(CPU check {r['cpu_check_ms']:.0f} ms)",
                flush=True,
            )
            time.sleep(args.pause)
    med = {k: statistics.median(r["eps"] for r in v) for k, v in results.items()}
    cpu = {k: statistics.median(r["cpu_eps"] for r in v) for k, v in results.items()}
    print(f"median A: {med['A']:.0f} events/s ({cpu['A']:.0f} per CPU-second)")
    print(f"median B: {med['B']:.0f} events/s ({cpu['B']:.0f} per CPU-second)")
    print(f"B / A: {med['B'] / med['A']:.2f}x wall, {cpu['B'] / cpu['A']:.2f}x per CPU-second")


if __name__ == "__main__":
    main()
