"""Flushing directories and a new repository (the durability claims: docs/storage.md). Every
file perfledger writes is fsynced before its rename and its directory after it, so a crash at any
instant leaves the old head or the new one; a new repository is made durable before its first
event (:func:`make_repository_durable`: dulwich's init fsyncs nothing).
"""

from __future__ import annotations

import os


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync the directory ``path`` so that renames and creations inside it are durable.
    Raises: OSError from the operating system (a missing directory, for instance).
    """
    _fsync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: str | os.PathLike[str], flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def first_missing_ancestor(path: str) -> str | None:
    """The topmost directory of ``path`` (itself included) that does not exist yet, or None
    when ``path`` exists: what ``os.makedirs(path)`` is about to create."""
    path = os.path.abspath(path)
    missing = None
    while not os.path.exists(path):
        missing = path
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return missing


def make_repository_durable(controldir: str, top: str) -> None:
    """fsync every file directly in ``controldir`` (``config``, ``HEAD``, ...), every directory
    under it, then each directory from ``controldir``'s parent up to ``top`` (the parent of
    the topmost directory the caller created, or of the repository's directory).
    Raises: OSError from the filesystem (a full disk, say): the caller's init fails.
    """
    controldir = os.path.abspath(controldir)
    top = os.path.abspath(top)
    for name in os.listdir(controldir):
        path = os.path.join(controldir, name)
        if os.path.isfile(path) and not os.path.islink(path):
            _fsync(path, os.O_RDONLY | os.O_CLOEXEC)
    # children before parents: each directory's entries, then the entry naming it
    for root, _dirs, _files in sorted(os.walk(controldir), key=lambda w: -len(w[0])):
        fsync_dir(root)
    directory = controldir
    while directory != top and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
        fsync_dir(directory)
