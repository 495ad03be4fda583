"""Every process a driver call starts, found and ended (SPEC.md section 5, "Workload driver").

A command may leave processes behind: a grandchild that calls ``setsid()`` (its own session and
process group), a double-forked daemon, a child of a child that was killed. Killing the command's
process group misses all of them, and one that holds the call's stdout open keeps a reader waiting
for end-of-file long after the command exited. This module finds them by *ancestry*, which no
process can leave:

- during a call the driver process is a **child subreaper** (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``):
  a process orphaned inside the call's tree is re-parented to the driver, not to init, whatever
  session or process group it moved to;
- :meth:`CallTree.descendants` walks ``/proc`` (``ppid`` of every process): the descendants of the
  command, plus the processes re-parented to the driver since the call began, and theirs;
- :meth:`CallTree.end` sends SIGKILL to all of them, walks again until none is alive (a process
  that forked meanwhile is caught by the next walk), and reaps the ones re-parented to the driver
  (the command itself is reaped by its :class:`subprocess.Popen`).

Not covered (stated, not guessed): processes started outside the call's tree on its behalf (a
request to a daemon that already ran, ``systemd-run``, ``ssh``), and processes in a new PID
namespace. Where ``prctl`` is unavailable (not Linux), only processes still in the command's own
tree are found.

It is also the one reader of per-process ``/proc`` facts for the isolation and the driver's
watch (children, sessions, thread states, CPU time, scheduling, autogroups, tracers).

Imports: standard library only (kernels imports events at most, SPEC.md section 1).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
from collections.abc import Iterable, Iterator

#: ``prctl`` options (linux/prctl.h).
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
#: How long :meth:`CallTree.end` keeps killing and reaping before it gives up (seconds).
END_DEADLINE_S = 1.0
#: Pause between two walks while ended processes are still exiting (seconds).
_POLL_S = 0.005


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None


_LIBC = _libc()


def set_subreaper(on: bool) -> bool | None:
    """Make this process a child subreaper (``on``) or not; Linux only.

    Returns: the previous setting, or None where ``prctl`` is unavailable (nothing changed).
    """
    if _LIBC is None or not hasattr(_LIBC, "prctl"):
        return None
    previous = ctypes.c_int(0)
    if _LIBC.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
        return None
    if _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) != 0:
        return None
    return bool(previous.value)


#: ``prctl`` options (linux/prctl.h).
_PR_GET_DUMPABLE, _PR_SET_DUMPABLE = 3, 4


def set_dumpable(on: bool) -> bool | None:
    """Make this process dumpable or not (Linux ``prctl(PR_SET_DUMPABLE)``): a process that is
    not cannot be traced, nor its memory read or written through ``/proc``, by other processes
    of the same user without ``CAP_SYS_PTRACE`` (a subject could otherwise patch the measuring
    process's clock or samples, or the other worker). Returns: the previous setting, or None
    where ``prctl`` is unavailable (nothing changed)."""
    libc = _LIBC
    if libc is None or not hasattr(libc, "prctl"):
        return None
    previous = libc.prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0)
    if previous < 0 or libc.prctl(_PR_SET_DUMPABLE, 1 if on else 0, 0, 0, 0) != 0:
        return None
    return bool(previous)


#: ``prctl(PR_CAPBSET_DROP)`` and the capability it drops (linux/capability.h).
_PR_CAPBSET_DROP, _CAP_SYS_PTRACE = 24, 19


def drop_ptrace_capability() -> None:
    """Drop ``CAP_SYS_PTRACE`` from this process's capability bounding set (Linux; nothing
    where it cannot: an ordinary user has no such capability to drop). Run in a subject's
    process before it executes the command (``preexec_fn``): a subject started by root then
    holds no ``CAP_SYS_PTRACE`` after ``exec``, so it cannot pass over the measuring process's
    being non-dumpable (:func:`undumpable`) to read or write its memory."""
    # the libc found at import: find_library runs /sbin/ldconfig, a fork and exec in this
    # forked child of a multithreaded parent, before the command's exec
    if _LIBC is not None and hasattr(_LIBC, "prctl"):
        _LIBC.prctl(_PR_CAPBSET_DROP, _CAP_SYS_PTRACE, 0, 0, 0)


@contextlib.contextmanager
def undumpable() -> Iterator[None]:
    """This process not dumpable inside the block (:func:`set_dumpable`), as before after it."""
    previous = set_dumpable(False)
    try:
        yield
    finally:
        if previous:
            set_dumpable(True)


#: One reading of every process's parent and state (:func:`process_table`).
ProcessTable = dict[int, tuple[int, str]]


def _read_stat(pid: int | str) -> bytes | None:
    """``/proc/<pid>/stat``'s bytes, None when the process is gone (one ``read``: the file is
    generated whole by the kernel, far below the size read)."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def process_table() -> ProcessTable:
    """Every process visible in ``/proc``: pid -> (parent pid, state letter: ``R``, ``S``, ``Z``...).
    Processes that exit during the walk are left out. Empty where there is no ``/proc``."""
    table: ProcessTable = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        stat = _read_stat(name)
        if stat is None:
            continue
        # the command name (field 2) may hold spaces and parentheses: parse after the last ')'
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 2:
            table[int(name)] = (int(fields[1]), fields[0].decode("ascii", "replace"))
    return table


