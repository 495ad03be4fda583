"""Verify's pass 1 in parallel: every packed commit read, re-hashed and parsed by worker processes.

Why: pass 1 walks the commit graph from the head, and each step needs the commit it reached
(its parents say where to go next), so it cannot be split as the walk goes. It took ~45 % of a
cold verify of 100,000 events on 2 CPUs (6.7 s of 14.6 s, one CPU busy, the other idle). The
work of a step is mostly reading, inflating, re-hashing and parsing one commit, which does not
depend on the walk: workers do it for every commit entry of the packs, in pack order (sequential
reads), and the walk then only looks the parsed commits up.

Nothing is trusted that a reader would have refused: a commit entry whose content does not hash
to its name, a delta entry, a pack in a layout this module does not map, or any entry a worker
cannot read is simply left out, and the walk reads that commit itself through the checking
:class:`~perfledger.ledger.reader.ObjectReader`, which reports it exactly as in one process.
Loose commits (recent single appends) are read by the walk too.
"""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from binascii import unhexlify
from collections.abc import Callable
from typing import Any, NamedTuple

from perfledger.errors import IntegrityError
from perfledger.events.envelope import is_valid_event_id
from perfledger.ledger.forked import start_forked_workers, stop_workers
from perfledger.ledger.gitobj import inflate
from perfledger.ledger.objects import is_decimal, parse_trailers

#: The empty tree's binary sha (a merge commit's tree).
_EMPTY_TREE = bytes.fromhex("4b825dc642cb6eb9a060e54bf8d69288fbee4904")
#: Pack entries per worker task (about a third are commits).
SCAN_CHUNK_ENTRIES = 30_000
_COMMIT_TYPE = 1


class ParsedCommit(NamedTuple):
    """A commit's header fields and message, as pass 1 and pass 2 of verify read them (a named
    tuple: built ~100,000 times a verify, and sent back by the scan's workers).

    Attributes:
        tree: the tree's binary sha (20 bytes).
        parents: the parents' binary shas.
        author / committer: ``Name <email> seconds tz`` (bytes).
        message: the commit message (bytes).
    """

    tree: bytes
    parents: tuple[bytes, ...]
    author: bytes
    committer: bytes
    message: bytes


class CommitFacts(NamedTuple):
    """What verify checks of an event or merge commit once pass 1 has placed it: its header
    fields, subject and perfledger trailers (a named tuple: one per commit, kept for pass 2).

    Attributes:
        tree: the tree's binary sha (20 bytes).
        parents: the parents' binary shas.
        author / committer: ``Name <email> seconds tz`` (bytes).
        subject: the message's first line (bytes).
        event_id: the ``Event-Id`` trailer (None for a merge commit).
        lamport: the ``Lamport`` trailer's text, digits only ("" for a merge commit).
        idempotency_key: the ``Idempotency-Key`` trailer, or None.
    """

    tree: bytes
    parents: tuple[bytes, ...]
    author: bytes
    committer: bytes
    subject: bytes
    event_id: str | None
    lamport: str
    idempotency_key: str | None


def commit_facts(commit: ParsedCommit, trailers: dict[str, str]) -> CommitFacts:
    """The :class:`CommitFacts` of a parsed commit and its trailers (checked by the caller)."""
    return CommitFacts(
        commit.tree,
        commit.parents,
        commit.author,
        commit.committer,
        commit.message.split(b"\n", 1)[0],
        trailers.get("Event-Id"),
        trailers.get("Lamport", ""),
        trailers.get("Idempotency-Key"),
    )


_COMMIT_FAST = re.compile(
    rb"tree ([0-9a-f]{40})\n((?:parent [0-9a-f]{40}\n)*)author ([^\n]*)\ncommitter ([^\n]*)\n\n"
)


def parse_commit(sha: bytes, raw: bytes) -> ParsedCommit:
    """Parse a commit's raw content (binary ``sha`` only names it in errors).

    Raises: IntegrityError when it has no message or a malformed tree/parent line.
    """
    fast = _COMMIT_FAST.match(raw)
    if fast is not None:  # the layout perfledger writes: one regex match
        parents = fast.group(2)
        tree, parents, author, committer = fast.groups()
        return ParsedCommit(
            unhexlify(tree),
            (unhexlify(parents[7:47]),)
            if len(parents) == 48
            else tuple(unhexlify(parents[i + 7 : i + 47]) for i in range(0, len(parents), 48)),
            author,
            committer,
            raw[fast.end() :],
        )
    header, sep, message = raw.partition(b"\n\n")
    if not sep:
        raise IntegrityError(f"commit {sha.hex()} has no message", commit=sha.hex())
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
    if len(tree) != 40 or any(len(p) != 40 for p in parent_list):
        raise IntegrityError(f"commit {sha.hex()} has a malformed header", commit=sha.hex())
    return ParsedCommit(
        bytes.fromhex(tree.decode()),
        tuple(bytes.fromhex(p.decode()) for p in parent_list),
        author,
        committer,
        message,
    )


#: What a forked worker inherits: per pack, its path and its entries' (offsets, names) in
#: offset order, plus where the entry data ends (set by the parent just before forking).
_INHERITED: list[tuple[str, Any, Any, int]] | None = None


