"""The workload driver's own scheduling, kept as it was (SPEC.md section 5, "Workload driver";
R11: both subjects measured under the same conditions).

Every call of either subject is a child of the driver process and inherits its scheduling: CPU
affinity, nice value, scheduling policy, timer slack, resource limits, cgroups. A command runs as
the driver's user, and Linux lets a process of the same user change most of these *on another
process*: ``sched_setaffinity(ppid, ...)``, ``setpriority(PRIO_PROCESS, ppid, 19)``,
``sched_setscheduler(ppid, SCHED_IDLE)``, ``prlimit(ppid, ...)``, and with ``CAP_SYS_NICE`` a
write to ``/proc/<ppid>/timerslack_ns``. A candidate that did so as it exited slowed every later
call of the reference (one CPU, nice 10, 50 ms of timer slack: with the same 0.1 s of sleeping
work, the reference's calls took 0.17-0.18 s of wall time and the candidate's 0.13 s), restored
its own scheduling as it started, and so reported honest times that the wall clock confirmed: a
saving the wall check cannot doubt.

:class:`DriverGuard` takes the driver's scheduling when a run starts and, before every call (and
after the last), compares it again. A change is undone where the process may undo it, and the
run then stops with a :class:`~perfledger.errors.MeasurementError` naming what changed and the
call that ran just before (the suspect): nothing is recorded from a run in which the process
that starts the calls was tampered with. An honest command never changes its parent's
scheduling; an operator who renices a running ``measure`` triggers it too (measure again).

Not covered (stated): the I/O priority (``ioprio_set`` has no standard-library call), threads of
the driver other than its main one (calls are started from the main thread; a monitor thread's
sampling is not a call), and changes a subject makes to the machine rather than to the driver
(CPU frequency governor, files in ``/dev/shm`` that hold memory).

Imports: standard library and :mod:`perfledger.errors` only.
"""

from __future__ import annotations

import contextlib
import os
import resource
from dataclasses import dataclass

from perfledger.errors import MeasurementError

#: Resource limits a call inherits (name -> ``resource`` constant), those this platform has.
RLIMITS = {
    name: getattr(resource, name)
    for name in (
        "RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_CPU", "RLIMIT_DATA", "RLIMIT_FSIZE",
        "RLIMIT_MEMLOCK", "RLIMIT_MSGQUEUE", "RLIMIT_NICE", "RLIMIT_NOFILE", "RLIMIT_NPROC",
        "RLIMIT_RSS", "RLIMIT_RTPRIO", "RLIMIT_RTTIME", "RLIMIT_SIGPENDING", "RLIMIT_STACK",
    )
    if hasattr(resource, name)
}  # fmt: skip


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


@dataclass(frozen=True)
class Scheduling:
    """What a call inherits from this process (main thread). Each field is None where the
    platform does not say.

    Attributes:
        affinity: the CPUs this process may run on (sorted).
        nice: the nice value (-20 .. 19; higher is less CPU).
        policy: ``(policy, priority)`` of ``sched_getscheduler`` / ``sched_getparam``.
        timerslack_ns: the timer slack in nanoseconds (how late a sleep may wake).
        rlimits: resource name -> ``(soft, hard)``.
        cgroup: the text of ``/proc/self/cgroup``.
    """

    affinity: tuple[int, ...] | None
    nice: int | None
    policy: tuple[int, int] | None
    timerslack_ns: int | None
    rlimits: tuple[tuple[str, tuple[int, int]], ...]
    cgroup: str | None

    @classmethod
    def now(cls) -> Scheduling:
        """This process's scheduling now."""
        affinity = nice = policy = None
        with contextlib.suppress(AttributeError, OSError):
            affinity = tuple(sorted(os.sched_getaffinity(0)))
        with contextlib.suppress(AttributeError, OSError):
            nice = os.getpriority(os.PRIO_PROCESS, 0)
        with contextlib.suppress(AttributeError, OSError):
            policy = (os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)
        slack = _read("/proc/self/timerslack_ns")
        limits = []
        for name, key in RLIMITS.items():
            with contextlib.suppress(OSError, ValueError):
                limits.append((name, resource.getrlimit(key)))
        return cls(
            affinity=affinity,
            nice=nice,
            policy=policy,
            timerslack_ns=int(slack) if slack is not None and slack.isdigit() else None,
            rlimits=tuple(limits),
            cgroup=_read("/proc/self/cgroup"),
        )

    def changes(self, other: Scheduling) -> list[str]:
        """What differs from ``self`` (the baseline) in ``other``, one phrase per field."""
        out = []
        for name in ("affinity", "nice", "policy", "timerslack_ns", "cgroup"):
            before, after = getattr(self, name), getattr(other, name)
            if before is not None and after != before:
                shown = (lambda v: list(v)) if name == "affinity" else (lambda v: v)
                out.append(f"{name} {shown(before)} -> {shown(after)}")
        now = dict(other.rlimits)
        for name, limits in self.rlimits:
            if name in now and now[name] != limits:
                out.append(f"{name} {limits} -> {now[name]}")
        return out


def _restore(base: Scheduling) -> list[str]:
    """Put this process's scheduling back to ``base`` where it may; return what it could not."""
    failed = []

    def attempt(what: str, action: object) -> None:
        try:
            action()  # type: ignore[operator]
        except (OSError, ValueError, AttributeError) as exc:
            failed.append(f"{what} ({exc})")

    if base.affinity is not None:
        attempt("affinity", lambda: os.sched_setaffinity(0, base.affinity))  # type: ignore[arg-type]
    if base.policy is not None:
        policy, priority = base.policy
        attempt("policy", lambda: os.sched_setscheduler(0, policy, os.sched_param(priority)))
    if base.nice is not None:
        attempt("nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, base.nice))  # type: ignore[arg-type]
    if base.timerslack_ns is not None:

        def slack() -> None:
            with open("/proc/self/timerslack_ns", "w", encoding="ascii") as f:
                f.write(str(base.timerslack_ns))

        attempt("timer slack", slack)
    for name, limits in base.rlimits:
        attempt(name, lambda key=RLIMITS[name], lim=limits: resource.setrlimit(key, lim))
    return failed


class DriverGuard:
    """The driver's scheduling, taken once and checked before every call (module docstring).

    Usage: ``guard = DriverGuard()`` when a run starts; ``guard.check(last_call_id)`` before
    each call and once after the last.
    """

    def __init__(self) -> None:
        self.baseline = Scheduling.now()

    def check(self, last_call: str | None) -> None:
        """Compare the driver's scheduling with the baseline; on a change, undo it where this
        process may, then stop the run.

        Args:
            last_call: the id of the call that ran just before (None before the first).
        Raises: MeasurementError naming every change, whether it was undone, and ``last_call``.
        """
        changed = self.baseline.changes(Scheduling.now())
        if not changed:
            return
        failed = _restore(self.baseline)
        after = f"after call {last_call}" if last_call else "before the first call"
        undone = "restored" if not failed else "could not restore: " + "; ".join(failed)
        raise MeasurementError(
            f"the driver's own scheduling changed {after}: {'; '.join(changed)} ({undone}). "
            "Every call inherits it, so a subject that lowers it slows the other subject's "
            "calls (R11); nothing from this run was recorded",
            hint="a subject must not change its parent process; if you reniced or pinned "
            "`perfledger measure` yourself, measure again without doing so",
        )


__all__ = ["RLIMITS", "DriverGuard", "Scheduling"]