def cpu_ticks(pid: int) -> tuple[int, int, int, int] | None:
    """``(utime, stime, cutime, cstime)`` of ``pid`` in clock ticks (``os.sysconf("SC_CLK_TCK")``
    a second; fields 14-17 of ``/proc/<pid>/stat``): its own CPU time and that of the children
    it has waited for. None when it is gone or the file does not parse."""
    stat = _read_stat(pid)
    if stat is None:
        return None
    # the command name (field 2) may hold spaces and parentheses: parse after the last ')'
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14])
    except (IndexError, ValueError):
        return None


def reaped_counters(pid: int) -> tuple[int, int] | None:
    """What ``pid`` has reaped of its children so far: their CPU time in clock ticks
    (``cutime + cstime``) and their page faults (``cminflt + cmajflt``, fields 11 and 13 of
    ``/proc/<pid>/stat``). The faults are an exact count: any child that ran and was reaped
    moves them, where its CPU time may stay below a tick. None when it is gone."""
    stat = _read_stat(pid)
    if stat is None:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[13]) + int(fields[14]), int(fields[8]) + int(fields[10])
    except (IndexError, ValueError):
        return None


def session_of(pid: int) -> int | None:
    """The session id of ``pid``, or None when it is gone."""
    try:
        return os.getsid(pid)
    except OSError:  # gone
        return None


def children_by_parent(table: ProcessTable) -> dict[int, list[int]]:
    """Parent pid -> its children's pids, from a :func:`process_table`."""
    out: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        out.setdefault(ppid, []).append(pid)
    return out


def subtree(roots: Iterable[int], children: dict[int, list[int]]) -> set[int]:
    """``roots`` and all their descendants in ``children`` (:func:`children_by_parent`)."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack.extend(children.get(pid, ()))
    return seen


class CallTree:
    """The processes of one driver call: the command (``root``) and everything it started.

    Use as a context manager around the call: entering makes this process a subreaper and notes
    its children that existed before the call (they are never touched); leaving restores the
    subreaper setting. Between the two, :meth:`watch` names the command's pid, :meth:`descendants`
    lists the call's processes and :meth:`end` ends them.
    """

    def __init__(self) -> None:
        self.me = os.getpid()
        #: this process's session: a new child in it was started by this program (another
        #: thread), never by the call, whose command runs in a session of its own and whose
        #: processes can only leave it for new sessions (setsid)
        self._my_session = os.getsid(0)
        self.root: int | None = None
        self._before: set[int] = set()
        self._previous: bool | None = None

    def __enter__(self) -> CallTree:
        self._previous = set_subreaper(True)
        self._before = set(children_by_parent(process_table()).get(self.me, ()))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is False:
            set_subreaper(False)

    @property
    def subreaper(self) -> bool:
        """True when orphans of the call come back to this process (Linux ``prctl`` worked)."""
        return self._previous is not None

    def watch(self, root: int) -> None:
        """Name the command's pid (the :class:`subprocess.Popen` that this process reaps)."""
        self.root = root

    def descendants(self, table: ProcessTable | None = None) -> dict[int, str]:
        """The call's processes other than the command itself, with their state letter: the
        command's descendants and the processes re-parented to this one since the call began
        (and theirs), outside this process's own session. Zombies are included (state ``Z``)."""
        table = process_table() if table is None else table
        children = children_by_parent(table)
        orphans = [
            p
            for p in children.get(self.me, ())
            if p not in self._before and p != self.root and session_of(p) != self._my_session
        ]
        roots = list(orphans)
        if self.root is not None:
            roots += children.get(self.root, ())
        return {pid: table[pid][1] for pid in subtree(roots, children) if pid in table}

    def _reap(self, table: ProcessTable) -> None:
        for pid, (ppid, state) in table.items():
            if (
                ppid == self.me
                and state == "Z"
                and pid not in self._before
                and pid != self.root
                and session_of(pid) != self._my_session
            ):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)

    def end(self, include_root: bool) -> int:
        """SIGKILL every process of the call (the command too when ``include_root``), walking
        ``/proc`` again until none is alive, and reap those re-parented to this process.

        Returns: how many processes other than the command were ended (zombies not counted).
        Gives up after :data:`END_DEADLINE_S` seconds (a process in uninterruptible sleep).
        """
        ended: set[int] = set()
        if include_root and self.root is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.root, signal.SIGKILL)
        deadline = time.monotonic() + END_DEADLINE_S
        table = process_table()
        if not table and self.root is not None:
            # no /proc to walk: at least the command's own process group (the driver starts it
            # in a new session; a group id is not reused while a member lives)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.root, signal.SIGKILL)
        while True:
            live = {p for p, state in self.descendants(table).items() if state != "Z"}
            for pid in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                    ended.add(pid)
                except (ProcessLookupError, PermissionError):
                    pass
            self._reap(table)
            table = process_table()
            if not self.descendants(table) or time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
            table = process_table()
        return len(ended)


