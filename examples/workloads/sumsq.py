"""A small CPU workload for perfledger's self-timed workload driver (``measure workload
--protocol self``; no GPU needed): its figures are the subject's own, recorded as reported and
deciding nothing (R5); the worker protocol's subjects are ``perfledger.subject.serve`` workers.

It computes the sum of squares of ``n`` integers (case ``small``: 20,000; ``large``: 80,000; the case
comes from ``$PERFLEDGER_CASE`` or ``--case``), checks the result against the closed form
n(n-1)(2n-1)/6 and prints one JSON object in the driver's protocol::

    {"correct": true, "metrics": {"time_ms": [..per repeat..]}, "detail": {...}}

``--extra-work R`` does R times more work (a slower candidate, e.g. 0.5 = 50 % more);
``--mode`` makes it misbehave on purpose, for the driver's failure tests:
``wrong`` (a wrong answer, correct=false), ``garbage`` (not JSON), ``exit`` (status 3),
``hang`` (sleeps forever), ``nan`` (a NaN metric), ``noshape`` (JSON without ``correct``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

SIZES = {"small": 20_000, "large": 80_000}


def sum_squares(n: int, extra_work: float) -> int:
    """Sum of i*i for i < n, plus ``extra_work * n`` discarded iterations (more work, same answer)."""
    total = 0
    for i in range(n):
        total += i * i
    waste = 0
    for i in range(int(extra_work * n)):
        waste += i * i
    return total if waste >= 0 else -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default=os.environ.get("PERFLEDGER_CASE", "small"))
    parser.add_argument("--extra-work", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--mode", default="ok", choices=["ok", "wrong", "garbage", "exit", "hang", "nan", "noshape"]
    )
    args = parser.parse_args()
    if args.mode == "hang":
        time.sleep(3600)
    if args.mode == "exit":
        print("simulated crash", file=sys.stderr)
        return 3
    if args.mode == "garbage":
        print("this is not json {")
        return 0
    n = SIZES.get(args.case)
    if n is None:
        print(f"unknown case {args.case!r}", file=sys.stderr)
        return 2
    times_ms = []
    result = 0
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = sum_squares(n, args.extra_work)
        times_ms.append((time.perf_counter() - start) * 1e3)
    expected = n * (n - 1) * (2 * n - 1) // 6
    if args.mode == "wrong":
        result += 1
    if args.mode == "nan":
        times_ms[0] = float("nan")
    out: dict[str, object] = {
        "correct": result == expected,
        "metrics": {"time_ms": times_ms},
        "detail": {"n": n, "extra_work": args.extra_work},
    }
    if args.mode == "noshape":
        del out["correct"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
