"""Compare-and-swap of a loose git ref with git's lock-file protocol (``lockfile.c``): create
``<ref>.lock`` exclusively holding the new value (fsynced), read and compare the ref, rename the
lock over it; the caller fsyncs the ref's directory. git and dulwich back off on our lock as we
do on theirs.

Whose lock is it? Age tells nothing (git can hold one for seconds), so a writer marks its lock:
the content is written under an *owner name* of its own in ``owner_dir``, flocked, fsynced (the
name too), then hard-linked to ``<ref>.lock`` (``link(2)`` is exclusive). A lock linked to an owner name whose
flock is free was left by a dead writer and is removed (:func:`break_dead_lock`); any other lock
(git's; an unmarked one where there are no hard links) is never broken. docs/storage.md, claims
5 and 6.

The order that keeps a lock marked across a power loss: the owner name is durable before the
lock name is linked, and it is removed only once the lock name's removal is durable (its
directory fsynced). A filesystem may write back the two directories in either order, so without
the second half a crash could keep the lock and lose its owner name: a lock never broken.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets

from perfledger.errors import IntegrityError
from perfledger.events.limits import MAX_REF_FILE_BYTES, MAX_REF_NAME_BYTES
from perfledger.ledger.durable import fsync_dir
from perfledger.ledger.gitobj import write_all
from perfledger.ledger.layout import REF_LOCK_OWNER_PREFIX as OWNER_PREFIX
from perfledger.ledger.layout import REF_LOCK_SUFFIX as LOCK_SUFFIX


class RefLocked(Exception):
    """``<ref>.lock`` (the argument, its path) exists: another writer holds it (a lost race,
    git, or a dead writer)."""


def read_ref(git_dir: str, name: bytes) -> bytes | None:
    """Return the value of ref ``name`` (a hex sha as bytes, or a ``ref: ...`` line), from its
    loose file, else from ``packed-refs``; None when the ref does not exist. Reads at most
    ``MAX_REF_FILE_BYTES`` of a loose ref and one line of ``packed-refs`` at a time.
    Raises: IntegrityError for a loose ref larger than any git writes; OSError from the
        filesystem other than a missing file.
    """
    try:
        with open(git_dir + os.sep + os.fsdecode(name), "rb") as f:
            value = f.read(MAX_REF_FILE_BYTES + 1)
    except FileNotFoundError:
        return packed_ref(git_dir, name)
    if len(value) > MAX_REF_FILE_BYTES:
        raise IntegrityError(
            f"ref {os.fsdecode(name)} in {git_dir} holds more than {MAX_REF_FILE_BYTES} bytes; "
            "git writes a sha or a `ref:` line",
            hint="the repository was damaged or forged: restore the ref from a clone",
        )
    return value.strip()


def packed_ref(git_dir: str, name: bytes) -> bytes | None:
    """The value of ref ``name`` in ``git_dir``'s ``packed-refs`` (a hex sha), or None when the
    file or the ref is absent. Reads one line at a time, each at most ``MAX_REF_NAME_BYTES``
    plus a sha (a longer line names no ref perfledger reads, and is skipped unread).
    Raises: OSError from the filesystem other than a missing file."""
    limit = MAX_REF_NAME_BYTES + 128
    try:
        with open(os.path.join(git_dir, "packed-refs"), "rb") as f:
            while line := f.readline(limit):
                if not line.endswith(b"\n") and len(line) == limit:
                    while (rest := f.readline(limit)) and not rest.endswith(b"\n"):
                        pass  # the rest of an overlong line
                    continue
                if line.startswith((b"#", b"^")):
                    continue
                sha, _, ref = line.rstrip(b"\n").partition(b" ")
                if ref == name:
                    return sha
    except FileNotFoundError:
        pass
    return None


class RefLock:
    """A held ``<ref>.lock`` holding the new value, durably (:func:`lock_ref` makes it)."""

    def __init__(self, path: str, fd: int, owner: str | None) -> None:
        self.path = path
        self.lock = path + LOCK_SUFFIX
        self._fd = fd
        self._owner = owner

    def commit(self) -> None:
        """Rename the lock over the ref (atomic), fsync the ref's directory (the new value is
        durable when this returns), and release the lock.
        Raises: OSError from the filesystem: before the rename, the lock is removed and the ref
            left as it was; from the fsync, the ref may hold either value after a power loss
            and the owner name stays (harmless; the next dead-lock sweep removes it).
        """
        try:
            os.replace(self.lock, self.path)
        except BaseException:
            self.abort()
            raise
        try:
            fsync_dir(os.path.dirname(self.path))
        except BaseException:
            self._release(lock_gone_durably=False)
            raise
        self._release(lock_gone_durably=True)

    def abort(self) -> None:
        """Remove the lock without touching the ref (its removal fsynced before the owner
        name goes; when that fsync fails the owner name stays)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.lock)
        try:
            fsync_dir(os.path.dirname(self.lock))
        except OSError:
            self._release(lock_gone_durably=False)
            return
        self._release(lock_gone_durably=True)

    def _release(self, *, lock_gone_durably: bool) -> None:
        # the owner name goes only once the lock name's removal is durable (module docstring)
        if self._owner is not None and lock_gone_durably:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._owner)
        self._owner = None
        if self._fd >= 0:
            os.close(self._fd)  # releases the flock
            self._fd = -1


