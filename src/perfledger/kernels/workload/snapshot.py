"""Take the snapshot of a measured subject from disk (R11; the digest and the comparisons are
:mod:`perfledger.events.identity`).

The rule for "what a subject reads" is deliberately simple and stated in ``docs/code-identity.md``:

- the subject is a directory (the value in the readiness driver's ``{subject}`` place, relative to
  the driver's working directory); every file under it is taken (coverage ``subject``; only the
  caches of :data:`SKIPPED_DIRS` are skipped), so a file the candidate adds or changes anywhere
  under it is a changed path, checked against the Target's scope. Snapshots recorded before that
  rule took only the files inside the scope (coverage absent); ``whole=False`` takes those again;
- a symbolic link under the subject is recorded as its target text (mode ``120000``), never
  followed, and only when it is relative and resolves inside the subject directory: a link out of
  it (or an absolute one) is refused (R11), since the code it points to could change after the
  snapshot and ``checkout`` could not reproduce it;
- every word of the command line that names an existing file, by a relative path or by any path
  under the subject directory (``--opt=PATH`` counts as ``PATH``), is taken too: under the subject
  directory with its path relative to it (whatever the scope says), elsewhere in ``driver`` with
  the path as named; a file named by an absolute path outside the subject is refused (R11), unless
  it lies in the interpreter's installation or the system's (:data:`SYSTEM_PREFIXES`: the
  interpreter itself, ``/usr/bin/env``), which the environment covers;
- regular files are read as bytes.

Where the subject directory lies in a git work tree, ``git`` records HEAD's commit and whether
anything under the directory is modified or untracked (``git status --porcelain``), through the
``git`` command itself.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import blake3

from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.identity import (
    COVERAGE_SUBJECT,
    FileEntry,
    GitState,
    Snapshot,
    tree_digest,
)

#: Limits of one snapshot: more files or bytes than this is refused (keep data and build outputs
#: out of the subject directory).
MAX_FILES = 20_000
MAX_BYTES = 256 * 1024 * 1024
#: Directories never taken: git's own, and caches derived from the sources and written by the run
#: itself (Python's bytecode, pytest's, mypy's and ruff's), which would make a subject differ from
#: its own snapshot.
SKIPPED_DIRS = frozenset({".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
#: Seconds a ``git`` call may take.
GIT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class TakenSnapshot:
    """A snapshot and the bytes of its files.

    Attributes:
        snapshot: the :class:`~perfledger.events.identity.Snapshot`.
        blobs: blake3 hex -> bytes of every file (link target text for a symbolic link).
    """

    snapshot: Snapshot
    blobs: dict[str, bytes]


def _entry(path: Path, blobs: dict[str, bytes]) -> FileEntry:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        data = os.readlink(path).encode("utf-8", "surrogateescape")
        mode = "120000"
    else:
        data = path.read_bytes()
        mode = "100755" if info.st_mode & stat.S_IXUSR else "100644"
    digest = blake3.blake3(data).hexdigest()
    blobs[digest] = data
    return FileEntry(blake3=digest, size=len(data), mode=mode)


def _under(path: Path, root: Path) -> str | None:
    """``path`` relative to ``root`` (POSIX separators), or None when it is not under it."""
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def _check_link(path: Path, rel: str, root: Path, subject: str) -> None:
    """Refuse (R11) a symbolic link that is absolute or resolves outside the subject ``root``."""
    text = os.readlink(path)
    try:
        resolved: Path | None = (path.parent / text).resolve()
    except (RuntimeError, OSError):  # a loop of links: it leads nowhere inside the subject
        resolved = None
    if os.path.isabs(text) or resolved is None or _under(resolved, root) is None:
        raise RuleRefused(
            f"R11: {rel!r} in the subject {subject!r} is a symbolic link to {text!r}, "
            + ("an absolute path" if os.path.isabs(text) else "which leads out of the subject")
            + ": the code it points to is not part of the snapshot; nothing was measured or "
            "recorded",
            rule="R11",
            hint="copy the file into the subject directory (or make the link relative, to a "
            "file inside it)",
        )


#: Where an installed program or library lives (the interpreter's prefixes are added): a
#: command word naming a file there by an absolute path is the environment's, not a driver.
SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/", "/etc/", "/dev/", "/proc/")
#: Places under :data:`SYSTEM_PREFIXES` that any process may write (shared-memory and message
#: queue file systems): a driver or module there is the subject's, not the system's.
WRITABLE_SYSTEM_PREFIXES = ("/dev/shm/", "/dev/mqueue/")


def _installed(path: Path) -> bool:
    """Whether ``path`` (absolute) lies in the interpreter's installation or the system's
    (:data:`SYSTEM_PREFIXES`), where the environment identity, not a snapshot, covers it."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    text = str(path)
    resolved = str(path.resolve())
    for candidate in (text, resolved):
        if candidate.startswith(SYSTEM_PREFIXES) and not candidate.startswith(
            WRITABLE_SYSTEM_PREFIXES
        ):
            return True
        if any(candidate.startswith(p.rstrip("/") + "/") for p in prefixes if p):
            return True
    return False


