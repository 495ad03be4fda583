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
