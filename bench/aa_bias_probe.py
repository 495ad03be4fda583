"""Where does the A/A bias of two workers come from? (subjects in processes of their own)

An A/A comparison of a short memory-bound kernel in two workers read ratios 0.5-1.1 % from 1,
confidence intervals excluding 1, the sign changing from one pair of workers to the next, while
the same kernel timed in one process moved by less than 0.1 % from one process to the next
(``bench/placement_probe.py``). This probe runs ``--runs`` A/A comparisons per variant of the
isolation settings and prints, per comparison: the ratio and its interval, and per subject the
median time of the first call of a batch against the median of the others (a GPU context switch
between the workers' batches would slow the first call after it), and the stream hold's counts.

Needs CuPy and a GPU. Run on the device::

    python bench/aa_bias_probe.py --runs 4
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

SPEC = """
from perfledger.kernels.harness.examples import scale_problem, scale_subject
from perfledger.kernels.harness.harness import HarnessConfig
from perfledger.kernels.harness.stopping import StoppingRule
PROBLEMS = {"scale": scale_problem(%(n)d)}
REFERENCE = scale_subject(%(n)d)
CANDIDATE = scale_subject(%(n)d, name="again")
CONFIG = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2, max_gpu_s=2.0))
"""


def _first_vs_rest(samples: list[float], calls: int) -> tuple[float, float]:
    first = [s for i, s in enumerate(samples) if i % calls == 0]
    rest = [s for i, s in enumerate(samples) if i % calls != 0]
    return statistics.median(first) * 1e6, statistics.median(rest) * 1e6


def main() -> None:
    """Print one line per comparison and variant."""
    from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--n", type=int, default=1 << 22)
    parser.add_argument("--variants", default="default,batch32,any_cpus")
    args = parser.parse_args()
    variants = {
        "default": IsolationConfig(),
        "batch32": IsolationConfig(calls_per_batch=32),
        "any_cpus": IsolationConfig(same_cpus=False),
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.py"
        spec.write_text(SPEC % {"n": args.n})
        for run in range(args.runs):
            for name in args.variants.split(","):
                c = compare_spec(str(spec), "scale", config=variants[name])
                calls = int(c.settings["isolation_settings"]["calls_per_batch"])
                s = c.stats
                assert c.ref is not None and c.cand is not None and s is not None
                rf, rr = _first_vs_rest(c.ref.samples_s, calls)
                cf, cr = _first_vs_rest(c.cand.samples_s, calls)
                holds = c.settings.get("stream_hold")
                print(
                    f"{name:<8} run {run}: ratio {s.median_ratio:.5f} [{s.ci_low:.5f}, "
                    f"{s.ci_high:.5f}] n={s.n} flags {c.flags}; ref first {rf:.2f} us rest "
                    f"{rr:.2f}; cand first {cf:.2f} rest {cr:.2f}; medians ratio "
                    f"{cr / rr:.5f}; holds {holds}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
