"""Ways to evict the L2 cache, timed side by side, each checked that it still evicts.

For each flush over a buffer of 2x the L2 size (CuPy ``fill`` of a uint32 buffer, the harness's
flush until it became a ``cudaMemsetAsync``; ``cudaMemsetAsync``, its flush now; a kernel of
16-byte stores; a kernel of 16-byte loads): the median event time of one flush, and the median
event time of a pointer chase right after it (one thread, dependent loads over 128-byte lines of
a 16 MiB buffer in random order), the chase having just run once (its lines warm). A flush that
evicts leaves the chase at DRAM latency per step; one that does not leaves it at L2 latency, as
with no flush at all.

Needs CuPy and a GPU. Run on the device::

    python bench/l2_flush_probe.py --repeats 51
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

STORE_SOURCE = r"""
extern "C" __global__ void store16(uint4* buf, unsigned long long n16, unsigned int value) {
    uint4 v = make_uint4(value, value, value, value);
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n16; i += (unsigned long long)gridDim.x * blockDim.x) {
        buf[i] = v;
    }
}
extern "C" __global__ void chase(const unsigned int* next, unsigned int steps,
                                 unsigned int* sink) {
    unsigned int i = 0;
    for (unsigned int s = 0; s < steps; ++s) i = next[i];
    sink[1] = i;
}
extern "C" __global__ void load16(const uint4* buf, unsigned long long n16, unsigned int* sink) {
    unsigned int acc = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n16; i += (unsigned long long)gridDim.x * blockDim.x) {
        uint4 v = buf[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;
}
"""


def main() -> None:
    """Print one line per flush: its time, bandwidth, and the probe read after it."""
    import cupy
    import numpy as np

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=51)
    args = parser.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    l2 = int(props["l2CacheSize"])
    sms = int(props["multiProcessorCount"])
    nbytes = 2 * l2
    buf = cupy.empty(nbytes // 4, dtype=cupy.uint32)
    lines, steps = (16 << 20) // 128, 4096
    order = np.random.default_rng(1).permutation(lines).astype(np.uint64) * 32
    host_next = np.zeros(lines * 32, dtype=np.uint32)
    host_next[order] = order.take(np.arange(1, lines + 1) % lines)  # one cycle through all
    probe = cupy.asarray(host_next)
    sink = cupy.zeros(2, dtype=cupy.uint32)
    module = cupy.RawModule(code=STORE_SOURCE)
    store16, load16 = module.get_function("store16"), module.get_function("load16")
    chase = module.get_function("chase")
    n16 = nbytes // 16
    state = {"value": 0}

    def fill() -> None:
        state["value"] = (state["value"] + 1) & 0xFFFF
        buf.fill(state["value"])

    def memset() -> None:
        state["value"] = (state["value"] + 1) & 0xFF
        cupy.cuda.runtime.memsetAsync(buf.data.ptr, state["value"], nbytes,
                                      cupy.cuda.get_current_stream().ptr)  # fmt: skip

    def stores(blocks: int) -> Callable[[], None]:
        def run() -> None:
            state["value"] += 1
            store16((blocks,), (1024,), (buf, cupy.uint64(n16), cupy.uint32(state["value"])))

        return run

    def loads() -> None:
        load16((sms * 4,), (1024,), (buf, cupy.uint64(n16), sink))

    def read_probe() -> None:
        chase((1,), (1,), (probe, cupy.uint32(steps), sink))

    flushes: dict[str, Callable[[], None] | None] = {
        "none (warm)": None,
        "cupy fill (harness)": fill,
        "memsetAsync": memset,
        f"store16 {sms * 4} blocks": stores(sms * 4),
        f"store16 {sms * 8} blocks": stores(sms * 8),
        f"load16 {sms * 4} blocks": loads,
    }
    events = [cupy.cuda.Event() for _ in range(3)]
    print(f"L2 {l2 / 2**20:.0f} MiB, flush buffer {nbytes / 2**20:.0f} MiB, probe: chase of "
          f"{steps} steps, {args.repeats} repeats", flush=True)  # fmt: skip
    for name, flush in flushes.items():
        flush_us, probe_us = [], []
        for _ in range(args.repeats):
            read_probe()  # the probe warm in L2
            events[0].record()
            if flush is not None:
                flush()
            events[1].record()
            read_probe()
            events[2].record()
            events[2].synchronize()
            flush_us.append(cupy.cuda.get_elapsed_time(events[0], events[1]) * 1e3)
            probe_us.append(cupy.cuda.get_elapsed_time(events[1], events[2]) * 1e3)
        f, p = statistics.median(flush_us), statistics.median(probe_us)
        gbs = nbytes / (f * 1e-6) / 1e9 if flush is not None else float("nan")
        step_ns = p * 1e3 / steps
        print(f"{name:24s} flush {f:8.1f} us ({gbs:6.0f} GB/s)  chase after {p:7.1f} us "
              f"({step_ns:5.0f} ns a step)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
