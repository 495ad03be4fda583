"""Does the stream hold change a kernel's measured time? The median call of one subject
(``bench/subjects_bench.py``'s kernels: ``tiny``, ``elementwise``) measured by the harness with
``hold_stream`` on and off, alternating, in one process, beside nvbench's cold mean where
``cuda-bench`` loads (``bench/nvbench_tool.py``).

A hold is a kernel of one block per SM with the most shared memory a block may have; the
subject's kernel runs right after it. If the switch of the SMs' shared-memory configuration
between the two, or the hold's release, landed inside the event time, the held median would
exceed the one without a hold by about that much on a kernel of a few microseconds.

Run on a GPU machine::

    python bench/hold_overhead_probe.py --kernel tiny --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    """Run the probe; print one line per measurement and a summary (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=("tiny", "elementwise"), default="tiny")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nvbench", action="store_true", help="one nvbench run beside it")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch

    import subjects_bench
    from perfledger.kernels.harness import Harness, HarnessConfig
    from perfledger.kernels.stopping import StoppingRule

    k = subjects_bench.kernels(torch, quick=False)[args.kernel]
    scale = k.get("gpu_s_scale", 1.0)
    rule = StoppingRule(min_gpu_s=0.2 * scale, max_gpu_s=3.0 * scale)
    medians: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(args.rounds):
        for hold in ("on", "off"):
            h = Harness(k["problem"], HarnessConfig(stopping=rule, hold_stream=hold == "on"))
            m = h.measure(k["a"])
            assert m.timing is not None, m.flags
            medians[hold].append(m.timing.median_s)
            counts = m.settings.get("stream_hold_counts")
            print(f"round {r} hold {hold}: median call {m.timing.median_s * 1e6:.3f} us over "
                  f"{len(m.timing.samples_s)} calls; {counts}", flush=True)  # fmt: skip
    out = {h: statistics.median(v) for h, v in medians.items()}
    print(f"median of medians: held {out['on'] * 1e6:.3f} us, not held {out['off'] * 1e6:.3f} us,"
          f" held / not held {out['on'] / out['off']:.4f}")  # fmt: skip
    if args.nvbench:
        import nvbench_tool

        why = nvbench_tool.available()
        if why is None:
            nv = nvbench_tool.run_variants(args.kernel)
            out["nvbench_cold_mean_s"] = nv["a"]
            print(f"nvbench cold mean {nv['a'] * 1e6:.3f} us (a2 {nv['a2'] * 1e6:.3f} us): held /"
                  f" nvbench {out['on'] / nv['a']:.4f}, not held / nvbench "
                  f"{out['off'] / nv['a']:.4f}")  # fmt: skip
        else:
            print(why)
    if args.json:
        Path(args.json).write_text(json.dumps({"medians_s": medians, **out}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
