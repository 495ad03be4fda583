"""Durability helpers: fsync of files and of the directories that hold renamed files.

dulwich fsyncs a file's data before renaming it into place (when asked to), but not the directory
that records the rename; without a directory fsync an acknowledged append could vanish in a power
loss on filesystems that do not order metadata (GUIDE.md pitfalls).
"""

from __future__ import annotations

import os


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync the directory ``path`` so that renames and creations inside it are durable.

    Raises: OSError from the operating system (a missing directory, for instance).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_durably(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file, fsync, rename, directory fsync)."""
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)
