"""The worker protocol: perfledger owns the clock, the inputs and every output of a workload
call (SPEC.md section 5, "Workload worker protocol"; R5, R11, R12).

A subject process (the readiness driver's argv with ``{subject}`` filled) starts, does its
setup and says it is ready; then, for each timed call, the parent sends the call and times it
with its own monotonic clock until the subject answers that the output is written. One JSON
object a line, over a pipe pair of its own whose descriptors the child finds in
:data:`FDS_ENV` (``"CALLS_FD,ANSWERS_FD"``), never over stdout: a subject's prints go to a file
and cannot break the protocol::

    child:  {"op": "ready", "protocol": "perfledger-worker/1"}      (optionally "wake": true)
    parent: {"op": "wake"}                      (only to a worker that said "wake": true)
    child:  {"op": "awake"}
    parent: {"op": "call", "id": 3, "case": "wide", "seed": 8236..., "output": "/tmp/.../output"}
    child:  {"op": "done", "id": 3}                       (optionally "reported": {name: number})
    parent: {"op": "exit"}

- The **wake** (:meth:`Worker._wake`), to a worker whose ready line says ``"wake": true``
  (:func:`perfledger.subject.serve`'s do), comes after a call's opening CPU readings and
  before its clock starts; the worker answers ``awake`` and polls for the call's line for a
  bounded time (``perfledger.subject.WAKE_POLL_NS``) before it sleeps again: the wake-up of a
  sleeping process (on a VM, an idle virtual CPU's) is then not inside the clock. It carries
  nothing of the call; what the worker does from it on is in the call's CPU time.
- The **seed** is drawn from the OS's random source (:func:`secrets.randbits`) when a pair's
  first call starts, and the same for both calls of the pair; the **output** place is fresh and
  private per call (:class:`perfledger.derive.outputs.OutputPlace`), read and removed as soon as
  ``done`` arrives. Every output is judged against the reference's of the same pair (R5).
- The **clock** (:func:`time.perf_counter_ns`) starts just before the call is written and stops
  once its ``done`` is read and its output collected: ``wall_s``. (Stopping at ``done`` alone
  left a gap: a thread of the worker could write the output after answering, while the
  measuring process waited for a core, and the output then counted as the call's with its work
  off the clock; now whatever is collected was written inside the clock.) Inside the clock
  only bytes are read (the answer line, the output file); parsing the answer, listing the
  output place (a second file written late makes the output unusable) and the output's
  digest come after it. While it waits for ``done`` the measuring process sleeps, but for a
  window of at most :data:`ANSWER_POLL_NS` around when the answer is expected (the same
  case's previous call), where it polls the pipe (its own CPU, yielded between looks): a
  sleeping process is woken inside the clock, on a VM at the cost of an idle virtual CPU's
  wake-up. The subject's **CPU time** (``cpu_s``) is the kernel's
  accounting of its whole process tree, read before and after the call, never the subject's
  word: the usage of a control group of the worker's own (:class:`~perfledger.kernels.proc.CpuGroup`,
  reaped processes included, at ns/us resolution), else :func:`tree_cpu_ns` (reaped children in
  clock ticks: a ``cpu_time`` call in which the tree reaped a process is then refused).
- **Scheduling** (:meth:`Worker.check_scheduling`): before every call, outside the clock, every
  thread's nice value, policy and CPUs and the autogroup's nice value are compared with the
  worker's start; a change (the other subject lowering its sibling) invalidates the run. A ``reported`` object is kept, labelled as reported, and decides
  nothing.
- A worker that cannot start, dies, does not answer within its limit, or answers out of
  protocol (not JSON, a wrong id, an unknown op, a second answer, a line longer than
  :data:`MAX_LINE_BYTES`) raises :class:`WorkerFailed` with the reason and the tails of its
  stdout and stderr: the comparison is invalid, nothing of it is recorded. So does an idle
  worker that used more CPU during the other subject's call than :func:`idle_cpu_limit_s`
  allows (work hidden between calls, or slowing the other subject).
- **The idle worker is stopped**: during a subject's call the other subject's worker (its whole
  process tree) is stopped with SIGSTOP and continued before its own call, outside the clock; a
  process a worker left to be re-parented to the measuring process (a double-forked daemon) is
  killed before every call (``settings.ended_orphans``). An idle worker cannot watch for the
  other subject's output, slow its calls or work off its own clock.
- **No results carried across calls**: a worker whose reference output does not change with the
  seed (a fixed test set, found by :func:`run_pairs`' probe, not declared) could hand back a
  remembered output; then every pair gets fresh worker processes (``fresh_worker``).
- **Whole-command mode** (:class:`CommandSubject`) for commands that cannot speak the protocol:
  one process per call, timed from spawn to exit by the parent, CPU time from ``os.wait4``'s
  resource usage; ``{case}``, ``{seed}`` and ``{output}`` in its argv.

The per-call table (:meth:`WorkerRun.table`) has the workload driver's row shape (``subject``,
``case``, ``call_id``, ``ok``, ``correct``, ``metrics``, ``wall_s``, ``start_s``, ``end_s``,
``output``, ``self_correct``, ``pair``, ``warmup``) plus ``cpu_s``, ``idle_cpu_s``, ``seed`` and
``reported``; ``metrics`` holds the observed metrics (:data:`OBSERVED_METRICS`) in the units
asked for, derived from ``wall_s`` and ``cpu_s`` (:func:`observed_values`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfledger.derive import outputs as output_rules
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import MeasurementError, RuleRefused
from perfledger.events.identity import environment_difference
from perfledger.kernels.confine import confine_subject, confinement
from perfledger.kernels.proc import (
    CallTree,
    CpuGroup,
    ProcessTable,
    affinity_of,
    autogroup_nice,
    children_by_parent,
    cpu_ticks,
    process_table,
    reaped_counters,
    sched_of,
    thread_ids,
)
from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.subject_env import call_environment, influencing_environment

#: The protocol's name and version, said by the subject in its ``ready`` line.
PROTOCOL = "perfledger-worker/1"
#: The environment variable naming the child's two descriptors: ``"CALLS_FD,ANSWERS_FD"``.
FDS_ENV = "PERFLEDGER_WORKER_FDS"
#: The longest answer line a subject may send (bytes): an answer is a few fields.
MAX_LINE_BYTES = 64 * 1024
#: Observed metrics a Target may name (metric -> the call's figure, seconds): perfledger's own
#: clock of the call and the kernel's CPU accounting of the subject's process tree.
OBSERVED_METRICS = {"wall_time": "wall_s", "cpu_time": "cpu_s"}
#: Protocol ids written in the samples' provenance (``worker/v1``, ``command/v1``).
WORKER_PROTOCOL_ID = "worker/v1"
COMMAND_PROTOCOL_ID = "command/v1"
#: Characters of a subject's stdout/stderr quoted when it fails.
TAIL_CHARS = 2_000
#: A worker may use this much CPU after answering ``done``, until its next call (seconds) ...
IDLE_CPU_FLOOR_S = 0.01
#: ... or this share of that call's wall time, whichever is larger.
IDLE_CPU_SHARE = 0.1
#: A call that reaped no process fails where its CPU group used more than its tree's own
#: clocks by this much (ns) ... (the two agree to the group's microsecond on honest calls: each
#: is read while the worker waits, the group's first at the end)
UNACCOUNTED_CPU_FLOOR_NS = 50_000
#: ... plus this share of the clocks' figure.
UNACCOUNTED_CPU_SHARE = 0.01
#: The measuring process polls for a call's answer, instead of sleeping until it comes, during
#: at most this long a window per call (ns), centred on when the answer is expected (the
#: worker's previous call of the same case took as long): a process asleep in ``select`` is
#: woken by the subject's write, which on a VM costs an inter-processor interrupt and the
#: waking of an idle virtual CPU inside the call's clock; a polling one reads the answer as it
#: is written. Before the window it sleeps; after it, it sleeps until the answer comes. The
#: measuring process's own CPU time, never the subject's, pays for the window.
ANSWER_POLL_NS = 400_000
#: Why a worker failed (:attr:`WorkerFailed.reason`).
FAILURE_REASONS = (
    "spawn", "died", "timeout", "protocol", "idle_cpu", "exit_status", "scheduling",
    "cpu_accounting",
)  # fmt: skip

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class WorkerFailed(MeasurementError):
    """A subject process failed the protocol; the comparison is invalid (nothing recorded).

    Attributes:
        reason: one of :data:`FAILURE_REASONS`.
        label: the subject (``ref`` or ``cand``).
    """

    def __init__(self, label: str, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(
            f"subject {label!r}: {message}; the comparison is invalid and nothing was recorded",
            hint=hint or "run the subject by hand with the same command; its stderr is quoted",
        )
        self.reason = reason
        self.label = label


def idle_cpu_limit_s(call_wall_s: float) -> float:
    """The most CPU time (seconds) a worker may use after answering ``done`` to a call of
    ``call_wall_s`` seconds, until its next call or its exit: :data:`IDLE_CPU_FLOOR_S` or :data:`IDLE_CPU_SHARE` of the call."""
    return max(IDLE_CPU_FLOOR_S, IDLE_CPU_SHARE * call_wall_s)


# ---------------------------------------------------------------------------- CPU accounting


def _process_cpu_ns(pid: int) -> int:
    """CPU time of process ``pid``'s whole thread group (ns), from the kernel's per-process CPU
    clock (Linux: ``clockid = (~pid << 3) | 2``, CPUCLOCK_SCHED of the process); 0 when gone."""
    try:
        return time.clock_gettime_ns((~pid << 3) | 2)
    except (OSError, OverflowError):
        return 0


def _children_of(pid: int, table: ProcessTable | None = None) -> list[int]:
    """The live children of ``pid`` (zombies included), from one reading of every process's
    parent (``table``, else a fresh :func:`perfledger.kernels.proc.process_table`). The
    per-thread ``/proc/PID/task/TID/children`` files are not reliable while the processes run
    (proc(5)): in a long-lived, many-threaded measuring process they missed an orphan
    re-parented to it."""
    return children_by_parent(process_table() if table is None else table).get(pid, [])


def _reaped_children_ns(pid: int) -> int:
    """CPU time of the children ``pid`` has waited for (``cutime + cstime`` of its stat, ns)."""
    ticks = cpu_ticks(pid)
    return 0 if ticks is None else (ticks[2] + ticks[3]) * 1_000_000_000 // _CLOCK_TICKS


def _describe(pid: int) -> str:
    """``pid``, its parent and its command line, for a message."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        argv = "?"
    parent = process_table().get(pid, (None, ""))[0]
    return f"pid {pid}, parent {parent}: {argv}"