def lock_ref(
    git_dir: str, name: bytes, expected: bytes | None, new: bytes, *, owner_dir: str
) -> RefLock | None:
    """Take ``<ref>.lock`` of ref ``name`` in ``git_dir`` holding ``new`` (fsynced; its owner
    name made in ``owner_dir``), and check that the ref holds ``expected`` (None: absent).
    Returns: the held lock, or None when the ref holds another value (nothing changed).
    Raises: RefLocked when ``<ref>.lock`` exists; OSError from the filesystem (the lock is
        removed, the ref left as it was).
    """
    path = git_dir + os.sep + os.fsdecode(name)
    lock = path + LOCK_SUFFIX
    held = _create_lock(path, lock, new + b"\n", owner_dir)
    try:
        current = read_ref(git_dir, name)
    except BaseException:
        held.abort()
        raise
    if current != expected:
        held.abort()
        return None
    return held


def _create_lock(path: str, lock: str, content: bytes, owner_dir: str) -> RefLock:
    """Make ``lock`` exclusively with ``content`` (fsynced), marked and flocked as this
    writer's (see the module docstring). Raises: RefLocked when it exists; OSError."""
    with contextlib.suppress(OSError):  # without it: an unmarked lock below
        os.makedirs(owner_dir, exist_ok=True)
    owner = os.path.join(owner_dir, f"{OWNER_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(owner, flags, 0o644)
    except OSError:
        return _create_unmarked_lock(path, lock, content)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held until the lock is renamed or removed
        write_all(fd, content)
        os.fsync(fd)
        # the owner name durable before the lock's: a power loss can keep the lock's directory
        # entry (written back on its own) and drop an unsynced owner name, leaving a lock that
        # looks like another program's and is never broken
        fsync_dir(owner_dir)
        try:
            try:
                os.link(owner, lock)
            except FileNotFoundError:  # the ref's directory is missing
                os.makedirs(os.path.dirname(lock), exist_ok=True)
                os.link(owner, lock)
        except FileExistsError:
            raise RefLocked(lock) from None
        except OSError:  # no hard links on this filesystem
            os.unlink(owner)
            os.close(fd)
            fd = -1
            return _create_unmarked_lock(path, lock, content)
    except BaseException:
        if fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(owner)
            os.close(fd)
        raise
    return RefLock(path, fd, owner)


def _create_unmarked_lock(path: str, lock: str, content: bytes) -> RefLock:
    """``<ref>.lock`` made with ``O_EXCL`` directly (no owner name: never broken if left)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        try:
            fd = os.open(lock, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(lock), exist_ok=True)
            fd = os.open(lock, flags, 0o644)
    except FileExistsError:
        raise RefLocked(lock) from None
    held = RefLock(path, fd, None)
    try:
        write_all(fd, content)
        os.fsync(fd)
    except BaseException:
        held.abort()
        raise
    return held


def break_dead_lock(lock: str, owner_dir: str) -> bool:
    """Remove the owner names in ``owner_dir`` whose flock is free (their writers are dead),
    and ``lock`` when it is linked under one of them. Call it holding the writers' lock.
    Returns: True when the lock is gone; False when a live writer or another program holds it.
    Raises: OSError from the filesystem other than a missing file.
    """
    try:
        held = os.stat(lock)
        names = [n for n in os.listdir(owner_dir) if n.startswith(OWNER_PREFIX)]
    except FileNotFoundError:
        return not os.path.exists(lock)
    broken = False
    for name in names:
        path = os.path.join(owner_dir, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # its writer is dead; a lock linked to its file is still that writer's (nothing
            # else can take an existing lock name)
            if os.path.samestat(os.fstat(fd), held):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
                # durable before the owner name goes (module docstring)
                fsync_dir(os.path.dirname(lock))
                broken = True
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        except BlockingIOError:
            pass  # a live writer's
        finally:
            os.close(fd)
    return broken
