"""Verification of commits received from a remote, before any local ref moves.

Only the new commits are checked (those not reachable from the local head, which was verified
when it was written or pulled); they are checked exactly as :mod:`perfledger.ledger.verify`
checks a whole ledger (same per-event function): every object re-hashed against its name, the
commit graph (merges carry no event, an event commit has one parent, no event twice, no second
root), then every new event in the total order: canonical bytes, id, trailers, author and time,
parents = the event heads of the commit it was appended on, Lamport = theirs + 1, schema,
artifacts. Where a new commit stands on local ones, the local commits' structure is read from
git (never from the derived index).

The received objects are held in memory (:class:`IncomingReader`) until they pass; only then are
they written to the object store, so a refused pull leaves the ledger's files untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from perfledger.errors import IntegrityError
from perfledger.events.kinds import RecordedEvent
from perfledger.ledger.dag import CommitNode
from perfledger.ledger.gitobj import RawObject
from perfledger.ledger.reader import ObjectReader

# The per-commit and per-event checks are verify's own (CommitGraph), so that a pull and a
# full verify can never disagree about what a valid event is.
from perfledger.ledger.verify import CommitGraph


class IncomingReader:
    """Objects received from a remote (held in memory, each already hashed from its content by
    the pack reader) in front of the local store's :class:`ObjectReader`.

    Args:
        incoming: binary sha -> (git type number, content).
        base: reader of the local object store, or None (a clone into an empty repository).
    Attributes:
        used: binary shas of the incoming objects read (what the verified commits reference).
    """

    def __init__(self, incoming: dict[bytes, tuple[int, bytes]], base: ObjectReader | None):
        self.incoming = incoming
        self.base = base
        self.used: set[bytes] = set()

    def read(self, sha: bytes, *, check: bool = True) -> tuple[int, bytes]:
        """Return (type number, content) of binary ``sha``; IntegrityError when missing."""
        hit = self.incoming.get(sha)
        if hit is not None:
            self.used.add(sha)
            return hit
        if self.base is None:
            raise IntegrityError(
                f"git object {sha.hex()} is missing from what the remote sent", commit=sha.hex()
            )
        return self.base.read(sha, check=check)

    def read_unchecked(self, sha: bytes) -> tuple[int, bytes] | None:
        """As :meth:`ObjectReader.read_unchecked`."""
        hit = self.incoming.get(sha)
        if hit is not None:
            return hit
        return self.base.read_unchecked(sha) if self.base is not None else None

    def used_objects(self) -> list[RawObject]:
        """Return the incoming objects the verification read, as :class:`RawObject` s."""
        incoming = self.incoming
        return [RawObject(*incoming[sha], sha.hex().encode()) for sha in self.used]


@dataclass
class IncomingReport:
    """What :func:`verify_incoming` checked.

    Attributes:
        tip: the remote head (hex bytes).
        new_commits: hex shas of the commits that were not local (events and merges).
        events: the new events, verified, in the total order (lamport, id).
        merges: new merge commits.
        objects: the received objects the new commits reference (what a pull stores).
        nodes: hex sha -> :class:`CommitNode` (hex parents) of every new commit.
        keys: hex sha -> the Idempotency-Key trailer of new event commits that carry one.
    """

    tip: bytes
    new_commits: list[bytes] = field(default_factory=list)
    events: list[RecordedEvent] = field(default_factory=list)
    merges: int = 0
    objects: list[RawObject] = field(default_factory=list)
    nodes: dict[bytes, CommitNode] = field(default_factory=dict)
    keys: dict[bytes, str] = field(default_factory=dict)


def verify_incoming(
    reader: IncomingReader,
    tip: bytes,
    *,
    is_local: Callable[[bytes], bool],
    has_event: Callable[[str], bool],
    format_version: int,
    clone: bool = False,
) -> IncomingReport:
    """Verify every commit reachable from ``tip`` that is not local.

    Args:
        reader: the incoming objects over the local store.
        tip: the remote head, hex bytes.
        is_local: hex commit sha -> True when it is reachable from the local head (verified).
        has_event: event id -> True when the local ledger holds it (a remote commit carrying a
            local event under another commit is refused: one event, one commit).
        format_version: the storage format this code reads.
        clone: True when there is no local ledger (the new commits must hold exactly one root);
            otherwise no new commit may be a root (a remote of another ledger).
    Returns: an :class:`IncomingReport`.
    Raises: IntegrityError naming the first bad event or commit (nothing was written).
    """
    report = IncomingReport(tip=tip)
    graph = CommitGraph(
        reader,  # type: ignore[arg-type]  (the read interface of ObjectReader)
        bytes.fromhex(tip.decode()),
        is_local=None if clone else (lambda sha: is_local(sha.hex().encode())),
        has_event=None if clone else has_event,
    )
    if clone and len(graph.roots) != 1:
        raise IntegrityError(
            f"the remote ledger has {len(graph.roots)} root commits; exactly one is allowed"
        )
    if not clone and graph.roots:
        raise IntegrityError(
            "the remote holds a different ledger (its history has another root commit)",
            commit=graph.roots[0].hex(),
            hint="pull only from clones of this ledger",
        )
    report.merges = graph.merges
    report.keys = {sha.hex().encode(): key for sha, key in graph.keys.items()}
    report.events = list(graph.check_events(graph.roots[0] if clone else b"", format_version))
    report.new_commits = [sha.hex().encode() for sha in graph.walked]
    report.nodes = {
        sha.hex().encode(): CommitNode(
            node.event_id, node.lamport, tuple(p.hex().encode() for p in node.parents)
        )
        for sha in graph.walked
        if (node := graph.nodes[sha])
    }
    return report


def descends_from(node: Callable[[bytes], CommitNode], ancestor: bytes, tip: bytes) -> bool:
    """True when commit ``ancestor`` is ``tip`` or one of its ancestors (hex bytes).

    The walk back from ``tip`` stops below ``ancestor``'s Lamport clock: clocks strictly
    increase along every edge of a verified ledger, so nothing there can reach it.

    Args:
        node: hex sha -> :class:`CommitNode` (parents as hex bytes).
    """
    if ancestor == tip:
        return True
    lamports: dict[bytes, int] = {}

    def lamport(sha: bytes) -> int:
        todo = [sha]
        while todo:
            current = todo[-1]
            if current in lamports:
                todo.pop()
                continue
            n = node(current)
            if n.event_id is not None:
                lamports[current] = n.lamport
                todo.pop()
                continue
            missing = [p for p in n.parents if p not in lamports]
            if missing:
                todo.extend(missing)
                continue
            lamports[current] = max(lamports[p] for p in n.parents)
            todo.pop()
        return lamports[sha]

    floor = lamport(ancestor)
    stack, seen = [tip], set()
    while stack:
        sha = stack.pop()
        if sha == ancestor:
            return True
        if sha in seen:
            continue
        seen.add(sha)
        n = node(sha)
        if n.event_id is not None and n.lamport <= floor:
            continue
        if n.event_id is None and lamport(sha) < floor:
            continue
        stack.extend(n.parents)
    return False


__all__ = ["IncomingReader", "IncomingReport", "descends_from", "verify_incoming"]
