"""One event shown and a free-form note recorded (``perfledger show EVENT``, ``perfledger note``;
SPEC.md section 6).

:func:`show_event` finds an event by its full id, a unique prefix of at least 4 characters,
``HEAD`` (the newest event) or the git sha (or prefix) of the ledger commit that carries it; a
merge commit carries none and is refused. :func:`record_note` appends a ``NoteRecorded``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from perfledger.commands.workflow.commit_lookup import find_commit
from perfledger.errors import AmbiguousId, BadRequest


class EventShown(msgspec.Struct, kw_only=True):
    """An event found: its ``envelope`` and, where it was found by a commit sha, that commit."""

    envelope: Any
    commit: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``perfledger show --json``'s answer: ``{"event", "commit"?}`` (builtins)."""
        event = msgspec.to_builtins(self.envelope)
        return {"event": event, **({"commit": self.commit} if self.commit else {})}


def show_event(ledger: Any, event_id: str) -> EventShown:
    """The event ``event_id`` names on the open ``ledger`` (module docstring).

    Raises: AmbiguousId (exit 2: a prefix of several events, never read as a commit sha);
        BadRequest (exit 2: no such event or commit; a merge commit, which carries no event)."""
    if event_id.upper() == "HEAD":
        event_id = ledger.log(1)[0].event_id
    try:
        return EventShown(envelope=ledger.get(event_id))
    except AmbiguousId:
        raise
    except BadRequest as exc:
        commit = find_commit(ledger.store, event_id)
        if commit is None:
            exc.hint = exc.hint or (
                "give an event id (`perfledger log`) or a ledger commit sha (`git log ledger`)"
            )
            raise
        if commit.event_id is None:
            raise BadRequest(
                f"commit {commit.commit} is a merge commit (it joins "
                f"{', '.join(p[:12] for p in commit.parents)}): it carries no event",
                hint="show one of its parents, or list events with `perfledger log`",
            ) from None
        return EventShown(envelope=ledger.get(commit.event_id), commit=commit.commit)


class Note(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A free-form note (an observation, friction, feedback) with its labels, ``actor`` who
    records it and an optional retry-safe ``idempotency_key``."""

    text: str
    tags: list[str] = []
    actor: str
    idempotency_key: str | None = None


class NoteRecorded(msgspec.Struct, kw_only=True):
    """The ``NoteRecorded`` event appended: its id and Lamport clock."""

    event_id: str
    lamport: int


def record_note(note: Note, *, open_ledger: Callable[[], Any]) -> NoteRecorded:
    """Append ``note`` as a ``NoteRecorded`` (the ledger opened once the note is checked, closed
    before returning). Raises: BadRequest (exit 2) for a note without text; ConcurrentAppend."""
    if not note.text.strip():
        raise BadRequest("a note needs text", hint='perfledger note "what you observed"')
    fields = {"text": note.text, "tags": list(note.tags)}
    ledger = open_ledger()
    try:
        envelope = ledger.append(
            "NoteRecorded", fields, actor=note.actor, request=dict(fields),
            idempotency_key=note.idempotency_key,
        )  # fmt: skip
    finally:
        ledger.close()
    return NoteRecorded(event_id=envelope.id, lamport=envelope.lamport)


def event_of(ledger: Any, event: str) -> Any:
    """The envelope ``event`` names on the open ``ledger``: HEAD (the newest event), a full id
    or a unique prefix. Raises: AmbiguousId, BadRequest (exit 2) for no such event."""
    if event.upper() == "HEAD":
        event = ledger.log(1)[0].event_id
    return ledger.get(event)


class ArtifactRow(msgspec.Struct, frozen=True):
    """One artifact of an event: its ``name``, ``size`` in bytes, ``media_type`` and
    ``blake3``."""

    name: str
    size: int
    media_type: str
    blake3: str


class Artifacts(msgspec.Struct, frozen=True):
    """The artifacts of the event ``event_id``, by name (``perfledger artifact list``)."""

    event_id: str
    artifacts: list[ArtifactRow]


def artifacts_of(ledger: Any, event: str) -> Artifacts:
    """The artifacts attached to ``event`` (:func:`event_of`) on the open ``ledger``, sorted by
    name. Raises: AmbiguousId, BadRequest (exit 2) for no such event."""
    envelope = event_of(ledger, event)
    rows = [
        ArtifactRow(name, ref.size, ref.media_type, ref.blake3)
        for name, ref in sorted(envelope.artifacts.items())
    ]
    return Artifacts(envelope.id, rows)


def artifact_of(ledger: Any, event: str, name: str) -> tuple[str, bytes]:
    """``(event id, bytes)`` of artifact ``name`` of ``event`` on the open ``ledger``, checked
    against its blake3 and size on the way out. Raises: BadRequest (exit 2) for no such event
    or artifact; IntegrityError (exit 5) for a mismatch."""
    envelope = event_of(ledger, event)
    if name not in envelope.artifacts:
        names = ", ".join(sorted(envelope.artifacts)) or "none"
        raise BadRequest(
            f"event {envelope.id[:12]} has no artifact {name!r}",
            hint=f"its artifacts: {names} (`perfledger artifact list {envelope.id[:12]}`)",
        )
    return envelope.id, ledger.artifact(envelope.id, name)


class ArtifactGet(msgspec.Struct, frozen=True, kw_only=True):
    """``perfledger artifact get``: artifact ``name`` of ``event`` (HEAD, an event id or a unique
    prefix), written to the file ``output`` or handed back (``output`` None); ``json``: the
    caller answers in JSON, which the artifact's bytes are not, so it needs ``output``."""

    event: str
    name: str
    output: str | None = None
    json: bool = False


class ArtifactGot(msgspec.Struct, frozen=True, kw_only=True):
    """An artifact got: its event, name and size in bytes; ``path`` where it was written, else
    ``data``, its bytes."""

    event_id: str
    name: str
    size: int
    path: str | None = None
    data: bytes | None = None


def get_artifact(request: ArtifactGet, *, open_ledger: Callable[[], Any]) -> ArtifactGot:
    """Artifact ``request.name`` of ``request.event`` (:func:`artifact_of`), checked against its
    blake3 and size, written to ``request.output`` or returned as bytes.

    Raises: BadRequest (exit 2) for ``json`` without ``output`` (checked before the ledger is
    opened), no such event or artifact, or an ``output`` that cannot be written; IntegrityError
    (exit 5) for a mismatch."""
    if request.json and request.output is None:
        raise BadRequest(
            "--json needs -o FILE (the artifact's bytes are not JSON)",
            hint="add -o FILE: the artifact is written there and the JSON answer names it",
        )
    ledger = open_ledger()
    try:
        event_id, data = artifact_of(ledger, request.event, request.name)
    finally:
        ledger.close()
    if request.output is None:
        return ArtifactGot(event_id=event_id, name=request.name, size=len(data), data=data)
    try:
        with open(request.output, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise BadRequest(
            f"cannot write {request.output!r}: {exc.strerror or exc}",
            hint="name a writable path for -o",
        ) from None
    return ArtifactGot(event_id=event_id, name=request.name, size=len(data), path=request.output)


__all__ = [
    "ArtifactGet",
    "ArtifactGot",
    "ArtifactRow",
    "Artifacts",
    "EventShown",
    "Note",
    "NoteRecorded",
    "artifact_of",
    "artifacts_of",
    "event_of",
    "get_artifact",
    "record_note",
    "show_event",
]
