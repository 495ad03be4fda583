"""What changed since the last local head (for ``perfledger resume`` and the
``pull`` summary): the record of the last pull or clone that brought events, and the events
reachable from one head and not from another, in the total order."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.envelope import Envelope
from perfledger.ledger import layout
from perfledger.ledger.cache import write_derived
from perfledger.ledger.store import GitStore

if TYPE_CHECKING:
    from perfledger.ledger.sync import PullResult

_LAST_PULL_FILE = layout.LAST_PULL_FILE


class LastPull(msgspec.Struct):
    """The record of the last pull or clone that brought events (derived data,
    ``<gitdir>/perfledger/``; a pull that found nothing new leaves it as it was).

    Attributes:
        remote, url: where from; before, after: the local head around it (hex; before is empty
        after a clone); action: as :attr:`PullResult.action`; at: UTC time (ISO 8601).
    """

    remote: str
    url: str
    before: str
    after: str
    action: str
    at: str


def record_pull(store: GitStore, result: PullResult) -> None:
    """Write the record of a pull or clone that brought events (best effort: derived data)."""
    record = LastPull(
        result.remote,
        result.url,
        result.before,
        result.after,
        result.action,
        datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    with contextlib.suppress(OSError):
        write_derived(os.path.join(store.derived_dir, _LAST_PULL_FILE), msgspec.json.encode(record))


def last_pull(store: GitStore) -> LastPull | None:
    """Return the record of this ledger's last pull or clone, or None (never pulled)."""
    try:
        with open(os.path.join(store.derived_dir, _LAST_PULL_FILE), "rb") as f:
            return msgspec.json.decode(f.read(), type=LastPull)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def changes_since(
    store: GitStore, old_head: str | None, new_head: str | None = None
) -> list[Envelope]:
    """Return the events reachable from ``new_head`` (default: the current head) that are not
    reachable from ``old_head`` (hex; None or empty: every event), in the total order
    (lamport, id). This is "what changed since the last local head" after a pull (for
    ``perfledger resume``: pass :attr:`LastPull.before`).

    Raises: BadRequest when ``old_head`` is not a commit of this ledger.
    """
    head = (new_head or store.read_head().decode()).encode()
    known: set[bytes] = set()
    if old_head:
        try:
            store.commit_node(old_head.encode())
        except IntegrityError:
            raise BadRequest(f"{old_head} is not a commit of this ledger") from None
        stack = [old_head.encode()]
        while stack:
            sha = stack.pop()
            if sha in known:
                continue
            known.add(sha)
            stack.extend(store.commit_node(sha).parents)
    found: list[tuple[int, str, bytes]] = []
    stack, seen = [head], set()
    while stack:
        sha = stack.pop()
        if sha in seen or sha in known:
            continue
        seen.add(sha)
        node = store.commit_node(sha)
        if node.event_id is not None:
            found.append((node.lamport, node.event_id, sha))
        stack.extend(node.parents)
    found.sort()
    return [store.read_envelope(sha) for _, _, sha in found]


def changes_since_last_pull(store: GitStore) -> tuple[LastPull | None, list[Envelope]]:
    """Return (the last pull's record, the events new since the local head before it); the
    events are empty when this ledger was never pulled or cloned."""
    record = last_pull(store)
    if record is None:
        return None, []
    return record, changes_since(store, record.before or None, record.after)


__all__ = ["LastPull", "changes_since", "changes_since_last_pull", "last_pull", "record_pull"]
