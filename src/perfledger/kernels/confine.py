"""Confine a subject's processes with the kernel's Landlock LSM (SPEC.md section 5, R11: code
outside the snapshot; issue 34, "open channels").

The bootstrap's audit hook refuses a Python subject's sockets and its reads of other processes'
``/proc`` entries, but native code (a C extension, ``ctypes``, a program the subject starts)
does not pass through it. Landlock holds for every process of the subject, whatever language,
and cannot be lifted by the subject once applied (it is inherited across ``fork`` and
``exec``). Applied in the child before ``exec`` (:func:`confine_subject`, a ``preexec_fn``):

- **TCP** (Landlock ABI 4 on): no ``bind`` and no ``connect`` on any port: no code or answers
  fetched from a server the agent runs, and no server a helper of the subject runs.
- **Scopes** (ABI 6 on): no connection to an abstract UNIX socket outside the subject's own
  processes, and no signal to a process outside them (the other subject's worker, the
  measuring process).
- **ptrace** (every ABI): a process in a Landlock domain cannot trace, or read the memory or
  ``/proc/<pid>/environ`` of, a process outside it; each worker gets its own domain, so the
  candidate's processes cannot reach the reference's.

Where the kernel has no Landlock (or an older ABI), what it lacks is not applied and
:func:`confinement` says so; nothing fails.

Landlock does not cover UDP, UNIX sockets named in the file system, SysV IPC or POSIX message
queues. A seccomp filter (:data:`SECCOMP_RULES`, built by libseccomp through ``pyseccomp``)
closes the class "a subject reaches a process outside its tree" at the system calls, with
``EPERM`` (a clear error, not a kill), for every process of the subject (a filter is inherited
across ``fork`` and ``exec``; ``no_new_privs`` is set):

- **sockets**: no ``socket`` but an AF_UNIX stream (or seqpacket) socket: no UDP, netlink,
  raw or packet socket, no TCP past Landlock, no UNIX datagram socket (it sends to any named
  socket unconnected). The CUDA driver's ``cuInit`` fails where ``socket``, ``bind`` or
  ``listen`` is refused: the AF_UNIX stream sockets stay for it, with ``connect`` and
  ``accept`` (Python's forkserver and multiprocessing managers use them); a stream socket
  named in the file system is a file the agent made, as open as the native reads of files
  below; ``socketpair`` of stream sockets stays allowed.
- **sysv_ipc**: no SysV shared memory, message queue or semaphore (keyed system-wide).
- **posix_mqueues**: no POSIX message queue (named system-wide, opened by a system call).
- **process_memory**: no ``process_vm_readv``/``writev``, ``process_madvise``,
  ``pidfd_getfd``, ``kcmp`` or ``userfaultfd`` (also where the kernel has no Landlock; ``ptrace``
  is left to Landlock's scope: a subject may trace its own children).
- **keyrings**: no ``add_key``, ``request_key`` or ``keyctl`` (the user's keyring is shared by
  all of the user's processes).
- **io_uring**: no ``io_uring_setup``/``enter``/``register`` (its operations, sockets
  included, are not seen by a seccomp filter).

Where ``pyseccomp`` or libseccomp is missing, or the kernel has no seccomp filters, none of
this is applied and :func:`confinement` lists none of these words. Open still: native reads of
files (``/dev/shm``, FIFOs, UNIX stream sockets named in the file system and anything the agent
can write; SPEC.md section 1).

Imports: the standard library, ``pyseccomp`` (optional at run time) and
:mod:`perfledger.kernels.proc`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
from typing import Any

from perfledger.kernels.proc import drop_ptrace_capability

try:  # a ctypes binding of libseccomp.so.2; it raises RuntimeError where that library is absent
    import pyseccomp as _pyseccomp
except (ImportError, RuntimeError, OSError):
    _pyseccomp = None

#: Landlock's system call numbers (the same on every architecture: 444-446).
_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446
_CREATE_RULESET_VERSION = 1
_PR_SET_NO_NEW_PRIVS = 38
#: ``handled_access_net`` bits (ABI 4): bind and connect on TCP ports.
_ACCESS_NET_BIND_TCP, _ACCESS_NET_CONNECT_TCP = 1 << 0, 1 << 1
#: ``scoped`` bits (ABI 6): abstract UNIX sockets and signals.
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1

_LIBC_NAME = ctypes.util.find_library("c")
# loaded at import: find_library runs /sbin/ldconfig, a fork and exec that must not happen in
# the forked child of a multithreaded parent
_LIBC = ctypes.CDLL(_LIBC_NAME, use_errno=True) if _LIBC_NAME else None


class _RulesetAttr(ctypes.Structure):
    """``struct landlock_ruleset_attr`` (linux/landlock.h); passed with the size the kernel's
    ABI knows (8 bytes before ABI 4, 16 before ABI 6, 24 from it)."""

    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0 where Landlock is absent or disabled)."""
    if _LIBC is None or not hasattr(_LIBC, "syscall"):
        return 0
    version = _LIBC.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION)
    return max(int(version), 0)


