"""Recycling the files of packed loose objects: a pool of spare inodes for single appends.

Why: a single append writes its blob, tree and commit as three loose object files, and about
every 1,000 appends they are packed (:mod:`perfledger.ledger.packing`). Deleting the packed
files cost most of a single append's kernel time on this machine's disk (ext4 mounted with
``discard``): freeing blocks written seconds before cost 0.5-1.9 ms a file, paid in the next
``syncfs``. Instead, packed loose files are moved into this pool and later rewritten in place as
new loose objects, so that in steady state no block is freed or allocated per append. Measured
here (6,000 single appends through ``Ledger.append``, same code but for the pool): from the
second thousand on, 178-197 appends/s when the packed files were deleted, 530-680 with the
pool.

Layout, under the derived directory (inside the git directory, which git ignores):
``loose-pool/`` holds batches, each a directory of files:

- ``new-<token>``: just made by :meth:`LoosePool.retire`, renamed ``fill-*`` once its writer
  holds the directory's ``flock`` (a ``new-*`` directory older than :data:`NEW_ORPHAN_S` was
  left by a writer killed in between, and is adopted like the others);
- ``fill-<token>``: being filled by :meth:`LoosePool.retire`, whose writer holds an exclusive
  ``flock`` on the directory; renamed ``ready-*`` when complete;
- ``ready-<time_ns>-<token>``: retired files, reused :data:`QUARANTINE_S` after ``time_ns``;
- ``held-<token>``: claimed by one writer, which holds the directory's ``flock`` while it takes
  files from it.

A ``fill-*`` or ``held-*`` batch whose ``flock`` nobody holds was left by a killed writer; the
next claim adopts it. Claiming is: open the batch, take its ``flock`` without waiting, rename it
to ``held-*``: the ``flock`` decides between two claimers, and a claimer whose rename finds
nothing lost to one that finished first.

Safety:

- A file enters the pool only once its object is in a durable pack, exactly when it used to be
  deleted; an object that a reader does not find loose is found in the pack.
- A reader that opened a loose object just before it was retired still holds the old inode; were
  the file rewritten at once it could read a different object. Batches are therefore reused
  only :data:`QUARANTINE_S` after they were retired (git itself maps a loose object for the
  microseconds it takes to inflate it; perfledger's and dulwich's readers read it whole at once).
- The pool is bounded: :data:`MAX_BATCHES` batches; files retired beyond that, and files over
  :data:`MAX_FILE_BYTES`, are deleted as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time

#: Directory of the pool, under the store's derived directory.
POOL_DIR = "loose-pool"
#: Seconds a retired batch waits before its files are rewritten (see the module docstring).
QUARANTINE_S = 1.0
#: Batches (each one packing's worth of loose files, about 3,000) the pool keeps at most.
MAX_BATCHES = 3
#: Files larger than this (an artifact's blob) are deleted rather than pooled, bytes.
MAX_FILE_BYTES = 16 * 1024
#: Seconds after which a ``new-*`` batch, whose writer had not locked it yet, counts as left by
#: a killed writer.
NEW_ORPHAN_S = 10.0
#: Seconds between two listings of the pool when it had nothing ready.
_LOOK_EVERY_S = 0.25


def _token() -> str:
    return secrets.token_hex(6)


class LoosePool:
    """The spare files of one store's pool (see the module docstring).

    Not thread-safe: :meth:`take` is called by the appending thread, :meth:`retire` by the
    store's one housekeeping thread; they share nothing but the directory.
    """

    def __init__(self, derived_dir: str) -> None:
        """``derived_dir``: the store's derived directory (the pool lives in ``loose-pool/``)."""
        self.root = os.path.join(derived_dir, POOL_DIR)
        self._held_fd: int | None = None
        self._held_path = ""
        self._names: list[str] = []
        self._next_look = 0.0
        #: used-up held batches, released by :meth:`settle` once their files are renamed away
        self._exhausted: list[tuple[int, str]] = []

    # ------------------------------------------------------------------ taking

    def take(self) -> str | None:
        """Return the path of a spare file that only this writer may rewrite, or None when
        none is ready (the caller creates a new file). The caller rewrites it whole
        (``pwrite`` then ``ftruncate``), renames it away, then calls :meth:`settle`."""
        if not self._names and not self._claim():
            return None
        return self._held_path + self._names.pop()

    def _claim(self) -> bool:
        """Set the exhausted batch aside (see :meth:`settle`) and claim another; False when
        none is ready. Lists the pool at most every :data:`_LOOK_EVERY_S` seconds."""
        if self._held_fd is not None:
            self._exhausted.append((self._held_fd, self._held_path.rstrip(os.sep)))
            self._held_fd, self._held_path = None, ""
        now = time.monotonic()
        if now < self._next_look:
            return False
        self._next_look = now + _LOOK_EVERY_S
        try:
            entries = os.listdir(self.root)
        except FileNotFoundError:
            return False
        ready_before = time.time_ns() - int(QUARANTINE_S * 1e9)
        ready: list[tuple[int, str]] = []
        orphans: list[str] = []
        for name in entries:
            kind, _, rest = name.partition("-")
            if kind == "ready":
                stamp = rest.partition("-")[0]
                if stamp.isascii() and stamp.isdigit() and int(stamp) <= ready_before:
                    ready.append((int(stamp), name))
            elif kind in ("held", "fill", "new"):
                orphans.append(name)
        for name in [n for _, n in sorted(ready)] + orphans:
            if self._adopt(name, orphan=not name.startswith("ready-")):
                return True
        return False

    def _adopt(self, name: str, *, orphan: bool) -> bool:
        """Try to make batch ``name`` this writer's held batch (see the module docstring)."""
        path = os.path.join(self.root, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if orphan:
                young = NEW_ORPHAN_S if name.startswith("new-") else QUARANTINE_S
                if time.time() - os.fstat(fd).st_mtime < young:
                    raise BlockingIOError  # a writer that made it and has not locked it yet
            held = os.path.join(self.root, f"held-{_token()}")
            os.rename(path, held)
            names = os.listdir(held)
        except OSError:
            os.close(fd)
            return False
        if not names:  # an empty batch (a killed writer's): removed
            self._give_back(fd, held)
            return False
        self._held_fd, self._held_path, self._names = fd, held + os.sep, names
        return True

    def settle(self) -> None:
        """Release the batches used up by earlier :meth:`take` calls, once the caller has
        renamed the files it took away (a batch is never moved while a taken file is in it)."""
        while self._exhausted:
            self._give_back(*self._exhausted.pop())

    def release(self) -> None:
        """Give back every batch this writer holds: removed when used up, handed back as
        ready otherwise (the store's close)."""
        self.settle()
        fd = self._held_fd
        if fd is None:
            return
        held = self._held_path.rstrip(os.sep)
        self._held_fd, self._held_path = None, ""
        self._names = []
        self._give_back(fd, held)

    def _give_back(self, fd: int, held: str) -> None:
        try:
            try:
                os.rmdir(held)
            except OSError:  # files left (a rewrite that failed): hand them back
                with contextlib.suppress(OSError):
                    os.rename(held, os.path.join(self.root, f"ready-0-{_token()}"))
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ retiring

    def _batch_count(self) -> int:
        """Batches in the pool (creating its directory when missing)."""
        try:
            return len(os.listdir(self.root))
        except FileNotFoundError:
            os.makedirs(self.root, exist_ok=True)
            return 0

    def retire(self, files: list[tuple[str, int]]) -> None:
        """Move packed loose object files into the pool; delete those that do not fit.

        Args:
            files: (path, size in bytes, an upper bound) of loose object files whose objects
                are already in a durable pack.
        Runs in the store's housekeeping thread. A file that has disappeared (packed and
        retired by another writer) is skipped. Raises: OSError from the filesystem.
        """
        small = [path for path, size in files if size <= MAX_FILE_BYTES]
        large = [path for path, size in files if size > MAX_FILE_BYTES]
        _unlink_all(large)
        if not small:
            return
        if self._batch_count() >= MAX_BATCHES:
            _unlink_all(small)
            return
        token = _token()
        made = os.path.join(self.root, f"new-{token}")
        fill = os.path.join(self.root, f"fill-{token}")
        os.mkdir(made)
        fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # locked before it is named fill-*: a claimer never sees a fill-* batch unlocked
            # while its writer lives (a new-* one it leaves alone for NEW_ORPHAN_S)
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(made, fill)
            prefix = fill + os.sep
            for i, path in enumerate(small):
                try:
                    os.rename(path, prefix + str(i))
                except FileNotFoundError:
                    continue
            os.rename(fill, os.path.join(self.root, f"ready-{time.time_ns()}-{token}"))
        finally:
            os.close(fd)


def open_spare(path: str) -> int:
    """Open a spare taken by :meth:`LoosePool.take` for rewriting; returns the descriptor.

    Loose objects are read-only (0444), and stay so: opening one for writing works as root;
    otherwise it is made writable, opened, and made read-only again (the descriptor stays open
    for writing): two more system calls, only then.
    Raises: OSError from the filesystem.
    """
    try:
        return os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except PermissionError:
        os.chmod(path, 0o644)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        os.fchmod(fd, 0o444)
        return fd


def _unlink_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