def _own_cpu(pids: Sequence[int]) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """``pids``' own CPU clocks summed (ns), what they reaped of their children (ns, clock-tick
    resolution) and each one's :func:`~perfledger.kernels.proc.reaped_counters` (the
    processes still there)."""
    counters = {p: c for p in pids if (c := reaped_counters(p)) is not None}
    live = sum(_process_cpu_ns(p) for p in pids)
    ticks = sum(c[0] for c in counters.values())
    return live, ticks * 1_000_000_000 // _CLOCK_TICKS, counters


def _reaped_ticks(pids: Sequence[int]) -> dict[int, int]:
    """``cutime + cstime`` (clock ticks) of each of ``pids`` still there."""
    readings = {pid: cpu_ticks(pid) for pid in pids}
    return {pid: t[2] + t[3] for pid, t in readings.items() if t is not None}


def tree_cpu_ns(
    pid: int,
    escaped: Callable[[], Sequence[int]] | None = None,
    table: ProcessTable | None = None,
) -> int:
    """CPU time of ``pid``'s process tree (ns), read from the kernel: every live process's own
    clock (:func:`_process_cpu_ns`, all its threads) plus what each has reaped of its children
    (clock-tick resolution). The subject cannot reach this figure. ``escaped``: processes that
    left the tree (re-parented to the measuring process) whose trees count too, each process
    once: the tree is walked first and ``escaped`` asked after, so a process moving between
    them while they are read (its parent's exit completing late) is found once or twice, never
    missed, and counted once. ``table``: the process table to walk first (else a fresh one)."""
    pids = dict.fromkeys(tree_pids(pid, table))
    for root in escaped() if escaped is not None else ():
        pids.update(dict.fromkeys(tree_pids(root)))
    return sum(_process_cpu_ns(p) + _reaped_children_ns(p) for p in pids)


def tree_pids(pid: int, table: ProcessTable | None = None) -> list[int]:
    """``pid`` and its live descendants, parents first, from one reading of every process's
    parent (``table``, else a fresh :func:`perfledger.kernels.proc.process_table`; see
    :func:`_children_of`)."""
    children = children_by_parent(process_table() if table is None else table)
    seen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.append(p)
            todo += children.get(p, [])
    return seen


def _orphans(keep: set[int], table: ProcessTable | None = None) -> list[int]:
    """This process's children that are not workers (``keep``: the workers and the children
    this process had before the run) nor started by this program: processes a worker started
    and left to be re-parented here (this process is a subreaper during a run). ``table``:
    the process table to read (else a fresh one)."""
    my_session = os.getsid(0)
    found = []
    for pid in _children_of(os.getpid(), table):
        if pid in keep:
            continue
        try:
            if os.getsid(pid) == my_session:
                continue  # started by this program (another thread), not by a subject
        except ProcessLookupError:
            continue
        found.append(pid)
    return found


def _end_orphans(keep: set[int], table: ProcessTable | None = None) -> int:
    """Kill :func:`_orphans`: a double-forked daemon comes back to this process (a subreaper
    during a run), and such a process outside every worker's tree could watch for the other
    subject's outputs while its worker is stopped. Returns: how many were ended."""
    ended = 0
    for pid in _orphans(keep, table):
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            ended += 1
        except (ProcessLookupError, PermissionError, ChildProcessError):
            continue
    return ended


# ---------------------------------------------------------------------------- scheduling

#: Scheduling policies by number, for messages.
_POLICY_NAMES = {
    getattr(os, n): n for n in ("SCHED_OTHER", "SCHED_BATCH", "SCHED_IDLE", "SCHED_FIFO",
                                "SCHED_RR") if hasattr(os, n)
}  # fmt: skip


def _policy(policy: int) -> str:
    return _POLICY_NAMES.get(policy, str(policy))


def _cpus(cpus: frozenset[int] | None) -> str:
    return "?" if cpus is None else ",".join(str(c) for c in sorted(cpus)) or "none"


@dataclass(frozen=True)
class Scheduling:
    """A worker's scheduling as the kernel gives it (:func:`scheduling_of`).

    Attributes:
        threads: thread id -> (nice value, policy, the CPUs it may run on), every thread of
            every live process of the worker's tree.
        autogroup: the nice value of the worker's autogroup (its session's), None where the
            kernel has none.
    """

    threads: dict[int, tuple[int, int, frozenset[int] | None]]
    autogroup: int | None


