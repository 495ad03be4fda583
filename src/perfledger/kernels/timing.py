"""GPU timing primitives of the harness (SPEC.md section 5, "Timing"): CUDA events on the
stream under test, a device-wide synchronize before the end event is read, the host wall time of
each sample checked against event time, and an L2 flush (a buffer of at least twice the L2 size
written) queued before the start event of each cold sample.

Needs CuPy (imported on use). Times are seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Units of a time-like metric per second (``value_in_unit = seconds * UNITS_PER_SECOND[unit]``).
UNITS_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}

#: Default flush size as a multiple of the L2 size (SPEC.md: at least 2x).
FLUSH_FACTOR = 2.0
#: Flush size when the L2 size is unknown (bytes): larger than any current GPU's L2 x 2.
FALLBACK_FLUSH_BYTES = 256 * 1024 * 1024


class L2Flusher:
    """Evicts the L2 cache by writing a buffer of ``factor`` x L2 size on a stream.

    Args:
        l2_bytes: the L2 size (bytes); None uses :data:`FALLBACK_FLUSH_BYTES`.
        factor: multiple of the L2 size to write (>= 2 per SPEC.md section 5).
    Raises: ValueError for ``factor < 2``.
    """

    def __init__(self, l2_bytes: int | None, factor: float = FLUSH_FACTOR) -> None:
        import cupy

        if factor < 2.0:
            raise ValueError("the L2 flush must write at least twice the L2 size")
        size = int(l2_bytes * factor) if l2_bytes else FALLBACK_FLUSH_BYTES
        self.nbytes = size
        self._buf = cupy.empty(size // 4, dtype=cupy.uint32)
        self._value = 0

    def flush(self) -> None:
        """Queue the flush on the current stream (a changing value, so no write is elided)."""
        self._value = (self._value + 1) & 0xFFFF
        self._buf.fill(self._value)


@dataclass(frozen=True)
class Sample:
    """One timed call.

    Attributes:
        gpu_s: event time from the start to the end event on the stream under test (seconds).
        span_s: event time from before the ``before`` work and the flush to the end event (s).
        wall_s: host wall time from before the flush was queued to after the device-wide
            synchronize (seconds).
        input_set: which rotated input set was used.
    """

    gpu_s: float
    span_s: float
    wall_s: float
    input_set: int

    @property
    def excess_s(self) -> float:
        """Host wall time not covered by the stream's events (seconds)."""
        return self.wall_s - self.span_s


class EventTimer:
    """Times one call on ``stream`` with three events (before flush, start, end) and a
    device-wide synchronize before reading them."""

    def __init__(self, stream: Any, flusher: L2Flusher | None) -> None:
        import cupy

        self.stream = stream
        self.flusher = flusher
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
        with self.stream:
            t0 = time.perf_counter()
            self._e0.record(self.stream)
            if before is not None:
                before()
            if self.flusher is not None:
                self.flusher.flush()
            self._e1.record(self.stream)
            call()
            self._e2.record(self.stream)
            self._sync()
            t1 = time.perf_counter()
        gpu_ms = self._elapsed(self._e1, self._e2)
        span_ms = self._elapsed(self._e0, self._e2)
        return Sample(gpu_ms / 1e3, span_ms / 1e3, t1 - t0, input_set)


__all__ = ["FALLBACK_FLUSH_BYTES", "FLUSH_FACTOR", "EventTimer", "L2Flusher", "Sample"]
