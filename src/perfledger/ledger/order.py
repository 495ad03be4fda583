"""The deterministic total order of events (SPEC.md section 2, Order).

Events form a DAG; projections consume them sorted by ``(lamport, id)``. Because every event's
Lamport clock is one more than the largest of its parents' (checked by verify), clocks strictly
increase along every edge, so this sort is a topological order; ties between concurrent events
are broken by id (a content hash), never by wall-clock time or by who merged. Any two machines
holding the same DAG therefore fold the same events in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def in_total_order(items: Iterable[tuple[int, str, T]]) -> list[T]:
    """Sort ``(lamport, event_id, value)`` triples into the total order; return the values."""
    return [value for _, _, value in sorted(items, key=lambda item: (item[0], item[1]))]