def scheduling_of(pid: int, table: ProcessTable | None = None) -> Scheduling:
    """The scheduling of every thread of ``pid``'s process tree and of its autogroup, read
    from the kernel (:func:`perfledger.kernels.proc.sched_of`, ``affinity_of``,
    ``autogroup_nice``: the isolated kernel path's readers). Threads gone meanwhile are left
    out. ``table``: the process table to walk (else a fresh one)."""
    threads: dict[int, tuple[int, int, frozenset[int] | None]] = {}
    for p in tree_pids(pid, table):
        for tid in thread_ids(p):
            got = sched_of(int(tid))
            if got is not None:
                threads[int(tid)] = (got[0], got[1], affinity_of(int(tid)))
    return Scheduling(threads, autogroup_nice(pid))


def scheduling_changes(start: Scheduling, now: Scheduling, main: int) -> list[str]:
    """How ``now`` differs from ``start`` (R11: a worker runs as it started; SPEC section 5):
    a thread's nice value or policy (a thread born since is held to the worker's main thread
    ``main`` at the start), the CPUs the whole tree's threads may run on together (threads born
    since included: an OpenMP runtime that binds its threads at its first parallel region
    spreads them, it does not narrow the set) and the autogroup's nice value. [] when none
    changed. A process of the same user (the other subject's code) can lower a worker's
    scheduling (nice 19, SCHED_IDLE, one CPU) and so slow every call it times honestly."""
    changes: list[str] = []
    base = start.threads.get(main)
    for tid, (nice, policy, _cpus_now) in sorted(now.threads.items()):
        was = start.threads.get(tid, base)
        if was is None:
            continue
        if nice != was[0]:
            changes.append(f"thread {tid} nice {was[0]} -> {nice}")
        if policy != was[1]:
            changes.append(f"thread {tid} policy {_policy(was[1])} -> {_policy(policy)}")
    known0 = [c for _n, _p, c in start.threads.values() if c is not None]
    known1 = [c for _n, _p, c in now.threads.values() if c is not None]
    union0 = frozenset().union(*known0) if known0 else None
    union1 = frozenset().union(*known1) if known1 else None
    if union0 is not None and union1 is not None and union0 != union1:
        changes.append(f"the tree's CPUs {_cpus(union0)} -> {_cpus(union1)}")
    if start.autogroup != now.autogroup:
        changes.append(f"autogroup nice {start.autogroup} -> {now.autogroup}")
    return changes


# ---------------------------------------------------------------------------- one worker


def _tail_of(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_CHARS))
            return f.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class Timing:
    """What the parent observed of one call.

    Attributes:
        wall_s: perfledger's clock, call written to ``done`` read and the output collected
            (seconds).
        cpu_s: the subject's process tree's CPU time over the call, from the kernel (seconds).
        start_s, end_s: ``time.perf_counter()`` at both ends (seconds, CLOCK_MONOTONIC on Linux,
            the monitors' clock).
        reported: what the subject reported itself (name -> number), labelled ``reported``.
        output: the call's :class:`~perfledger.derive.output_rules.Output`, read as ``done`` came
            (None when the caller reads it).
    """

    wall_s: float
    cpu_s: float
    start_s: float
    end_s: float
    reported: dict[str, float] = field(default_factory=dict)
    output: Any = None


