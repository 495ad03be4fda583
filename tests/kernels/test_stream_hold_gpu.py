"""The stream hold of the event timer (:class:`perfledger.kernels.timing.StreamHold`), on a real
GPU (marked ``gpu``): the host's launch latency stays out of the event time, work a subject puts
on another stream cannot run before the start event unseen, and a subject that waits on its own
stream during a call turns the hold off with a reason instead of hanging. Nothing is mocked."""

from __future__ import annotations

import statistics
import time

import pytest
from cuda_device import require_cuda_device

cupy = require_cuda_device()

from perfledger.kernels.timing import HOLD_GIVE_UP, EventTimer, L2Flusher  # noqa: E402

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


def test_stream_hold_keeps_the_hosts_launch_latency_out_of_the_event_time() -> None:
    held, plain = _timers()
    x = cupy.random.random(N, dtype=cupy.float32)
    y = cupy.empty_like(x)

    def kernel() -> None:
        cupy.multiply(x, 2.0, out=y)

    def slow_host() -> None:  # a subject whose host side takes 2 ms before it launches
        time.sleep(0.002)
        cupy.multiply(x, 2.0, out=y)

    alone = _median_gpu_s(held, kernel)
    lingering_held = _median_gpu_s(held, slow_host)
    lingering_plain = _median_gpu_s(plain, slow_host)
    print(f"kernel {alone * 1e6:.1f} us; after 2 ms of host: held "
          f"{lingering_held * 1e6:.1f} us, not held {lingering_plain * 1e6:.1f} us")  # fmt: skip
    assert lingering_plain > 1.5e-3  # without the hold the host's 2 ms are in the event time
    assert lingering_held < 1.3 * alone + 5e-6


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
    assert all(s.held for s in samples)
    assert statistics.median(shown) > 0.8 * work


def test_a_subject_that_waits_on_its_stream_turns_the_hold_off_with_a_reason() -> None:
    held, _ = _timers()
    x = cupy.random.random(1 << 20, dtype=cupy.float32)
    y = cupy.empty_like(x)

    def waits() -> None:
        cupy.multiply(x, 2.0, out=y)
        cupy.cuda.get_current_stream().synchronize()  # waits for the hold: it times out

    samples = [held.time(waits) for _ in range(HOLD_GIVE_UP + 2)]
    print(held.hold_off, [s.held for s in samples])
    assert not any(s.held for s in samples)
    assert held.hold is None and held.hold_off and "timed out" in held.hold_off
    assert samples[-1].wall_s < 0.1  # no hold any more: no wait
    assert cupy.allclose(y, 2 * x)
