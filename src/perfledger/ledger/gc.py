"""Reclaiming what killed writers and pulls leave behind (``perfledger gc``; docs/storage.md, gc).
Whether a live process may still be writing a file is never decided by its age:

- temporaries named after their writer's pid (``tmp_obj_<pid>_<n>``, ``tmp_pack_<pid>_<n>``,
  ``tmp_idx_<pid>_<n>``, ``perfledger/**/*.<pid>.tmp``) are removed when no process has that pid;
- files whose writer cannot be named (half a pack, other ``tmp_*`` and ``*.lock`` files in
  ``objects/pack``, older versions' ``perfledger/incoming-*.pack`` and ``retired-packs/``) only
  while gc holds the *open guard* (``perfledger/gc.lock``, held shared by every open store)
  exclusively, and no process on this machine holds the file open (``/proc``);
- git's lock files (under ``refs/``, ``packed-refs.lock``, ``config.lock``) are listed, never
  removed: they carry no owner.

The next writer does the cheap part (:func:`collect_dead_temporaries`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

from perfledger.ledger import layout

#: Temporaries named after their writer's pid (gitobj's ``_create_tmp``; cache and index files).
_PID_TEMP = re.compile(r"^tmp_(?:obj|pack|idx)_(\d+)_\d+$")
_PID_SUFFIX_TEMP = re.compile(r"\.(\d+)\.tmp$")
_FANOUT = re.compile(r"^[0-9a-f]{2}$")


@dataclass
class GcReport:
    """What :func:`collect` did: paths ``removed`` (or that would be, with ``dry_run``), their
    size in bytes, (path, why) ``kept`` for garbage-like files left alone, and whether gc held
    the open guard (no perfledger process had the ledger open)."""

    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    kept: list[tuple[str, str]] = field(default_factory=list)
    guard_held: bool = False

    def to_json(self) -> dict[str, object]:
        """The report as ``{"removed", "removed_bytes", "kept": [{"path", "why"}], ...}``."""
        return {
            "removed": self.removed,
            "removed_bytes": self.removed_bytes,
            "kept": [{"path": path, "why": why} for path, why in self.kept],
            "guard_held": self.guard_held,
        }


def hold_open_guard(controldir: str) -> int | None:
    """Take the open guard shared (every store, from open to close) and return its descriptor,
    to be closed at close; None where it cannot be created (a read-only ledger: nothing there
    to collect concurrently either). Blocks while gc holds it exclusively (a moment)."""
    path = os.path.join(controldir, layout.DERIVED_DIR, layout.GC_GUARD_FILE)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def try_flock(path: str) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``path`` (created, with its directory) while it is free;
    yields whether it was taken. Raises: OSError when the file cannot be created."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the flock


def _pid_alive(pid: int) -> bool:
    """Whether a process with ``pid`` exists (one we may not signal exists too)."""
    if pid <= 0:
        return True  # not a pid we wrote: keep the file
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _writer_pid(name: str) -> int | None:
    match = _PID_TEMP.match(name) or _PID_SUFFIX_TEMP.search(name)
    return int(match.group(1)) if match else None


def _remove(path: str, report: GcReport, dry_run: bool) -> None:
    try:
        size = os.lstat(path).st_size
        if not dry_run:
            os.unlink(path)
    except FileNotFoundError:
        return  # removed meanwhile (by its writer, or the next writer)
    report.removed.append(path)
    report.removed_bytes += size


def collect_dead_temporaries(pack_dir: str) -> int:
    """Remove the pid-named temporaries of ``pack_dir`` whose writer is dead (the next
    writer's cheap part of gc); returns how many. Never raises: a failure only leaves them."""
    removed = 0
    with contextlib.suppress(OSError):
        for name in os.listdir(pack_dir):
            pid = _writer_pid(name) if name.startswith("tmp_") else None
            if pid is not None and not _pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(pack_dir, name))
                    removed += 1
    return removed


