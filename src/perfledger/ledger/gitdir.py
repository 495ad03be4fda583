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
from collections.abc import Callable
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


#: What a section selector returns for a header this reader does not read as git does.
_UNREADABLE = object()
#: A remote's section header as ``git remote add`` writes it: ``[remote "name"]`` (a plain name).
_REMOTE_HEADER = re.compile(rb'^remote "([^"\\]+)"$')


def _config_entries(
    controldir: str, select: Callable[[bytes], object]
) -> list[tuple[object, bytes, bytes | None]] | None:
    """The plain entries of the ``config`` sections that ``select`` picks, in file order:
    ``(label, key lower-cased, value or None for a bare key)``. ``select(header)`` (the text
    between the brackets, stripped) returns the label of a section whose entries are wanted,
    None for one that is skipped, or :data:`_UNREADABLE`. An empty list when the file is
    absent; None when the file holds anything this reader does not read exactly as git does
    (an include, an unreadable header, an entry outside a section, a wanted entry that is not
    plain: quoting, escapes, continuations): the caller then asks dulwich.
    Raises: OSError other than a missing file."""
    try:
        with open(os.path.join(controldir, "config"), "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    label: object = None
    in_section = False
    entries: list[tuple[object, bytes, bytes | None]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith((b"#", b";")):
            continue
        header = _SECTION.match(line)
        if header is not None:
            name = header.group(1).strip()
            if name.lower().startswith(b"include"):
                return None
            label = select(name)
            if label is _UNREADABLE:
                return None
            in_section = True
            continue
        if not in_section:
            return None
        if label is None:
            continue
        entry = _PLAIN_ENTRY.match(line)
        if entry is None:
            return None
        entries.append((label, entry.group(1).lower(), entry.group(2)))
    return entries


def read_section(controldir: str, section: bytes) -> dict[bytes, bytes] | None:
    """Return the keys of ``[section]`` (no subsection) in the repository's ``config`` file,
    lower-cased, each with its last value (git's rule; a bare key is ``true``); an empty dict
    when the file or the section is absent; None when the file holds anything this reader does
    not read exactly as git does (:func:`_config_entries`): the caller then asks dulwich.
    Raises: OSError other than a missing file.
    """
    wanted = section.lower()
    entries = _config_entries(controldir, lambda name: True if name.lower() == wanted else None)
    if entries is None:
        return None
    return {key: b"true" if value is None else value for _, key, value in entries}


def _remote_of(header: bytes) -> object:
    """A ``[remote "name"]`` header's name; None for another plain section;
    :data:`_UNREADABLE` for any other subsection (dulwich's reading of it is left to it)."""
    remote = _REMOTE_HEADER.match(header)
    if remote is not None:
        return remote.group(1).decode("utf-8", "replace")
    return _UNREADABLE if b'"' in header or b"." in header else None


def read_remotes(controldir: str) -> dict[str, str] | None:
    """Return ``{name: url}`` of the ``[remote "name"]`` sections of the repository's ``config``
    file that carry a ``url`` (its last value), as dulwich's config reads them; an empty dict
    when the file is absent; None when the file holds anything this reader does not read
    exactly as dulwich does (:func:`_config_entries`, another spelling of a remote's header, a
    bare ``url`` key): the caller then asks dulwich.
    Raises: OSError other than a missing file.
    """
    entries = _config_entries(controldir, _remote_of)
    if entries is None:
        return None
    remotes: dict[str, str] = {}
    for name, key, value in entries:
        if key == b"url":
            if value is None:
                return None  # a bare ``url`` key: left to dulwich's reading
            remotes[str(name)] = value.decode("utf-8", "replace")
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
