"""The stream hold of the event timer (:class:`perfledger.kernels.cuda.timing.StreamHold`), on a real
GPU (marked ``gpu``): the host's launch latency stays out of the event time up to the hold's
limit (``HOLD_MAX_S``), host time beyond it is in it, work a subject puts on another stream
cannot run before the start event unseen, and a subject that waits on its own stream during a
call costs at most the hold's limit instead of hanging. (What a hold keeps out is checked in
workers by the measuring process's clock: ``test_isolated_subjects_gpu.py``.) Nothing is
mocked."""

from __future__ import annotations

import statistics
import time

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from perfledger.kernels.cuda.timing import HOLD_MAX_S, EventTimer, L2Flusher  # noqa: E402

pytestmark = pytest.mark.gpu

N = 1 << 24  # 64 MiB of float32: a memory-bound kernel of some tens of microseconds


def _timers() -> tuple[EventTimer, EventTimer]:
    stream = cupy.cuda.Stream(non_blocking=True)
    l2 = int(cupy.cuda.runtime.getDeviceProperties(0)["l2CacheSize"])
    flusher = L2Flusher(l2)
    held = EventTimer(stream, flusher, hold=True)
    assert held.hold is not None, held.hold_off
    return held, EventTimer(stream, flusher, hold=False)


def _median_gpu_s(timer: EventTimer, call, n: int = 15) -> float:
    for _ in range(3):
        timer.time(call)
    return statistics.median(timer.time(call).gpu_s for _ in range(n))


def test_stream_hold_keeps_a_late_launch_out_of_the_event_time_up_to_its_limit() -> None:
    held, plain = _timers()
    x = cupy.random.random(N, dtype=cupy.float32)
    y = cupy.empty_like(x)

    def kernel() -> None:
        cupy.multiply(x, 2.0, out=y)

    def late(host_s: float):
        def call() -> None:  # a subject whose host side takes a while before it launches
            end = time.perf_counter() + host_s
            while time.perf_counter() < end:
                pass
            cupy.multiply(x, 2.0, out=y)

        return call

    alone = _median_gpu_s(held, kernel)
    within = _median_gpu_s(held, late(0.6 * HOLD_MAX_S))
    within_plain = _median_gpu_s(plain, late(0.6 * HOLD_MAX_S))
    beyond = _median_gpu_s(held, late(3 * HOLD_MAX_S))
    print(f"kernel {alone * 1e6:.1f} us; {0.6 * HOLD_MAX_S * 1e6:.0f} us late: held "
          f"{within * 1e6:.1f} us, not held {within_plain * 1e6:.1f} us; "
          f"{3 * HOLD_MAX_S * 1e6:.0f} us late: held {beyond * 1e6:.1f} us")  # fmt: skip
    assert within < 1.3 * alone + 5e-6  # within the limit: out of the event time
    assert within_plain > alone + HOLD_MAX_S / 6  # not held, the host's delay is in it
    assert beyond > 1.5 * HOLD_MAX_S  # beyond the limit the host's time is in the event time


def test_cheat_work_on_another_stream_queued_while_the_stream_is_held_is_not_hidden() -> None:
    """The subject queues its whole work on a stream of its own, lingers on the host, and puts
    a trivial kernel on the stream under test. Held, its side work cannot run before the start
    event: it is either inside the event time or past the end event (host wall beyond the
    events' span, which the harness flags as side work)."""
    held, _ = _timers()
    x = cupy.random.random(N, dtype=cupy.float32)
    y = cupy.empty_like(x)
    tiny = cupy.empty(1, dtype=cupy.float32)
    side = cupy.cuda.Stream(non_blocking=True)

    def honest() -> None:
        for _ in range(8):
            cupy.multiply(x, 2.0, out=y)

    def cheat() -> None:
        with side:
            for _ in range(8):
                cupy.multiply(x, 2.0, out=y)
        time.sleep(0.001)  # let the side work finish while the host lingers
        tiny.fill(1.0)

    work = _median_gpu_s(held, honest)
    tiny.fill(1.0)  # its kernel loaded now: a module load would wait for the hold
    samples = [held.time(cheat) for _ in range(10)]
    shown = [s.gpu_s + max(0.0, s.wall_s - s.span_s) for s in samples]
    print(f"honest {work * 1e6:.1f} us; cheat event time "
          f"{statistics.median(s.gpu_s for s in samples) * 1e6:.1f} us, event time + excess "
          f"{statistics.median(shown) * 1e6:.1f} us")  # fmt: skip
    assert statistics.median(shown) > 0.8 * work


def test_a_subject_that_waits_on_its_stream_costs_at_most_the_holds_limit_per_call() -> None:
    held, _ = _timers()
    x = cupy.random.random(1 << 20, dtype=cupy.float32)
    y = cupy.empty_like(x)

    def waits() -> None:
        cupy.multiply(x, 2.0, out=y)
        cupy.cuda.get_current_stream().synchronize()  # waits for the hold to run out

    samples = [held.time(waits) for _ in range(8)]
    print(held.hold_counts, [round(s.wall_s * 1e6) for s in samples])
    assert not any(s.held for s in samples)
    assert held.hold is not None  # still holding: each such call costs the hold's limit only
    assert held.hold_counts["timed_out"] >= 8
    assert max(s.wall_s for s in samples) < HOLD_MAX_S + 0.01
    assert cupy.allclose(y, 2 * x)
