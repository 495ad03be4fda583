"""The event envelope (SPEC.md section 2) and its content-derived id.

An event's id is ``blake3(DOMAIN + canonical_bytes(envelope without "id"))`` in hex (64 chars). The
domain prefix keeps an event id from ever colliding with a hash of some other perfledger object
(an artifact, a state snapshot) that happens to have the same bytes.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import blake3
import msgspec

from perfledger.errors import BadRequest, CanonicalEncodingError
from perfledger.events.canonical import canonical_bytes, to_canonical_value
from perfledger.events.limits import (
    MAX_ARTIFACTS,
    MAX_DEPTH,
    MAX_PARENTS,
    bytes_within_shape,
    event_size_problem,
    shape_problem,
)

#: Domain-separation prefix hashed before the canonical bytes of an event.
EVENT_ID_DOMAIN = b"perfledger/event/v1\x00"
#: Domain-separation prefix for the folded-state hash.
STATE_HASH_DOMAIN = b"perfledger/state/v1\x00"

# ``\Z``, not ``$`` (which also matches before a final newline), and ``[0-9]``, not ``\d``
# (which matches any Unicode digit): these forms are exact.
_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_TS = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z\Z")
#: The form of an envelope timestamp (``YYYY-MM-DDTHH:MM:SS.ffffffZ``, UTC).
TIMESTAMP_FORM = _TS
_ACTOR = re.compile(r"^[^\x00-\x1f<>\x7f]{1,200}\Z")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}\Z")
_ARTIFACT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\Z")


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "perfledger writes envelopes within these limits (docs/storage.md gives the format); what you pass (--actor, --idempotency-key, artifact names) must fit it too"


class ArtifactRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A file attached to an event, stored as the blob ``artifacts/<blake3>`` in its commit tree.

    Attributes:
        blake3: blake3 hex digest (64 chars) of the file's bytes.
        size: length in bytes.
        media_type: IANA media type, e.g. ``text/x-cuda`` or ``application/json``.
    """

    blake3: str
    size: int
    media_type: str


