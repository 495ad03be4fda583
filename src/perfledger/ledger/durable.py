"""Durability: how an acknowledged append reaches the disk.

Three methods, chosen per ledger (git config ``perfledger.fsyncMethod``, or the environment
variable ``PERFLEDGER_FSYNC_METHOD``, which wins):

- ``writeout`` (the default on Linux when the ledger is on ext4 or XFS): an append writes its
  object files and the ref's new value, has the kernel write each one out to the device and
  waits for that (``sync_file_range(2)``: no cache flush yet), renames the objects into place
  and the lock over the ref, then fsyncs the ref's directory once. That fsync commits the
  filesystem's journal, which holds every earlier rename too (ext4 and XFS commit their journal
  in order, one transaction after another), and flushes the device's cache, which makes the
  data written out before it durable. One journal commit and one cache flush per append — git's
  ``core.fsyncMethod=batch`` idea, relying, as it does, on the journal's ordering; hence only
  on the two filesystems whose journal is known to work so (a btrfs fsync logs one directory).
- ``syncfs`` (the default elsewhere on Linux): an append writes its object files and renames
  them into place without flushing each one, then calls ``syncfs`` once on the ledger's
  filesystem: every file, rename and directory entry written so far is on disk when it returns
  (and since Linux 5.8 it reports writeback errors). Only then is the ref's lock file renamed
  over the ref, and the ref's directory is fsynced (the rename). Two flushes per append, however
  many objects it wrote, without relying on one filesystem's journal ordering. The ``syncfs``
  cost grows with unrelated dirty data on the same filesystem (another process writing
  gigabytes); choose ``fsync`` or ``writeout`` there.
- ``fsync``: every file is fsynced before its rename and every directory that received a rename
  is fsynced afterwards (portable; 6-8 flushes per single append).

Every way the ref moves only after the objects it points to are durable, so a crash at any
instant (power loss included) leaves the old head or the new one.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: The three durability methods.
WRITEOUT, SYNCFS, FSYNC = "writeout", "syncfs", "fsync"
#: ``statfs`` magic numbers of the filesystems ``writeout`` is the default on: ext2/3/4, XFS.
_ORDERED_JOURNAL_FILESYSTEMS = {0xEF53: "ext4", 0x58465342: "xfs"}
#: ``statfs`` magic of FUSE: ``syncfs(2)`` sends nothing to a FUSE daemon (only virtiofs gets a
#: request), so on FUSE the default is ``fsync``, whose requests every daemon receives (an
#: acknowledged append was lost there: found by tests/powerloss).
_FUSE_MAGIC = 0x65735546
#: ``sync_file_range`` flags (linux/fs.h).
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4
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


_sync_file_range_fn: Callable[[int, int, int, int], int] | bool | None = None


def _libc_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Return libc's ``sync_file_range`` (ctypes, loaded once), or None where there is none."""
    global _sync_file_range_fn
    if _sync_file_range_fn is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            fn = libc.sync_file_range
            fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _sync_file_range_fn = fn
        except (OSError, AttributeError):
            _sync_file_range_fn = False
    return _sync_file_range_fn or None


def filesystem_name(path: str | os.PathLike[str]) -> str | None:
    """Return ``"ext4"`` or ``"xfs"`` when ``path`` is on one of them (``statfs(2)``'s magic
    number; ext2 and ext3 share ext4's), ``"fuse"`` on a FUSE filesystem, else None (another
    filesystem, or no ``statfs``)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(256)  # struct statfs: f_type is its first word
        if libc.statfs(os.fsencode(path), buf) != 0:
            return None
        magic = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    except (OSError, AttributeError):
        return None
    return "fuse" if magic == _FUSE_MAGIC else _ORDERED_JOURNAL_FILESYSTEMS.get(magic)


def choose_method(configured: str | None, path: str | os.PathLike[str] | None = None) -> str:
    """Return the durability method to use: ``$PERFLEDGER_FSYNC_METHOD``, else ``configured``
    (the ledger's ``perfledger.fsyncMethod``), else ``writeout`` when ``path`` (the ledger's
    git directory) is on ext4 or XFS, ``fsync`` on FUSE, else ``syncfs`` where available, else
    ``fsync``.

    Raises: ValueError naming the bad value when the environment or config holds another word;
    ValueError when ``syncfs`` or ``writeout`` is asked for where the C library lacks it.
    """
    method = os.environ.get(METHOD_ENV) or configured
    if method is None:
        filesystem = filesystem_name(path) if path is not None else None
        if filesystem == "fuse":
            return FSYNC
        if _libc_sync_file_range() is not None and filesystem is not None:
            return WRITEOUT
        return SYNCFS if _libc_syncfs() is not None else FSYNC
    if method not in (WRITEOUT, SYNCFS, FSYNC):
        raise ValueError(
            f"unknown fsync method {method!r} (expected {WRITEOUT!r}, {SYNCFS!r} or {FSYNC!r})"
        )
    if method == SYNCFS and _libc_syncfs() is None:
        raise ValueError("fsync method 'syncfs' is not available on this system")
    if method == WRITEOUT and _libc_sync_file_range() is None:
        raise ValueError("fsync method 'writeout' is not available on this system")
    return method


def write_out(fd: int, *, wait: bool) -> None:
    """Have the kernel write the dirty pages of ``fd`` to the device (``sync_file_range``):
    start it (``wait=False``), or start it and wait until the device has them (``wait=True``).
    Nothing is flushed from the device's cache: see the ``writeout`` method above.

    Raises: OSError with the system's error (an I/O error, say); RuntimeError where the C
    library has no ``sync_file_range`` (callers check :func:`choose_method` first).
    """
    fn = _libc_sync_file_range()
    if fn is None:
        raise RuntimeError("sync_file_range is not available on this system")
    if fn(fd, 0, 0, (_WAIT_BEFORE | _WRITE | _WAIT_AFTER) if wait else _WRITE) != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


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
