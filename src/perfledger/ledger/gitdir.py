"""Finding a repository's git directory and reading perfledger's keys of its config, without
dulwich.

Why: importing ``dulwich.repo`` and opening a ``Repo`` cost about as much as the rest of a CLI
call that answers from the derived cache (``perfledger state``) or appends one note, and neither
needs dulwich. The two layouts a ledger has in practice are handled here: a bare repository and
a work tree with a ``.git`` directory. Anything else (a ``.git`` file pointing elsewhere, a linked
work tree with ``commondir``, a config that includes other files or quotes its values) returns
None, and the caller opens the repository through dulwich, which handles them all.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import NamedTuple

from perfledger.errors import IntegrityError

#: A config line ``key = value`` with a plain value (no quotes, escapes or continuations).
_PLAIN_ENTRY = re.compile(rb"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*([^\"\\;#]*?))?\s*(?:[;#].*)?$")
_SECTION = re.compile(rb"^\s*\[([^\]]*)\]\s*(?:[;#].*)?$")


class GitLocation(NamedTuple):
    """Where a repository lives: the ``path`` the caller named and its git directory."""

    path: str
    controldir: str


def find_controldir(path: str) -> GitLocation | None:
    """Return where the repository at ``path`` keeps its git directory, as dulwich's
    discovery does (``path/.git/objects``: a work tree; ``path/objects`` and ``path/refs``: bare);
    None for any other layout (the caller then asks dulwich)."""
    dotgit = os.path.join(path, ".git")
    if os.path.isdir(os.path.join(dotgit, "objects")):
        location = GitLocation(path, dotgit)
    elif os.path.isdir(os.path.join(path, "objects")) and os.path.isdir(os.path.join(path, "refs")):
        location = GitLocation(path, path)
    else:
        return None
    if os.path.exists(os.path.join(location.controldir, "commondir")):
        return None  # a linked work tree: its refs live in another directory
    return location


def read_section(controldir: str, section: bytes) -> dict[bytes, bytes] | None:
    """Return the keys of ``[section]`` (no subsection) in the repository's ``config`` file,
    lower-cased, each with its last value (git's rule); an empty dict when the file or the
    section is absent; None when the file holds anything this reader does not read exactly as
    git does (includes, quoting, escapes, continuations, an entry outside a section): the
    caller then asks dulwich.
    Raises: OSError other than a missing file.
    """
    try:
        with open(os.path.join(controldir, "config"), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    wanted = section.lower()
    current: bytes | None = None
    values: dict[bytes, bytes] = {}
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith((b"#", b";")):
            continue
        header = _SECTION.match(line)
        if header is not None:
            name = header.group(1).strip().lower()
            if name.startswith(b"include"):
                return None
            current = name
            continue
        if current is None:
            return None
        if current != wanted:
            continue
        entry = _PLAIN_ENTRY.match(line)
        if entry is None:
            return None
        values[entry.group(1).lower()] = entry.group(2) if entry.group(2) is not None else b"true"
    return values


#: A remote's section header as ``git remote add`` writes it: ``[remote "name"]`` (a plain name).
_REMOTE_HEADER = re.compile(rb'^remote "([^"\\]+)"$')


def read_remotes(controldir: str) -> dict[str, str] | None:
    """Return ``{name: url}`` of the ``[remote "name"]`` sections of the repository's ``config``
    file that carry a ``url`` (its last value), as dulwich's config reads them; an empty dict
    when the file is absent; None when the file holds anything this reader does not read
    exactly as dulwich does (includes, quoting, escapes, continuations, another spelling of a
    remote's header): the caller then asks dulwich.
    Raises: OSError other than a missing file.
    """
    try:
        with open(os.path.join(controldir, "config"), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    remotes: dict[str, str] = {}
    current: str | None = None
    in_section = False
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith((b"#", b";")):
            continue
        header = _SECTION.match(line)
        if header is not None:
            name = header.group(1).strip()
            remote = _REMOTE_HEADER.match(name)
            if remote is not None:
                current = remote.group(1).decode("utf-8", "replace")
            elif b'"' in name or b"." in name or name.lower().startswith(b"include"):
                return None  # a subsection this reader does not read as dulwich does
            else:
                current = None
            in_section = True
            continue
        if not in_section:
            return None
        if current is None:
            continue
        entry = _PLAIN_ENTRY.match(line)
        if entry is None:
            return None
        if entry.group(1).lower() == b"url":
            if entry.group(2) is None:
                return None  # a bare ``url`` key: left to dulwich's reading
            remotes[current] = entry.group(2).decode("utf-8", "replace")
    return remotes


def refuse_incomplete_clone(controldir: str) -> None:
    """Refuse a shallow or partial git clone, whose missing history or blobs would read as a
    damaged ledger (``verify``, and every command when it opens the ledger). Raises:
    IntegrityError saying which and how to clone whole."""
    if os.path.exists(os.path.join(controldir, "shallow")):
        raise IntegrityError(
            "this is a shallow git clone (git clone --depth): its history stops before the "
            "ledger's root, so it cannot be read or verified",
            hint="clone the whole ledger (git clone --branch ledger URL, without --depth), or "
            "run `git fetch --unshallow` in it",
        )
    with contextlib.suppress(OSError), open(os.path.join(controldir, "config"), "rb") as f:
        config = f.read().lower().replace(b" ", b"").replace(b"\t", b"")
        if b"promisor=true" in config or b"partialclone=" in config:
            raise IntegrityError(
                "this is a partial git clone (git clone --filter): objects the ledger holds "
                "were left on the server, so it cannot be read or verified",
                hint="clone the whole ledger (git clone --branch ledger URL, without --filter)",
            )
