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

The processes below the command (a shell's child, a worker process) are not the driver's
children, so the kernel keeps no report of their stops for it: every :data:`TREE_POLL_S` the
driver reads their state instead (:meth:`StopWatch.poll_tree`): a process of the call found
stopped (``T``), or traced by a process outside the call, is interference too. Measured here:
with the command a shell whose child does the work, a watcher stopping that child for 0.1 s per
reference call went unseen before.

A stop of the driver itself (``SIGSTOP``/``SIGCONT`` to the measuring process as a reference
call ends: it sees the exit late, and that call's wall time grows by the stop) is seen by a
``SIGCONT`` handler the driver holds during each call (:meth:`StopWatch.__enter__`).

Not covered (stated): a stop of a process below the command shorter than :data:`TREE_POLL_S`
is seen only when a reading falls inside it (a stop of a tenth of that interval, repeated, is
seen in about a tenth of the readings); a stop of the command itself that is continued within
:data:`POLL_S` of its exit may be missed (its report is gone once the child exits); a process
of the call stopped by the call itself (a shell's job control, a debugger it runs) is taken for
interference.

Imports: standard library only.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from perfledger.kernels.proc import tracer_pid

#: How often the driver asks about its child's stops while a call runs (seconds).
POLL_S = 0.02
#: How often it reads the state of the processes below the command (seconds): a walk of
#: ``/proc`` each time (about 1 ms with 75 processes here).
TREE_POLL_S = 0.1


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
        tracer = tracer_pid(self.pid)
        if tracer:
            self._note(f"traced by process {tracer}")

    def poll_tree(self, states: dict[int, str]) -> None:
        """Look once at the processes below the command: ``states`` maps each pid to its state
        letter (:meth:`perfledger.kernels.proc.CallTree.descendants`). A stopped one
        (``T``) is noted; a traced one only where its tracer is not a process of the call (a
        command may run its own tracer). Never raises."""
        call = {self.pid, *states}
        for pid, state in states.items():
            if state == "T":
                self._note(f"process {pid} below it stopped")
            tracer = tracer_pid(pid) if state != "Z" else 0
            if tracer and tracer not in call:
                self._note(f"process {pid} below it traced by process {tracer}")

    def __enter__(self) -> StopWatch:
        """Count this process's own continues (SIGCONT) while the call runs: a process outside
        the run that stops the *driver* as a call ends makes the driver see the exit late, so
        that call's wall time grows. Only from the main thread (where Python runs handlers)."""
        self._continued = 0
        self._previous: Any = None
        if threading.current_thread() is threading.main_thread():

            def continued(signum: int, frame: object) -> None:
                self._continued += 1

            self._previous = signal.signal(signal.SIGCONT, continued)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGCONT, self._previous)
            self._previous = None
        if self._continued:
            self._note("the driver itself was stopped and continued during it")

    def _note(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    @property
    def message(self) -> str:
        """The findings as one phrase ('' when none)."""
        return "; ".join(self.found)


__all__ = ["POLL_S", "TREE_POLL_S", "StopWatch"]
