"""Does the stream hold change a kernel's measured time? The median call of one subject
(``bench/subjects_bench.py``'s kernels: ``tiny``, ``elementwise``) measured by the harness with
``hold_stream`` on and off, alternating, in one process, beside nvbench's cold mean where
``cuda-bench`` loads (``bench/nvbench_tool.py``).

A hold is a kernel of one block per SM with the most shared memory a block may have; the
subject's kernel runs right after it. If the switch of the SMs' shared-memory configuration
between the two, or the hold's release, landed inside the event time, the held median would
exceed the one without a hold by about that much on a kernel of a few microseconds.

``--parts`` first times the parts of a call's preparation on their own: the L2 flush (event
time), and the host's wait from queuing a stream hold to seeing it resident on an idle stream.

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


def _parts(repeats: int = 21) -> None:
    """Print the median event time of one L2 flush and the median host wait for a bare hold."""
    import time

    import cupy
    import numpy as np

    from perfledger.kernels.cuda.timing import HOLD_SOURCE, L2Flusher, StreamHold

    l2 = int(cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"])
    flusher = L2Flusher(l2)
    stream = cupy.cuda.Stream(non_blocking=True)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    flush_ms, wait_us = [], []
    with stream:
        hold = StreamHold()
        for _ in range(repeats):
            start.record(stream)
            flusher.flush()
            end.record(stream)
            end.synchronize()
            flush_ms.append(cupy.cuda.get_elapsed_time(start, end))
        for _ in range(repeats):
            t0 = time.perf_counter()
            token = hold.queue()
            resident = hold.wait_resident(token)
            wait_us.append((time.perf_counter() - t0) * 1e6 if resident else float("nan"))
            hold.release(token)
            stream.synchronize()
        # where the wait goes: the same hold kernel without its shared memory, and one block
        hold_kernel = cupy.RawKernel(HOLD_SOURCE, "perfledger_hold")
        words = hold._words
        for label, blocks, smem in (("no shared memory", hold.blocks, 0), ("one block", 1, 0)):
            waits = []
            for i in range(repeats):
                token = 0x7000 + i + (0 if smem else 0x100 * blocks)
                hold._dev.fill(0)
                t0 = time.perf_counter()
                hold_kernel(
                    (blocks,), (1,),
                    (np.uint64(hold._pinned.ptr), np.uint32(token), hold._dev,
                     np.uint64(1_000_000)),
                    shared_mem=smem,
                )  # fmt: skip
                while int(words[1]) != token and time.perf_counter() - t0 < 0.25:
                    pass
                waits.append((time.perf_counter() - t0) * 1e6)
                words[0] = token
                stream.synchronize()
            print(f"  hold kernel, {label}: queued to seen resident "
                  f"{statistics.median(waits):.1f} us", flush=True)  # fmt: skip
    gb = flusher.nbytes / 1e9
    flush = statistics.median(flush_ms)
    print(f"L2 {l2 / 2**20:.0f} MiB, flush {flusher.nbytes / 2**20:.0f} MiB: {flush * 1e3:.1f} us "
          f"({gb / (flush / 1e3):.0f} GB/s); bare hold queued to seen resident: "
          f"{statistics.median(wait_us):.1f} us (median of {repeats})", flush=True)  # fmt: skip


def main() -> int:
    """Run the probe; print one line per measurement and a summary (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=("tiny", "elementwise"), default="tiny")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--nvbench", action="store_true", help="one nvbench run beside it")
    parser.add_argument("--json", default=None)
    parser.add_argument("--parts", action="store_true", help="time the flush and a bare hold")
    args = parser.parse_args()
    if args.parts:
        _parts()
    if args.rounds < 1:
        return 0
    import torch

    import subjects_bench
    from perfledger.kernels.harness.harness import Harness, HarnessConfig
    from perfledger.kernels.harness.stopping import StoppingRule

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
