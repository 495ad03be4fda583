"""Where a kernel comparison's wall time goes, under each protocol of the harness: one A/A
comparison of the memory-bound scale kernel per protocol (wall seconds, pairs, wall per pair),
then a cProfile of the second protocol's comparison (cumulative host time, device waits
included, of the harness's steps). Needs CuPy and a GPU.

Usage: ``python bench/harness_cost_profile.py [--n 67108864]``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from dataclasses import replace


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 26)
    args = parser.parse_args()
    from perfledger.kernels.harness.examples import scale_problem, scale_subject
    from perfledger.kernels.harness.harness import Harness, HarnessConfig

    subject = scale_subject(args.n)
    base = HarnessConfig(resamples=4000)
    variants = {
        "protocol 1": replace(base, protocol=1),
        "protocol 2": base,
        "protocol 2, + per-call poison": replace(base, poison_every_call=True),
    }
    for label, config in variants.items():
        h = Harness(scale_problem(args.n), config)
        t0 = time.perf_counter()
        c = h.compare(subject, subject)
        wall = time.perf_counter() - t0
        assert c.stats is not None and c.ref is not None
        checked = len(c.ref.checked_calls)
        print(
            f"{label:32s} wall {wall:6.2f} s  pairs {c.stats.n * 2:6d}  wall/pair "
            f"{1e6 * wall / (2 * c.stats.n):7.1f} us  call {1e6 * c.stats.ref_median_s:6.1f} us  "
            f"checked {checked}  valid {c.valid}",
            flush=True,
        )
    h = Harness(scale_problem(args.n), base)
    profile = cProfile.Profile()
    profile.enable()
    h.compare(subject, subject)
    profile.disable()
    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