#: Read once in the measuring process: the child applies what this kernel supports.
_ABI = landlock_abi()


#: ``socket``'s address family and types (linux/socket.h, linux/net.h).
_AF_UNIX, _SOCK_DGRAM, _SOCK_RAW, _SOCK_TYPE_MASK = 1, 2, 3, 0xF

#: One seccomp rule: a system call, denied (``EPERM``) where every argument test holds; a test
#: is (argument index, libseccomp comparison by name, value, second value: 0 where unused).
SeccompRule = tuple[str, tuple[tuple[int, str, int, int], ...]]

#: What the seccomp filter denies, by the word :func:`confinement` records when it held: every
#: way a subject's process reaches a process outside its tree that Landlock does not close (and,
#: for another process's memory, also where the kernel has no Landlock). Nothing a normal
#: subject needs: ``mmap``, ``futex``, ``clone``, pipes, ``socketpair`` of stream sockets, files,
#: ``ptrace`` of its own children.
SECCOMP_RULES: dict[str, tuple[SeccompRule, ...]] = {
    "sockets": (
        # any family but AF_UNIX: UDP, TCP past Landlock, netlink, raw and packet sockets
        ("socket", ((0, "NE", _AF_UNIX, 0),)),
        # AF_UNIX datagrams (raw is datagram there): sendto/recvfrom any named socket, unconnected
        ("socket", ((1, "MASKED_EQ", _SOCK_TYPE_MASK, _SOCK_DGRAM),)),
        ("socket", ((1, "MASKED_EQ", _SOCK_TYPE_MASK, _SOCK_RAW),)),
        # a datagram pair whose other end closed is unconnected: a named end then takes anyone's
        ("socketpair", ((0, "NE", _AF_UNIX, 0),)),
        ("socketpair", ((1, "MASKED_EQ", _SOCK_TYPE_MASK, _SOCK_DGRAM),)),
        ("socketpair", ((1, "MASKED_EQ", _SOCK_TYPE_MASK, _SOCK_RAW),)),
        # connect and accept stay: a UNIX stream socket named in the file system is a file the
        # agent made, the open channel of native file reads (module docstring), and denying
        # them stops Python's forkserver, multiprocessing managers and CUDA's own IPC
    ),
    # SysV objects are found by key or id system-wide: any process of the user can attach
    "sysv_ipc": tuple(
        (name, ())
        for name in (
            "shmget",
            "shmat",
            "shmctl",
            "msgget",
            "msgsnd",
            "msgrcv",
            "msgctl",
            "semget",
            "semop",
            "semtimedop",
            "semctl",
            "ipc",  # the multiplexer of 32-bit x86
        )
    ),
    # a POSIX queue is named system-wide and opened by a system call, not a file Landlock sees
    "posix_mqueues": (("mq_open", ()), ("mq_unlink", ())),
    # (``ptrace`` is left to Landlock's scope: a subject may trace its own children, strace)
    "process_memory": (
        ("process_vm_readv", ()),  # copies another process's memory ...
        ("process_vm_writev", ()),  # ... or into it
        ("process_madvise", ()),  # pages another process's memory out (slows it)
        ("pidfd_getfd", ()),  # copies another process's open file (a socket, a segment)
        ("kcmp", ()),  # tells which files and memory two processes share
        ("userfaultfd", ()),  # serves page faults of memory shared with another process
    ),
    # the user keyring holds bytes any process of the user can read
    "keyrings": (("add_key", ()), ("request_key", ()), ("keyctl", ())),
    # its queued operations (socket, connect, accept...) never pass through a seccomp filter
    "io_uring": (("io_uring_setup", ()), ("io_uring_enter", ()), ("io_uring_register", ())),
}

#: 32-bit programs run on a 64-bit kernel through their own system call table: the same rules
#: are added for that architecture (libseccomp maps them onto the ``socketcall`` and ``ipc``
#: multiplexers). Any other architecture's system call is ended by the filter (SIGSYS).
_COMPAT_ARCH: dict[int, int] = (
    {_pyseccomp.Arch.X86_64: _pyseccomp.Arch.X86, _pyseccomp.Arch.AARCH64: _pyseccomp.Arch.ARM}
    if _pyseccomp is not None
    else {}
)
_SECCOMP_GET_ACTION_AVAIL, _SECCOMP_RET_ERRNO = 2, 0x00050000


def _seccomp_in_kernel() -> bool:
    """Whether the kernel has seccomp filters that can return an error (Linux 4.14 on)."""
    if _pyseccomp is None or _LIBC is None or not hasattr(_LIBC, "syscall"):
        return False
    nr = _pyseccomp.resolve_syscall(_pyseccomp.Arch.NATIVE, "seccomp")
    if nr < 0:
        return False
    action = ctypes.c_uint32(_SECCOMP_RET_ERRNO)
    return _LIBC.syscall(nr, _SECCOMP_GET_ACTION_AVAIL, 0, ctypes.byref(action)) == 0


