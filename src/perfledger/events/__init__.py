"""The event vocabulary: envelope, canonical encoding, kinds with schema versions and upcasters."""

from perfledger.events.canonical import canonical_bytes, decode_json, is_canonical
from perfledger.events.envelope import (
    ArtifactRef,
    Envelope,
    compute_event_id,
    decode_envelope,
    encode_envelope,
    format_ts,
    parse_ts,
)
from perfledger.events.kinds import (
    KindSpec,
    RecordedEvent,
    get_kind,
    recorded,
    register_kind,
    registered_kinds,
    upcast,
)

__all__ = [
    "ArtifactRef",
    "Envelope",
    "KindSpec",
    "RecordedEvent",
    "canonical_bytes",
    "compute_event_id",
    "decode_envelope",
    "decode_json",
    "encode_envelope",
    "format_ts",
    "get_kind",
    "is_canonical",
    "parse_ts",
    "recorded",
    "register_kind",
    "registered_kinds",
    "upcast",
]
