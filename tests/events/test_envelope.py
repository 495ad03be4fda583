"""The event envelope: its content id (domain-separated blake3), strict decoding, timestamps and
field validation (SPEC.md section 2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import blake3
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import BadRequest
from perfledger.events.canonical import canonical_bytes, is_canonical
from perfledger.events.envelope import (
    EVENT_ID_DOMAIN,
    STATE_HASH_DOMAIN,
    ArtifactRef,
    Envelope,
    compute_event_id,
    decode_envelope,
    encode_envelope,
    format_ts,
    parse_ts,
    validate_envelope_fields,
)
from perfledger.ledger.base import Artifact, EventDraft, build_envelope

PARENT = "ab" * 32
TS = datetime(2024, 5, 17, 12, 30, 45, 123456, tzinfo=UTC)


def _envelope(**changes: object) -> Envelope:
    """A well-formed envelope with its id computed (fields overridden by ``changes``)."""
    fields: dict[str, object] = {
        "schema": 1,
        "kind": "NoteRecorded",
        "id": "",
        "parents": (PARENT,),
        "lamport": 2,
        "ts": format_ts(TS),
        "actor": "tester",
        "idempotency_key": "key-1",
        "request": {"text": "hello", "tags": []},
        "payload": {"text": "hello", "tags": []},
        "artifacts": {"a.txt": ArtifactRef("cd" * 32, 3, "text/plain")},
    }
    fields.update(changes)
    draft = Envelope(**fields)  # type: ignore[arg-type]
    return msgspec.structs.replace(draft, id=compute_event_id(draft))


def _hashed_bytes(envelope: Envelope) -> bytes:
    """The canonical bytes of every envelope field but ``id`` (computed independently)."""
    data = msgspec.to_builtins(envelope)
    del data["id"]
    return canonical_bytes(data)


# ------------------------------------------------------------------------------- the id


def test_id_is_domain_separated_blake3_of_canonical_body() -> None:
    """id = blake3(domain prefix + canonical bytes without id), never the plain hash."""
    envelope = _envelope()
    body = _hashed_bytes(envelope)
    assert envelope.id == blake3.blake3(EVENT_ID_DOMAIN + body).hexdigest()
    assert envelope.id != blake3.blake3(body).hexdigest()
    assert envelope.id != blake3.blake3(encode_envelope(envelope)).hexdigest()
    assert envelope.id != blake3.blake3(STATE_HASH_DOMAIN + body).hexdigest()
    assert EVENT_ID_DOMAIN != STATE_HASH_DOMAIN


def test_id_ignores_the_id_field_itself() -> None:
    """Recomputing over an envelope carrying any id gives the same id (id is not hashed)."""
    envelope = _envelope()
    assert compute_event_id(msgspec.structs.replace(envelope, id="f" * 64)) == envelope.id


@pytest.mark.parametrize(
    "change",
    [
        {"schema": 2},
        {"kind": "Other"},
        {"parents": ()},
        {"parents": ("cd" * 32,)},
        {"lamport": 3},
        {"ts": format_ts(TS + timedelta(microseconds=1))},
        {"actor": "someone else"},
        {"idempotency_key": None},
        {"idempotency_key": "key-2"},
        {"request": None},
        {"request": {"text": "hello", "tags": [], "x": 0}},
        {"payload": {"text": "hello!", "tags": []}},
        {"payload": {"text": "hello", "tags": ["t"]}},
        {"artifacts": {}},
        {"artifacts": {"b.txt": ArtifactRef("cd" * 32, 3, "text/plain")}},
        {"artifacts": {"a.txt": ArtifactRef("cd" * 32, 4, "text/plain")}},
        {"artifacts": {"a.txt": ArtifactRef("cd" * 32, 3, "text/x-cuda")}},
    ],
    ids=lambda change: "-".join(change),
)
def test_every_field_changes_the_id(change: dict[str, object]) -> None:
    """Each hashed field contributes to the id."""
    assert _envelope(**change).id != _envelope().id


def test_id_independent_of_dict_insertion_order() -> None:
    """Payload and request keys in another insertion order give the same id."""
    a = _envelope(payload={"text": "x", "tags": []}, request={"b": 1, "a": 2})
    b = _envelope(payload={"tags": [], "text": "x"}, request={"a": 2, "b": 1})
    assert a.id == b.id


def test_build_envelope_id_recomputes_and_bytes_are_canonical() -> None:
    """The store's builder places the draft and computes the same id as compute_event_id; the
    stored bytes are canonical and decode back to the envelope."""
    draft = EventDraft(
        "NoteRecorded",
        {"tags": ["b"], "text": "hi"},
        "tester",
        request={"z": 1.5, "a": [1, 2]},
        idempotency_key="k",
        artifacts={"f.bin": Artifact(b"\x00\x01", "application/octet-stream")},
        ts=TS,
    )
    built = build_envelope(draft, [PARENT], 7)
    envelope = built.envelope
    assert compute_event_id(envelope) == envelope.id
    assert is_canonical(built.data)
    assert built.data == encode_envelope(envelope)
    assert decode_envelope(built.data) == envelope
    assert (envelope.parents, envelope.lamport, envelope.schema) == ((PARENT,), 7, 1)
    assert envelope.ts == "2024-05-17T12:30:45.123456Z"
    assert built.seconds == int(TS.timestamp())
    ref = envelope.artifacts["f.bin"]
    assert ref.blake3 == blake3.blake3(b"\x00\x01").hexdigest() and ref.size == 2
    assert built.blobs == {ref.blake3: b"\x00\x01"}
    again = build_envelope(draft, [PARENT], 7)
    assert again.data == built.data  # deterministic for a fixed timestamp


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)  # fmt: skip


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    request=_json,
    text=st.text(max_size=20),
    tags=st.lists(st.text(max_size=5), max_size=3),
    key=st.none() | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=10),
    lamport=st.integers(1, 2**40),
    blobs=st.dictionaries(st.sampled_from(["a.txt", "b.bin", "k.cu"]), st.binary(max_size=8), max_size=2),
)  # fmt: skip
def test_build_envelope_bytes_are_the_canonical_encoding_of_the_whole_envelope(
    request: object, text: str, tags: list[str], key: str | None, lamport: int,
    blobs: dict[str, bytes],
) -> None:  # fmt: skip
    """build_envelope encodes the envelope in two halves around ``id``: the result must be
    byte-for-byte the canonical encoding of the whole envelope, and its id compute_event_id's."""
    draft = EventDraft(
        "NoteRecorded", {"text": text, "tags": tags}, "tester", request=request,
        idempotency_key=key, ts=TS,
        artifacts={n: Artifact(b, "application/octet-stream") for n, b in blobs.items()},
    )  # fmt: skip
    built = build_envelope(draft, [PARENT], lamport)
    assert built.data == canonical_bytes(msgspec.to_builtins(built.envelope))
    assert compute_event_id(built.envelope) == built.envelope.id


