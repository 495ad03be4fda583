"""What every event store shares: the draft an append starts from, the head view a decision sees,
and the construction of envelopes (parents, Lamport clock, content id).

Two stores implement :class:`EventStore`: the git store (:mod:`perfledger.ledger.store`) and the
in-memory store (:mod:`perfledger.ledger.memory`); the contract suite in ``tests/contract`` runs
against both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

import blake3

from perfledger.errors import BadRequest, CanonicalEncodingError
from perfledger.events.canonical import (
    canonical_bytes,
    canonical_encoder,
    check_canonical,
    to_canonical_value,
)
from perfledger.events.envelope import (
    EVENT_ID_DOMAIN,
    Envelope,
    decode_envelope,
    format_ts,
    validate_draft_fields,
)
from perfledger.events.kinds import get_kind, validate_payload
from perfledger.events.limits import MAX_ARTIFACTS, shape_problem

#: The kind of the one root event every ledger starts with.
ROOT_KIND = "LedgerInitialized"
#: Attempts :meth:`EventStore.transact` makes before raising ConcurrentAppend.
DEFAULT_MAX_ATTEMPTS = 64
#: Lost races a writer tolerates before it decides and writes under the writers' lock (then it
#: is guaranteed to progress however many writers contend).
OPTIMISTIC_ATTEMPTS = 3


@dataclass(frozen=True)
class Artifact:
    """A file to attach to an event: its bytes and IANA media type (``text/plain``, ...)."""

    data: bytes
    media_type: str = "application/octet-stream"


@dataclass(frozen=True)
class EventDraft:
    """An event before it is placed in the DAG: its registered ``kind``, ``payload`` (the
    kind's Struct or builtins), ``actor``, the ``request`` as received (builtins) or None, the
    caller's ``idempotency_key``, ``artifacts`` (name -> :class:`Artifact`) and ``ts`` (an
    aware datetime; default: now, UTC)."""

    kind: str
    payload: Any
    actor: str
    request: Any = None
    idempotency_key: str | None = None
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    ts: datetime | None = None


@dataclass(frozen=True)
class HeadView:
    """What a decision sees of the ledger at one head: an opaque ``head`` token (git: the
    commit hex sha), the sorted ids of the events at the DAG's tips, and the largest Lamport
    clock among them."""

    head: str | None
    event_heads: tuple[str, ...]
    lamport: int


#: A decision: given the view at the current head, return the drafts to append (may be empty).
Decide = Callable[[HeadView], Sequence[EventDraft]]


class BuiltEvent(NamedTuple):
    """An envelope placed in the DAG (decoded back from ``data``, as a reader will see it),
    the canonical bytes of ``event.json``, artifact ``blobs`` (blake3 hex -> bytes), the
    event time in whole seconds (the commit time) and a one-line summary for the message."""

    envelope: Envelope
    data: bytes
    blobs: dict[str, bytes]
    seconds: int
    summary: str = ""


def build_envelope(draft: EventDraft, parents: Sequence[str], lamport: int) -> BuiltEvent:
    """Turn a draft into a complete envelope placed after ``parents`` at Lamport ``lamport``,
    its id the blake3 of the domain prefix and the canonical bytes without ``id``.
    Returns: a :class:`BuiltEvent`.
    Raises: BadRequest for a payload that does not fit its schema or a malformed field;
        CanonicalEncodingError (a BadRequest) for NaN/Inf anywhere.
    """
    spec = get_kind(draft.kind)
    if draft.kind == ROOT_KIND and (parents or lamport != 1):
        raise BadRequest(
            f"{ROOT_KIND} is the root event; a ledger has exactly one",
            hint="create a new ledger with `perfledger init` instead",
        )
    # the storage format's limits first: a value nested past them would exhaust the
    # recursion of the converters below (RecursionError), and a reader would refuse the event
    problem = (
        shape_problem(draft.payload, "$.payload", 2)
        or shape_problem(draft.request, "$.request", 2)
        or (
            f"{len(draft.artifacts)} artifacts (at most {MAX_ARTIFACTS})"
            if len(draft.artifacts) > MAX_ARTIFACTS
            else None
        )
    )
    if problem is not None:
        raise BadRequest(
            f"the event is outside the storage format's limits: {problem}",
            hint="docs/storage.md, Limits: keep requests and payloads within them (large data "
            "belongs in an artifact)",
        )
    struct, payload = validate_payload(draft.kind, draft.payload)
    refs: dict[str, dict[str, Any]] = {}
    blobs: dict[str, bytes] = {}
    for name, artifact in draft.artifacts.items():
        if not isinstance(artifact.data, bytes | bytearray):
            raise BadRequest(
                f"artifact {name!r}: data must be bytes",
                hint="pass the artifact's content as bytes",
            )
        digest = blake3.blake3(artifact.data).hexdigest()
        refs[name] = {
            "blake3": digest,
            "size": len(artifact.data),
            "media_type": artifact.media_type,
        }
        blobs[digest] = bytes(artifact.data)
    validate_draft_fields(
        draft.actor,
        draft.idempotency_key,
        {n: (r["blake3"], r["size"], r["media_type"]) for n, r in refs.items()} if refs else {},
    )
    moment = draft.ts or datetime.now(UTC)
    # Only the free-form parts can hold NaN/Inf or odd types; the rest is typed and checked. The
    # payload is already builtins (from its Struct): it needs the check, not a conversion.
    check_canonical(payload)
    # Canonical JSON sorts keys, and "id" sorts between "artifacts" and "idempotency_key": the
    # bytes with the id are the two halves around it, so the envelope is encoded once.
    head = {"actor": draft.actor, "artifacts": refs}
    tail = {
        "idempotency_key": draft.idempotency_key,
        "kind": draft.kind,
        "lamport": lamport,
        "parents": sorted(parents),
        "payload": payload,
        "request": None if draft.request is None else to_canonical_value(draft.request),
        "schema": spec.version,
        "ts": format_ts(moment),
    }
    try:
        first = canonical_encoder.encode(head)[:-1]
        second = canonical_encoder.encode(tail)[1:]
        event_id = blake3.blake3(EVENT_ID_DOMAIN + first + b"," + second).hexdigest()
        data = first + b',"id":"' + event_id.encode() + b'",' + second
    except UnicodeEncodeError as exc:
        raise CanonicalEncodingError(
            f"text is not valid Unicode (lone surrogate at position {exc.start})",
            hint="store text as valid Unicode (no lone surrogates): decode it with errors='replace' first",
        ) from None
    try:
        envelope = decode_envelope(data)  # what every reader will decode, limits included
    except BadRequest as exc:
        exc.hint = exc.hint or "docs/storage.md, Limits: large data belongs in an artifact"
        raise
    try:
        summary = spec.summary(struct)
    except Exception:  # a summary is decoration: it must never block an append
        summary = ""
    return BuiltEvent(envelope, data, blobs, int(moment.timestamp()), summary)


def check_batch_keys(drafts: Sequence[EventDraft]) -> None:
    """Refuse a batch in which two drafts carry the same idempotency key (BadRequest)."""
    keys = [d.idempotency_key for d in drafts if d.idempotency_key is not None]
    if len(keys) != len(set(keys)):
        raise BadRequest(
            "a batch carries the same idempotency key twice",
            hint="give each request of a batch its own idempotency key",
        )


def artifact_ref(envelope: Envelope, name: str) -> Any:
    """The reference (blake3, size, media type) of artifact ``name`` of ``envelope``'s event.
    Raises: BadRequest when the event has no such artifact."""
    ref = envelope.artifacts.get(name)
    if ref is None:
        raise BadRequest(
            f"event {envelope.id} has no artifact {name!r}",
            hint="`perfledger show EVENT` lists an event's artifacts",
        )
    return ref


def idempotent_replay(
    drafts: Sequence[EventDraft], holder: Callable[[str], Envelope | None]
) -> list[Envelope] | None:
    """The events already recorded under the drafts' idempotency keys (``holder``: key -> the
    event, or None), or None when no draft's key is recorded (SPEC.md section 2).
    Raises: BadRequest when a key was used for a different request (kind, or the canonical
        request or payload), or when part of the batch is recorded and part is not.
    """
    found: list[Envelope] = []
    missing = 0
    for draft in drafts:
        key = draft.idempotency_key
        envelope = holder(key) if key is not None else None
        if envelope is None:
            missing += 1
            continue
        stored = envelope.request if draft.request is not None else envelope.payload
        offered = (
            draft.request
            if draft.request is not None
            else validate_payload(draft.kind, draft.payload)[1]
        )
        if envelope.kind != draft.kind or canonical_bytes(stored) != canonical_bytes(offered):
            raise BadRequest(
                f"idempotency key {key!r} was already used for a different request "
                f"(event {envelope.id})",
                hint="use a new idempotency key for a new request",
            )
        found.append(envelope)
    if not found:
        return None
    if missing:
        raise BadRequest(
            "part of this batch is already in the ledger under its idempotency keys and part "
            "is not",
            hint="retry the batch exactly as first sent, or send the missing events alone",
        )
    return found


class EventStore(Protocol):
    """The storage contract both stores satisfy (see ``tests/contract``); both subclass it for
    :meth:`append` and :meth:`append_batch`."""

    def head_view(self) -> HeadView:
        """Return the view at the current head."""
        ...

    def transact(
        self, decide: Decide, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[Envelope]:
        """Run ``decide`` on the current head and append its drafts atomically, re-deciding on a
        lost compare-and-swap; returns the appended (or idempotently found) envelopes."""
        ...

    def append(self, draft: EventDraft) -> Envelope:
        """Append one event (:meth:`transact`); returns it, or the recorded one with the same
        idempotency key."""
        return self.transact(lambda view: [draft])[0]

    def append_batch(self, drafts: Sequence[EventDraft]) -> list[Envelope]:
        """Append ``drafts`` atomically (one commit each, one head move): all or none."""
        drafts = list(drafts)
        return self.transact(lambda view: drafts)

    def iter_events(self) -> Iterator[Envelope]:
        """Yield every event in the deterministic total order (lamport, id)."""
        ...

    def get_event(self, event_id: str) -> Envelope:
        """Return the event with ``event_id``; raises BadRequest when absent."""
        ...

    def find_by_idempotency_key(self, key: str) -> Envelope | None:
        """Return the event carrying ``key``, or None."""
        ...

    def read_artifact(self, event_id: str, name: str) -> bytes:
        """Return artifact ``name`` of event ``event_id`` after checking size and blake3;
        BadRequest when there is no such artifact, IntegrityError when it does not match."""
        ...
