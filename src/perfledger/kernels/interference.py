"""A call's command stopped or traced by a process outside the measurement (SPEC.md section 5,
"Workload driver"; R11: both subjects under the same conditions).

A process that is not part of any call (started before ``measure``, so no call's tree holds it)
can find the reference's command in ``/proc`` by its command line and stop it for a while
(``SIGSTOP`` then ``SIGCONT``, or a ``ptrace`` attach), using no CPU that a host monitor would
see as foreign: each reference call then takes longer, its own report of its time is honest, and
the wall clock confirms a saving the candidate never made. Measured here: a watcher that
stopped each reference call for 0.1 s made an identical candidate 26 % "faster" (0.2 s of CPU
work per call, 5 pairs), and the wall-clock check found the saving consistent.

:class:`StopWatch` asks the kernel, while the call runs (every :data:`POLL_S`), whether the
command (the driver's own child) was stopped or continued since it started (``waitid`` with
``WSTOPPED | WCONTINUED | WNOWAIT``: a stop that was continued stays reported until the child
exits) or has a tracer (``TracerPid`` in ``/proc/<pid>/status``). The driver then treats the
call as interfered with and stops the run; nothing is recorded.

Not covered (stated): processes below the command (a shell's child, a worker process) are not
watched, and a stop that is continued within :data:`POLL_S` of the command's exit may be missed
(its report is gone once the child exits).

Imports: standard library only.
"""

from __future__ import annotations

import os
import signal

#: How often the driver asks about its child's stops while a call runs (seconds).
POLL_S = 0.02


def _tracer(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


class StopWatch:
    """Stops and tracers of one child process seen while it runs (module docstring).

    Attributes:
        pid: the child's process id (this process must be its parent).
        found: what was seen, one phrase each, in the order seen (empty: nothing).
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.found: list[str] = []

    def poll(self) -> None:
        """Look once; never raises (a child already reaped or gone reports nothing)."""
        flags = os.WSTOPPED | os.WCONTINUED | os.WNOHANG | os.WNOWAIT
        try:
            info = os.waitid(os.P_PID, self.pid, flags)
        except (OSError, AttributeError):  # reaped, or no waitid on this platform
            info = None
        if info is not None:
            if info.si_code == os.CLD_STOPPED:
                self._note(f"stopped by {signal.Signals(info.si_status).name}")
            elif info.si_code == os.CLD_CONTINUED:
                self._note("continued after a stop")
            elif info.si_code == getattr(os, "CLD_TRAPPED", -1):
                self._note("stopped by a tracer")
        tracer = _tracer(self.pid)
        if tracer:
            self._note(f"traced by process {tracer}")

    def _note(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    @property
    def message(self) -> str:
        """The findings as one phrase ('' when none)."""
        return "; ".join(self.found)


__all__ = ["POLL_S", "StopWatch"]
