"""The content digest of the Python installation subjects run on (R11; part of the environment
identity, :mod:`perfledger.kernels.env`).

:func:`python_tree` hashes, with blake3, every file of the interpreter's installation: the
interpreter binary, the standard library (``stdlib``, ``platstdlib``), site-packages (the
user's included where Python reads it) and the source directories of editable installs (the
directories that ``.pth`` files of site-packages add to the path, and those an editable
finder's ``MAPPING`` names). Compiled caches (``__pycache__``, ``*.pyc``) are left out: the
calls of a measured subject never read them (each subject compiles into its own cache,
:mod:`perfledger.kernels.workload.subject_copy`). Symbolic links count by their target text.

Files are read and hashed on a thread pool (blake3 releases the GIL). Each file's digest is
cached under the user's cache directory (``$PERFLEDGER_CACHE_DIR``, else
``$XDG_CACHE_HOME/perfledger``, else ``~/.cache/perfledger``), keyed by its path, size,
modification and change times (ns) and inode: a second measurement re-reads only files that
changed. The change time is in the key because a process can set a modification time back
after editing a file of the same size; the change time it cannot.

The digest names each file by its root's role and its path relative to it
(``stdlib/json/__init__.py``), so the same installation in another place gives the same digest.

Imports: the standard library, blake3 and msgspec.
"""

from __future__ import annotations

import contextlib
import os
import re
import site
import stat
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import blake3
import msgspec

#: Domain prefix of the digest.
TREE_DOMAIN = b"perfledger/python-tree/v1\x00"
#: Directories and suffixes never hashed (caches the runs write themselves).
SKIPPED_DIRS = frozenset({"__pycache__"})
SKIPPED_SUFFIXES = (".pyc",)
#: Name of the cache file under the cache directory.
CACHE_FILE = "python-tree-v1.msgpack"
#: Threads hashing files.
THREADS = max(2, min(16, os.cpu_count() or 2))
_FINDER = re.compile(r"""['"](/[^'"]+)['"]""")

#: path -> (size, mtime_ns, ctime_ns, inode, blake3 hex)
_Cache = dict[str, tuple[int, int, int, int, str]]


@dataclass(frozen=True)
class PythonTree:
    """The digest of an installation and what computing it cost.

    Attributes:
        digest: blake3 hex over every file's role-relative path, mode and digest.
        files: files covered.
        bytes_read: bytes read and hashed now (0 when every file was in the cache).
        seconds: wall time it took.
        roots: role -> directory (or file) covered.
        stamp: blake3 hex over every file's name, size, modification and change times and
            inode, and every directory's entries (bytecode caches left out): it changes
            whenever a file is written, even with its content put back (no process can set a
            change time back), added or removed; not for a file added and removed again
            between two stamps.
    """

    digest: str
    files: int
    bytes_read: int
    seconds: float
    roots: dict[str, str]
    stamp: str = ""


