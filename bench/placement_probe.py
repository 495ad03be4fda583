"""Does where a kernel's buffers lie change its time? (the A/A bias of subjects in two workers)

Two workers running the same memory-bound kernel read A/A ratios 0.5-1.1 % away from 1, with
confidence intervals that exclude 1, and the sign changed from one pair of workers to the next.
Each worker allocates its buffers once, so each subject's calls all see one placement. This probe
times one kernel (``y = a * x`` over float32, the L2 flushed before every call) on:

- ``same``: one pair of buffers for every trial (the control: how much a trial's median moves
  by itself);
- ``fresh``: a new ``cudaMalloc`` of each buffer per trial, the old ones kept (new virtual and
  physical memory);
- ``offset``: one arena per buffer, the buffer at a random 512-byte multiple inside it per trial
  (same physical memory, another offset).

A trial is ``--calls`` timed calls after a few untimed ones; its figure is their median event
time. Trials of the three placements are interleaved, so drift falls on all three alike. Printed:
per placement, the median over trials and the spread of the trial medians (standard deviation
and max/min - 1, in %). A ``fresh`` spread well above ``same``'s says placement moves the time.

Needs CuPy and a GPU. Run on the device::

    python bench/placement_probe.py --trials 24
"""

from __future__ import annotations

import argparse
import secrets
import statistics

SOURCE = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < n; i += (unsigned long long)gridDim.x * blockDim.x) {
        y[i] = a * x[i];
    }
}
"""


def main() -> None:
    """Print, per size and placement, the trials' median time and their spread."""
    import cupy

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--calls", type=int, default=31)
    parser.add_argument("--sizes", default="32768,4194304", help="elements, comma-separated")
    args = parser.parse_args()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    l2 = int(props["l2CacheSize"])
    sms = int(props["multiProcessorCount"])
    flush = cupy.cuda.Memory(2 * l2)
    kernel = cupy.RawModule(code=SOURCE).get_function("scale")
    stream = cupy.cuda.Stream(non_blocking=True)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()

    def timed(x_ptr: int, y_ptr: int, n: int) -> float:
        """Median event time (us) of ``args.calls`` calls on these buffers, flushed before each."""
        blocks = min(4 * sms, (n + 255) // 256)
        times = []
        for k in range(args.calls + 3):
            cupy.cuda.runtime.memsetAsync(flush.ptr, k & 0xFF, flush.size, stream.ptr)
            start.record(stream)
            kernel(
                (blocks,),
                (256,),
                (x_ptr, y_ptr, cupy.float32(1.5), cupy.uint64(n)),
                stream=stream,
            )
            end.record(stream)
            end.synchronize()
            if k >= 3:
                times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3)
        return statistics.median(times)

    print(f"# {props['name'].decode()}; L2 {l2 >> 20} MiB; {args.trials} trials of {args.calls} "
          "calls per placement, interleaved")  # fmt: skip
    for n in (int(s) for s in args.sizes.split(",")):
        nbytes = 4 * n
        same = (cupy.cuda.Memory(nbytes), cupy.cuda.Memory(nbytes))
        arena_bytes = nbytes + (4 << 20)
        arenas = (cupy.cuda.Memory(arena_bytes), cupy.cuda.Memory(arena_bytes))
        kept: list[object] = []
        results: dict[str, list[float]] = {"same": [], "fresh": [], "offset": []}
        for _ in range(args.trials):
            for mode in results:
                if mode == "same":
                    x, y = same[0].ptr, same[1].ptr
                elif mode == "fresh":
                    bufs = (cupy.cuda.Memory(nbytes), cupy.cuda.Memory(nbytes))
                    kept.append(bufs)
                    x, y = bufs[0].ptr, bufs[1].ptr
                else:
                    slots = (arena_bytes - nbytes) // 512
                    x = arenas[0].ptr + 512 * secrets.randbelow(slots)
                    y = arenas[1].ptr + 512 * secrets.randbelow(slots)
                results[mode].append(timed(x, y, n))
        for mode, values in results.items():
            mid = statistics.median(values)
            sd = 100 * statistics.stdev(values) / mid
            span = 100 * (max(values) / min(values) - 1)
            print(f"n={n:>9} {mode:<7} median {mid:9.3f} us  sd {sd:6.3f} %  max/min-1 "
                  f"{span:6.3f} %  trials {' '.join(f'{v:.2f}' for v in values[:8])} ...")  # fmt: skip
        del kept


if __name__ == "__main__":
    main()
