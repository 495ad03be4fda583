"""Compare-and-swap of a loose git ref, with git's own lock-file protocol.

Why not dulwich's ``refs.set_if_equals``: it fsyncs the lock file on its own, which costs a
flush per append even when the ledger flushes everything at once with ``syncfs``
(:mod:`perfledger.ledger.durable`), and it cannot hold the lock across that flush. The protocol
here is git's (``lockfile.c``, ``refs/files-backend.c``): create ``<ref>.lock`` exclusively,
read the current value while holding it, compare, write the new value, rename the lock over the
ref. A concurrent git CLI or dulwich writer sees the same lock and backs off, as this module does
on theirs.

Spare inode: on some filesystems freeing a file's blocks is expensive (ext4 mounted with
``discard`` spent ~1.5 ms in every rename over a 41-byte ref here, against ~0.1 ms when the old
file stays linked elsewhere). So the ref's previous file is kept as a *spare*, hard-linked under
the derived directory, and the next lock is that spare linked to ``<ref>.lock`` (``link(2)``
fails on an existing name, so the lock is as exclusive as ``O_EXCL``) and overwritten in place.
In-place writes are not ordered with metadata, so the caller must flush the lock's content
(``syncfs`` or ``fdatasync``) before :meth:`RefLock.commit`: otherwise a crash could leave the
ref renamed onto a file still holding an older value. Without a spare (first use, a filesystem
without hard links, an interrupted retirement) a fresh file is created.
"""

from __future__ import annotations

import contextlib
import os

#: Suffix of a ref's lock file (git's).
LOCK_SUFFIX = ".lock"


class RefLocked(Exception):
    """Another writer holds ``<ref>.lock`` (a lost race, or a dead writer's leftover)."""


def read_ref(git_dir: str, name: bytes) -> bytes | None:
    """Return the value of ref ``name`` (a hex sha as bytes, or a ``ref: ...`` line), from its
    loose file, else from ``packed-refs``; None when the ref does not exist.

    Raises: OSError from the filesystem other than a missing file.
    """
    try:
        with open(os.path.join(git_dir, os.fsdecode(name)), "rb") as f:
            return f.read().strip()
    except FileNotFoundError:
        pass
    try:
        with open(os.path.join(git_dir, "packed-refs"), "rb") as f:
            for line in f:
                if line.startswith((b"#", b"^")):
                    continue
                sha, _, ref = line.rstrip(b"\n").partition(b" ")
                if ref == name:
                    return sha
    except FileNotFoundError:
        pass
    return None


class RefLock:
    """A held ``<ref>.lock`` that already holds the new value; :meth:`commit` publishes it.

    Create with :func:`lock_ref`. The new value is not durable until the caller flushes it
    (``fsync=True`` here, or a later ``syncfs``).
    """

    def __init__(self, path: str, spare: str | None) -> None:
        self.path = path
        self.lock = path + LOCK_SUFFIX
        self.spare = spare

    def commit(self) -> None:
        """Rename the lock over the ref (atomic), keeping the ref's old file as the spare.

        The rename is durable only after the caller's directory fsync or ``syncfs``.
        Raises: OSError from the filesystem (the lock is removed, the ref left as it was).
        """
        try:
            if self.spare is not None:
                with contextlib.suppress(OSError):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.spare)
                    os.link(self.path, self.spare)
            os.replace(self.lock, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Release the lock without touching the ref."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock)


def lock_ref(
    git_dir: str,
    name: bytes,
    expected: bytes | None,
    new: bytes,
    *,
    fsync: bool,
    spare: str | None = None,
) -> RefLock | None:
    """Take ``<ref>.lock`` for ref ``name``, check it holds ``expected``, write ``new`` into it.

    Args:
        git_dir: the repository's git directory.
        name: the ref (``refs/heads/ledger``).
        expected: the value the ref must hold (hex sha bytes), or None for "absent".
        new: the new value (hex sha bytes).
        fsync: fdatasync the lock's content now (the ``fsync`` durability method); otherwise the
            caller flushes it (``syncfs``) before :meth:`RefLock.commit`.
        spare: where the ref's retired file is kept for reuse (see the module docstring), or
            None to always create a fresh lock file.
    Returns: the held lock, or None when the ref holds another value (nothing changed).
    Raises: RefLocked when ``<ref>.lock`` exists; OSError from the filesystem (the lock is
        removed, the ref left as it was).
    """
    path = os.path.join(git_dir, os.fsdecode(name))
    held = RefLock(path, spare)
    content = new + b"\n"
    fd = _open_lock(held.lock, spare, path)
    try:
        try:
            if read_ref(git_dir, name) != expected:
                held.abort()
                return None
            os.pwrite(fd, content, 0)
            os.ftruncate(fd, len(content))
            if fsync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
    except BaseException:
        held.abort()
        raise
    return held


def _open_lock(lock: str, spare: str | None, ref: str) -> int:
    """Create ``lock`` exclusively, as a new link of ``spare`` when there is one; returns a
    descriptor open for writing. Raises: RefLocked when ``lock`` exists.

    A spare that is the ref's own file (a writer killed between keeping the ref's file as the
    spare and renaming its lock) is dropped: writing it in place would change the live ref.
    """
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    if spare is not None:
        try:
            os.link(spare, lock)
        except FileExistsError:
            raise RefLocked(lock) from None
        except OSError:
            pass  # no spare yet, or no hard links here: a fresh file
        else:
            try:
                fd = os.open(lock, os.O_WRONLY)
                try:
                    if _same_file(os.fstat(fd), ref):
                        raise FileExistsError(ref)
                except BaseException:
                    os.close(fd)
                    raise
                return fd
            except FileExistsError:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(spare)
                os.unlink(lock)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
                raise
    try:
        return os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise RefLocked(lock) from None


def _same_file(st: os.stat_result, path: str) -> bool:
    """Whether ``path`` is the file described by ``st`` (False when ``path`` is missing)."""
    try:
        other = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)
