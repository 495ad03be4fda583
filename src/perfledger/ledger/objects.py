"""How one event becomes git objects, and how a commit is read back (SPEC.md section 2).

Each event is one commit whose tree holds ``event.json`` (the canonical envelope) and, when the
event has attachments, ``artifacts/<blake3-hex>`` blobs. The commit message is
``<kind>: <summary>`` then a blank line and the trailers ``Event-Id:``, ``Lamport:`` and, when the
event has one, ``Idempotency-Key:``. The trailers let the store index a ledger from commits alone,
without reading every tree; ``verify`` checks them against the envelope.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfledger.events.envelope import Envelope
from perfledger.ledger import layout
from perfledger.ledger.base import BuiltEvent
from perfledger.ledger.gitobj import RawObject, make_blob, make_commit, make_tree

if TYPE_CHECKING:
    from dulwich.objects import Commit

#: Name of the envelope blob in each event commit's tree.
EVENT_FILE = layout.EVENT_FILE
#: Name of the subtree that holds artifact blobs, each named by its blake3 hex.
ARTIFACTS_DIR = layout.ARTIFACTS_DIR
#: Email written for every actor: git wants one, perfledger identifies actors by name only.
ACTOR_EMAIL = b"perfledger"
_SUMMARY_MAX = 100


@dataclass(frozen=True)
class CommitInfo:
    """What the store needs from a commit without reading its tree.

    Attributes:
        sha: commit hex sha (bytes, 40 chars).
        parents: parent commit shas.
        event_id: the ``Event-Id`` trailer, None for a merge commit (which carries no event).
        lamport: the ``Lamport`` trailer (0 for a merge commit).
        idempotency_key: the ``Idempotency-Key`` trailer, if any.
        tree: the tree sha.
        message: the raw commit message.
    """

    sha: bytes
    parents: tuple[bytes, ...]
    event_id: str | None
    lamport: int
    idempotency_key: str | None
    tree: bytes
    message: bytes


def summary_line(kind: str, summary: str) -> str:
    """Return ``<kind>: <summary>`` on one line, the summary cut to ~100 characters."""
    summary = " ".join(summary.split())[:_SUMMARY_MAX]
    return f"{kind}: {summary}" if summary else kind


def commit_message(envelope: Envelope, summary: str = "") -> bytes:
    """Return the commit message of ``envelope`` with its trailers."""
    lines = [
        summary_line(envelope.kind, summary),
        "",
        f"Event-Id: {envelope.id}",
        f"Lamport: {envelope.lamport}",
    ]
    if envelope.idempotency_key is not None:
        lines.append(f"Idempotency-Key: {envelope.idempotency_key}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def merge_message(parent_heads: tuple[str, ...]) -> bytes:
    """Return the message of a merge commit (it carries no event and no trailers)."""
    return (
        "Merge divergent ledger heads\n\n" + "\n".join(f"Joins: {h}" for h in parent_heads) + "\n"
    ).encode()


def actor_ident(actor: str) -> bytes:
    """Return the git identity ``<actor> <perfledger>`` used as author and committer."""
    return actor.encode("utf-8") + b" <" + ACTOR_EMAIL + b">"


def build_event_objects(
    built: BuiltEvent, parent_commits: list[bytes]
) -> tuple[RawObject, list[RawObject]]:
    """Build the blob(s), tree(s) and commit of one event.

    Args:
        built: the placed event with its canonical bytes and artifact blobs.
        parent_commits: the commit shas (hex bytes) the event is appended on.
    Returns: (the commit, every object to write, commit last).
    """
    tree, objects = build_event_tree(built)
    commit = build_event_commit(built, tree.id, parent_commits)
    objects.append(commit)
    return commit, objects


def build_event_tree(built: BuiltEvent) -> tuple[RawObject, list[RawObject]]:
    """Build the blob(s) and tree(s) of one event, which depend on nothing but the event.

    Returns: (its root tree, every blob and tree to write, the root tree last).
    """
    event_blob = make_blob(built.data)
    objects = [event_blob]
    dirs: list[tuple[bytes, bytes]] = []
    if built.blobs:
        art_files = []
        for digest in sorted(built.blobs):
            blob = make_blob(built.blobs[digest])
            objects.append(blob)
            art_files.append((digest.encode("ascii"), blob.id))
        art_tree = make_tree(art_files)
        objects.append(art_tree)
        dirs.append((ARTIFACTS_DIR, art_tree.id))
    tree = make_tree([(EVENT_FILE, event_blob.id)], dirs)
    objects.append(tree)
    return tree, objects


def build_event_commit(built: BuiltEvent, tree: bytes, parent_commits: list[bytes]) -> RawObject:
    """Build the commit of one event whose root tree is ``tree`` (hex sha, bytes), appended on
    ``parent_commits`` (hex shas): what chains the events' commits together."""
    envelope = built.envelope
    return make_commit(
        tree,
        parent_commits,
        actor_ident(envelope.actor),
        built.seconds,
        commit_message(envelope, built.summary),
    )