def scan_packed_commits(
    pack_paths: list[str], workers: int, meanwhile: Callable[[], None] | None = None
) -> dict[bytes, CommitFacts]:
    """Read, re-hash, parse and check every commit entry of the packs in ``workers`` forked
    processes: everything pass 1 checks of one commit on its own (a merge carries no event
    trailer and the empty tree and has two or more parents; an event commit has a well-formed
    Event-Id and Lamport trailer and at most one parent); what depends on other commits (a
    duplicate event id, the single root) is left to the walk.

    Args:
        pack_paths: the ``.pack`` files (each with its version-2 ``.idx`` beside it).
        workers: worker processes (at least 2; fork is required).
        meanwhile: called in this process once the work is handed out, while the workers run
            (verify imports what its pass-2 workers need there instead of after the scan).
    Returns: binary sha -> its :class:`CommitFacts`, for every commit entry that was read,
        hashed to its name and passed those checks; anything else is left out (see the module
        docstring), never reported from here.
    """
    from concurrent.futures import as_completed

    global _INHERITED
    plans: list[tuple[str, Any, Any, int]] = []
    for path in pack_paths:
        plan = _plan(path)
        if plan is not None:
            plans.append(plan)
    tasks = [
        (number, start, min(start + SCAN_CHUNK_ENTRIES, len(plan[1])))
        for number, plan in enumerate(plans)
        for start in range(0, len(plan[1]), SCAN_CHUNK_ENTRIES)
    ]
    found: dict[bytes, CommitFacts] = {}
    if not tasks:
        return found
    _INHERITED = plans
    try:
        pool = start_forked_workers(workers)
    finally:
        _INHERITED = None
    try:
        futures = [pool.submit(_scan_task, task) for task in tasks]
        if meanwhile is not None:
            meanwhile()
        for future in as_completed(futures):
            for row in future.result():  # plain tuples: a third of a named tuple's unpickling
                found[row[0]] = CommitFacts._make(row[1:])
    finally:
        stop_workers(pool)
    return found


def _plan(path: str) -> tuple[str, Any, Any, int] | None:
    """A pack's entries in offset order: (path, offsets, binary names, end of entry data);
    None for a pack this module does not map (it is read by the walk instead)."""
    import numpy as np

    from perfledger.ledger.packindex import read_index

    try:
        index = read_index(path[: -len(".pack")] + ".idx")
        size = os.path.getsize(path)
    except OSError:
        return None
    if index is None:
        return None
    entries = index.by_offset()
    return path, entries.offsets.astype(np.int64), entries.names, size - 20


def _scan_task(task: tuple[int, int, int]) -> list[tuple[Any, ...]]:
    """Worker: the commit entries among positions [start, stop) of pack ``number``'s plan, as
    (binary sha, *CommitFacts fields) rows; see the module docstring for what is left out."""
    number, start, stop = task
    plans = _INHERITED
    assert plans is not None
    path, offsets, names, end_of_data = plans[number]
    first = int(offsets[start])
    last = int(offsets[stop]) if stop < len(offsets) else end_of_data
    if not first < last <= end_of_data:
        return []
    with open(path, "rb") as f:
        f.seek(first)
        data = f.read(last - first)
    if len(data) != last - first:  # a truncated pack: the walk reads (and reports) these
        return []
    starts = (offsets[start:stop] - first).tolist()
    shas = names[start:stop].tobytes()  # 20 bytes each (indexing an S20 array drops zeros)
    rows: list[tuple[Any, ...]] = []
    for i, at in enumerate(starts):
        if at >= len(data):  # entries the index places past the pack's data (truncated)
            break
        if (data[at] >> 4) & 0x07 != _COMMIT_TYPE:
            continue
        end = starts[i + 1] if i + 1 < len(starts) else len(data)
        try:
            row = _read_commit(data, at, end, shas[20 * i : 20 * i + 20])
        except (IndexError, ValueError):  # a damaged entry: left to the walk
            continue
        if row is not None:
            rows.append(row)
    return rows


def _read_commit(data: bytes, at: int, end: int, sha: bytes) -> tuple[Any, ...] | None:
    """Inflate, re-hash and parse the commit entry at ``data[at:end]``; None when anything
    about it is off (the walk then reads it through the checking reader)."""
    byte = data[at]
    size = byte & 0x0F
    shift, pos = 4, at + 1
    while byte & 0x80:
        if pos >= end:
            return None
        byte = data[pos]
        size |= (byte & 0x7F) << shift
        shift += 7
        pos += 1
    try:
        raw = inflate(data[pos:end], size)
    except zlib.error:
        return None
    if len(raw) != size:
        return None
    digest = hashlib.sha1(b"commit %d\0" % size)
    digest.update(raw)
    if digest.digest() != sha:
        return None
    try:
        commit = parse_commit(sha, raw)
    except IntegrityError:
        return None
    trailers = parse_trailers(commit.message)
    event_id = trailers.get("Event-Id")
    if event_id is None:  # a merge: no event trailers, the empty tree, two or more parents
        if len(trailers) or len(commit.parents) < 2 or commit.tree != _EMPTY_TREE:
            return None
    else:
        lamport = trailers.get("Lamport", "")
        if not (is_valid_event_id(event_id) and is_decimal(lamport) and len(commit.parents) <= 1):
            return None
    return (
        sha,
        commit.tree,
        commit.parents,
        commit.author,
        commit.committer,
        commit.message.split(b"\n", 1)[0],
        event_id,
        trailers.get("Lamport", ""),
        trailers.get("Idempotency-Key"),
    )