__all__ = [
    "CallTree",
    "CpuGroup",
    "ProcessTable",
    "drop_ptrace_capability",
    "process_table",
    "reaped_counters",
    "set_dumpable",
    "set_subreaper",
    "undumpable",
]


def children_of(pid: int) -> list[int] | None:
    """``pid``'s children from ``/proc/<pid>/task/<tid>/children`` (every thread's), [] when it
    is gone, None where the kernel has no such files."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended meanwhile
            return None  # a kernel without the children files
        except OSError:
            continue
    return out


#: Thread states (``/proc/<pid>/task/<tid>/stat``) of a thread that cannot run: stopped,
#: stopped by a tracer, zombie, dead.
STOPPED_STATES = frozenset("TtZX")
#: SIGSTOP's bit in ``/proc/<pid>/status``'s pending-signal masks.
_SIGSTOP_BIT = 1 << (signal.SIGSTOP - 1) if hasattr(signal, "SIGSTOP") else 0


def sched_of(tid: int) -> tuple[int, int] | None:
    """A thread's nice value and scheduling policy (0: this thread); None when it is gone or
    the platform does not say."""
    try:
        return os.getpriority(os.PRIO_PROCESS, tid), os.sched_getscheduler(tid)
    except (OSError, AttributeError):
        return None


def autogroup_nice(pid: int) -> int | None:
    """The nice value of ``pid``'s autogroup (``/proc/<pid>/autogroup``: ``/autogroup-N nice
    K``); None where the kernel has no autogroups or the process is gone. With autogroups on,
    the CPU is shared between sessions by this value, not by the threads' own nice values."""
    try:
        with open(f"/proc/{pid}/autogroup", encoding="ascii", errors="replace") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def affinity_of(tid: int) -> frozenset[int] | None:
    """The CPUs a thread may run on (``sched_getaffinity``; 0: this thread); None when it is
    gone or the platform does not say."""
    try:
        return frozenset(os.sched_getaffinity(tid))
    except (OSError, AttributeError):
        return None


def thread_ids(pid: int) -> list[str]:
    """The thread ids of ``pid`` (``/proc/<pid>/task``), as text; [] when it is gone."""
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone (or no /proc: nothing to check)


def thread_states(pid: int) -> Iterator[str]:
    """The state letter of each of ``pid``'s threads (``/proc/<pid>/task/<tid>/stat``; none
    when it is gone), read one thread at a time."""
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        # the state follows the command name, which is in parentheses and may hold any byte
        end = stat.rfind(b")")
        yield stat[end + 2 : end + 3].decode("ascii", "replace")


def is_stopped(pid: int, states: frozenset[str] = STOPPED_STATES) -> bool:
    """Whether every thread of ``pid`` is in one of ``states`` (default: stopped, traced,
    zombie, dead; True when it is gone)."""
    return all(state in states for state in thread_states(pid))


def comm(pid: int) -> str:
    """The process's command name (``/proc/<pid>/comm``), or ``?``."""
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()[:32] or "?"
    except OSError:
        return "?"


def states_text(pid: int) -> str:
    """The states of ``pid``'s threads, e.g. ``TTTS`` (``?`` when it is gone)."""
    return "".join(thread_states(pid)) or "?"


def stop_pending(pid: int) -> bool:
    """Whether a SIGSTOP sent to ``pid`` is still pending (it has not run user code since:
    a pending signal is taken on the way back to user space)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("ShdPnd:", "SigPnd:")) and (
                    int(line.split()[1], 16) & _SIGSTOP_BIT
                ):
                    return True
    except (OSError, ValueError):
        pass
    return False


def cpu_ns(pid: int) -> int | None:
    """CPU time of all of ``pid``'s threads so far (ns, ``/proc/<pid>/task/*/schedstat``);
    None when it is gone or the kernel does not say."""
    total, seen = 0, False
    for tid in thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split()[0])
                seen = True
        except (OSError, ValueError, IndexError):
            continue
    return total if seen else None


def tracer_pid(pid: int) -> int:
    """The pid of the process tracing ``pid`` (``TracerPid`` in ``/proc/<pid>/status``), 0 when
    none traces it or it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


