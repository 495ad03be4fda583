"""How one event becomes git objects, and how a commit is read back (SPEC.md section 2).

Each event is one commit whose tree holds ``event.json`` (the canonical envelope) and, when the
event has attachments, ``artifacts/<blake3-hex>`` blobs. The commit message is
``<kind>: <summary>`` then a blank line and the trailers ``Event-Id:``, ``Lamport:`` and, when the
event has one, ``Idempotency-Key:``. The trailers let the store index a ledger from commits alone,
without reading every tree; ``verify`` checks them against the envelope.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from perfledger.errors import IntegrityError
from perfledger.events.envelope import Envelope
from perfledger.events.limits import LEDGER_LIMITS_HINT, MAX_COMMIT_BYTES, MAX_PARENTS
from perfledger.ledger.base import BuiltEvent
from perfledger.ledger.gitobj import RawObject, make_blob, make_commit, make_tree
from perfledger.ledger.layout import ARTIFACTS_DIR, EVENT_FILE

#: Email written for every actor: git wants one, perfledger identifies actors by name only.
ACTOR_EMAIL = b"perfledger"
#: Characters of a payload's summary kept in a commit's subject.
_SUMMARY_MAX = 100


def commit_message(envelope: Envelope, summary: str = "") -> bytes:
    """Return the commit message of ``envelope``: ``<kind>: <summary>`` on one line (the summary
    cut short), a blank line, its trailers."""
    summary = " ".join(summary.split())[:_SUMMARY_MAX]
    lines = [
        f"{envelope.kind}: {summary}" if summary else envelope.kind,
        "",
        f"Event-Id: {envelope.id}",
        f"Lamport: {envelope.lamport}",
    ]
    if envelope.idempotency_key is not None:
        lines.append(f"Idempotency-Key: {envelope.idempotency_key}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def actor_ident(actor: str) -> bytes:
    """Return the git identity ``<actor> <perfledger>`` used as author and committer."""
    return actor.encode("utf-8") + b" <" + ACTOR_EMAIL + b">"


def build_event_objects(
    built: BuiltEvent, parent_commits: list[bytes]
) -> tuple[RawObject, list[RawObject]]:
    """Build the blob(s), tree(s) and commit of one event on ``parent_commits`` (hex shas).
    Returns: (the commit, every object to write, commit last)."""
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
    envelope = built.envelope
    who = actor_ident(envelope.actor)
    message = commit_message(envelope, built.summary)
    commit = make_commit(tree.id, parent_commits, who, built.seconds, message)
    objects += [tree, commit]
    return commit, objects


#: The sha of git's empty tree, which every merge commit points at.
EMPTY_TREE = make_tree([])


def build_merge_commit(
    parent_commits: list[bytes], parent_heads: tuple[str, ...], actor: str, seconds: int
) -> RawObject:
    """Build a merge commit joining ``parent_commits``: the empty tree, no trailers, a
    ``Joins:`` line per event head."""
    joins = "".join(f"\nJoins: {h}" for h in parent_heads)
    message = f"Merge divergent ledger heads\n{joins}\n".encode()
    return make_commit(EMPTY_TREE.id, parent_commits, actor_ident(actor), seconds, message)


_TRAILER_LINE = re.compile(rb"^(Event-Id|Lamport|Idempotency-Key): (.+)$", re.MULTILINE)


def is_decimal(text: str) -> bool:
    """True when ``text`` is one or more ASCII digits (``str.isdigit`` alone also accepts
    superscripts and other scripts' digits, which ``int`` then refuses or reads)."""
    return text.isascii() and text.isdigit()


def parse_trailers(message: bytes) -> dict[str, str]:
    """Return the perfledger trailers of a commit message (last paragraph only); a trailer
    that appears twice keeps its first value (``verify`` reports the mismatch it causes)."""
    cut = message.rstrip(b"\n").rfind(b"\n\n")
    if cut < 0:
        return {}
    trailers: dict[str, str] = {}
    for key, value in _TRAILER_LINE.findall(message, cut + 2):
        trailers.setdefault(key.decode(), value.decode("utf-8", "replace"))
    return trailers


class ParsedCommit(NamedTuple):
    """A commit's header fields (binary tree and parent shas, ``Name <email> seconds tz``
    author and committer) and its message."""

    tree: bytes
    parents: tuple[bytes, ...]
    author: bytes
    committer: bytes
    message: bytes


def check_commit_limits(name: str, size: int, parents: int) -> None:
    """Refuse commit ``name`` (hex) of ``size`` bytes with ``parents`` parents when it is outside
    the storage format's limits (events.limits: ``MAX_COMMIT_BYTES``, ``MAX_PARENTS``).
    Raises: IntegrityError naming the commit, with the hint for a forged ledger."""
    if size > MAX_COMMIT_BYTES or parents > MAX_PARENTS:
        raise IntegrityError(
            f"commit {name} has {parents} parents in {size} bytes, outside the storage format's "
            f"limits (at most {MAX_PARENTS} parents and {MAX_COMMIT_BYTES} bytes)",
            commit=name,
            hint=LEDGER_LIMITS_HINT,
        )


def parse_commit(sha: bytes, raw: bytes) -> ParsedCommit:
    """Parse a commit's raw content (``sha``, binary or hex bytes, only names it in errors).
    Raises: IntegrityError when it has no message or a malformed tree/parent line, or is
        outside the storage format's limits (size, parents).
    """
    name = sha.decode() if len(sha) == 40 else sha.hex()
    check_commit_limits(name, len(raw), 0)
    header, sep, message = raw.partition(b"\n\n")
    if not sep:
        raise IntegrityError(f"commit {name} has no message", commit=name)
    tree = b""
    parent_list: list[bytes] = []
    author = committer = b""
    for line in header.split(b"\n"):
        if line.startswith(b" "):
            continue  # continuation of a multi-line header (e.g. a signature)
        key, _, value = line.partition(b" ")
        if key == b"tree":
            tree = value
        elif key == b"parent":
            parent_list.append(value)
        elif key == b"author":
            author = value
        elif key == b"committer":
            committer = value
    check_commit_limits(name, len(raw), len(parent_list))
    if len(tree) != 40 or any(len(p) != 40 for p in parent_list):
        raise IntegrityError(f"commit {name} has a malformed header", commit=name)
    return ParsedCommit(
        bytes.fromhex(tree.decode()),
        tuple(bytes.fromhex(p.decode()) for p in parent_list),
        author,
        committer,
        message,
    )


def split_ident(value: bytes) -> tuple[bytes, int]:
    """Split ``Name <email> 1700000000 +0000`` into (``Name <email>``, seconds)."""
    ident, _, rest = value.rpartition(b"> ")
    seconds, _, _tz = rest.partition(b" ")
    return ident + b">", int(seconds) if seconds.isdigit() else -1


def event_trailers(message: bytes) -> tuple[str | None, int, str | None]:
    """(Event-Id, Lamport, Idempotency-Key) of a commit message, not yet verified: the event id
    is None for a merge commit, the Lamport clock 0 when absent and -1 when malformed."""
    trailers = parse_trailers(message)
    lamport_text = trailers.get("Lamport", "0")
    lamport = int(lamport_text) if is_decimal(lamport_text) else -1
    return trailers.get("Event-Id"), lamport, trailers.get("Idempotency-Key")
