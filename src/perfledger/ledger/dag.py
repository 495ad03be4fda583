"""The event DAG over commits: which events a commit stands on (its *event heads*).

An event commit stands on itself. A merge commit (no event) stands on the union of its parents'
event heads, minus any that is an ancestor of another: after a merge of ``M(A, B)`` with ``C``
(where ``C`` descends from ``A``) the heads are ``{B, C}``. An event appended on a commit lists
exactly that commit's event heads as its ``parents`` (sorted), and its Lamport clock is one more
than the largest among them. The store (on append) and verify (on replay) both use this module,
so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar


@dataclass(frozen=True, slots=True)
class CommitNode:
    """What the DAG needs of one commit: its event id and Lamport clock (None and 0 for a
    merge commit) and its parent commit shas."""

    event_id: str | None
    lamport: int
    parents: tuple[bytes, ...]


@dataclass
class EventHeads:
    """Memoised event heads and Lamport clocks of commits, given ``node`` (sha ->
    :class:`CommitNode`) and ``commit_of`` (event id -> sha)."""

    node: Callable[[bytes], CommitNode]
    commit_of: Callable[[str], bytes]
    _heads: dict[bytes, tuple[str, ...]] = field(default_factory=dict)
    _lamport: dict[bytes, int] = field(default_factory=dict)

    def heads(self, sha: bytes) -> tuple[str, ...]:
        """Return the sorted event ids commit ``sha`` stands on."""
        node = self.node(sha)
        if node.event_id is not None:
            return (node.event_id,)
        cached = self._heads.get(sha)
        if cached is None:
            candidates: set[str] = set()
            for parent in node.parents:
                candidates.update(self.heads(parent))
            cached = tuple(sorted(c for c in candidates if not self._dominated(c, candidates)))
            self._heads[sha] = cached
        return cached

    def lamport(self, sha: bytes) -> int:
        """Return the largest Lamport clock of the events commit ``sha`` stands on."""
        node = self.node(sha)
        if node.event_id is not None:
            return node.lamport
        cached = self._lamport.get(sha)
        if cached is None:
            cached = max((self.lamport(p) for p in node.parents), default=0)
            self._lamport[sha] = cached
        return cached

    def _dominated(self, event_id: str, others: set[str]) -> bool:
        """True when ``event_id`` is an ancestor of another event in ``others``."""
        target = self.commit_of(event_id)
        return any(
            other != event_id and descends_from(self.node, target, self.commit_of(other))
            for other in others
        )


#: The deterministic total order of events (SPEC.md section 2, Order): by ``(lamport, id)``.
#: Every event's Lamport clock is one more than the largest of its parents' (checked by
#: verify), so clocks strictly increase along every edge and this sort is a topological order;
#: ties between concurrent events are broken by id (a content hash), never by wall-clock time
#: or by who merged: any two machines holding the same DAG fold the same events in one order.
T = TypeVar("T")


def in_total_order(items: Iterable[tuple[int, str, T]]) -> list[T]:
    """Sort ``(lamport, event_id, value)`` triples into the total order; return the values."""
    return [value for _, _, value in sorted(items, key=lambda item: (item[0], item[1]))]


def descends_from(node: Callable[[bytes], CommitNode], ancestor: bytes, tip: bytes) -> bool:
    """True when commit ``ancestor`` is ``tip`` or one of its ancestors (hex bytes; ``node``:
    sha -> :class:`CommitNode`); the walk stops below ``ancestor``'s Lamport clock."""
    floor = EventHeads(node, {}.__getitem__).lamport(ancestor)  # (no event lookup needed)
    stack, seen = [tip], set()
    while stack:
        sha = stack.pop()
        if sha == ancestor:
            return True
        if sha in seen:
            continue
        seen.add(sha)
        n = node(sha)
        if n.event_id is None or n.lamport > floor:  # clocks strictly increase along edges
            stack.extend(n.parents)
    return False
