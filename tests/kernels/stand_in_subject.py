"""A stand-in subject process for the isolation tests (CPU): answers the JSON-lines protocol of
:mod:`perfledger.kernels.isolation.isolation`, doing ``--work-k`` thousand steps of arithmetic per call
(a fixed amount of CPU work: on a loaded machine its time stretches the same way for every
subject) and returning ``answer(seed)`` as each call's output.

Cheats, by option: ``--report-factor F`` reports F x the time it measured (a patched clock);
``--report-s T`` reports T seconds per call whatever it took; ``--wrong-every N`` returns a
wrong output on every N-th call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def answer(seed: int) -> int:
    """The output a call on ``seed`` must return."""
    return (seed * 2654435761) % 2**32


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work-k", type=int, required=True)
    parser.add_argument("--report-factor", type=float, default=1.0)
    parser.add_argument("--report-s", type=float, default=None)
    parser.add_argument("--wrong-every", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=None, help="run on this CPU only")
    args = parser.parse_args()
    if args.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    calls = 0
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "exit":
            return 0
        times, outputs = [], []
        for seed in request["seeds"]:
            calls += 1
            t0 = time.perf_counter()
            x = seed & 0xFFFFFFFF
            for _ in range(args.work_k * 1000):  # the call's "work"
                x = (x * 1103515245 + 12345) & 0xFFFFFFFF
            took = time.perf_counter() - t0
            times.append(args.report_s if args.report_s is not None else took * args.report_factor)
            wrong = args.wrong_every and calls % args.wrong_every == 0
            outputs.append(answer(seed) + 1 if wrong else answer(seed))
        sys.stdout.write(json.dumps({"times_s": times, "outputs": outputs}) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
