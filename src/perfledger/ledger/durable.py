"""Durability: how an acknowledged append reaches the disk.

Two methods, chosen per ledger (git config ``perfledger.fsyncMethod``, or the environment
variable ``PERFLEDGER_FSYNC_METHOD``, which wins):

- ``syncfs`` (the default where the C library has ``syncfs(2)``, i.e. Linux): an append writes
  its object files and renames them into place without flushing each one, then calls
  ``syncfs`` once on the ledger's filesystem: every file, rename and directory entry written so
  far is on disk when it returns (and since Linux 5.8 it reports writeback errors). Only then is
  the ref's lock file renamed over the ref, and the ref's directory is fsynced (the rename).
  Two flushes per append, however many objects it wrote — the same idea as git's
  ``core.fsyncMethod=batch``, but without relying on one filesystem's journal ordering. The
  ``syncfs`` cost grows with unrelated dirty data on the same filesystem (another process
  writing gigabytes); choose ``fsync`` there.
- ``fsync``: every file is fsynced before its rename and every directory that received a rename
  is fsynced afterwards (portable; 6-8 flushes per single append).

Either way the ref moves only after the objects it points to are durable, so a crash at any
instant (power loss included) leaves the old head or the new one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: The two durability methods.
SYNCFS, FSYNC = "syncfs", "fsync"
#: Environment variable that overrides the ledger's configured method (tests, benchmarks).
METHOD_ENV = "PERFLEDGER_FSYNC_METHOD"

_syncfs_fn: Callable[[int], int] | bool | None = None


def _libc_syncfs() -> Callable[[int], int] | None:
    """Return libc's ``syncfs`` (ctypes, loaded once), or None where there is none."""
    global _syncfs_fn
    if _syncfs_fn is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.syncfs
            fn.argtypes = [ctypes.c_int]
            fn.restype = ctypes.c_int
            _syncfs_fn = fn
        except (OSError, AttributeError):
            _syncfs_fn = False
    return _syncfs_fn or None


def choose_method(configured: str | None) -> str:
    """Return the durability method to use: ``$PERFLEDGER_FSYNC_METHOD``, else ``configured``
    (the ledger's ``perfledger.fsyncMethod``), else ``syncfs`` where available, else ``fsync``.

    Raises: ValueError naming the bad value when the environment or config holds another word;
    ValueError when ``syncfs`` is asked for where the C library has none.
    """
    method = os.environ.get(METHOD_ENV) or configured
    if method is None:
        return SYNCFS if _libc_syncfs() is not None else FSYNC
    if method not in (SYNCFS, FSYNC):
        raise ValueError(f"unknown fsync method {method!r} (expected {SYNCFS!r} or {FSYNC!r})")
    if method == SYNCFS and _libc_syncfs() is None:
        raise ValueError("fsync method 'syncfs' is not available on this system")
    return method


def sync_filesystem(path: str | os.PathLike[str] | int) -> None:
    """Flush every pending write of the filesystem that holds ``path`` to disk (``syncfs(2)``).

    Args:
        path: a path on the filesystem, or a descriptor open on it (a writer keeps one, which
            spares an ``open`` and a ``close`` per append).
    Raises: OSError with the system's error (an I/O error during writeback, say); RuntimeError
    where the C library has no ``syncfs`` (callers check :func:`choose_method` first).
    """
    fn = _libc_syncfs()
    if fn is None:
        raise RuntimeError("syncfs is not available on this system")
    owned = not isinstance(path, int)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC) if owned else path
    try:
        if fn(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), str(path))
    finally:
        if owned:
            os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync the directory ``path`` so that renames and creations inside it are durable.

    Raises: OSError from the operating system (a missing directory, for instance).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