def collect(controldir: str, *, dry_run: bool = False) -> GcReport:
    """Remove what killed writers and pulls left in the git directory ``controldir`` (see the
    module docstring); with ``dry_run`` only report it.
    Returns: a :class:`GcReport`. Raises: OSError when a directory cannot be listed or a file
    cannot be removed (a read-only filesystem, say): what was removed before stays removed,
    which changes nothing but space.
    """
    report = GcReport()
    objects = os.path.join(controldir, "objects")
    pack_dir = os.path.join(objects, "pack")
    derived = os.path.join(controldir, layout.DERIVED_DIR)
    retired_dir = os.path.join(derived, layout.LEGACY_RETIRED_PACKS_DIR)
    unnamed: list[str] = []  # garbage whose writer cannot be named: needs the guard

    # loose temporaries: objects/tmp_obj_* and objects/??/tmp_obj_*
    fanout = [os.path.join(objects, n) for n in _listdir(objects) if _FANOUT.match(n)]
    for directory in [objects, *fanout]:
        for name in _listdir(directory):
            if name.startswith("tmp_"):
                _pid_named(os.path.join(directory, name), report, dry_run, unnamed)
    # packs: pid-named temporaries, then halves of a pack
    names = set(_listdir(pack_dir))
    for name in sorted(names):
        path = os.path.join(pack_dir, name)
        if name.startswith("tmp_"):
            _pid_named(path, report, dry_run, unnamed)
        elif (
            (name.endswith(".pack") and name[:-5] + ".idx" not in names)
            or (name.endswith(".idx") and name[:-4] + ".pack" not in names)
            or name.endswith(".lock")  # dulwich's GitFile (pack writes), never git's
        ):
            unnamed.append(path)
    # the derived directory: pid-named cache files, a pull's spool, retired packs
    for root, dirs, files in os.walk(derived):
        retired = os.path.relpath(root, retired_dir).split(os.sep)[0] != os.pardir
        for name in files:
            path = os.path.join(root, name)
            if retired or (root == derived and name.startswith("incoming-")):
                unnamed.append(path)
            elif _PID_SUFFIX_TEMP.search(name):
                _pid_named(path, report, dry_run, unnamed)
        dirs.sort()
    with contextlib.ExitStack() as stack:
        try:  # exclusive: no store has the ledger open
            held = stack.enter_context(try_flock(os.path.join(derived, layout.GC_GUARD_FILE)))
        except OSError:
            held = False
        report.guard_held = held
        held_open = _files_held_open() if held and unnamed else set()
        for path in unnamed:
            if not held:
                report.kept.append((path, "a perfledger process has the ledger open"))
            elif os.path.realpath(path) in held_open:
                report.kept.append((path, "a live process holds it open (git, say)"))
            else:
                _remove(path, report, dry_run)
        if held and not dry_run:
            with contextlib.suppress(OSError):  # the emptied directory itself
                shutil.rmtree(retired_dir)
    for lock in _lock_files(controldir):
        report.kept.append((lock, "a lock file: a git process may hold it"))
    return report


def _pid_named(path: str, report: GcReport, dry_run: bool, unnamed: list[str]) -> None:
    pid = _writer_pid(os.path.basename(path))
    if pid is None:
        unnamed.append(path)  # dulwich's temporaries: no pid in the name
    elif _pid_alive(pid):
        report.kept.append((path, f"its writer (pid {pid}) is alive"))
    else:
        _remove(path, report, dry_run)


def _files_held_open() -> set[str]:
    """The paths of the files any process on this machine holds open (``/proc/*/fd``; the
    ones we may read): a git process writing its own temporary pack, say."""
    held: set[str] = set()
    with contextlib.suppress(OSError):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            fd_dir = f"/proc/{pid}/fd"
            with contextlib.suppress(OSError):
                for fd in os.listdir(fd_dir):
                    with contextlib.suppress(OSError):
                        held.add(os.readlink(f"{fd_dir}/{fd}"))
    return held


def _listdir(directory: str) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def _lock_files(controldir: str) -> list[str]:
    locks = [
        os.path.join(controldir, name)
        for name in ("packed-refs.lock", "config.lock", "HEAD.lock")
        if os.path.exists(os.path.join(controldir, name))
    ]
    for root, _dirs, files in os.walk(os.path.join(controldir, "refs")):
        locks.extend(os.path.join(root, name) for name in sorted(files) if name.endswith(".lock"))
    return locks


__all__ = ["GcReport", "collect", "collect_dead_temporaries", "hold_open_guard", "try_flock"]