# ---------------------------------------------------------------------------- CPU groups


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, options) of every cgroup file system mounted."""
    out = []
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                    out.append((parts[1], parts[2], set(parts[3].split(","))))
    except OSError:
        pass
    return out


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup path per hierarchy (``/proc/self/cgroup``): a v1 controller
    (``cpuacct``) or ``""`` (the v2 hierarchy) -> its path."""
    out: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                _n, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _remove_stale(parent: str) -> None:
    """Remove the empty groups ``perfledger-PID-*`` under ``parent`` older than a minute whose
    process ``PID`` is gone (a measuring process killed before it removed its own); a group
    still holding a process cannot be removed and stays."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "perfledger" or not parts[1].isdigit():
            continue
        if os.path.exists(f"/proc/{parts[1]}"):
            continue
        with contextlib.suppress(OSError):
            # not a new one (a process of another PID namespace, about to join it)
            if os.stat(os.path.join(parent, name)).st_mtime < time.time() - 60:
                os.rmdir(os.path.join(parent, name))


class CpuGroup:
    """A control group of one worker's processes, read for their CPU time (ns) at the kernel's
    scheduler resolution: cgroup v1 ``cpuacct.usage`` (ns) or v2 ``cpu.stat`` ``usage_usec``
    (us). It counts every process that was ever in the group (a child joins its parent's at
    fork), those that exited and were reaped included: unlike ``/proc/PID/stat``'s
    ``cutime``/``cstime`` (clock ticks, 10 ms), a helper reaped inside a call leaves all its
    CPU time in the reading (SPEC section 5, "Workload worker protocol").

    Made by :meth:`make` (None where no group can be made: no cgroup file system, or not
    writable by this user); a process joins with :meth:`join` (in the child, before exec).
    """

    def __init__(self, path: str, version: int) -> None:
        self.path = path
        self.version = version

    @classmethod
    def make(cls, name: str) -> CpuGroup | None:
        """A new group ``name`` under this process's own cgroup of the ``cpuacct`` (v1)
        hierarchy, else of the v2 hierarchy; None where neither can be made."""
        own = _own_cgroups()
        for point, kind, options in _mounts():
            if kind == "cgroup" and "cpuacct" in options and "cpuacct" in own:
                version, rel = 1, own["cpuacct"]
            elif kind == "cgroup2" and "" in own:
                version, rel = 2, own[""]
            else:
                continue
            path = os.path.join(point, rel.lstrip("/"), name)
            _remove_stale(os.path.dirname(path))
            try:
                os.mkdir(path, 0o755)
            except OSError:
                continue
            group = cls(path, version)
            if group.usage_ns() is None:
                group.remove()
                continue
            return group
        return None

    def join(self) -> None:
        """Move the calling process into the group (``cgroup.procs``; for a ``preexec_fn``:
        only system calls). Raises: OSError."""
        fd = os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def usage_ns(self) -> int | None:
        """CPU time of every process that was ever in the group (ns); None when unreadable."""
        try:
            if self.version == 1:
                with open(os.path.join(self.path, "cpuacct.usage"), "rb") as f:
                    return int(f.read())
            with open(os.path.join(self.path, "cpu.stat"), "rb") as f:
                for line in f:
                    key, _, value = line.partition(b" ")
                    if key == b"usage_usec":
                        return int(value) * 1000
        except (OSError, ValueError):
            pass
        return None

    def holds(self, pid: int) -> bool | None:
        """Whether ``pid`` is in the group (``/proc/<pid>/cgroup``); None when it is gone or
        has exited (a zombie names the root group: its CPU time was charged at its exit)."""
        rel = "/" + os.path.basename(self.path)
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        for line in lines:
            _n, controllers, path = line.split(":", 2)
            mine = "cpuacct" in controllers.split(",") if self.version == 1 else not controllers
            if mine and path.endswith(rel):
                return True
        return None if is_stopped(pid, frozenset("ZX")) else False  # exited (or gone) meanwhile

    def members(self) -> list[int]:
        """The live processes in the group (``cgroup.procs``)."""
        try:
            with open(os.path.join(self.path, "cgroup.procs"), "rb") as f:
                return [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            return []

    def remove(self) -> bool:
        """Kill what is left in the group and remove it (retried for up to
        :data:`END_DEADLINE_S`). Returns: whether it is gone."""
        deadline = time.monotonic() + END_DEADLINE_S
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError:
                if time.monotonic() > deadline:
                    return False
            for pid in self.members():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(_POLL_S)