def _seccomp_filter() -> tuple[Any, tuple[str, ...]]:
    """The filter of :data:`SECCOMP_RULES` (a ``pyseccomp.SyscallFilter``, built here in the
    measuring process: the child only loads it) and the words whose every rule went in; (None,
    ()) where libseccomp, its binding or the kernel's seccomp is missing."""
    if not _seccomp_in_kernel():
        return None, ()
    lib = _pyseccomp
    try:
        filt = lib.SyscallFilter(lib.ALLOW)
        compat = _COMPAT_ARCH.get(lib.system_arch())
        if compat is not None:
            with contextlib.suppress(OSError):  # before the rules: they are added for each
                filt.add_arch(compat)
    except OSError:
        return None, ()
    held: list[str] = []
    for word, rules in SECCOMP_RULES.items():
        complete = True
        for name, tests in rules:
            if lib.resolve_syscall(lib.Arch.NATIVE, name) == -1:  # unknown to this libseccomp
                complete = False
                continue
            args = [lib.Arg(i, getattr(lib, op), a, b) for i, op, a, b in tests]
            try:
                filt.add_rule(lib.ERRNO(errno.EPERM), name, *args)
            except OSError:
                complete = False
        if complete:
            held.append(word)
    return filt, tuple(held)


#: Built once in the measuring process; the forked child only loads it (``seccomp_load``, whose
#: allocation is safe after ``fork`` under glibc, as the rest of a ``preexec_fn`` is).
_FILTER, _SECCOMP_HELD = _seccomp_filter()


def confinement() -> list[str]:
    """What :func:`confine_subject` applies on this kernel, as words for a run's settings and
    messages: Landlock's (``ptrace``, ``tcp``, ``abstract_unix_sockets``, ``signals``) then the
    seccomp filter's (the keys of :data:`SECCOMP_RULES`); ``[]`` where neither is there."""
    applied: list[str] = []
    if _ABI >= 1:
        applied.append("ptrace")
    if _ABI >= 4:
        applied.append("tcp")
    if _ABI >= 6:
        applied += ["abstract_unix_sockets", "signals"]
    return applied + list(_SECCOMP_HELD)


def _ruleset() -> tuple[_RulesetAttr, int] | None:
    """The ruleset this kernel supports and the size to pass; None without Landlock."""
    if _ABI < 1:
        return None
    if _ABI < 4:
        # ABI 1-3 know only file-system rights, one of which must be handled: handle one no
        # subject needs (making a block device) so that the domain exists (ptrace scoping)
        return _RulesetAttr(1 << 11, 0, 0), 8
    if _ABI < 6:
        return _RulesetAttr(0, _ACCESS_NET_BIND_TCP | _ACCESS_NET_CONNECT_TCP, 0), 16
    net = _ACCESS_NET_BIND_TCP | _ACCESS_NET_CONNECT_TCP
    return _RulesetAttr(0, net, _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL), 24


def confine_self() -> bool:
    """Put this process (and everything it starts later) in a new Landlock domain with
    :func:`confinement`'s restrictions. Returns: True when applied, False where the kernel has
    no Landlock or refused it (nothing changed then, apart from ``no_new_privs``)."""
    ruleset = _ruleset()
    if ruleset is None or _LIBC is None:
        return False
    attr, size = ruleset
    if _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return False
    fd = _LIBC.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), size, 0)
    if fd < 0:
        return False
    try:
        return _LIBC.syscall(_SYS_RESTRICT_SELF, fd, 0) == 0
    finally:
        os.close(fd)


def seccomp_self() -> bool:
    """Load the seccomp filter of :data:`SECCOMP_RULES` into this process (and everything it
    starts later; it sets ``no_new_privs``). Returns: True when loaded, False where there is no
    filter (no libseccomp, binding or kernel support) or the kernel refused it."""
    if _FILTER is None:
        return False
    try:
        _FILTER.load()
    except OSError:
        return False
    return True


def confine_subject() -> None:
    """``preexec_fn`` of a subject's process: drop ``CAP_SYS_PTRACE``
    (:func:`perfledger.kernels.proc.drop_ptrace_capability`: it cannot reach the measuring
    process's clock), :func:`confine_self` (Landlock) and :func:`seccomp_self`. Never raises (a
    kernel without Landlock or seccomp leaves the subject as it was; :func:`confinement` tells
    which held)."""
    drop_ptrace_capability()
    confine_self()
    seccomp_self()


__all__ = [
    "SECCOMP_RULES",
    "confine_self",
    "confine_subject",
    "confinement",
    "landlock_abi",
    "seccomp_self",
]