#: The sha of git's empty tree, which every merge commit points at.
EMPTY_TREE = make_tree([])


def build_merge_commit(
    parent_commits: list[bytes], parent_heads: tuple[str, ...], actor: str, seconds: int
) -> RawObject:
    """Build a merge commit joining ``parent_commits``; it carries no event (empty tree)."""
    return make_commit(
        EMPTY_TREE.id, parent_commits, actor_ident(actor), seconds, merge_message(parent_heads)
    )


_TRAILER_LINE = re.compile(rb"^(Event-Id|Lamport|Idempotency-Key): (.+)$", re.MULTILINE)


def is_decimal(text: str) -> bool:
    """True when ``text`` is one or more ASCII digits (``str.isdigit`` alone also accepts
    superscripts and other scripts' digits, which ``int`` then refuses or reads)."""
    return text.isascii() and text.isdigit()


def parse_trailers(message: bytes) -> dict[str, str]:
    """Return the perfledger trailers of a commit message (last paragraph only).

    A trailer that appears twice keeps its first value; ``verify`` reports the mismatch it
    causes.
    """
    cut = message.rstrip(b"\n").rfind(b"\n\n")
    if cut < 0:
        return {}
    trailers: dict[str, str] = {}
    for key, value in _TRAILER_LINE.findall(message, cut + 2):
        trailers.setdefault(key.decode(), value.decode("utf-8", "replace"))
    return trailers


@dataclass(frozen=True)
class RawCommit:
    """A commit parsed from its raw content, with the attributes of dulwich's ``Commit`` that
    perfledger reads (so :func:`commit_info` takes either).

    Attributes:
        id: hex sha (bytes). tree: tree hex sha. parents: parent hex shas.
        author / committer: ``Name <email>`` (bytes). commit_time: committer time, seconds
        since the epoch. message: the raw message.
    """

    id: bytes
    tree: bytes
    parents: tuple[bytes, ...]
    author: bytes
    committer: bytes
    commit_time: int
    message: bytes


def parse_commit(sha: bytes, raw: bytes) -> RawCommit:
    """Parse a commit's raw content (headers, blank line, message); ``sha`` is its hex sha.
    Unknown and continuation header lines (a signature) are skipped.
    Raises: ValueError for a committer line without a time."""
    header, _, message = raw.partition(b"\n\n")
    tree = author = committer = b""
    parents: list[bytes] = []
    commit_time = 0
    for line in header.split(b"\n"):
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value
        elif key == b"parent":
            parents.append(value)
        elif key == b"author":
            author = value.rsplit(b" ", 2)[0]
        elif key == b"committer":
            who, seconds, _zone = value.rsplit(b" ", 2)
            committer, commit_time = who, int(seconds)
    return RawCommit(sha, tree, tuple(parents), author, committer, commit_time, message)


def event_trailers(message: bytes) -> tuple[str | None, int, str | None]:
    """(Event-Id, Lamport, Idempotency-Key) of a commit message, not yet verified: the event id
    is None for a merge commit, the Lamport clock 0 when absent and -1 when malformed."""
    trailers = parse_trailers(message)
    lamport_text = trailers.get("Lamport", "0")
    lamport = int(lamport_text) if is_decimal(lamport_text) else -1
    return trailers.get("Event-Id"), lamport, trailers.get("Idempotency-Key")


def commit_info(commit: Commit | RawCommit) -> CommitInfo:
    """Extract a :class:`CommitInfo` from a parsed commit (trailers not yet verified)."""
    event_id, lamport, key = event_trailers(commit.message)
    return CommitInfo(
        sha=commit.id,
        parents=tuple(commit.parents),
        event_id=event_id,
        lamport=lamport,
        idempotency_key=key,
        tree=commit.tree,
        message=commit.message,
    )