def cache_dir() -> str:
    """Where per-file digests are cached (module docstring)."""
    explicit = os.environ.get("PERFLEDGER_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "perfledger")


def _editable_dirs(site_dirs: Iterable[str]) -> list[str]:
    """Source directories of editable installs: path lines of ``.pth`` files, and the
    directories an editable finder (``__editable___*_finder.py``) maps."""
    found: list[str] = []
    for directory in site_dirs:
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            path = os.path.join(directory, name)
            try:
                if name.endswith(".pth"):
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        for line in handle:
                            line = line.strip()
                            if line and not line.startswith(("#", "import ", "import\t")):
                                full = os.path.join(directory, line)
                                if os.path.isdir(full):
                                    found.append(os.path.realpath(full))
                elif name.startswith("__editable__") and name.endswith("_finder.py"):
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        for match in _FINDER.finditer(handle.read()):
                            if os.path.isdir(match.group(1)):
                                found.append(os.path.realpath(match.group(1)))
            except OSError:
                continue
    return list(dict.fromkeys(found))


def installation_roots() -> dict[str, str]:
    """Role -> path of what :func:`python_tree` covers for this interpreter."""
    paths = sysconfig.get_paths()
    site_dirs = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        site_dirs.append(site.getusersitepackages())
    roots = {"interpreter": os.path.realpath(sys.executable)}
    for role in ("stdlib", "platstdlib"):
        roots[role] = os.path.realpath(paths[role])
    for i, directory in enumerate(site_dirs):
        roots[f"site{i}"] = os.path.realpath(directory)
    for i, directory in enumerate(_editable_dirs(site_dirs)):
        roots[f"editable{i}"] = directory
    return roots


def _files(roots: dict[str, str], dirs: list[str] | None = None) -> dict[str, str]:
    """Role-relative name -> absolute path of every file to hash (and, into ``dirs``, every
    directory walked with its entries). A directory that is another root, or a ``site-packages`` directory that
    is not one, is not entered."""
    others = set(roots.values())
    out: dict[str, str] = {}
    for role, top in sorted(roots.items()):
        if os.path.isfile(top):
            out[role] = top
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            if dirs is not None:  # its entries, the caches the runs write left out
                names = sorted(n for n in (*dirnames, *filenames) if n not in SKIPPED_DIRS)
                dirs.append("\0".join((dirpath, *names)))
            dirnames[:] = sorted(
                d
                for d in dirnames
                if d not in SKIPPED_DIRS
                and os.path.join(dirpath, d) not in others
                and not (d == "site-packages" and os.path.join(dirpath, d) not in others)
            )
            # one relpath per directory, not per file: the walk's hot loop
            rel = os.path.relpath(dirpath, top)
            prefix = f"{role}/" if rel == "." else f"{role}/{rel}/"
            for name in filenames:
                if name.endswith(SKIPPED_SUFFIXES):
                    continue
                out[prefix + name] = os.path.join(dirpath, name)
    return out


def _load(path: str) -> _Cache:
    try:
        with open(path, "rb") as handle:
            return msgspec.msgpack.decode(handle.read(), type=_Cache)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return {}


def _save(path: str, cache: _Cache) -> None:
    """Write the cache atomically (a temporary file renamed over it); never raises."""
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".python-tree-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(msgspec.msgpack.encode(cache))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _digest_of(path: str) -> tuple[str, int]:
    """(blake3 hex, bytes read) of a file, or of a link's target text; ("", 0) if unreadable."""
    try:
        if os.path.islink(path):
            data = os.fsencode(os.readlink(path))
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except OSError:
        return "", 0
    return blake3.blake3(data).hexdigest(), len(data)


def python_tree(roots: dict[str, str] | None = None, *, cache: str | None = None) -> PythonTree:
    """The digest of the installation ``roots`` (role -> path; default
    :func:`installation_roots`), with per-file digests cached in ``cache`` (a file; default
    :func:`cache_dir`/:data:`CACHE_FILE`). Never raises for an unreadable file (it counts with
    an empty digest)."""
    start = time.perf_counter()
    chosen = installation_roots() if roots is None else roots
    cache_path = cache or os.path.join(cache_dir(), CACHE_FILE)
    known = _load(cache_path)
    walked: list[str] = []
    files = _files(chosen, walked)
    entries: dict[str, tuple[int, str]] = {}
    todo: list[tuple[str, str, tuple[int, int, int, int]]] = []
    fresh: _Cache = {}
    for name, path in files.items():
        try:
            st = os.lstat(path)
        except OSError:
            continue
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        hit = known.get(path)
        if hit is not None and hit[:4] == key:
            entries[name] = (st.st_mode, hit[4])
            fresh[path] = hit
        else:
            entries[name] = (st.st_mode, "")
            todo.append((name, path, key))
    read = 0
    if todo:
        with ThreadPoolExecutor(THREADS) as pool:
            for (name, path, key), (digest, size) in zip(
                todo, pool.map(lambda item: _digest_of(item[1]), todo), strict=True
            ):
                entries[name] = (entries[name][0], digest)
                fresh[path] = (*key, digest)
                read += size
        _save(cache_path, fresh)
    hasher = blake3.blake3(TREE_DOMAIN)
    stamp = blake3.blake3(TREE_DOMAIN + b"stamp\0")
    # each digest is fed one joined text (the same bytes as a line at a time, fewer calls)
    lines = [f"{path}\0{fresh[path][:4]}\n" for path in sorted(fresh)]
    lines += [f"{listing}\n" for listing in walked]  # a file added (or removed), whatever its name
    stamp.update("".join(lines).encode("utf-8", "surrogateescape"))
    lines = []
    for name in sorted(entries):
        mode, digest = entries[name]
        kind = "l" if stat.S_ISLNK(mode) else "x" if mode & 0o111 else "f"
        lines.append(f"{name}\0{kind}\0{digest}\n")
    hasher.update("".join(lines).encode("utf-8", "surrogateescape"))
    return PythonTree(
        digest=hasher.hexdigest(),
        files=len(entries),
        bytes_read=read,
        seconds=time.perf_counter() - start,
        roots=dict(chosen),
        stamp=stamp.hexdigest(),
    )


__all__ = [
    "CACHE_FILE",
    "PythonTree",
    "cache_dir",
    "installation_roots",
    "python_tree",
]
