"""The ledger-level projection: what every ledger has, whatever its workflow content.

A pure fold: :func:`evolve` takes the state and one :class:`RecordedEvent` and returns the next
state. The workflow projection (targets, experiments, verdicts, ...) builds on this one.

``evolve`` updates the state it is given and returns it (linear use): a fold owns its state, and
copying every dict on every event would make replay quadratic. Callers that need the state
before an event (the auditor's re-decide) read it before folding the event in.
"""

from __future__ import annotations

import blake3
import msgspec

from perfledger.events.canonical import canonical_bytes
from perfledger.events.envelope import STATE_HASH_DOMAIN
from perfledger.events.kinds import LedgerInitialized, NoteRecorded, RecordedEvent

#: Bumped whenever the projection's meaning changes; part of the state cache key.
PROJECTION_VERSION = 1


class LedgerState(msgspec.Struct, kw_only=True):
    """The folded state of a ledger.

    Attributes:
        name: the ledger's name (from ``LedgerInitialized``).
        format_version: the storage format version.
        created_by: who created the ledger.
        created_at: UTC timestamp of the root event.
        event_count: number of events folded.
        kinds: event kind -> count.
        last_event_id: id of the last event in the total order.
        last_lamport: Lamport clock of that event.
        notes: number of ``NoteRecorded`` events.
    """

    name: str = ""
    format_version: int = 0
    created_by: str = ""
    created_at: str = ""
    event_count: int = 0
    kinds: dict[str, int] = msgspec.field(default_factory=dict)
    last_event_id: str = ""
    last_lamport: int = 0
    notes: int = 0


def initial_state() -> LedgerState:
    """Return the state of an empty ledger."""
    return LedgerState()


def evolve(state: LedgerState, event: RecordedEvent) -> LedgerState:
    """Fold one event into ``state`` (updated in place and returned; see the module docstring)."""
    envelope = event.envelope
    payload = event.payload
    if isinstance(payload, LedgerInitialized):
        state.name = payload.name
        state.format_version = payload.format_version
        state.created_by = payload.creator
        state.created_at = envelope.ts
    elif isinstance(payload, NoteRecorded):
        state.notes += 1
    state.event_count += 1
    state.kinds[envelope.kind] = state.kinds.get(envelope.kind, 0) + 1
    state.last_event_id = envelope.id
    state.last_lamport = envelope.lamport
    return state


def state_hash(state: msgspec.Struct) -> str:
    """Return blake3 hex over the domain prefix and the canonical encoding of ``state``.

    Any machine folding the same DAG gets the same hash (SPEC.md section 2, Order).
    """
    return blake3.blake3(STATE_HASH_DOMAIN + canonical_bytes(state)).hexdigest()
