"""Event kinds: each with a payload schema (a frozen msgspec Struct), a schema version and the
upcasters that lift payloads written by older versions to the current one on read.

Stored bytes are never rewritten: an upcaster runs on every read, so the event id (a hash of what
was stored) still verifies while projections see only current-version payloads.
"""

from __future__ import annotations

from typing import Any

import blake3
import msgspec

from perfledger._version import __version__
from perfledger.errors import BadRequest, IntegrityError, NewerLedger
from perfledger.events.envelope import Envelope
from perfledger.events.kindspec import _REGISTRY, KindSpec, register_kind

_WORKFLOW_LOADED = False


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "the payload must fit its kind's schema: a request's is shown by `perfledger schema OP`"


def _ensure_workflow_kinds() -> None:
    """Register the workflow's, the loop's and the review's kinds (:mod:`perfledger.events.vocabulary`)
    on first use: commands that never decode a workflow payload (``log``, ``--version``) do not
    pay for importing them."""
    global _WORKFLOW_LOADED
    if not _WORKFLOW_LOADED:
        _WORKFLOW_LOADED = True
        import perfledger.events.vocabulary  # noqa: F401, PLC0415 (registers the kinds; off `perfledger log`'s start-up path)


def get_kind(kind: str) -> KindSpec:
    """Return the registered spec of ``kind``.

    Raises: BadRequest when the kind is unknown.
    """
    _ensure_workflow_kinds()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise BadRequest(
            f"unknown event kind {kind!r}",
            hint="known kinds: " + ", ".join(sorted(_REGISTRY)),
        ) from None


def registered_kinds() -> dict[str, KindSpec]:
    """Return a copy of the registry: kind name -> spec."""
    _ensure_workflow_kinds()
    return dict(_REGISTRY)


def kinds_fingerprint() -> str:
    """Return a short hash of every registered kind and its schema version: part of the state
    cache key, so that a new schema version or kind invalidates cached folds."""

    _ensure_workflow_kinds()
    text = ";".join(f"{k}={spec.version}" for k, spec in sorted(_REGISTRY.items()))
    return blake3.blake3(text.encode()).hexdigest()[:16]


def validate_payload(kind: str, payload: Any) -> tuple[Any, dict[str, Any]]:
    """Validate a current-version payload (a Struct of the kind's type, or builtins).

    Returns: (the payload Struct, the payload as builtins ready for canonical encoding).
    Raises: BadRequest naming the kind and the field that does not fit its schema.
    """
    spec = get_kind(kind)
    if isinstance(payload, spec.payload_type):
        struct = payload
    else:
        try:
            struct = msgspec.convert(payload, spec.payload_type, strict=True)
        except msgspec.ValidationError as exc:
            raise BadRequest(f"{kind} payload does not fit its schema: {exc}", hint=_HINT) from exc
    result = msgspec.to_builtins(struct)
    assert isinstance(result, dict)
    return struct, result


def upcast(kind: str, schema: int, payload: dict[str, Any]) -> Any:
    """Lift a stored payload of ``schema`` to the current version and decode it strictly.

    Returns: an instance of the kind's payload Struct.
    Raises: IntegrityError for an unknown kind, a version newer than this code knows, or a
        payload that does not fit its schema after upcasting.
    """
    _ensure_workflow_kinds()
    spec = _REGISTRY.get(kind)
    if spec is None:
        raise NewerLedger(
            f"unknown event kind {kind!r} (this is perfledger {_version()}): a newer perfledger "
            "wrote it; the ledger is read-only here until you upgrade perfledger",
            hint=UPGRADE_HINT,
            kind=kind,
            schema=schema,
        )
    if schema > spec.version:
        raise NewerLedger(
            f"{kind} schema version {schema} is newer than this perfledger knows "
            f"({spec.version}) (this is perfledger {_version()}): a newer perfledger wrote it; "
            "the ledger is read-only here until you upgrade perfledger",
            hint=UPGRADE_HINT,
            kind=kind,
            schema=schema,
        )
    data = payload
    for version in range(schema, spec.version):
        data = spec.upcasters[version](data)
    try:
        return msgspec.convert(data, spec.payload_type, strict=True)
    except msgspec.ValidationError as exc:
        raise IntegrityError(f"{kind} payload (schema {schema}) does not fit: {exc}") from exc


class RecordedEvent(msgspec.Struct, frozen=True):
    """An event read back from a ledger: the envelope as stored and its payload, upcast to the
    current schema version and decoded into the kind's Struct. Projections fold these.

    Attributes:
        envelope: the stored envelope (its ``payload`` field is the stored builtins form).
        payload: the current-version payload Struct.
    """

    envelope: Envelope
    payload: Any

    @property
    def kind(self) -> str:
        """The event kind."""
        return self.envelope.kind

    @property
    def id(self) -> str:
        """The event id."""
        return self.envelope.id


def recorded(envelope: Envelope) -> RecordedEvent:
    """Upcast and decode ``envelope``'s payload; raises IntegrityError as :func:`upcast`
    (NewerLedger naming the event)."""
    try:
        return RecordedEvent(envelope, upcast(envelope.kind, envelope.schema, envelope.payload))
    except NewerLedger as exc:
        raise exc.naming(envelope.id) from None


#: What to do about a ledger written by a newer perfledger (NewerLedger's hint).
UPGRADE_HINT = (
    "upgrade perfledger (pip install --upgrade perfledger) to the version that wrote it; until "
    "then every command that writes refuses this ledger (exit 7), and `perfledger log` still "
    "lists its events"
)


def _version() -> str:
    """This perfledger's version, for the message of a NewerLedger."""
    return __version__


# --- kinds of the ledger core ------------------------------------------------------------


class LedgerInitialized(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Payload of the root event every ledger has exactly one of.

    Attributes:
        name: the ledger's name.
        format_version: the storage format version (:data:`perfledger.ledger.FORMAT_VERSION`).
        creator: who created it.
    """

    name: str
    format_version: int
    creator: str


class NoteRecorded(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A free-form note (observation, friction, feedback); carries no decision.

    Attributes:
        text: the note (Markdown).
        tags: labels for filtering.
    """

    text: str
    tags: tuple[str, ...] = ()


register_kind(
    KindSpec(
        "LedgerInitialized",
        1,
        LedgerInitialized,
        summary=lambda p: f"ledger {p.name!r} (format {p.format_version})",
    )
)
register_kind(
    KindSpec(
        "NoteRecorded",
        1,
        NoteRecorded,
        summary=lambda p: p.text.splitlines()[0][:72] if p.text.strip() else "(empty note)",
    )
)
