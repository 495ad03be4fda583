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
from typing import Any, TypeVar


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
        if sha not in self._heads:
            for merge in self._merges_below(sha, self._heads):
                candidates: set[str] = set()
                for parent in self.node(merge).parents:
                    parent_node = self.node(parent)
                    if parent_node.event_id is not None:
                        candidates.add(parent_node.event_id)
                    else:
                        candidates.update(self._heads[parent])
                self._heads[merge] = tuple(
                    sorted(c for c in candidates if not self._dominated(c, candidates))
                )
        return self._heads[sha]

    def lamport(self, sha: bytes) -> int:
        """Return the largest Lamport clock of the events commit ``sha`` stands on."""
        node = self.node(sha)
        if node.event_id is not None:
            return node.lamport
        if sha not in self._lamport:
            for merge in self._merges_below(sha, self._lamport):
                self._lamport[merge] = max(
                    (
                        n.lamport if (n := self.node(p)).event_id is not None else self._lamport[p]
                        for p in self.node(merge).parents
                    ),
                    default=0,
                )
        return self._lamport[sha]

    def _merges_below(self, sha: bytes, done: dict[bytes, Any]) -> list[bytes]:
        """The merge commits from merge ``sha`` down through merges only, not yet in ``done``,
        each after every merge parent of it (post-order, without recursion: a forged chain of
        merges of any length is walked on the heap)."""
        order: list[bytes] = []
        seen: set[bytes] = set()
        stack: list[tuple[bytes, bool]] = [(sha, False)]
        while stack:
            current, expanded = stack.pop()
            if expanded:
                order.append(current)
                continue
            if current in seen or current in done:
                continue
            seen.add(current)
            stack.append((current, True))
            for parent in self.node(current).parents:
                if parent not in seen and parent not in done and self.node(parent).event_id is None:
                    stack.append((parent, False))
        return order

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
