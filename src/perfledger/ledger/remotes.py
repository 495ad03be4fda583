"""Named remotes of a ledger: ``[remote "<name>"] url = ...`` in the repository's git
config, the same place ``git remote`` keeps them, so ``git remote -v`` lists them too.

Each remote has a tracking ref ``refs/remotes/<name>/ledger``: the last head seen from it, moved
only by compare-and-swap after what it points at was verified. It is how a rewritten remote is
detected (its new head must descend from the last one seen).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import blake3
from dulwich.repo import Repo

from perfledger.errors import BadRequest
from perfledger.ledger.layout import TRACKING_REF_FORMAT

#: The remote ``push``/``pull``/``sync`` use when none is named (``clone`` creates it).
DEFAULT_REMOTE = "origin"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_URL_SCHEMES = ("file://", "git://", "ssh://", "http://", "https://", "git+ssh://")


@dataclass(frozen=True)
class Remote:
    """A remote: its ``name`` (configured, or ``url-<hash>`` for a bare URL) and ``url``."""

    name: str
    url: str

    @property
    def tracking_ref(self) -> bytes:
        """``refs/remotes/<name>/ledger``."""
        return tracking_ref(self.name)


def tracking_ref(name: str) -> bytes:
    """Return the tracking ref of remote ``name``: ``refs/remotes/<name>/ledger``."""
    return TRACKING_REF_FORMAT % name.encode()


def _check_name(name: str) -> None:
    if not _NAME.match(name) or name.endswith(".lock") or ".." in name:
        raise BadRequest(
            f"invalid remote name {name!r}",
            hint="use letters, digits, '.', '_' or '-' (at most 64), e.g. origin",
        )


def list_remotes(repo: Repo) -> dict[str, str]:
    """Return ``{name: url}`` of the configured remotes, sorted by name."""
    config = repo.get_config()
    found: dict[str, str] = {}
    for section in config.sections():
        if len(section) == 2 and section[0] == b"remote":
            try:
                url = config.get(section, b"url")
            except KeyError:
                continue
            found[section[1].decode("utf-8", "replace")] = url.decode("utf-8", "replace")
    return dict(sorted(found.items()))


def add_remote(repo: Repo, name: str, url: str) -> Remote:
    """Configure remote ``name`` at ``url`` (a path, ``file://``, ``git://``, ``ssh://``,
    ``http(s)://``). A relative path is stored absolute.
    Raises: BadRequest for an invalid name, an empty URL, or a name already configured.
    """
    _check_name(name)
    if not url.strip():
        raise BadRequest(
            "a remote needs a URL or a path",
            hint="`perfledger remote add NAME URL` (a git URL or a path)",
        )
    if name in list_remotes(repo):
        raise BadRequest(
            f"remote {name!r} already exists",
            hint=f"remove it first: perfledger remote remove {name}",
        )
    url = _absolute(url)
    config = repo.get_config()
    config.set((b"remote", name.encode()), b"url", url.encode())
    config.write_to_path()
    return Remote(name, url)


def _absolute(url: str) -> str:
    """``url``, a relative path made absolute (a URL, or ``user@host:path`` as git reads it
    for ssh, as it is)."""
    head, sep, _ = url.partition(":")
    if "://" in url or (sep and "/" not in head and len(head) > 1):
        return url
    return os.path.abspath(url)


def remove_remote(repo: Repo, name: str) -> None:
    """Forget remote ``name`` and its tracking ref.
    Raises: BadRequest when no such remote is configured.
    """
    if name not in list_remotes(repo):
        raise BadRequest(f"no remote {name!r}", hint="list them: perfledger remote list")
    config = repo.get_config()
    del config[(b"remote", name.encode())]
    config.write_to_path()
    ref = tracking_ref(name)
    if ref in repo.refs:
        repo.refs.remove_if_equals(ref, None)


def resolve_remote(repo: Repo, remote: str | None) -> Remote:
    """Return the :class:`Remote` named ``remote`` (default ``origin``), or a URL/path used
    directly (tracked under ``url-<blake3 of the URL>``).
    Raises: BadRequest when ``remote`` is neither a configured name nor a URL or path.
    """
    remote = remote or DEFAULT_REMOTE
    configured = list_remotes(repo)
    if remote in configured:
        return Remote(remote, configured[remote])
    url_or_path = remote.startswith((*_URL_SCHEMES, ".")) or "/" in remote
    if url_or_path or (":" in remote and not remote.startswith(":")):
        url = _absolute(remote)
        return Remote("url-" + blake3.blake3(url.encode()).hexdigest()[:16], url)
    raise BadRequest(
        f"no remote {remote!r}",
        hint="add one: perfledger remote add NAME URL (or pass a URL or a path)",
    )


__all__ = [
    "DEFAULT_REMOTE",
    "Remote",
    "add_remote",
    "list_remotes",
    "remove_remote",
    "resolve_remote",
    "tracking_ref",
]
