"""Durability: how an acknowledged append reaches the disk (SPEC.md section 2).

One method, the portable one: every file perfledger writes (a loose object, a pack and its
index, the ref's lock) is fsynced before it is renamed into place, and every directory that
received a rename is fsynced after it. Objects are durable before the ref's lock is renamed over
the ref, and the ref's directory is fsynced before the append is acknowledged, so a crash at any
instant (power loss included) leaves the old head or the new one. The claims and their tests are
listed in ``docs/storage.md``.
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
