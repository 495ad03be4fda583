"""The derived commit index (SPEC.md section 2): which commits are reachable from the ledger
ref, the commit of each event, and the event of each idempotency key.

Derived data only: it is rebuilt from the commits whenever it is missing, unreadable or
disagrees with git, so deleting ``<gitdir>/perfledger/index-v3.msgpack`` changes nothing but
speed, and ``verify`` never reads it. Reading commits from git is the store's business
(:mod:`perfledger.ledger.store`); this module keeps the maps, the idempotency rule, and the
file's load and save.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from perfledger.ledger.cache import write_derived
from perfledger.ledger.dag import in_total_order
from perfledger.ledger.objects import check_commit_limits, event_trailers


class IndexEntry(msgspec.Struct, array_like=True):
    """One commit in the derived index: event id (None for a merge), Lamport clock, parents
    (hex bytes) and idempotency key (None when the event has none)."""

    event_id: str | None
    lamport: int
    parents: list[bytes]
    key: str | None


class _IndexFile(msgspec.Struct):
    """The saved index: every commit reachable from ``head``, and the maps derived from them
    (saved too, so that loading costs one decode and no per-commit Python work)."""

    head: bytes
    commits: dict[bytes, IndexEntry]
    by_event: dict[str, bytes]
    keys: dict[str, str]


def entry_from_raw(raw: bytes, sha: str = "") -> IndexEntry:
    """The index entry of commit ``sha`` (hex, for errors) from its raw content (header, blank
    line, message).
    Raises: IntegrityError for a commit outside the storage format's limits (size, parents)."""
    header, _, message = raw.partition(b"\n\n")
    parents = [line[7:] for line in header.split(b"\n") if line.startswith(b"parent ")]
    check_commit_limits(sha, len(raw), len(parents))
    event_id, lamport, key = event_trailers(message)
    return IndexEntry(event_id, lamport, parents, key)


class CommitIndex:
    """The maps a store keeps about its commits (hex shas): ``commits`` holds every commit
    read or written (branches not yet merged too); ``reachable``, ``by_event`` and ``keys``
    describe exactly the commits reachable from ``head``, whose events are visible;
    ``all_events`` maps the event id of every known commit to it."""

    def __init__(self) -> None:
        """An empty index, not yet loaded from disk."""
        self.commits: dict[bytes, IndexEntry] = {}
        self.reachable: set[bytes] = set()
        self.by_event: dict[str, bytes] = {}
        self.keys: dict[str, str] = {}
        self.all_events: dict[str, bytes] = {}
        #: the head whose reachable commits the maps describe
        self.head: bytes | None = None
        #: the last head whose entries were cross-checked against git (or written here)
        self.checked_head: bytes | None = None
        self.loaded = False
        #: commits indexed since the last save
        self.unsaved = 0

    def know(self, sha: bytes, entry: IndexEntry) -> None:
        """Record the structure of commit ``sha`` without making its event visible."""
        self.commits[sha] = entry
        if entry.event_id is not None:
            self.all_events[entry.event_id] = sha

    def add(self, sha: bytes, entry: IndexEntry) -> None:
        """Record a commit that is reachable from the ledger ref (its event becomes visible)."""
        self.know(sha, entry)
        self.mark_reachable(sha)

    def mark_reachable(self, sha: bytes) -> None:
        """Make the known commit ``sha`` visible: its event, and its idempotency key. A key
        carried by several events (concurrent branches, merged) answers with the first in the
        total order, whatever order a walk met them in (SPEC.md section 2, idempotency)."""
        entry = self.commits[sha]
        self.reachable.add(sha)
        if entry.event_id is None:
            return
        self.all_events[entry.event_id] = sha
        self.by_event[entry.event_id] = sha
        if entry.key is not None:
            current = self.keys.get(entry.key)
            if current is None or (entry.lamport, entry.event_id) < (
                self.commits[self.by_event[current]].lamport,
                current,
            ):
                self.keys[entry.key] = entry.event_id

    def walk_new(
        self, head: bytes, previous: bytes | None, entry_of: Callable[[bytes], IndexEntry]
    ) -> bool:
        """Make the commits reachable from ``head`` but not yet reachable visible, reading each
        through ``entry_of``. Returns False (changing nothing) when the walk never met
        ``previous``: the ref moved somewhere else, and the caller rebuilds."""
        stack = [head]
        new: list[bytes] = []
        seen: set[bytes] = set()
        met_previous = previous is None
        while stack:
            sha = stack.pop()
            if sha in seen:
                continue
            if sha in self.reachable:
                met_previous = met_previous or sha == previous
                continue
            seen.add(sha)
            new.append(sha)
            stack.extend(self._known(sha, entry_of).parents)
        if not met_previous:
            return False
        for sha in new:
            self.mark_reachable(sha)
        self.head = head
        self.unsaved += len(new)
        return True

    def _known(self, sha: bytes, entry_of: Callable[[bytes], IndexEntry]) -> IndexEntry:
        entry = self.commits.get(sha)
        if entry is None:
            entry = entry_of(sha)
            self.know(sha, entry)
        return entry

    def rebuild(self, head: bytes, entry_of: Callable[[bytes], IndexEntry]) -> None:
        """Recompute the reachable set and the event and key maps from ``head``."""
        self.reachable.clear()
        self.by_event.clear()
        self.keys.clear()
        self.walk_new(head, None, entry_of)

    def ordered(self) -> list[bytes]:
        """The event commits reachable from :attr:`head` in the total order."""
        commits = self.commits
        return in_total_order(
            (entry.lamport, entry.event_id, sha)
            for sha in self.reachable
            if (entry := commits[sha]).event_id is not None
        )

    def load(self, path: str, head_exists: Callable[[bytes], bool]) -> None:
        """Load the saved index from ``path`` when it is readable, self-consistent, and its
        head still exists (``head_exists``); otherwise keep the index empty (it is rebuilt
        from the commits). Never raises for a bad file: derived data only."""
        self.loaded = True
        try:
            with open(path, "rb") as f:
                data = msgspec.msgpack.decode(f.read(), type=_IndexFile)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return
        if data.head not in data.commits or not head_exists(data.head):
            return
        events = sum(1 for entry in data.commits.values() if entry.event_id is not None)
        if events != len(data.by_event) or len(data.keys) > events:
            return  # inconsistent: rebuilt from the commits
        self.commits.update(data.commits)
        self.reachable.update(data.commits)
        self.by_event.update(data.by_event)
        self.all_events.update(data.by_event)
        self.keys.update(data.keys)
        self.head = data.head
        self.unsaved = 0

    def save(self, path: str) -> None:
        """Write the reachable part of the index to ``path`` (:func:`write_derived`).
        Raises: OSError when the file cannot be written (callers suppress it)."""
        if self.head is None or self.unsaved == 0:
            return
        reachable = {sha: self.commits[sha] for sha in self.reachable}
        write_derived(
            path,
            msgspec.msgpack.encode(_IndexFile(self.head, reachable, self.by_event, self.keys)),
        )
        self.unsaved = 0


__all__ = ["CommitIndex", "IndexEntry", "entry_from_raw"]
