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
:func:`confinement` says so; nothing fails. UDP, pathname UNIX sockets and SysV IPC are not
covered by Landlock (the audit hook still refuses a Python subject's ``sendto``, ``connect``
and ``bind``).

Imports: the standard library and :mod:`perfledger.kernels.proc`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from perfledger.kernels.proc import drop_ptrace_capability

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


def confinement() -> list[str]:
    """What :func:`confine_subject` applies on this kernel, as words for a run's settings and
    messages (``[]`` where Landlock is absent)."""
    applied: list[str] = []
    if _ABI >= 1:
        applied.append("ptrace")
    if _ABI >= 4:
        applied.append("tcp")
    if _ABI >= 6:
        applied += ["abstract_unix_sockets", "signals"]
    return applied


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


def confine_subject() -> None:
    """``preexec_fn`` of a subject's process: drop ``CAP_SYS_PTRACE``
    (:func:`perfledger.kernels.proc.drop_ptrace_capability`: it cannot reach the measuring
    process's clock) and :func:`confine_self`. Never raises (a kernel without Landlock leaves
    the subject as it was; :func:`confinement` tells which)."""
    drop_ptrace_capability()
    confine_self()


__all__ = ["confine_self", "confine_subject", "confinement", "landlock_abi"]