class Worker:
    """One subject process speaking the worker protocol (module docstring).

    Args:
        label: ``ref`` or ``cand`` (never told to the subject).
        argv: the command (no ``{case}``, ``{seed}`` or ``{output}``: those come with each call).
        env: the child's whole environment (None: this process's).
        cwd: its working directory.
        timeout_s: the most a call (and the start-up until ``ready``) may take (seconds).
        log_dir: where its stdout and stderr files go (a private temporary directory if None).
    Raises: WorkerFailed when it cannot start, or does not say ``ready`` within ``timeout_s``.
    """

    def __init__(
        self,
        label: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout_s: float = 600.0,
        log_dir: str | None = None,
        cpu_exact: bool = False,
    ) -> None:
        self.label = label
        #: a ``cpu_time`` run: where no CPU group can be made, a call in which a process of the
        #: tree was reaped is refused (its CPU would be read in clock ticks)
        self.cpu_exact = cpu_exact
        self.timeout_s = timeout_s
        self._own_dir = log_dir is None
        self.log_dir = log_dir or tempfile.mkdtemp(prefix="perfledger-worker-")
        self.stdout_path = os.path.join(self.log_dir, f"{label}-{os.getpid()}-{id(self)}.out")
        self.stderr_path = self.stdout_path[:-4] + ".err"
        self._next_id = 0
        self._buffer = b""
        #: (the worker's own CPU clock at the last `done`, its other processes' CPU time then)
        self._done_cpu: tuple[int, int] | None = None
        self._done_wall = 0.0
        #: case -> how long its previous call took (ns): when the next one's answer is polled for
        self._expected_ns: dict[str, int] = {}
        inherited = sched_of(0)  # what the worker inherits (nice, policy)
        # the worker's processes, reaped ones included, read at ns/us resolution (R5)
        group = CpuGroup.make(f"perfledger-{os.getpid()}-{label}-{secrets.token_hex(4)}")
        self._group = group

        def start_child() -> None:
            if group is not None:
                with contextlib.suppress(OSError):  # checked at `ready`
                    group.join()
            confine_subject()  # cannot reach the parent's clock, a server, the other worker

        calls_r, self._calls_w = os.pipe()
        self._answers_r, answers_w = os.pipe()
        child_env = dict(os.environ if env is None else env)
        child_env[FDS_ENV] = f"{calls_r},{answers_w}"
        try:
            with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
                self._proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    env=child_env,
                    cwd=cwd,
                    pass_fds=(calls_r, answers_w),
                    start_new_session=True,  # its signals and terminal are its own
                    preexec_fn=start_child,
                )
        except OSError as exc:
            if group is not None:
                group.remove()
            for fd in (calls_r, answers_w, self._calls_w, self._answers_r):
                os.close(fd)
            raise WorkerFailed(label, "spawn", f"cannot start {argv[0]!r}: {exc}") from None
        os.close(calls_r)
        os.close(answers_w)
        self.pid = self._proc.pid
        ready = self._read(time.perf_counter() + timeout_s, "its ready line")
        if ready.get("op") != "ready" or ready.get("protocol") != PROTOCOL:
            self._fail(
                "protocol",
                f"its first line must be {{'op': 'ready', 'protocol': {PROTOCOL!r}}}, "
                f"not {json.dumps(ready)[:200]}",
            )
        #: it answers ``wake`` (said in its ready line): woken before each call's clock starts
        self.wakes = ready.get("wake") is True
        if self._group is not None and not self._group.holds(self.pid):
            self._group.remove()  # it could not join: read as where no group can be made
            self._group = None
        self._sched_start = scheduling_of(self.pid)
        # its start may already be lowered (the other subject's code ran meanwhile): held to
        # what it inherited from this process, and its new session's autogroup to nice 0
        main = self._sched_start.threads.get(self.pid)
        group = self._sched_start.autogroup
        if (
            inherited is not None
            and main is not None
            and (main[0] > inherited[0] or main[1] != inherited[1])
        ):
            self._fail(
                "scheduling",
                f"its worker started with nice {main[0]}, policy {_policy(main[1])}, not the "
                f"nice {inherited[0]}, policy {_policy(inherited[1])} it inherited from "
                "perfledger: a process of the same user (the other subject's code) can lower a "
                "worker's scheduling and slow its calls",
            )
        if group is not None and group > 0:
            self._fail(
                "scheduling",
                f"its worker's new session started with autogroup nice {group}, not 0: a "
                "process of the same user (the other subject's code) can lower it",
            )

    # -- failures ------------------------------------------------------------------------

    def tails(self) -> str:
        """The last lines the subject wrote to stdout and stderr, for an error message."""
        parts = []
        for name, path in (("stdout", self.stdout_path), ("stderr", self.stderr_path)):
            text = _tail_of(path)
            if text:
                shown = "\n".join(text.splitlines()[-8:])
                parts.append(f"its {name} ends:\n{shown}")
        return ("; " + "\n".join(parts)) if parts else ""

    def _fail(self, reason: str, message: str, hint: str | None = None) -> None:
        tails = self.tails()
        self.kill()
        raise WorkerFailed(self.label, reason, message + tails, hint=hint)

    # -- lines ---------------------------------------------------------------------------

    def _read(self, deadline: float, what: str) -> dict[str, Any]:
        """Read one answer line before ``deadline`` (perf_counter seconds), parsed."""
        return self._parse(self._read_line(deadline, what))

    def _read_line(self, deadline: float, what: str, poll: tuple[int, int] | None = None) -> bytes:
        """Read one answer line's bytes before ``deadline`` (perf_counter seconds). ``poll``:
        ``(start, end)`` (``perf_counter_ns``): from ``start`` to ``end`` the answers pipe is
        polled without sleeping (:data:`ANSWER_POLL_NS`), yielding the CPU between two looks;
        before and after, a sleep until the answer comes (before ``start``: at most until
        ``start``)."""
        while b"\n" not in self._buffer:
            now_ns = time.perf_counter_ns()
            left = deadline - now_ns / 1e9
            if left <= 0:
                self._fail("timeout", f"no answer ({what}) within {self.timeout_s:g} s")
            polling = poll is not None and poll[0] <= now_ns < poll[1]
            if polling:
                left = 0.0
            elif poll is not None and now_ns < poll[0]:
                left = min(left, (poll[0] - now_ns) / 1e9)  # asleep until the window
            ready, _, _ = select.select([self._answers_r], [], [], left)
            if not ready:
                if polling:  # a subject's thread waiting for this CPU runs first
                    os.sched_yield()
                continue
            chunk = os.read(self._answers_r, 65536)
            if not chunk:
                code = self._proc.poll()
                if code is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        code = self._proc.wait(timeout=0.2)
                self._fail("died", f"the worker closed its answers or exited (code {code}) "
                           f"while perfledger waited for {what}")  # fmt: skip
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer[:MAX_LINE_BYTES]:
                self._fail("protocol", f"an answer line longer than {MAX_LINE_BYTES} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _parse(self, line: bytes) -> dict[str, Any]:
        """One answer line as a JSON object. Raises: WorkerFailed (``protocol``)."""
        if len(line) > MAX_LINE_BYTES:
            self._fail("protocol", f"an answer line longer than {MAX_LINE_BYTES} bytes")
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            self._fail("protocol", f"an answer that is not a JSON object: {line[:200]!r}")
        return message  # type: ignore[return-value]

    def _unasked(self) -> None:
        """Fail when the worker sent anything nobody asked for (a second answer)."""
        if self._buffer.strip():
            self._fail("protocol", f"an answer nobody asked for: {self._buffer[:200]!r}")
        while True:
            ready, _, _ = select.select([self._answers_r], [], [], 0)
            if not ready:
                return
            chunk = os.read(self._answers_r, 65536)
            if not chunk:
                code = self._proc.poll()
                self._fail("died", f"the worker exited between calls (code {code})")
            if chunk.strip():
                self._fail("protocol", f"an answer nobody asked for: {chunk[:200]!r}")

    # -- the call ------------------------------------------------------------------------

    def _quiet(self, table: ProcessTable | None = None) -> None:
        """Fail when the worker used more CPU since its last ``done`` than
        :func:`idle_cpu_limit_s` of that call allows: work after answering (an output written
        late, work hidden between calls) or work slowing the other subject's calls."""
        if self._done_cpu is None:
            return
        root_done, others_done = self._done_cpu
        tree, root = self._tree_cpu(table=table), _process_cpu_ns(self.pid)
        # the worker's own threads since `done`, its other processes since they were read
        used = (max(root - root_done, 0) + max(tree - root - others_done, 0)) / 1e9
        limit = idle_cpu_limit_s(self._done_wall)
        if used > limit:
            self._fail(
                "idle_cpu",
                f"used {used:.4f} s of CPU after answering `done` to call {self._next_id} "
                f"(at most {limit:.4f} s allowed, for a call of {self._done_wall:.4f} s): a worker "
                "must not work between its calls",
            )

    def call(
        self,
        case: str,
        seed: int,
        output_path: str,
        collect: Callable[[], output_rules.Output] | None = None,
        escaped: Callable[[], Sequence[int]] | None = None,
        finish: Callable[[output_rules.Output], output_rules.Output] | None = None,
        table: ProcessTable | None = None,
    ) -> Timing:
        """Run one timed call (module docstring); ``collect`` reads the output the moment
        ``done`` is read (before anything else: an output written after ``done`` is missing, or
        written inside the clock, which stops once it is collected), then ``finish`` (where
        given) checks and digests it after the clock; kept as :attr:`Timing.output`. Only the
        answer's bytes and the output's are read inside the clock; the answer is parsed after.
        ``table``: a process table read since the previous call ended, for the checks before
        the clock starts (one reading of ``/proc`` serves them all); else one is read.
        ``escaped``: the processes that left every worker's tree and
        were re-parented to the measuring process (:func:`_orphans`; none at the call's start,
        the caller ends them first): their CPU clocks count in the call's closing reading, so
        a process that leaves the tree during the call takes none of its CPU time, counted in
        the opening reading, out of the call (R5: the kernel's accounting of the whole tree).
        Returns: the :class:`Timing`. Raises: WorkerFailed (the worker is ended)."""
        table = process_table() if table is None else table
        self._unasked()
        self._quiet(table)
        self.check_scheduling(table)
        self._next_id += 1
        n = self._next_id
        line = json.dumps(
            {"op": "call", "id": n, "case": case, "seed": seed, "output": output_path}
        ).encode()
        # the tree's processes' own clocks (see _group_call_cpu)
        call_cpu_ns: int | None = None
        own0 = _own_cpu(tree_pids(self.pid, table)) if self._group is not None else None
        cpu0 = self._tree_cpu(table=table)
        exact = self._group is None and self.cpu_exact
        reaped0 = _reaped_ticks(tree_pids(self.pid, table)) if exact else {}
        if self.wakes:
            self._wake(n)
        took = self._expected_ns.get(case)
        expected = (
            None if took is None else (took - ANSWER_POLL_NS // 2, took + ANSWER_POLL_NS // 2)
        )
        t0 = time.perf_counter_ns()
        try:
            os.write(self._calls_w, line + b"\n")
        except OSError as exc:
            self._fail("died", f"the worker cannot be sent its call: {exc}")
        # the answer is polled for around when it is expected (ANSWER_POLL_NS)
        poll = None if expected is None else (t0 + expected[0], t0 + expected[1])
        answer_line = self._read_line(t0 / 1e9 + self.timeout_s, f"call {n}", poll)
        root_done = _process_cpu_ns(self.pid)  # work after `done` is counted from here
        written = collect() if collect is not None else None
        # the clock stops once the output is collected: an output a thread writes after `done`
        # counts only with its work inside the clock (module docstring)
        t1 = time.perf_counter_ns()
        answer = self._parse(answer_line)
        if written is not None and finish is not None:
            written = finish(written)
        members = self._group.members() if self._group is not None else []
        # one walk of the tree (and one asking of `escaped`) after `members`, for both readings
        pids1 = self._walk(escaped) if self._group is not None else None
        tree1 = self._tree_cpu(escaped, pids=pids1)
        if own0 is not None and pids1 is not None:
            call_cpu_ns = self._group_call_cpu(n, own0, cpu0, tree1, members, pids1)
        cpu1 = tree1
        if escaped is not None and self._group is None:  # left the tree: still the call's (R5)
            # one reading of the union: a process re-parented between two walks (its parent's
            # exit completing late on a loaded host) would otherwise count twice
            cpu1 = tree_cpu_ns(self.pid, escaped)
        if self._group is not None and cpu1 < cpu0:
            self._fail("cpu_accounting", f"its CPU group's usage went back during call {n}")
        if reaped0:
            self._check_reaped(n, reaped0, escaped)
        self._done_cpu = (root_done, tree1 - _process_cpu_ns(self.pid))
        self._done_wall = (t1 - t0) / 1e9
        self._expected_ns[case] = t1 - t0
        if answer.get("op") != "done":
            self._fail("protocol", f"answered {json.dumps(answer)[:200]} to call {n}")
        if answer.get("id") != n or isinstance(answer.get("id"), bool):
            self._fail("protocol", f"answered id {answer.get('id')!r} to call {n}")
        unknown = sorted(set(answer) - {"op", "id", "reported"})
        if unknown:
            self._fail("protocol", f"unknown fields {unknown} in its answer to call {n}")
        reported = answer.get("reported") or {}
        if not isinstance(reported, dict) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
            for k, v in reported.items()
        ):
            self._fail("protocol", f"`reported` must map names to numbers (call {n})")
        return Timing(
            wall_s=(t1 - t0) / 1e9,
            cpu_s=max(cpu1 - cpu0 if call_cpu_ns is None else call_cpu_ns, 0) / 1e9,
            start_s=t0 / 1e9,
            end_s=t1 / 1e9,
            reported={str(k): float(v) for k, v in reported.items()},
            output=written,
        )

    def _wake(self, n: int) -> None:
        """Wake the worker for call ``n`` (``wake``, answered ``awake``) after the call's
        opening CPU readings and before its clock starts: the call's line then finds it
        awake, polling for it (``perfledger.subject.WAKE_POLL_NS``), and the wake-up of a
        sleeping process is not inside the clock. What it does from here is in the call's CPU
        time (a few microseconds of answering and polling). Raises: WorkerFailed (``died``,
        ``timeout``, ``protocol``: any other answer)."""
        try:
            os.write(self._calls_w, b'{"op": "wake"}\n')
        except OSError as exc:
            self._fail("died", f"the worker cannot be woken for call {n}: {exc}")
        now = time.perf_counter_ns()
        line = self._read_line(
            now / 1e9 + self.timeout_s, f"its awake before call {n}", (now, now + ANSWER_POLL_NS)
        )
        if line.strip() != b'{"op": "awake"}':
            self._fail("protocol", f"answered {line[:200]!r} to the wake before call {n}")

    def _walk(
        self,
        escaped: Callable[[], Sequence[int]] | None = None,
        table: ProcessTable | None = None,
    ) -> list[int]:
        """The worker's live tree (:func:`tree_pids`, from ``table``, else a fresh reading of
        ``/proc``), then ``escaped`` asked after the walk, each pid once."""
        tree = tree_pids(self.pid, table)  # walked first: a process moving out is not missed
        return list(dict.fromkeys([*tree, *(escaped() if escaped is not None else ())]))

    def _tree_cpu(
        self,
        escaped: Callable[[], Sequence[int]] | None = None,
        table: ProcessTable | None = None,
        pids: Sequence[int] | None = None,
    ) -> int:
        """The worker's processes' CPU time so far (ns): its :class:`CpuGroup`'s usage where
        it has one (every process that was ever in it, reaped ones included, at ns/us
        resolution), after checking that every live process of its tree (and ``escaped``) is
        still in the group; else :func:`tree_cpu_ns` (reaped children in clock ticks).
        ``table``: the process table to walk (else a fresh one; ``escaped`` is asked after).
        ``pids``: the walk already made (:meth:`_walk`), in place of ``escaped`` and ``table``.
        Raises: WorkerFailed (``cpu_accounting``) for a process that left the group."""
        if self._group is None:
            return tree_cpu_ns(self.pid, table=table)
        pids = self._walk(escaped, table) if pids is None else pids
        left = [p for p in pids if self._group.holds(p) is False]
        if left:
            self._fail(
                "cpu_accounting",
                f"processes of its tree left its CPU accounting group (pids {left[:8]}): their "
                "CPU time would not be counted",
            )
        usage = self._group.usage_ns()
        if usage is None:
            self._fail("cpu_accounting", "its CPU accounting group can no longer be read")
        return int(usage or 0)

    def _group_call_cpu(
        self,
        n: int,
        own0: tuple[int, int, dict[int, tuple[int, int]]],
        usage0: int,
        usage1: int,
        members: Sequence[int],
        pids1: Sequence[int],
    ) -> int:
        """The CPU time of call ``n`` (ns) for a worker with a CPU group. Any process of the
        same user may write the group's ``cgroup.procs``: an agent's hog could join the
        reference's group during its calls, burn CPU there (charged to its ``cpu_time``) and
        leave. So: a live process outside the tree in the group now (``members``, read before
        the tree) fails the call (``cpu_accounting``); and where no process of the tree ended
        or was reaped during the call (every process's count of its reaped children's page
        faults is unchanged: an exact count), the call's CPU is its processes' own clocks
        (``own0`` and after), which no other process can add to, and the group's usage must
        agree with them (:data:`UNACCOUNTED_CPU_FLOOR_NS`): more in the group is CPU no clock
        of the tree holds (a CLONE_VM child, which makes no page fault, born and reaped inside
        the call; a hog that joined the group and left), and fails the call. Only a call that
        reaped a process (one of the tree at its start, or one born during it) takes the
        group's usage (``usage1 - usage0``), which holds that process's CPU at ns resolution
        where the kernel gives it to its reaper in clock ticks. ``pids1``: the
        tree and its escaped processes at the call's end (:meth:`_walk`, made once for the
        group's check and for this)."""
        strangers = [p for p in members if p not in pids1 and self._stranger(p)]
        if strangers:
            self._fail(
                "cpu_accounting",
                f"processes outside its tree are in its CPU accounting group after call {n} "
                f"({'; '.join(_describe(p) for p in strangers[:4])}): their CPU time would "
                "count as the subject's",
            )
        live1, _reaped1, counters1 = _own_cpu(pids1)
        live0, _reaped0, counters0 = own0
        reaped = any(counters1.get(p) != c for p, c in counters0.items()) or any(
            p not in counters0 and c != (0, 0) for p, c in counters1.items()
        )  # a process born during the call that reaped one (red38 H: CLONE_VM children)
        if reaped:
            return usage1 - usage0
        own_ns = live1 - live0
        unaccounted_ns = (usage1 - usage0) - own_ns
        if unaccounted_ns > UNACCOUNTED_CPU_FLOOR_NS + UNACCOUNTED_CPU_SHARE * own_ns:
            self._fail(
                "cpu_accounting",
                f"its CPU group used {unaccounted_ns / 1e3:.0f} us more CPU during call {n} "
                f"than the clocks of its tree's processes hold ({own_ns / 1e3:.0f} us) while "
                "no process of the tree reaped one: a process born and ended inside the call "
                "out of sight of its reapers' counts (a CLONE_VM child makes no page fault), "
                "or one that joined the group and left; neither figure can be taken",
                hint="a subject's helpers must be processes the tree waits for (a child "
                "reaped with its page faults counted), or measure it with `--protocol command`",
            )
        return own_ns

    def _stranger(self, pid: int) -> bool:
        """Whether ``pid``, in the worker's group but not in its tree, is another program's
        process: alive, in another session than the worker's (every process the worker starts
        is in its session unless it makes its own), and not re-parented to the measuring
        process (where a daemon the worker started goes: its CPU is the subject's)."""
        if _process_cpu_ns(pid) <= 0:
            return False  # gone
        try:
            if os.getsid(pid) == self.pid:
                return False
        except OSError:
            return False
        counters = process_table().get(pid)
        return counters is not None and counters[0] != os.getpid()

    def _check_reaped(
        self, n: int, reaped0: dict[int, int], escaped: Callable[[], Sequence[int]] | None
    ) -> None:
        """Where no CPU group could be made (a ``cpu_time`` run): fail when a process of the
        tree at the call's start is gone at its end, or reaped a child during it (``cutime``,
        ``cstime`` moved): the kernel gives reaped children's CPU in clock ticks only, where a
        helper's work reads 0 on most calls. Whole-command mode times each process with
        ``os.wait4``'s microsecond resource usage."""
        pids1 = list(tree_pids(self.pid)) + list(escaped() if escaped is not None else ())
        reaped1 = _reaped_ticks(pids1)
        gone = sorted(set(reaped0) - set(reaped1))
        moved = sorted(p for p in reaped0 if p in reaped1 and reaped1[p] != reaped0[p])
        if gone or moved:
            self._fail(
                "cpu_accounting",
                f"processes of its tree ended during call {n} (gone: pids {gone[:8]}; reaped "
                f"children: pids {moved[:8]}) and no CPU accounting group could be made: the "
                "kernel gives a reaped process's CPU time in clock ticks, which a helper's "
                "work can hide in",
                hint="measure such a subject with `--protocol command` (one process per call, "
                "timed with os.wait4's microsecond resource usage), or where a cgroup file "
                "system is writable",
            )

    def check_scheduling(self, table: ProcessTable | None = None) -> None:
        """Fail (``scheduling``) when a thread of the worker's tree, or its autogroup, runs
        with another scheduling than at the worker's start (:func:`scheduling_changes`): nice
        value, policy or CPUs, lowered by the other subject's code (or by its own). Read
        outside the clock, before every call. Raises: WorkerFailed (the worker is ended)."""
        changes = scheduling_changes(self._sched_start, scheduling_of(self.pid, table), self.pid)
        if changes:
            self._fail(
                "scheduling",
                "its worker's scheduling changed since it started ("
                + "; ".join(changes[:6])
                + (f"; {len(changes) - 6} more" if len(changes) > 6 else "")
                + "): a process of the same user (the other subject's code) can lower a "
                "worker's scheduling and slow its calls, so the comparison is not fair",
                hint="a subject may set its own threads' scheduling during its setup (before "
                "`ready`), never after it nor another process's",
            )

    def cpu_ns(self) -> int:
        """The worker's process tree's CPU time so far (ns, :meth:`_tree_cpu`)."""
        return self._tree_cpu()

    def _tree(self, table: ProcessTable | None = None) -> list[int]:
        """The worker and its live descendants (pids, :func:`tree_pids`)."""
        return tree_pids(self.pid, table)

    def pause(self, table: ProcessTable | None = None) -> None:
        """Stop the worker's whole process tree (SIGSTOP) while the other subject's call runs:
        an idle worker cannot watch for the other's output, slow it, or work off its clock.
        ``table``: the process table to walk (else a fresh one)."""
        for pid in self._tree(table):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)

    def resume(self, table: ProcessTable | None = None) -> None:
        """Continue the worker's process tree (SIGCONT) before its own call (``table``: as
        :meth:`pause`)."""
        for pid in self._tree(table):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)

    def close(self) -> None:
        """Check nothing more was sent, ask the worker to exit, and end it and its processes.
        Raises: WorkerFailed for an answer nobody asked for."""
        try:
            if self._proc.poll() is None:
                self._unasked()
                self._quiet()
                self.resume()  # a stopped worker could not read its exit
                with contextlib.suppress(OSError):
                    os.write(self._calls_w, b'{"op": "exit"}\n')
        finally:
            self.kill()

    def kill(self) -> None:
        """End the worker's process group at once and close the pipes (idempotent)."""
        if self._proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=0.5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        self._proc.wait()
        if self._group is not None:
            self._group.remove()  # what is left in it is ended
            self._group = None
        for fd in (self._calls_w, self._answers_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._calls_w = self._answers_r = -1
        if self._own_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


# ---------------------------------------------------------------------------- whole command


def _fill(argv: Sequence[str], case: str, seed: int, output_path: str) -> list[str]:
    return [
        a.replace("{case}", case)
        .replace(outputs.SEED_PLACEHOLDER, str(seed))
        .replace(outputs.OUTPUT_PLACEHOLDER, output_path)
        for a in argv
    ]


def run_command(
    label: str,
    argv: Sequence[str],
    *,
    case: str,
    seed: int,
    output_path: str,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    timeout_s: float = 600.0,
) -> Timing:
    """Whole-command mode: one process for one call, timed by the parent from spawn to exit
    (as hyperfine does), its CPU time from ``os.wait4``'s resource usage (the process and the
    children it waited for). ``{case}``, ``{seed}`` and ``{output}`` in ``argv`` (and
    ``$PERFLEDGER_CASE``, ``$PERFLEDGER_SEED``, ``$PERFLEDGER_OUTPUT``) carry the call.

    Returns: the :class:`Timing`. Raises: WorkerFailed when it cannot start, runs past
    ``timeout_s`` (it and its processes are killed) or exits non-zero."""
    child_env = dict(os.environ if env is None else env)
    child_env.update(
        {"PERFLEDGER_CASE": case, outputs.SEED_ENV: str(seed), outputs.OUTPUT_ENV: output_path}
    )
    words = _fill(argv, case, seed, output_path)
    log = tempfile.mkdtemp(prefix="perfledger-cmd-")
    out_path, err_path = os.path.join(log, "out"), os.path.join(log, "err")
    try:
        with CallTree() as tree, open(out_path, "wb") as out, open(err_path, "wb") as err:
            t0 = time.perf_counter_ns()
            try:
                proc = subprocess.Popen(
                    words, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=child_env,
                    cwd=cwd, start_new_session=True, preexec_fn=confine_subject,
                )  # fmt: skip
            except OSError as exc:
                raise WorkerFailed(label, "spawn", f"cannot start {words[0]!r}: {exc}") from None
            tree.watch(proc.pid)
            pidfd = os.pidfd_open(proc.pid)
            try:
                ready, _, _ = select.select([pidfd], [], [], timeout_s)
            finally:
                os.close(pidfd)
            if not ready:
                tree.end(include_root=True)
                proc.wait()
                raise WorkerFailed(label, "timeout", f"no exit within {timeout_s:g} s")
            _pid, status, usage = os.wait4(proc.pid, 0)
            t1 = time.perf_counter_ns()
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            tree.end(include_root=False)
        if proc.returncode != 0:
            tails = "; ".join(
                f"its {n} ends:\n{_tail_of(p)}" for n, p in (("stdout", out_path),
                                                            ("stderr", err_path)) if _tail_of(p)
            )  # fmt: skip
            raise WorkerFailed(
                label, "exit_status", f"exited with status {proc.returncode}"
                + (f"; {tails}" if tails else ""),
            )  # fmt: skip
    finally:
        shutil.rmtree(log, ignore_errors=True)
    return Timing(
        wall_s=(t1 - t0) / 1e9,
        cpu_s=usage.ru_utime + usage.ru_stime,
        start_s=t0 / 1e9,
        end_s=t1 / 1e9,
    )


# ---------------------------------------------------------------------------- pairs


@dataclass(frozen=True)
class WorkerSubject:
    """A subject of :func:`run_pairs`: its label, command, environment and directory."""

    label: str
    argv: Sequence[str]
    env: Mapping[str, str] | None = None
    cwd: str | None = None


def observed_values(timing: Mapping[str, Any], units: Mapping[str, str]) -> dict[str, list[float]]:
    """The observed metrics of one call (:data:`OBSERVED_METRICS` named in ``units``, each in
    its time unit): ``{"wall_time": [wall_s * units-per-second]}``. ``timing`` holds ``wall_s``
    and ``cpu_s`` (seconds). Raises: ValueError for an observed metric in a unit that is not a
    time (``s``, ``ms``, ``us``, ``µs``, ``ns``)."""
    values: dict[str, list[float]] = {}
    for name, source in OBSERVED_METRICS.items():
        if name not in units:
            continue
        scale = UNITS_PER_SECOND.get(units[name])
        if scale is None:
            raise ValueError(
                f"observed metric {name!r} is a time; its unit {units[name]!r} is not one of "
                f"{sorted(UNITS_PER_SECOND)}"
            )
        values[name] = [float(timing[source]) * scale]
    return values


@dataclass
class WorkerRun:
    """The result of :func:`run_pairs`.

    Attributes:
        rows: every call, in run order (the per-call table's rows, :meth:`table`).
        settings: the protocol's settings (recorded in the samples' provenance).
        outputs: artifact name -> bytes of the kept (small) outputs of paired calls.
    """

    rows: list[dict[str, Any]]
    settings: dict[str, Any]
    outputs: dict[str, bytes] = field(default_factory=dict)

    def table(self) -> list[dict[str, Any]]:
        """The raw per-call table (JSON builtins)."""
        return self.rows

    @property
    def failed_calls(self) -> list[dict[str, Any]]:
        """Always empty: under the worker protocol a failed call invalidates the run
        (:class:`WorkerFailed`); a wrong output is an incorrect call, not a failed one."""
        return []

    def pairs(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """``(ref row, cand row)`` of every paired round, in run order."""
        by_round: dict[int, dict[str, dict[str, Any]]] = {}
        for row in self.rows:
            if not row["warmup"]:
                by_round.setdefault(int(row["pair"]), {})[row["subject"]] = row
        return [(r["ref"], r["cand"]) for _n, r in sorted(by_round.items())]


def new_seed() -> int:
    """A fresh 63-bit seed from the OS's random source, drawn when a pair starts."""
    return secrets.randbits(63)


def run_pairs(
    ref: WorkerSubject,
    cand: WorkerSubject,
    *,
    cases: Sequence[str],
    pairs_per_case: int,
    accuracy: Mapping[str, Any],
    units: Mapping[str, str],
    mode: str = "worker",
    warmup_calls: int = 1,
    timeout_s: float = 600.0,
    fresh_worker: bool = False,
    on_call: Callable[[dict[str, Any]], None] | None = None,
    before_call: Callable[[str], None] | None = None,
    more_pairs: Callable[[list[dict[str, Any]]], int] | None = None,
    subject_roots: Mapping[str, str] | None = None,
    extra_settings: Mapping[str, Any] | None = None,
    on_worker: Callable[[int], None] | None = None,
) -> WorkerRun:
    """Run ``ref`` and ``cand`` in interleaved ABBA pairs over ``cases`` under the worker
    protocol (``mode="worker"``) or one process per call (``mode="command"``), judging every
    output against the reference's of its pair (R5).

    In worker mode, each subject's worker first answers two probe calls per case with different
    seeds (warm-up rows, ``probe: true``): where the reference's two outputs of a case are the
    same bytes, its inputs do not come from the seed, a worker could hand back a remembered
    output, and every pair gets fresh workers (``settings.fresh_worker``, with the reason).

    Args:
        ref, cand: the subjects.
        cases: test cases (non-empty, distinct).
        pairs_per_case: pairs per case (>= 1).
        accuracy: the readiness's rule (``compare``: ``exact`` or ``allclose``, ``rtol``, ``atol``).
        units: metric -> unit of the samples: the observed metrics named there fill each row's
            ``metrics`` (:func:`observed_values`).
        mode: ``worker`` or ``command``.
        warmup_calls: warm-up rounds per case (>= 0), ABBA, not paired.
        timeout_s: the most one call (and a worker's start-up) may take (seconds).
        fresh_worker: a fresh worker per pair whatever the probe finds.
        on_call: called with each row as it is made.
        before_call: called with the label before every call and worker start (R11 checks).
        on_worker: called with each worker's pid as it starts (a monitor adopting perfledger's
            own workers, whose work is not foreign activity, R17).
        more_pairs: a stopping rule: called with the rows so far once the planned pairs of
            every case ran; the more pairs per case to run (0 stops). The settings record how
            many ran (``pairs_per_case``) and how many were planned first (``planned_pairs``).
    Returns: the :class:`WorkerRun`.
    Raises: ValueError for bad arguments; RuleRefused (R11) when the two subjects' environments
        differ (``subject_roots``: label -> its copy's private directory, the one difference
        allowed; ``extra_settings``: more entries of the settings, recorded with the samples);
        WorkerFailed when a subject fails the protocol, an
        worker used CPU after its ``done``, or a call fails (the run is invalid).
    """
    if not cases or len(set(cases)) != len(cases):
        raise ValueError("cases must be non-empty and distinct")
    # R11: the two subjects' processes get the same environment, apart from their private
    # directories (``subject_roots``: label -> the private directory of its read-only copy)
    roots = dict(subject_roots or {})
    environments = {
        label: call_environment(dict(os.environ if s.env is None else s.env), roots.get(label))
        for label, s in (("ref", ref), ("cand", cand))
    }
    differ = environment_difference(environments["ref"], environments["cand"])
    if ref.cwd != cand.cwd:
        differ.append("(working directory)")
    if differ:
        raise RuleRefused(
            "R11: the reference's and the candidate's workers would run with different "
            f"environments: {', '.join(differ)}; a variable set for one subject alone can "
            "change how it runs without any file of it differing, so nothing was measured",
            rule="R11",
            hint="give both subjects the same environment (only their own directories differ)",
        )
    if pairs_per_case < 1 or warmup_calls < 0:
        raise ValueError("pairs_per_case must be >= 1 and warmup_calls >= 0")
    if mode not in ("worker", "command"):
        raise ValueError(f"mode must be 'worker' or 'command', not {mode!r}")
    if accuracy.get("compare") not in ("exact", "allclose"):
        raise ValueError("every output is judged: the accuracy rule must be exact or allclose")
    rule = dict(accuracy)
    rtol, atol = float(rule.get("rtol", 0.0)), float(rule.get("atol", 0.0))
    subjects = {"ref": ref, "cand": cand}
    rows: list[dict[str, Any]] = []
    kept: dict[str, bytes] = {}
    workers: dict[str, Worker] = {}
    fresh = {"on": fresh_worker, "reason": "asked for" if fresh_worker else ""}

    ended = {"orphans": 0}
    children_before = set(_children_of(os.getpid()))

    def workers_pids() -> list[int]:
        return [w.pid for w in workers.values()]

    def worker(label: str) -> Worker:
        if label not in workers:
            if before_call is not None:
                before_call(label)
            s = subjects[label]
            workers[label] = Worker(
                label, s.argv, env=s.env, cwd=s.cwd, timeout_s=timeout_s,
                cpu_exact="cpu_time" in units,
            )  # fmt: skip
            if on_worker is not None:
                on_worker(workers[label].pid)
        return workers[label]

    def retire(label: str) -> None:
        w = workers.pop(label, None)
        if w is not None:
            w.close()

    def one_call(label: str, case: str, seed: int, tag: str) -> tuple[Timing, output_rules.Output]:
        place = outputs.OutputPlace()
        written = None
        try:
            if mode == "worker":
                w = worker(label)
                if before_call is not None:
                    before_call(label)
                other = workers.get("cand" if label == "ref" else "ref")
                # one reading of /proc for everything before the clock starts (each reading
                # opens every process's stat file)
                table = process_table()
                if other is not None:
                    other.pause(table)  # stopped for the whole of this call
                keep = set(workers_pids()) | children_before
                ended["orphans"] += _end_orphans(keep, table)
                # the call is charged with what leaves its own worker's tree during it, or is
                # new; never with a process of the other subject's tree (re-parented here late)
                mine = set(tree_pids(w.pid, table))
                seen = mine.union(*(tree_pids(x.pid, table) for x in workers.values()))
                w.resume(table)
                timing = w.call(  # the output read inside the clock, removed after it
                    case, seed, place.path, collect=place.read_bytes, finish=place.finish,
                    table=table,
                    escaped=lambda: [p for p in _orphans(keep) if p in mine or p not in seen],
                )  # fmt: skip
                written = timing.output
            else:
                if before_call is not None:
                    before_call(label)
                s = subjects[label]
                timing = run_command(
                    label, s.argv, case=case, seed=seed, output_path=place.path, env=s.env,
                    cwd=s.cwd, timeout_s=timeout_s,
                )  # fmt: skip
        finally:
            if written is None:  # read and removed before anything else runs
                written = place.collect()
            else:
                place.remove()
        return timing, written

    def row(label: str, case: str, tag: str, seed: int, timing: Timing, written: Any,
            reason: str, pair: int | None, warmup: bool, probe: bool = False) -> dict[str, Any]:  # fmt: skip
        record = {
            **written.to_json(), "ok": not reason, "reason": reason,
            "method": output_rules.METHOD, "compare": rule["compare"],
        }  # fmt: skip
        if not warmup and record["stored"] is not None:
            kept[record["stored"]] = written.data
        figures = {"wall_s": timing.wall_s, "cpu_s": timing.cpu_s}
        out = {
            "subject": label, "case": case, "call_id": f"{label}-{case}-{tag}", "ok": True,
            "correct": not reason, "self_correct": True, "metrics": observed_values(figures, units),
            "reason": None, "message": "", "returncode": None, "start_s": timing.start_s,
            "end_s": timing.end_s, "wall_s": timing.wall_s, "cpu_s": timing.cpu_s,
            "seed": str(seed), "reported": timing.reported, "output": record,
            "warmup": warmup, "pair": pair, "probe": probe,
        }  # fmt: skip
        rows.append(out)
        if on_call is not None:
            on_call(out)
        return out

    def run_round(order: tuple[str, str], case: str, tag: str, pair: int | None) -> None:
        seed = new_seed()  # drawn now: no subject can know it before its call
        done = {label: one_call(label, case, seed, tag) for label in order}
        if fresh["on"]:
            for label in order:
                retire(label)
        (_rt, ref_out), (_ct, cand_out) = done["ref"], done["cand"]
        if pair is not None and ref_out.data is not None and case not in trivial:
            # R5: does the declared rule tell an output that does no work from this one?
            trivial[case] = output_rules.trivial_output_passes(
                ref_out.data, rule["compare"], rtol, atol
            )
        reasons = {
            "ref": "" if ref_out.data is not None else f"output: {ref_out.error}",
            "cand": output_rules.judge_pair(ref_out, cand_out, rule["compare"], rtol, atol),
        }
        for label in order:
            timing, written = done[label]
            row(label, case, tag, seed, timing, written, reasons[label], pair, pair is None)

    trivial: dict[str, str] = {}  # case -> what no-work output the accuracy rule accepts
    order_of = [("ref", "cand") if k % 2 == 0 else ("cand", "ref") for k in range(pairs_per_case)]
    with CallTree() as tree:
        try:
            if mode == "worker" and not fresh["on"]:
                # the probe: do the reference's outputs follow the seed? (observed, not declared)
                for case in cases:
                    digests = []
                    for p in range(2):
                        seed = new_seed()
                        timing, written = one_call("ref", case, seed, f"p{p}")
                        row("ref", case, f"p{p}", seed, timing, written, "" if written.data
                            is not None else f"output: {written.error}", None, True, True)  # fmt: skip
                        digests.append(written.blake3)
                    if digests[0] is not None and digests[0] == digests[1]:
                        fresh["on"] = True
                        fresh["reason"] = (
                            f"the reference's outputs of case {case!r} did not change with the "
                            "seed: a worker could hand back a remembered output"
                        )
                        retire("ref")
            for w in range(warmup_calls):
                for case in cases:
                    run_round(order_of[w % 2] if order_of else ("ref", "cand"), case, f"w{w}",
                              None)  # fmt: skip
            n, k, planned = 0, 0, pairs_per_case
            while k < planned:
                order = ("ref", "cand") if k % 2 == 0 else ("cand", "ref")
                for case in cases:
                    run_round(order, case, str(k), n)
                    n += 1
                k += 1
                if k == planned and more_pairs is not None:
                    planned += max(0, int(more_pairs(rows)))
            for label in list(workers):
                retire(label)
        finally:
            for w in list(workers.values()):
                w.kill()
            tree.end(include_root=False)  # what the workers left behind, re-parented here

    settings = {
        "protocol": WORKER_PROTOCOL_ID if mode == "worker" else COMMAND_PROTOCOL_ID,
        "mode": mode,
        "cases": list(cases),
        "pairs_per_case": k,
        **({"planned_pairs": pairs_per_case} if more_pairs is not None else {}),
        "warmup_calls": warmup_calls,
        "timeout_s": timeout_s,
        "fresh_worker": bool(fresh["on"]),
        "fresh_reason": fresh["reason"],
        "ended_orphans": ended["orphans"],
        "confinement": confinement(),  # what Landlock and seccomp held every subject process to
        "ref_argv": list(ref.argv),
        "cand_argv": list(cand.argv),
        "idle_cpu": {"floor_s": IDLE_CPU_FLOOR_S, "share": IDLE_CPU_SHARE},
        "observed": {k: v for k, v in OBSERVED_METRICS.items() if k in units},
        "environment": influencing_environment(),
        # R11: the full environment of every worker (names, values' hashes), the same for both
        "call_environment": {**environments, "per_call": [FDS_ENV]},
        **dict(extra_settings or {}),
        "outputs": {
            "method": output_rules.METHOD, "accuracy": rule, "seeded": True,
            "trivial_passes": {c: why for c, why in trivial.items() if why},
            "store_max_bytes": output_rules.STORE_MAX_BYTES,
        },
    }  # fmt: skip
    return WorkerRun(rows, settings, kept)


__all__ = [
    "COMMAND_PROTOCOL_ID",
    "FDS_ENV",
    "MAX_LINE_BYTES",
    "OBSERVED_METRICS",
    "PROTOCOL",
    "WORKER_PROTOCOL_ID",
    "Timing",
    "Worker",
    "WorkerFailed",
    "WorkerRun",
    "WorkerSubject",
    "idle_cpu_limit_s",
    "new_seed",
    "observed_values",
    "run_command",
    "run_pairs",
    "tree_cpu_ns",
]
