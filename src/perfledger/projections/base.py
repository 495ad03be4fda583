"""A projection: an initial state, a pure ``evolve`` and a version (the state cache key)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from perfledger.events.kinds import RecordedEvent
from perfledger.projections import workflow


@dataclass(frozen=True)
class Projection:
    """How to fold a ledger into one read model.

    Attributes:
        name: identifies the projection in the state cache.
        version: bump when the meaning of the state changes; invalidates caches.
        state_type: the msgspec Struct type of the state (for cache decoding).
        initial: returns a fresh initial state.
        evolve: ``evolve(state, event) -> state``; may update ``state`` in place (linear use).
    """

    name: str
    version: int
    state_type: type[msgspec.Struct]
    initial: Callable[[], Any]
    evolve: Callable[[Any, RecordedEvent], Any]


#: The projection ``perfledger state`` shows and ``verify`` hashes: the workflow state, which
#: keeps the ledger-level fields of :mod:`perfledger.projections.ledger_state` inside it.
DEFAULT_PROJECTION = Projection(
    name="workflow",
    version=workflow.PROJECTION_VERSION,
    state_type=workflow.WorkflowState,
    initial=workflow.initial_state,
    evolve=workflow.evolve,
)


def fold(events: Iterable[RecordedEvent], projection: Projection = DEFAULT_PROJECTION) -> Any:
    """Fold ``events`` (in the total order) from the initial state; returns the final state."""
    state = projection.initial()
    for event in events:
        state = projection.evolve(state, event)
    return state
