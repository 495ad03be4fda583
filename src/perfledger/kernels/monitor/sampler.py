"""A background thread that takes an observation ``hz`` times per second and keeps them all: the
sampling loop shared by the GPU monitor (:class:`perfledger.kernels.monitor.monitor.Monitor`, NVML) and
the host monitor (:class:`perfledger.kernels.monitor.hostmonitor.HostMonitor`, ``/proc/stat``).

Imports: standard library only (kernels imports events at most, SPEC.md section 1).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, Self, TypeVar


class _Timed(Protocol):
    t_s: float


Obs = TypeVar("Obs", bound=_Timed)


class PeriodicSampler(Generic[Obs]):
    """Calls ``read()`` at ``hz`` on a daemon thread between :meth:`start` and :meth:`stop`,
    keeping every observation (objects with a time ``t_s`` in seconds). A reading that raises is
    counted in :attr:`errors` and skipped: a monitor never stops the measurement it watches.

    Args:
        read: takes one observation.
        hz: readings per second (> 0).
        thread_name: the thread's name (seen in debuggers and ``py-spy``).
        initial: observations to start with (e.g. a reading taken at construction).
    Raises: ValueError for ``hz <= 0``.
    """

    def __init__(
        self, read: Callable[[], Obs], *, hz: float, thread_name: str, initial: Iterable[Obs] = ()
    ) -> None:
        if not hz > 0:
            raise ValueError("hz must be > 0")
        self.hz = hz
        self._read = read
        self._thread_name = thread_name
        self._obs: list[Obs] = list(initial)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0

    def read_now(self) -> Obs:
        """Take one observation synchronously and keep it (raises what ``read`` raises)."""
        obs = self._read()
        with self._lock:
            self._obs.append(obs)
        return obs

    def _run(self) -> None:
        period = 1.0 / self.hz
        next_t = time.monotonic()
        while not self._stop.is_set():
            try:
                self.read_now()
            except Exception:
                self.errors += 1
            next_t += period
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def start(self) -> Self:
        """Start the sampling thread (a daemon) unless it runs; returns self."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self._thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the sampling thread; one more observation is taken after it stopped, so that the
        last window is bracketed. Does nothing when the thread is not running."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            self.read_now()
        except Exception:
            self.errors += 1

    def observations(self) -> list[Obs]:
        """A copy of the observations so far, sorted by time."""
        with self._lock:
            return sorted(self._obs, key=lambda o: o.t_s)
