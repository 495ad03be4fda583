"""Find a ledger commit by its git sha (or a unique prefix), for ``perfledger show``.

People meet git commit ids where perfledger prints them (``Ledger head c05b37...`` in a handoff,
``git log ledger``); ``show`` takes event ids. When an id is not an event's, this module looks
it up among the commits reachable from the ledger head: an event commit carries exactly one event
(its ``Event-Id`` trailer); a merge commit (sync, SPEC.md section 2) carries none.

Reads through the store's public ``read_head``/``commit_node``; walks the whole DAG, so it is
meant for the error path of ``show`` only (O(commits)).
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from perfledger.errors import BadRequest

#: Shortest commit prefix accepted (as for event ids).
MIN_PREFIX = 4


@dataclass(frozen=True)
class CommitMatch:
    """A ledger commit found by sha prefix.

    Attributes:
        commit: the full commit sha (hex).
        event_id: the event it carries, or None for a merge commit.
        parents: its parent commit shas (hex).
    """

    commit: str
    event_id: str | None
    parents: tuple[str, ...]


def find_commit(store: Any, prefix: str) -> CommitMatch | None:
    """Return the commit reachable from the ledger head whose sha starts with ``prefix``.

    Args:
        store: the ledger's git store (``Ledger.store``).
        prefix: a full sha or a hex prefix of at least :data:`MIN_PREFIX` characters.
    Returns: the match, or None when ``prefix`` is not hex, too short, or names no commit.
    Raises: BadRequest when the prefix is ambiguous (names several commits).
    """
    wanted = prefix.lower()
    if len(wanted) < MIN_PREFIX or any(c not in string.hexdigits for c in wanted):
        return None
    found: list[CommitMatch] = []
    stack, seen = [store.read_head()], set()
    while stack:
        sha = stack.pop()
        if sha in seen:
            continue
        seen.add(sha)
        node = store.commit_node(sha)
        if sha.decode().startswith(wanted):
            found.append(
                CommitMatch(sha.decode(), node.event_id, tuple(p.decode() for p in node.parents))
            )
        stack.extend(node.parents)
    if len(found) > 1:
        raise BadRequest(
            f"commit prefix {prefix!r} is ambiguous: {sorted(m.commit[:12] for m in found)}",
            hint="give more characters",
        )
    return found[0] if found else None
