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


__all__ = ["EventShown", "Note", "NoteRecorded", "record_note", "show_event"]