def test_build_envelope_sorts_parents() -> None:
    """Parents are stored sorted, so the same heads give the same id in any order."""
    other = "01" * 32
    draft = EventDraft("NoteRecorded", {"text": "x", "tags": []}, "t", ts=TS)
    a = build_envelope(draft, [PARENT, other], 5).envelope
    b = build_envelope(draft, [other, PARENT], 5).envelope
    assert a.parents == (other, PARENT)
    assert a.id == b.id


# ------------------------------------------------------------------------------- encoding


def test_encode_decode_round_trip() -> None:
    """encode_envelope gives canonical bytes that decode_envelope turns back into the same."""
    envelope = _envelope()
    data = encode_envelope(envelope)
    assert is_canonical(data)
    assert decode_envelope(data) == envelope
    assert data.startswith(b'{"actor":"tester","artifacts":{"a.txt":{')


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"schema":1}',
    ],
)
def test_decode_envelope_rejects_malformed(data: bytes) -> None:
    """Bytes that are not an envelope are a BadRequest."""
    with pytest.raises(BadRequest):
        decode_envelope(data)


def test_decode_envelope_rejects_unknown_fields() -> None:
    """An envelope with an extra field is refused (closed schema)."""
    data = msgspec.to_builtins(_envelope())
    data["extra"] = 1
    with pytest.raises(BadRequest, match="extra"):
        decode_envelope(canonical_bytes(data))
    data = msgspec.to_builtins(_envelope())
    data["artifacts"]["a.txt"]["sneaky"] = True
    with pytest.raises(BadRequest):
        decode_envelope(canonical_bytes(data))


# ------------------------------------------------------------------------------- timestamps


def test_format_ts_is_utc_with_microseconds() -> None:
    """Any aware time is written in UTC with exactly six fractional digits and ``Z``."""
    plus2 = timezone(timedelta(hours=2))
    assert format_ts(datetime(2024, 1, 1, 2, 0, tzinfo=plus2)) == "2024-01-01T00:00:00.000000Z"
    assert format_ts(TS) == "2024-05-17T12:30:45.123456Z"
    assert parse_ts(format_ts(TS)) == TS


def test_format_ts_refuses_naive() -> None:
    """A naive datetime has no defined instant: refused."""
    with pytest.raises(BadRequest):
        format_ts(datetime(2024, 1, 1))


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-17T12:30:45Z",
        "2024-05-17T12:30:45.123Z",
        "2024-05-17T12:30:45.123456+00:00",
        "2024-05-17 12:30:45.123456Z",
        "2024-05-17T12:30:45.123456",
    ],
)
def test_parse_ts_refuses_other_forms(text: str) -> None:
    """Only the one canonical timestamp form is accepted."""
    with pytest.raises(BadRequest):
        parse_ts(text)


# ------------------------------------------------------------------------------- field checks


def test_valid_envelope_passes_field_validation() -> None:
    """The reference envelope is well formed."""
    validate_envelope_fields(_envelope())


@pytest.mark.parametrize(
    "change",
    [
        {"id": "AB" * 32},
        {"id": "ab" * 31},
        {"parents": ("xyz",)},
        {"parents": (PARENT, PARENT)},
        {"parents": ("ff" * 32, "00" * 32)},
        {"lamport": 0},
        {"schema": 0},
        {"ts": "2024-05-17T12:30:45Z"},
        {"actor": ""},
        {"actor": "a\nb"},
        {"actor": "x <y>"},
        {"idempotency_key": "with space"},
        {"idempotency_key": ""},
        {"artifacts": {"../x": ArtifactRef("cd" * 32, 1, "text/plain")}},
        {"artifacts": {"a": ArtifactRef("nothex", 1, "text/plain")}},
        {"artifacts": {"a": ArtifactRef("cd" * 32, -1, "text/plain")}},
        {"artifacts": {"a": ArtifactRef("cd" * 32, 1, "")}},
    ],
    ids=lambda change: "-".join(f"{k}={v!r}"[:40] for k, v in change.items()),
)
def test_malformed_fields_refused(change: dict[str, object]) -> None:
    """Every malformed field is a BadRequest naming what is wrong."""
    envelope = msgspec.structs.replace(_envelope(), **change)
    with pytest.raises(BadRequest):
        validate_envelope_fields(envelope)
