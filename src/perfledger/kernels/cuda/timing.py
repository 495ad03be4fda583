"""GPU timing primitives of the harness (SPEC.md section 5, "Timing"): CUDA events on the
stream under test, a device-wide synchronize before the end event is read, the host wall time of
each sample checked against event time, and an L2 flush (a buffer of at least twice the L2 size
written) queued before the start event of each cold sample.

The stream under test is held (:class:`StreamHold`) from the flush to the start event while the
call's work is queued (at most :data:`HOLD_MAX_S`), so that the time the host takes to launch it
is not inside the event time, and no other stream's kernel of the process runs while the stream
is held.

Needs CuPy (imported on use). Times are seconds.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Default flush size as a multiple of the L2 size (SPEC.md: at least 2x).
FLUSH_FACTOR = 2.0
#: Flush size when the L2 size is unknown (bytes): larger than any current GPU's L2 x 2.
FALLBACK_FLUSH_BYTES = 256 * 1024 * 1024


#: ``CU_LIMIT_PERSISTING_L2_CACHE_SIZE`` of the driver API (``cuda.h``; the runtime's
#: ``cudaLimitPersistingL2CacheSize``): the L2 set aside for lines marked persisting.
CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06


class PersistingL2:
    """The current context's persisting L2 carve-out, cleared before each flush (issue 36,
    hole 4; docs/kernel-harness.md, "Persisting L2").

    A kernel launched on a stream with an access-policy window (``hitProp`` persisting) keeps
    the window's lines in the carve-out a context set with ``cudaDeviceSetLimit
    (cudaLimitPersistingL2CacheSize, n)``; a flush by writing a buffer evicts only normal
    lines, so such a subject would start every call with its data in L2. :meth:`clear`, called
    before each flush, reads the carve-out (``cuCtxGetLimit``) and, where one is set, turns
    every persisting line back to normal (``cuCtxResetPersistingL2Cache``) and sets the
    carve-out to 0 (``cuCtxSetLimit``), so the flush evicts them; it counts the calls that found
    one (:attr:`found`, :attr:`max_bytes`: the harness refuses such a subject). Through the
    driver library (``libcuda.so.1``) on the context current on this thread (CuPy's);
    :attr:`available` is False where it cannot be loaded (nothing is checked then).
    """

    def __init__(self) -> None:
        try:
            self._lib: Any = ctypes.CDLL("libcuda.so.1")
            self._lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
            self._lib.cuCtxSetLimit.argtypes = [ctypes.c_int, ctypes.c_size_t]
            self._lib.cuCtxResetPersistingL2Cache.argtypes = []
        except (OSError, AttributeError):
            self._lib = None
        self.available = self._lib is not None
        #: calls whose flush found a carve-out set, and the largest carve-out found (bytes)
        self.found = 0
        self.max_bytes = 0

    def carve_out_bytes(self) -> int | None:
        """The carve-out set on the current context now (bytes); None where it cannot be read."""
        if self._lib is None:
            return None
        value = ctypes.c_size_t(0)
        if self._lib.cuCtxGetLimit(ctypes.byref(value), CU_LIMIT_PERSISTING_L2_CACHE_SIZE) != 0:
            return None
        return int(value.value)

    def clear(self) -> int:
        """Where a carve-out is set: count it, reset the persisting lines to normal and the
        carve-out to 0. Returns: the carve-out found (bytes; 0 when none or unreadable)."""
        found = self.carve_out_bytes() or 0
        if found > 0:
            self.found += 1
            self.max_bytes = max(self.max_bytes, found)
            self._lib.cuCtxResetPersistingL2Cache()
            self._lib.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
        return found

    def to_json(self) -> dict[str, Any]:
        """``{"found": calls, "max_bytes": bytes, "available": bool}``."""
        return {"found": self.found, "max_bytes": self.max_bytes, "available": self.available}


def clear_context_default() -> int:
    """Before a worker loads its subject: make the CUDA context current and clear the persisting
    L2 carve-out a fresh context starts with on some machines (an H100 here started every
    context with one), so that a carve-out a flush finds later is the subject's own (issue 36,
    hole 4; :class:`PersistingL2`). Returns: the carve-out the context started with (bytes; 0
    when none, or where CuPy, a GPU or the driver library is missing)."""
    try:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        cupy.empty(1, dtype=cupy.uint8)  # the primary context, current on this thread
    except Exception:  # no CuPy or no GPU: nothing to clear
        return 0
    persisting = PersistingL2()
    found = persisting.carve_out_bytes() or 0
    if found > 0:
        persisting._lib.cuCtxResetPersistingL2Cache()
        persisting._lib.cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)
    return found


class L2Flusher:
    """Evicts the L2 cache by writing a buffer of ``factor`` x L2 size on a stream.

    The write is a ``cudaMemsetAsync``: it evicts as a kernel's stores do (a pointer chase over
    lines made warm just before runs at DRAM latency after either; ``bench/l2_flush_probe.py``)
    and runs near the memory's write bandwidth, several times faster than CuPy's ``fill``.
    Lines marked persisting are not evicted by a write: each flush first clears the context's
    persisting carve-out (:class:`PersistingL2`, :attr:`persisting`).

    Args:
        l2_bytes: the L2 size (bytes); None uses :data:`FALLBACK_FLUSH_BYTES`.
        factor: multiple of the L2 size to write (>= 2 per SPEC.md section 5).
    Raises: ValueError for ``factor < 2``.
    """

    def __init__(self, l2_bytes: int | None, factor: float = FLUSH_FACTOR) -> None:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        if factor < 2.0:
            raise ValueError("the L2 flush must write at least twice the L2 size")
        size = int(l2_bytes * factor) if l2_bytes else FALLBACK_FLUSH_BYTES
        self.nbytes = size
        self._buf = cupy.empty(size, dtype=cupy.uint8)
        self._value = 0
        self.persisting = PersistingL2()

    def flush(self) -> None:
        """Queue the flush on the current stream (a changing value, so no write is elided),
        persisting lines first turned normal (:class:`PersistingL2`)."""
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        self.persisting.clear()
        self._value = self._value % 255 + 1
        cupy.cuda.runtime.memsetAsync(
            self._buf.data.ptr, self._value, self.nbytes, cupy.cuda.get_current_stream().ptr
        )


#: The hold kernel (:class:`StreamHold`). One block per SM, each with the most dynamic shared
#: memory a block may have, so that while it waits no block of any other kernel fits on any SM
#: (every block also takes the SM's per-block reserve). ``host`` is mapped host memory:
#: ``host[0]`` the release word (the host writes the token), ``host[1]`` the resident word
#: (written by the last block to arrive), ``host[2]`` the timed-out word. ``dev`` is device
#: memory: ``dev[0]`` counts the blocks that started, ``dev[1]`` passes the release on. Only block
#: 0 reads the release word over the bus; the others wait on ``dev[1]``: with every block reading
#: mapped host memory, the host saw the hold resident far later than with one reader
#: (``bench/hold_overhead_probe.py --parts``), time the hold then ran idle in every call.
HOLD_SOURCE = r"""
extern "C" __global__ void perfledger_hold(volatile unsigned int* host, unsigned int token,
                                           unsigned int* dev,
                                           unsigned long long timeout_ns) {
  extern __shared__ unsigned char hog[];
  volatile unsigned int* passed = dev + 1;
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  if (atomicAdd(dev, 1u) == gridDim.x - 1) {
    host[1] = token;
    __threadfence_system();
  }
  if (blockIdx.x == 0) {
    while (host[0] != token) {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > timeout_ns) {
        host[2] = token;
        __threadfence_system();
        break;
      }
    }
    *passed = token;
    __threadfence();
  } else {
    while (*passed != token) {
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > timeout_ns) break;
    }
  }
  if (token == 0u) hog[0] = 0;  // never true: keeps the shared memory declared in use
}
"""
#: The longest one hold lasts after its blocks start (seconds), enforced on the device. Well above
#: the host side of an honest call launched from Python (``held_host_s`` in the hold counts), it
#: also ends a hold that a subject's own wait on its stream would otherwise keep (a synchronize, a
#: ``cudaFree``). Host time a hold keeps out of the event time is time a subject could use on the
#: host or the copy engines: at most this much a call, and, in workers, on the measuring process's
#: wall clock in no reported time (the clock check compares it with the reference's).
HOLD_MAX_S = 1e-3
#: The longest the host waits for a hold to own every SM (seconds): the GPU work queued before it
#: (inputs, flush) must finish first. A bound on waiting, not a safety argument.
RESIDENT_WAIT_S = 0.25
#: Holds not resident in time after which a timer stops holding (another process or stream keeps
#: SMs busy; each such call cost :data:`RESIDENT_WAIT_S`).
HOLD_GIVE_UP = 2


class StreamHold:
    """Holds a stream (nvbench's "blocking kernel", made exclusive) while the host queues a
    call's work, then releases it.

    :meth:`queue` launches the hold kernel on the current stream; :meth:`wait_resident` returns
    once every block of it is resident, i.e. once every SM of this context is taken by it and no
    other kernel of this process runs; :meth:`release` lets it end, and so does its allowance
    running out. The work queued on the stream meanwhile then runs back to back, and kernels
    queued on other streams meanwhile wait for the hold's end. Copy engines and the host are not
    held: what they do meanwhile is host time that no event covers (in workers, the measuring
    process's clock check compares it between the subjects).

    Raises RuntimeError at construction when the hold does not work on this device (its
    self-test: a released hold must report itself resident through mapped host memory).
    """

    def __init__(self) -> None:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
        import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

        device = cupy.cuda.Device()
        attrs = device.attributes
        self.blocks = int(attrs["MultiProcessorCount"])
        self.shared_bytes = int(attrs["MaxSharedMemoryPerBlockOptin"])
        self._kernel = cupy.RawKernel(HOLD_SOURCE, "perfledger_hold")
        self._kernel.max_dynamic_shared_size_bytes = self.shared_bytes
        self._pinned = cupy.cuda.alloc_pinned_memory(4 * 4)
        self._words = np.frombuffer(self._pinned, dtype=np.uint32, count=4)
        self._words[:] = 0
        self._dev = cupy.zeros(2, dtype=cupy.uint32)  # the kernel's dev[0], dev[1]
        self._token = 0
        # self-test: released before it starts, the hold must still say it was resident
        token = self.queue(released=True)
        cupy.cuda.runtime.deviceSynchronize()
        if int(self._words[1]) != token:
            raise RuntimeError("the stream hold kernel cannot reach mapped host memory here")

    def queue(self, allowance_s: float = HOLD_MAX_S, released: bool = False) -> int:
        """Queue the hold on the current stream, to end at the latest ``allowance_s`` after its
        blocks start; returns its token."""
        import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

        self._token = (self._token % 0xFFFFFFFE) + 1
        if released:
            self._words[0] = self._token
        self._dev.fill(0)
        self._kernel(
            (self.blocks,),
            (1,),
            (np.uint64(self._pinned.ptr), np.uint32(self._token), self._dev,
             np.uint64(int(allowance_s * 1e9))),
            shared_mem=self.shared_bytes,
        )  # fmt: skip
        return self._token

    def wait_resident(self, token: int, deadline_s: float = RESIDENT_WAIT_S) -> bool:
        """Wait (spinning, at most ``deadline_s``) until every block of the hold ``token`` has
        started (each block bumps the count when it starts, so this comes even when the hold
        has already run out). Returns False when it did not in time (the GPU busy with other
        work)."""
        end = time.perf_counter() + deadline_s
        while int(self._words[1]) != token:
            if time.perf_counter() > end:
                return False
        return True

    def release(self, token: int) -> None:
        """Let the hold ``token`` end."""
        self._words[0] = token

    def timed_out(self, token: int) -> bool:
        """Whether the hold ``token`` ended because its allowance ran out rather than by its
        release (read after the stream completed)."""
        return int(self._words[2]) == token


@dataclass(frozen=True)
class Sample:
    """One timed call.

    Attributes:
        gpu_s: event time from the start to the end event on the stream under test (seconds).
        span_s: event time from before the ``before`` work and the flush to the end event (s).
        wall_s: host wall time from before the flush was queued to after the device-wide
            synchronize (seconds).
        input_set: which rotated input set was used.
        held: the stream was held while the call was queued (:class:`StreamHold`): False
            without a hold, or when it was not resident before the call or timed out.
    """

    gpu_s: float
    span_s: float
    wall_s: float
    input_set: int
    held: bool = False

    @property
    def excess_s(self) -> float:
        """Host wall time not covered by the stream's events (seconds)."""
        return self.wall_s - self.span_s


class EventTimer:
    """Times one call on ``stream`` with three events (before flush, start, end) and a
    device-wide synchronize before reading them.

    With ``hold`` the stream is held (:class:`StreamHold`) between the flush and the start
    event while the call is queued, at most :data:`HOLD_MAX_S`: the event time is then the
    call's GPU work, not the host's launch latency (which, after the process was idle, can be
    several times a small kernel), and no other stream's kernel runs before the start event
    unseen. Host time beyond that is inside the event time, as without a hold. The host time a
    hold keeps out is in ``span_s`` and the wall time, not in ``gpu_s``: in workers the
    measuring process's clock check sees it. A subject that waits on its own stream during a
    call waits for the hold to run out (the sample says it was not held). After
    :data:`HOLD_GIVE_UP` holds that did not own the SMs within :data:`RESIDENT_WAIT_S`, the timer
    stops holding (:attr:`hold_off` says why).
    """

    def __init__(self, stream: Any, flusher: L2Flusher | None, hold: bool = False) -> None:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

        self.stream = stream
        self.flusher = flusher
        self.hold: StreamHold | None = None
        #: why the timer does not hold the stream (None while it does)
        self.hold_off: str | None = None if hold else "not asked"
        self._not_resident = 0
        #: how the holds went: calls held to their release, holds not resident in time, holds
        #: that ran out first, the host's seconds spent waiting for residency, and the host's
        #: seconds from residency to release (the time the holds kept out of the event times)
        self.hold_counts: dict[str, float] = {
            "held": 0,
            "not_resident": 0,
            "timed_out": 0,
            "resident_wait_s": 0.0,
            "held_host_s": 0.0,
        }
        if hold:
            try:
                self.hold = StreamHold()
            except Exception as exc:  # no opt-in shared memory, no mapped memory: time without
                self.hold_off = f"the stream hold does not work here: {exc}"
        self._e0 = cupy.cuda.Event()
        self._e1 = cupy.cuda.Event()
        self._e2 = cupy.cuda.Event()
        self._sync = cupy.cuda.runtime.deviceSynchronize
        self._elapsed = cupy.cuda.get_elapsed_time

    def time(
        self,
        call: Callable[[], None],
        input_set: int = 0,
        before: Callable[[], None] | None = None,
    ) -> Sample:
        """Time ``call()`` (which launches its work on the current stream = ``stream``).

        ``before`` (e.g. poisoning the call's outputs) is queued after the first event and before
        the flush and the start event: it is inside ``span_s`` (so the wall-time check accounts
        for it) and outside ``gpu_s``.
        """
        hold = self.hold
        resident = False
        with self.stream:
            t0 = time.perf_counter()
            self._e0.record(self.stream)
            if before is not None:
                before()
            if self.flusher is not None:
                self.flusher.flush()
            token = hold.queue() if hold is not None else 0
            self._e1.record(self.stream)
            t_wait = time.perf_counter()
            try:
                # the call is queued only once the hold owns every SM (the flush done): kernels
                # it puts on other streams cannot run before the start event
                if hold is not None:
                    resident = hold.wait_resident(token)
                t_resident = time.perf_counter()
                self.hold_counts["resident_wait_s"] += t_resident - t_wait
                call()
                self._e2.record(self.stream)
            finally:
                if hold is not None:
                    hold.release(token)
                    if resident:
                        self.hold_counts["held_host_s"] += time.perf_counter() - t_resident
            self._sync()
            t1 = time.perf_counter()
        held = resident and hold is not None and not hold.timed_out(token)
        if hold is not None:
            key = "held" if held else "timed_out" if resident else "not_resident"
            self.hold_counts[key] += 1
            if not resident:
                self._not_resident += 1
                if self._not_resident >= HOLD_GIVE_UP:
                    self.hold = None
                    self.hold_off = (
                        f"{self._not_resident} holds did not own every SM within "
                        f"{RESIDENT_WAIT_S} s: other work keeps the GPU busy"
                    )
        gpu_ms = self._elapsed(self._e1, self._e2)
        span_ms = self._elapsed(self._e0, self._e2)
        return Sample(gpu_ms / 1e3, span_ms / 1e3, t1 - t0, input_set, held)


__all__ = [
    "CU_LIMIT_PERSISTING_L2_CACHE_SIZE",
    "FALLBACK_FLUSH_BYTES",
    "FLUSH_FACTOR",
    "HOLD_GIVE_UP",
    "HOLD_MAX_S",
    "HOLD_SOURCE",
    "RESIDENT_WAIT_S",
    "EventTimer",
    "L2Flusher",
    "PersistingL2",
    "Sample",
    "StreamHold",
]
