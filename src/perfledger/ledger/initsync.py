"""Making a newly initialised repository durable before its first event (SPEC.md section 2).

``git init`` through dulwich writes ``config``, ``HEAD``, ``description`` and the ``objects/`` and
``refs/`` directories without one fsync; an append later fsyncs its objects and the ref's own
directory, but not the directories above them. After a power loss the ledger, acknowledged events
included, could be gone (a filesystem that drops unsynced directory entries, tests/powerloss).
"""

from __future__ import annotations

import os

from perfledger.ledger.durable import fsync_dir


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
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    # children before parents: each directory's entries, then the entry naming it
    for root, _dirs, _files in sorted(os.walk(controldir), key=lambda w: -len(w[0])):
        fsync_dir(root)
    directory = controldir
    while directory != top and os.path.dirname(directory) != directory:
        directory = os.path.dirname(directory)
        fsync_dir(directory)
