"""Compare-and-swap of a loose git ref, with git's own lock-file protocol.

Why not dulwich's ``refs.set_if_equals``: it fsyncs the lock file on its own, which costs a
flush per append even when the ledger flushes everything at once with ``syncfs``
(:mod:`perfledger.ledger.durable`), and it cannot hold the lock across that flush. The protocol
here is git's (``lockfile.c``, ``refs/files-backend.c``): create ``<ref>.lock`` exclusively,
read the current value while holding it, compare, write the new value, rename the lock over the
ref. A concurrent git CLI or dulwich writer sees the same lock and backs off, as this module does
on theirs.

Spare inodes: on some filesystems freeing a file's blocks is expensive (ext4 mounted with
``discard`` spent ~1.5 ms in every rename over a 41-byte ref here, against ~0.1 ms when the old
file stays linked elsewhere). So two files take turns: each has a *spare* name under the derived
directory, one of them is also the ref, and the next lock is the other one linked to
``<ref>.lock`` (``link(2)`` fails on an existing name, so the lock is as exclusive as
``O_EXCL``) and overwritten in place; renaming the lock over the ref then frees nothing, and no
spare name has to be moved.
In-place writes are not ordered with metadata, so the caller must flush the lock's content
(``syncfs`` or ``fdatasync``) before :meth:`RefLock.commit`: otherwise a crash could leave the
ref renamed onto a file still holding an older value. Without a spare (first use, a filesystem
without hard links, an interrupted retirement) a fresh file is created.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence

from perfledger.ledger.durable import write_out

#: Suffix of a ref's lock file (git's).
LOCK_SUFFIX = ".lock"


class RefLocked(Exception):
    """Another writer holds ``<ref>.lock`` (a lost race, or a dead writer's leftover)."""


def read_ref(git_dir: str, name: bytes) -> bytes | None:
    """Return the value of ref ``name`` (a hex sha as bytes, or a ``ref: ...`` line), from its
    loose file, else from ``packed-refs``; None when the ref does not exist.

    Raises: OSError from the filesystem other than a missing file.
    """
    value = read_loose_ref(git_dir + os.sep + os.fsdecode(name))
    if value is not None:
        return value
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


def read_loose_ref(path: str) -> bytes | None:
    """The stripped content of a loose ref file; None when there is none. A ref is 41 bytes:
    one ``read`` (plain ``os`` calls: ``open()``'s buffered file costs ~20 µs here)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        chunks = [os.read(fd, 4096)]
        while len(chunks[-1]) == 4096:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks).strip()


class RefLock:
    """A held ``<ref>.lock`` that already holds the new value; :meth:`commit` publishes it.

    Create with :func:`lock_ref`. The new value is not durable until the caller flushes it
    (``fsync=True`` here, or a later ``syncfs``).
    """

    def __init__(self, path: str, adopt: str | None) -> None:
        self.path = path
        self.lock = path + LOCK_SUFFIX
        #: the spare name that the ref's current file takes at :meth:`commit`, when missing
        self.adopt = adopt

    def commit(self, dir_fd: int | None = None) -> bool:
        """Rename the lock over the ref (atomic), keeping the ref's old file as a spare.

        Args:
            dir_fd: a descriptor open on the ref's directory, kept by the caller: the rename is
                then made inside that very directory (relative names), so that fsyncing the
                same descriptor makes it durable, and no ``open`` of the directory is needed.
        Returns: True when the rename went through ``dir_fd``; False when it was made by path
            because ``dir_fd`` is no longer the ref's directory (it was removed and made again:
            the caller reopens it) or none was given.
        The rename is durable only after the caller's directory fsync or ``syncfs``.
        Raises: OSError from the filesystem (the lock is removed, the ref left as it was).
        """
        try:
            adopt = self.adopt
            if adopt is not None and adopt not in _present_spares:
                try:
                    os.link(self.path, adopt)
                except FileExistsError:
                    _present_spares.add(adopt)  # a spare already: not tried again
                except OSError:
                    pass
            if dir_fd is not None:
                name = os.path.basename(self.path)
                try:
                    os.replace(name + LOCK_SUFFIX, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                    return True
                except FileNotFoundError:  # a removed directory: the lock is not in it
                    pass
            os.replace(self.lock, self.path)
            return False
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
    writeout: bool = False,
    spare: str | None = None,
    written_out: Sequence[int] = (),
) -> RefLock | None:
    """Take ``<ref>.lock`` for ref ``name``, check it holds ``expected``, write ``new`` into it.

    Args:
        git_dir: the repository's git directory.
        name: the ref (``refs/heads/ledger``).
        expected: the value the ref must hold (hex sha bytes), or None for "absent".
        new: the new value (hex sha bytes).
        fsync: fdatasync the lock's content now (the ``fsync`` durability method); otherwise the
            caller flushes it (``syncfs``) before :meth:`RefLock.commit`.
        writeout: write the lock's content out to the device now and wait for it, without a
            cache flush (the ``writeout`` method: the caller's directory fsync flushes it).
        written_out: descriptors of files whose write-out was started (``writeout``): waited
            for together with the lock's, before this returns.
        spare: the path of the first of the two spare names (the second is ``spare + "-b"``;
            see the module docstring), or None to always create a fresh lock file.
    Returns: the held lock, or None when the ref holds another value (nothing changed).
    Raises: RefLocked when ``<ref>.lock`` exists; OSError from the filesystem (the lock is
        removed, the ref left as it was).
    """
    path = git_dir + os.sep + os.fsdecode(name)
    lock = path + LOCK_SUFFIX
    content = new + b"\n"
    fd, size, adopt = _open_lock(lock, spare, path)
    held = RefLock(path, adopt)
    try:
        try:
            current = read_loose_ref(path)
            if current is None:
                current = read_ref(git_dir, name)
            if current != expected:
                held.abort()
                return None
            os.pwrite(fd, content, 0)
            if size != len(content):
                os.ftruncate(fd, len(content))
            if fsync:
                os.fdatasync(fd)
            elif writeout:
                write_out(fd, wait=False)
                for other in written_out:
                    write_out(other, wait=True)
                write_out(fd, wait=True)
        finally:
            os.close(fd)
    except BaseException:
        held.abort()
        raise
    return held


#: spare path -> which of its two names to try first (the one not used last time)
_next_spare: dict[str, int] = {}
#: spare names known to exist (so that a commit does not try to give them again); a name found
#: missing or dropped leaves the set
_present_spares: set[str] = set()


def _open_lock(lock: str, spare: str | None, ref: str) -> tuple[int, int, str | None]:
    """Create ``lock`` exclusively, as a new link of a spare file when one is free.

    Returns: (a descriptor open for writing, the file's current size in bytes, the spare name
    that the ref's current file should take at commit, or None).
    Raises: RefLocked when ``lock`` exists.

    A spare is written in place only when, once linked as the lock, it has exactly two links
    (its spare name and the lock): one that is also the live ref (a writer killed between
    giving the ref's file a spare name and renaming its lock) must not be written, and a name
    that shares its file with anything else is dropped, to be given again at a later commit.
    """
    adopt: str | None = None
    if spare is not None:
        names = (spare, spare + "-b")
        first = _next_spare.get(spare, 0)
        for k in (first, 1 - first):
            candidate = names[k]
            try:
                os.link(candidate, lock)
            except FileExistsError:
                raise RefLocked(lock) from None
            except FileNotFoundError:
                if not os.path.isdir(os.path.dirname(lock)):
                    break  # the ref's directory is missing: made below
                _present_spares.discard(candidate)
                adopt = adopt or candidate  # no such spare yet
                continue
            except OSError:
                break  # no hard links here: a fresh file
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    st = os.fstat(fd)
                    if st.st_nlink == 2:
                        _next_spare[spare] = 1 - k
                        return fd, st.st_size, names[1 - k]
                    if not _same_file(st, ref):
                        os.unlink(candidate)  # shared with something else: given again later
                        _present_spares.discard(candidate)
                        adopt = adopt or candidate
                except BaseException:
                    os.close(fd)
                    raise
                os.close(fd)
                os.unlink(lock)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
                raise
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        try:
            return os.open(lock, flags, 0o644), 0, adopt
        except FileNotFoundError:
            os.makedirs(os.path.dirname(lock), exist_ok=True)
            return os.open(lock, flags, 0o644), 0, adopt
    except FileExistsError:
        raise RefLocked(lock) from None


def _same_file(st: os.stat_result, path: str) -> bool:
    """Whether ``path`` is the file described by ``st`` (False when ``path`` is missing)."""
    try:
        other = os.stat(path)
    except FileNotFoundError:
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)
