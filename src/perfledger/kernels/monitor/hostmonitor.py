"""The host monitor (SPEC.md section 5 "Monitor", rule R17, for CPU workloads): a background
thread that reads the host's CPU counters while the workload driver runs, and a foreign-activity
verdict for each sample window.

A CPU workload has no GPU to watch, but the same question applies to its formal samples: did
something else run during the window? This monitor answers it from Linux's ``/proc/stat`` (the
busy CPU time of the whole host: user, nice, system, irq, softirq, steal) and :func:`os.times`
(the CPU time of this process and of its children reaped so far, which covers every driver call
of the window once the call has exited), plus the live process trees of the workers perfledger
adopted (:meth:`HostMonitor.adopt`: the worker protocol's long-lived workers, whose calls would
otherwise read as another process's work until they are reaped, and each self-timed driver call
while it runs, disowned once reaped, :meth:`HostMonitor.disown`). For a window ``[start_s, end_s]`` it takes the last
observation at or before ``start_s`` and the first at or after ``end_s`` (so the window is always
covered, never interpolated) and computes::

    foreign_cores = (host busy CPU seconds - our CPU seconds) / window seconds

the average number of cores that other processes kept busy. Above ``foreign_cores`` of
:class:`HostThresholds` (default 0.25 core) the window has ``foreign_activity``; the reasons say
``host_monitor`` (always: the observations came from the host, not from NVML) and
``foreign_cpu:<cores>``. Whether that activity matters to the metric is not the agent's call
to type: another actor's review, cited by ``perfledger activity explain``, explains it (R17).

Imports: the standard library and :mod:`perfledger.kernels.proc` (kernels imports events at
most, SPEC.md section 1).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from perfledger.kernels.monitor.sampler import PeriodicSampler
from perfledger.kernels.proc import children_by_parent, cpu_ticks, process_table, subtree

#: The host's CPU counters (Linux).
PROC_STAT = "/proc/stat"
#: Default sampling rate (Hz).
DEFAULT_HZ = 10.0
#: Readings of our own CPU time that :func:`read_host` takes at most to get one in which no
#: child was reaped while the adopted trees were read.
CONSISTENT_TRIES = 3
#: Fields of the aggregate ``cpu`` line of /proc/stat counted as busy (user, nice, system, irq,
#: softirq, steal; idle and iowait are not; guest time is already inside user).
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class HostObservation:
    """One reading of the host's counters.

    Attributes:
        t_s: ``time.monotonic()`` at the reading (seconds).
        busy_s: busy CPU time of the whole host since boot (seconds, all cores summed).
        own_s: CPU time of this process and its reaped children (seconds, user + system).
        load1: the 1-minute load average.
    """

    t_s: float
    busy_s: float
    own_s: float
    load1: float


@dataclass(frozen=True)
class HostThresholds:
    """Threshold of the foreign-activity verdict (recorded with the samples).

    Attributes:
        foreign_cores: average cores busy with other processes in a window above which the
            window has foreign activity.
    """

    foreign_cores: float = 0.25


@dataclass(frozen=True)
class HostWindowVerdict:
    """The host monitor's verdict on one sample window (R17).

    Attributes:
        start_s, end_s: the window (``time.monotonic()`` seconds).
        observed: observations bracket the window.
        foreign_activity: other processes kept more than the threshold of cores busy.
        reasons: ``host_monitor`` and, when foreign, ``foreign_cpu:<cores>``; ``no_observations``
            when the window is not bracketed.
        observations: how many observations lie in the bracketed span.
        foreign_cores: average cores busy with other processes (None when not observed).
        own_cores: average cores busy with this process and its calls (None when not observed).
        load1_max: the highest 1-minute load average seen in the span.
    """

    start_s: float
    end_s: float
    observed: bool
    foreign_activity: bool
    reasons: tuple[str, ...]
    observations: int
    foreign_cores: float | None = None
    own_cores: float | None = None
    load1_max: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON builtins (one window of the samples artifact)."""
        return asdict(self)

    def to_request(self) -> dict[str, Any]:
        """The ``monitor`` object of a ``samples.record`` pair (R17; ``explained`` is null:
        another actor's review explains, after the samples)."""
        return {
            "observed": self.observed,
            "foreign_activity": self.foreign_activity,
            "explained": None,
            "flags": list(self.reasons),
        }


def tree_cpu_s(roots: Iterable[int]) -> float:
    """CPU time (seconds, user + system, the reaped children's included) of every live process
    of the trees under ``roots`` (pids; processes that are gone are left out): what perfledger's
    own workers and their children have used so far. Reaped into a root's parent, a process's
    time moves to that parent's counters (this process's: :func:`read_host` reads them)."""
    roots = [pid for pid in roots if pid != os.getpid()]
    if not roots:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in subtree(roots, children_by_parent(process_table())):
        reading = cpu_ticks(pid)  # None: gone since the table was read
        total += 0 if reading is None else sum(reading)
    return total / ticks