def git_state(root: Path) -> GitState | None:
    """HEAD's commit and the dirty flag of the git work tree ``root`` lies in (changes or
    untracked files under ``root``), or None when it is in none (or git is not installed)."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )

    try:
        inside = git("rev-parse", "--is-inside-work-tree")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return None
    top = git("rev-parse", "--show-toplevel").stdout.strip()
    head = git("rev-parse", "--verify", "--quiet", "HEAD")
    commit = head.stdout.strip() if head.returncode == 0 and head.stdout.strip() else None
    status = git("status", "--porcelain", "--untracked-files=normal", "--", ".")
    dirty = status.returncode != 0 or bool(status.stdout.strip())
    rel = _under(root.resolve(), Path(top).resolve()) if top else None
    return GitState(commit=commit, dirty=dirty, path="" if rel in (None, ".") else rel)


def take_snapshot(
    subject: str,
    argv: Sequence[str],
    in_scope: Callable[[str], bool],
    cwd: str | os.PathLike[str] | None = None,
    *,
    whole: bool = True,
) -> TakenSnapshot:
    """Snapshot the subject directory ``subject`` (relative to ``cwd``, default the current
    directory) as run by ``argv`` (the exact command): every file under it (``whole``, the rule
    since R11 covers the whole subject) or, with ``whole=False`` (to re-take a snapshot recorded
    before), the files ``in_scope`` accepts (a path relative to the subject directory -> bool);
    plus the files the command line names (see the module docstring).

    Raises: BadRequest when the subject is not a directory, or the snapshot would exceed
    :data:`MAX_FILES` files or :data:`MAX_BYTES` bytes; RuleRefused (R11) when it holds a
    symbolic link that is absolute or leads out of the subject directory.
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    root = (base / subject).resolve()
    if "{subject}" in subject:  # the driver's argv copied as it is: the place is still empty
        raise BadRequest(
            "the command still holds the {subject} placeholder: put a code directory in its place",
            hint="the original's directory for `measure baseline` and `measure aa` (the "
            "readiness's original.subject), each subject's own for `measure workload --ref/--cand`",
        )
    if not root.is_dir():
        raise BadRequest(
            f"the subject {subject!r} is not a directory (relative to {str(base)!r})",
            hint="the readiness driver's {subject} place takes the directory of the code that "
            "runs, the root the Target's scope is relative to",
        )
    blobs: dict[str, bytes] = {}
    files: dict[str, FileEntry] = {}
    total = 0

    def add(rel: str, path: Path) -> None:
        nonlocal total
        if rel in files:
            return
        if len(files) >= MAX_FILES:
            raise BadRequest(
                f"the snapshot of {subject!r} would hold more than {MAX_FILES} files",
                hint="a subject directory holds the code that runs; keep data, build outputs "
                "and environments outside it (every file under it is snapshotted, R11)",
            )
        files[rel] = _entry(path, blobs)
        total += files[rel].size
        if total > MAX_BYTES:
            raise BadRequest(
                f"the snapshot of {subject!r} would hold more than {MAX_BYTES} bytes",
                hint="a subject directory holds the code that runs; keep data, build outputs "
                "and environments outside it (every file under it is snapshotted, R11)",
            )

    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        here = Path(dirpath)
        for name in sorted(filenames):
            path = here / name
            rel = _under(path, root)
            if rel is None:
                continue
            if path.is_symlink():
                _check_link(path, rel, root, subject)
            if (whole or in_scope(rel)) and (path.is_symlink() or path.is_file()):
                add(rel, path)
        # a symbolic link to a directory is listed in dirnames and never followed: record it
        for name in list(dirnames):
            path = here / name
            rel = _under(path, root)
            if path.is_symlink() and rel is not None:
                _check_link(path, rel, root, subject)
                if whole or in_scope(rel):
                    add(rel, path)
    driver: dict[str, FileEntry] = {}
    for word in argv:
        named = word.partition("=")[2] if word.startswith("-") and "=" in word else word
        if not named or named.startswith("-"):
            continue
        path = Path(named) if Path(named).is_absolute() else base / named
        try:
            if not path.is_file():
                continue
        except OSError:
            continue
        inside = _under(path.resolve(), root)
        if inside is not None:
            add(inside, path.resolve())
        elif not Path(named).is_absolute():
            driver[named] = _entry(path, blobs)
        elif not _installed(path):
            raise RuleRefused(
                f"R11: the command names {named!r}, a file outside the subject {subject!r} by "
                "an absolute path: it would run (or be read) without being in the snapshot; "
                "nothing was measured or recorded",
                rule="R11",
                hint="move it into the subject directory, or name it by a path relative to the "
                "driver's working directory (then it is snapshotted as a driver file)",
            )
    snapshot = Snapshot(
        subject=subject,
        argv=tuple(argv),
        files=files,
        driver=driver,
        digest=tree_digest(files, driver),
        git=git_state(root),
        **({"coverage": COVERAGE_SUBJECT} if whole else {}),
    )
    return TakenSnapshot(snapshot=snapshot, blobs=blobs)


def remove_bytecode_caches(subject: str | Path) -> int:
    """Remove every ``__pycache__`` under a subject directory (R11).

    A snapshot skips them (the run writes them itself), so a ``.pyc`` planted there, stamped
    with its source's modification time and size, would run instead of the snapshotted source
    and no snapshot would see it (a candidate planting one for the reference). ``measure
    workload`` calls this for both subjects when a run begins and ends, and for a subject whose
    caches changed during the other subject's call
    (:class:`perfledger.app.identity.SubjectsWatch`).
    Never follows a symbolic link (one named ``__pycache__`` is removed as a link); ``.git`` is
    not entered.

    Returns: the number of caches removed. Raises: OSError when one cannot be removed.
    """
    removed = 0
    for dirpath, dirnames, _files in os.walk(subject):
        for name in [d for d in dirnames if d in (".git", "__pycache__")]:
            dirnames.remove(name)  # never walked into
            if name == "__pycache__":
                path = os.path.join(dirpath, name)
                if os.path.islink(path):
                    os.unlink(path)
                else:
                    shutil.rmtree(path)
                removed += 1
    return removed


__all__ = [
    "MAX_BYTES",
    "MAX_FILES",
    "TakenSnapshot",
    "git_state",
    "remove_bytecode_caches",
    "take_snapshot",
]
