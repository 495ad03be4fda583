"""An in-memory event store with the same contract as the git store (``tests/contract``).

For tests and for deciders exercised without I/O. Thread-safe: a decision and its append run
under one lock. Artifacts are checked on read like the git store's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import blake3

from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.envelope import Envelope
from perfledger.events.kinds import LedgerInitialized
from perfledger.ledger.base import (
    DEFAULT_MAX_ATTEMPTS,
    Decide,
    EventDraft,
    EventStore,
    HeadView,
    artifact_ref,
    build_envelope,
    check_batch_keys,
    idempotent_replay,
)
from perfledger.ledger.dag import in_total_order


class MemoryStore(EventStore):
    """A linear event log in memory, head = the id of the last event; ``name`` is written in
    the root ``LedgerInitialized``."""

    def __init__(self, name: str = "memory") -> None:
        self._lock = threading.RLock()
        self._events: list[Envelope] = []
        self._by_id: dict[str, Envelope] = {}
        self._keys: dict[str, str] = {}
        self._blobs: dict[str, bytes] = {}
        root = build_envelope(
            EventDraft("LedgerInitialized", LedgerInitialized(name, 1, "perfledger"), "perfledger"),
            (),
            1,
        )
        self._commit([root])

    def _commit(self, built: list) -> None:
        for item in built:
            envelope = item.envelope
            self._events.append(envelope)
            self._by_id[envelope.id] = envelope
            if envelope.idempotency_key is not None:
                self._keys.setdefault(envelope.idempotency_key, envelope.id)
            self._blobs.update(item.blobs)

    def head_view(self) -> HeadView:
        """Return the view at the current head."""
        with self._lock:
            last = self._events[-1]
            return HeadView(last.id, (last.id,), last.lamport)

    def transact(
        self, decide: Decide, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[Envelope]:
        """Run ``decide`` on the head and append its drafts atomically. It runs under the
        store's lock: no other writer of this process can move the head meanwhile, so no race
        is lost (``max_attempts``, the protocol's, is never reached)."""
        with self._lock:
            view = self.head_view()
            drafts = list(decide(view))
            if not drafts:
                return []
            check_batch_keys(drafts)
            existing = idempotent_replay(drafts, self.find_by_idempotency_key)
            if existing is not None:
                return existing
            parents, lamport = view.event_heads, view.lamport
            built = []
            for draft in drafts:
                lamport += 1
                built.append(build_envelope(draft, parents, lamport))
                parents = (built[-1].envelope.id,)
            self._commit(built)
        return [item.envelope for item in built]

    def iter_events(self) -> Iterator[Envelope]:
        """Yield every event in the total order (lamport, id)."""
        with self._lock:
            events = list(self._events)
        yield from in_total_order((e.lamport, e.id, e) for e in events)

    def get_event(self, event_id: str) -> Envelope:
        """Return the event ``event_id``; BadRequest when absent."""
        try:
            return self._by_id[event_id]
        except KeyError:
            raise BadRequest(
                f"no event {event_id!r} in this ledger",
                hint="give an event id (`perfledger log`) or a ledger commit sha (`git log ledger`)",
            ) from None

    def find_by_idempotency_key(self, key: str) -> Envelope | None:
        """Return the event carrying ``key``, or None."""
        event_id = self._keys.get(key)
        return None if event_id is None else self._by_id[event_id]

    def read_artifact(self, event_id: str, name: str) -> bytes:
        """Return an event's artifact after checking size and blake3."""
        ref = artifact_ref(self.get_event(event_id), name)
        data = self._blobs.get(ref.blake3)
        if data is None or len(data) != ref.size or blake3.blake3(data).hexdigest() != ref.blake3:
            raise IntegrityError(f"event {event_id}: artifact {name!r} does not match")
        return data

    def count(self) -> int:
        """Number of events."""
        return len(self._events)