def read_host(proc_stat: str = PROC_STAT, adopted: Iterable[int] = ()) -> HostObservation:
    """Read the host's counters once; our own CPU time is this process's and its reaped
    children's, and that of the live trees under ``adopted`` (:meth:`HostMonitor.adopt`).
    Raises: RuntimeError when ``proc_stat`` is unreadable or has no aggregate ``cpu`` line (not
    Linux)."""
    try:
        with open(proc_stat, encoding="ascii") as handle:
            first = handle.readline().split()
    except OSError as exc:
        raise RuntimeError(f"cannot read {proc_stat}: {exc.strerror}") from None
    if not first or first[0] != "cpu" or len(first) < 9:
        raise RuntimeError(f"{proc_stat} has no aggregate cpu line")
    ticks = os.sysconf("SC_CLK_TCK")
    values = [int(v) for v in first[1:]]
    busy = sum(values[i] for i in BUSY_FIELDS) / ticks
    roots = list(adopted)
    for _ in range(CONSISTENT_TRIES):
        # a process reaped between the two readings of our counters would be in neither the
        # reaped children's time nor the live trees' (a self-timed call ends, and is reaped,
        # while this thread reads): read again until no child was reaped in between
        before = os.times()
        live = tree_cpu_s(roots)
        t = os.times()
        if (t.children_user, t.children_system) == (before.children_user, before.children_system):
            break
    own = t.user + t.system + t.children_user + t.children_system + live
    return HostObservation(time.monotonic(), busy, own, os.getloadavg()[0])


class HostMonitor(PeriodicSampler[HostObservation]):
    """A background thread reading the host's CPU counters at ``hz`` (see the module docstring).

    The interface matches what ``perfledger measure workload`` uses of the GPU
    :class:`~perfledger.kernels.monitor.monitor.Monitor`: :meth:`start`, :meth:`stop`, :meth:`calibrate`,
    :meth:`verdict`, :meth:`settings`, :meth:`observations`.

    Args:
        hz: readings per second (> 0).
        thresholds: see :class:`HostThresholds`.
        proc_stat: the counters' file (tests point it elsewhere).
    Raises: RuntimeError when the counters cannot be read; ValueError for ``hz <= 0``.
    """

    def __init__(
        self,
        *,
        hz: float = DEFAULT_HZ,
        thresholds: HostThresholds = HostThresholds(),
        proc_stat: str = PROC_STAT,
    ) -> None:
        self.adopted: frozenset[int] = frozenset()
        super().__init__(
            lambda: read_host(proc_stat, self.adopted),
            hz=hz,
            thread_name="perfledger-host",
            initial=[read_host(proc_stat)],
        )
        self.thresholds = thresholds
        self.proc_stat = proc_stat
        self.cpus = os.cpu_count() or 1

    def adopt(self, pid: int) -> None:
        """Count the CPU time of ``pid``'s live tree (a worker perfledger started to run a
        subject, and its children) as ours from the next observation on: a long-lived worker's
        calls are the measurement, not foreign activity (R17); reaped, its time is ours
        through this process's counters."""
        self.adopted = self.adopted | {pid}

    def disown(self, pid: int) -> None:
        """Stop counting ``pid``'s live tree as ours: call it once ``pid`` was reaped (a
        self-timed driver's call, :func:`perfledger.kernels.workload.driver.run_call`), whose
        CPU time is then in this process's reaped children's counters; the kernel may give the
        pid to another process, whose work is foreign (R17)."""
        self.adopted = self.adopted - {pid}

    def calibrate(self) -> frozenset[int]:
        """Nothing to learn on a host (our CPU time is read directly); returns our PID."""
        return frozenset({os.getpid()})

    def verdict(self, start_s: float, end_s: float) -> HostWindowVerdict:
        """The foreign-activity verdict of ``[start_s, end_s]`` (monotonic seconds); call it
        after :meth:`stop` (or once an observation after ``end_s`` exists)."""
        return host_window_verdict(self.observations(), start_s, end_s, self.thresholds)

    def settings(self) -> dict[str, Any]:
        """The monitor's settings (recorded in the samples' metadata)."""
        return {"source": "host", "hz": self.hz, "cpus": self.cpus, **asdict(self.thresholds)}


def host_window_verdict(
    observations: list[HostObservation],
    start_s: float,
    end_s: float,
    thresholds: HostThresholds = HostThresholds(),
) -> HostWindowVerdict:
    """Judge the window ``[start_s, end_s]`` from time-sorted ``observations`` (see the module
    docstring). A window that no pair of observations brackets is not ``observed``."""
    before = [o for o in observations if o.t_s <= start_s]
    after = [o for o in observations if o.t_s >= end_s]
    if not before or not after:
        return HostWindowVerdict(start_s, end_s, False, False, ("no_observations",), 0)
    first, last = before[-1], after[0]
    span = [o for o in observations if first.t_s <= o.t_s <= last.t_s]
    seconds = max(last.t_s - first.t_s, 1e-9)
    own = max(last.own_s - first.own_s, 0.0) / seconds
    foreign = max((last.busy_s - first.busy_s) / seconds - own, 0.0)
    foreign_activity = foreign > thresholds.foreign_cores
    reasons = ("host_monitor",) + ((f"foreign_cpu:{foreign:.2f}",) if foreign_activity else ())
    return HostWindowVerdict(
        start_s,
        end_s,
        True,
        foreign_activity,
        reasons,
        len(span),
        foreign_cores=round(foreign, 4),
        own_cores=round(own, 4),
        load1_max=max(o.load1 for o in span),
    )


__all__ = [
    "DEFAULT_HZ",
    "HostMonitor",
    "HostObservation",
    "HostThresholds",
    "HostWindowVerdict",
    "host_window_verdict",
    "read_host",
]