class Envelope(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One event as stored in ``event.json`` (SPEC.md section 2).

    Attributes:
        schema: the schema version of this kind's payload when it was written.
        kind: the event kind, e.g. ``TargetFrozen``.
        id: blake3 hex of the canonical bytes of every other field (see :func:`compute_event_id`).
        parents: event ids of the heads this event was appended on (empty only for the root).
        lamport: Lamport clock, ``max(parents' lamport) + 1``; the root has 1.
        ts: UTC timestamp ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (microseconds); information only,
            never used for ordering.
        actor: who appended it (agent or person name; no ``<``, ``>`` or control characters).
        idempotency_key: the caller's idempotency key, if any.
        request: the closed request as received (builtins), if any.
        payload: the decided content (builtins, validated against the kind's schema).
        artifacts: logical name -> :class:`ArtifactRef`.
    """

    schema: int
    kind: str
    id: str
    parents: tuple[str, ...]
    lamport: int
    ts: str
    actor: str
    idempotency_key: str | None = None
    request: Any = None
    payload: dict[str, Any] = {}
    artifacts: dict[str, ArtifactRef] = {}


_envelope_decoder = msgspec.json.Decoder(Envelope)


def format_ts(moment: datetime) -> str:
    """Format an aware datetime as the envelope's UTC timestamp string (microseconds, ``Z``)."""
    if moment.tzinfo is None:
        raise BadRequest("timestamp must be timezone-aware", hint=_HINT)
    m = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    # the same text as ``isoformat(timespec="microseconds")`` of the naive UTC time, in half
    # the time (it runs once per appended event)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031 (the fastest form)
        m.year, m.month, m.day, m.hour, m.minute, m.second, m.microsecond
    )  # fmt: skip


def parse_ts(ts: str) -> datetime:
    """Parse an envelope timestamp; raises BadRequest when it is not in the canonical form."""
    if not _TS.match(ts):
        raise BadRequest(
            f"timestamp {ts!r} is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ", hint=_HINT
        )
    return datetime.fromisoformat(ts)


def _hashed_fields(envelope: Envelope) -> dict[str, Any]:
    data = to_canonical_value(envelope)
    assert isinstance(data, dict)
    del data["id"]
    return data


def compute_event_id(envelope: Envelope) -> str:
    """Return the content id of ``envelope``: blake3 hex over the domain prefix and the canonical
    bytes of every field but ``id``.

    Raises: CanonicalEncodingError if a field holds NaN/Inf or an unsupported value.
    """
    body = canonical_bytes(_hashed_fields(envelope))
    return blake3.blake3(EVENT_ID_DOMAIN + body).hexdigest()


def validate_envelope_fields(envelope: Envelope) -> None:
    """Check the shape of every envelope field that the type system does not (used on read and
    by verify; appends check the caller-supplied fields with :func:`validate_draft_fields`).

    Raises: BadRequest naming the field.
    """
    if not _HEX64.match(envelope.id):
        raise BadRequest(f"event id {envelope.id!r} is not 64 lowercase hex characters", hint=_HINT)
    for parent in envelope.parents:
        if not _HEX64.match(parent):
            raise BadRequest(f"parent id {parent!r} is not 64 lowercase hex characters", hint=_HINT)
    if len(set(envelope.parents)) != len(envelope.parents):
        raise BadRequest("parents contain a duplicate id", hint=_HINT)
    if list(envelope.parents) != sorted(envelope.parents):
        raise BadRequest("parents must be sorted", hint=_HINT)
    if envelope.lamport < 1:
        raise BadRequest(f"lamport {envelope.lamport} must be >= 1", hint=_HINT)
    if envelope.schema < 1:
        raise BadRequest(f"schema version {envelope.schema} must be >= 1", hint=_HINT)
    if not _TS.match(envelope.ts):
        raise BadRequest(
            f"timestamp {envelope.ts!r} is not of the form YYYY-MM-DDTHH:MM:SS.ffffffZ", hint=_HINT
        )
    validate_draft_fields(
        envelope.actor,
        envelope.idempotency_key,
        {name: (ref.blake3, ref.size, ref.media_type) for name, ref in envelope.artifacts.items()},
    )


def validate_draft_fields(
    actor: object, idempotency_key: object, artifacts: dict[str, tuple[str, int, str]]
) -> None:
    """Check the caller-supplied envelope fields: actor, idempotency key, artifact names.

    Args:
        actor: the actor name.
        idempotency_key: the key or None.
        artifacts: name -> (blake3 hex, size in bytes, media type).
    Raises: BadRequest naming the field.
    """
    if not isinstance(actor, str) or not _ACTOR.match(actor):
        shown = repr(actor)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise BadRequest(
            f"actor {shown} must be 1-200 characters without '<', '>' or control characters",
            hint=_HINT,
        )
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not _KEY.match(idempotency_key)
    ):
        shown = repr(idempotency_key)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise BadRequest(
            f"idempotency key {shown} must be 1-200 printable ASCII characters without spaces",
            hint=_HINT,
        )
    for name, (digest, size, media_type) in artifacts.items():
        if not isinstance(name, str) or not _ARTIFACT_NAME.match(name):
            raise BadRequest(
                f"artifact name {name!r} must be 1-200 characters of letters, digits, '._+-', "
                "starting with a letter or digit",
                hint=_HINT,
            )
        if (
            not _HEX64.match(digest)
            or size < 0
            or not isinstance(media_type, str)
            or not media_type
        ):
            raise BadRequest(f"artifact {name!r} has a malformed reference", hint=_HINT)


def encode_envelope(envelope: Envelope) -> bytes:
    """Return the canonical bytes of the whole envelope (the content of ``event.json``)."""
    return canonical_bytes(envelope)


def decode_envelope(data: bytes) -> Envelope:
    """Decode ``event.json`` bytes strictly into an :class:`Envelope`, within the storage
    format's limits (:mod:`perfledger.events.limits`).

    Raises: BadRequest when the bytes are not valid JSON of the envelope's shape or are outside
        the limits (a reader of a ledger turns it into an IntegrityError naming the commit).
    """
    problem = event_size_problem(len(data))
    if problem is not None:
        raise BadRequest(
            f"event.json is outside the storage format's limits: {problem}", hint=_HINT
        )
    try:
        envelope = _envelope_decoder.decode(data)
    except RecursionError:  # msgspec's own guard, far above MAX_DEPTH
        raise BadRequest(
            f"event.json is outside the storage format's limits: it nests deeper than "
            f"{MAX_DEPTH} levels",
            hint=_HINT,
        ) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"event.json does not decode as an envelope: {exc}", hint=_HINT) from None
    problem = envelope_shape_problem(data, envelope)
    if problem is not None:
        raise BadRequest(
            f"event.json is outside the storage format's limits: {problem}", hint=_HINT
        )
    return envelope


def envelope_shape_problem(data: bytes, envelope: Envelope) -> str | None:
    """Why the decoded ``envelope`` (from ``data``, its ``event.json``) is outside the storage
    format's shape limits (parents, artifacts, depth, strings, containers), or None. Fast when
    the bytes alone prove it within them (:func:`~perfledger.events.limits.bytes_within_shape`).
    """
    if len(envelope.parents) > MAX_PARENTS:
        return f"$.parents: {len(envelope.parents)} parents (at most {MAX_PARENTS})"
    if len(envelope.artifacts) > MAX_ARTIFACTS:
        return f"$.artifacts: {len(envelope.artifacts)} artifacts (at most {MAX_ARTIFACTS})"
    if bytes_within_shape(data):
        return None
    return shape_problem(envelope)


def is_valid_event_id(value: str) -> bool:
    """Return True when ``value`` is 64 lowercase hex characters."""
    return bool(_HEX64.match(value))


__all__ = [
    "EVENT_ID_DOMAIN",
    "STATE_HASH_DOMAIN",
    "TIMESTAMP_FORM",
    "ArtifactRef",
    "CanonicalEncodingError",
    "Envelope",
    "compute_event_id",
    "decode_envelope",
    "encode_envelope",
    "envelope_shape_problem",
    "format_ts",
    "is_valid_event_id",
    "parse_ts",
    "validate_draft_fields",
    "validate_envelope_fields",
]
