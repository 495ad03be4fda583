"""End-to-end verification of a ledger, from the ref down to every byte (SPEC.md s. 2).

Checked, in this order, stopping at the first failure (reported with the event and the reason):

1. the format version in the repository config; the ledger ref exists; git shows the
   repository's own objects (no ``refs/replace/``, no ``info/grafts``) and all of them (not a
   shallow or partial clone);
2. every commit reachable from the head: a commit, its trailers well formed; merge commits
   carry no event (no trailers, at least two parents, the empty tree); event commits have at
   most one parent; exactly one root;
3. every event, in the total order (lamport, id): every git object re-hashed against its name;
   the tree holds exactly ``event.json`` (mode 100644) and, when there are attachments,
   ``artifacts/`` (a tree of regular non-executable blobs, mode 100644, named by their blake3);
   every tree parses strictly (a zero-padded mode, a name listed twice, entries out of git's
   order, any other malformed entry is an integrity failure naming the event); ``event.json`` is canonical JSON, its
   integers within the 64-bit range that append and ``is_canonical()`` allow; its id
   recomputes; the trailers (Event-Id, Lamport, Idempotency-Key) match it; its parents are the event heads of the commit's parent; its Lamport
   clock is one more than theirs (so clocks strictly increase along every edge); author and
   commit time match actor and timestamp; the payload decodes against its kind's schema (after
   upcasting); every artifact blob matches its blake3 and size, and nothing else is attached;
   the root is the only ``LedgerInitialized`` and names this format version; the commit
   message is exactly what perfledger writes for the event (its subject summarises the
   payload; nothing but the trailers follows); no commit has a header perfledger does not write,
   and a merge's message names exactly the event heads it joins.

Never reads the derived cache or index. Each verified envelope is passed to ``on_event`` in the
total order, so a caller can fold the state while verifying (one pass).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import blake3
import msgspec
from dulwich.objects import ObjectFormatException, parse_tree

from perfledger.errors import BadRequest, IntegrityError, NewerLedger, PerfledgerError
from perfledger.events.canonical import canonical_encoder, integer_range_problem
from perfledger.events.envelope import (
    EVENT_ID_DOMAIN,
    Envelope,
    envelope_shape_problem,
    is_valid_event_id,
    validate_envelope_fields,
)
from perfledger.events.kinds import LedgerInitialized, RecordedEvent, get_kind, upcast
from perfledger.events.limits import (
    LEDGER_LIMITS_HINT,
    MAX_COMMIT_BYTES,
    MAX_DEPTH,
    MAX_EVENT_BYTES,
    MAX_TREE_BYTES,
    event_size_problem,
)
from perfledger.ledger.dag import CommitNode, EventHeads, in_total_order
from perfledger.ledger.gitdir import refuse_incomplete_clone
from perfledger.ledger.gitobj import BLOB, COMMIT, TREE, RawObject
from perfledger.ledger.layout import ARTIFACTS_DIR, EVENT_FILE
from perfledger.ledger.objects import (
    EMPTY_TREE,
    ParsedCommit,
    actor_ident,
    commit_message,
    event_trailers,
    is_decimal,
    parse_commit,
    parse_trailers,
    split_ident,
)
from perfledger.ledger.reader import ObjectReader

if TYPE_CHECKING:
    from perfledger.ledger.store import GitStore

_envelope_decoder = msgspec.json.Decoder(Envelope)


@dataclass
class VerifyReport:
    """The outcome of :func:`verify_store`: ``ok``, the verified ``head`` (hex), the events
    verified and merge commits seen, the first failure (``error``), the wall time in seconds."""

    ok: bool
    head: str
    events: int = 0
    merges: int = 0
    error: IntegrityError | None = None
    elapsed_s: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        """Return a JSON-ready dict (the error as its SPEC.md section 6 object)."""
        data: dict[str, object] = {
            "ok": self.ok,
            "head": self.head,
            "events": self.events,
            "merges": self.merges,
            "elapsed_s": round(self.elapsed_s, 6),
        }
        data.update(self.extra)
        if self.error is not None:
            data.update(self.error.to_json())
        return data


_PLAIN_TREE_PREFIX = b"100644 " + EVENT_FILE + b"\0"
#: Git modes of a regular non-executable file and of a directory (a subtree).
_REGULAR_FILE = 0o100644
_DIRECTORY = 0o040000
#: An artifact's name in ``artifacts/``: its blake3, 64 lowercase hex digits.
_BLAKE3_NAME = re.compile(rb"[0-9a-f]{64}")


def _ts_seconds(ts: str) -> int:
    """Whole seconds since the epoch of an envelope timestamp (``validate_envelope_fields``
    checked its form). Raises: IntegrityError when it is not a real time (month 13, minute 61).
    """
    try:
        return int(datetime.fromisoformat(ts).timestamp())
    except ValueError:
        raise _fail(f"timestamp {ts!r} is not a valid UTC time") from None


@dataclass(frozen=True)
class Checked:
    """A head an earlier verification of this repository passed (the audit cache): ``head``
    (binary sha), ``commits`` (every commit reachable from it, hex: ``in`` is all that is
    asked of it), ``event_ids`` (the events they carry)."""

    head: bytes
    commits: Container[str]
    event_ids: Container[str]


class NotDescendant(Exception):
    """:func:`verify_store` with ``since``: the head does not descend from ``since.head``
    (the history was rewritten or reset below it), or a new root commit appeared; nothing was
    passed to ``on_event``."""


def verify_store(
    store: GitStore,
    *,
    on_event: Callable[[RecordedEvent], None] | None = None,
    on_graph: Callable[[CommitGraph], None] | None = None,
    format_version: int,
    since: Checked | None = None,
) -> VerifyReport:
    """Verify the ledger of ``store`` end to end, in the format ``format_version``;
    ``on_event`` gets every verified event (payload upcast and decoded) in the total order;
    ``on_graph`` gets the walked :class:`CommitGraph` before the first event (its
    ``commit_of`` maps each event id to its commit, from git, never from derived data).
    ``since``: check only the commits the head reaches that ``since.commits`` does not hold
    (the repository-wide checks are made as always); the events of ``since`` are taken as
    verified, as a pull takes the local ones (:func:`verify_incoming`).
    Returns: a :class:`VerifyReport`; ``ok`` False with ``error`` set on the first failure.
    Raises: NotDescendant (``since`` only) when the head does not descend from ``since.head``
    or a new root appeared.
    """
    started = time.perf_counter()
    report = VerifyReport(ok=False, head="")
    # after a checked head, the new commits are a few reads: the pack indexes searched in place
    reader = store.object_reader(sparse=since is not None)
    try:
        report.head = store.read_head().decode()
        _refuse_substitutions(store.controldir)
        refuse_incomplete_clone(store.controldir)
        if since is None:
            graph = CommitGraph(reader, bytes.fromhex(report.head))
        else:
            graph = CommitGraph(
                reader,
                bytes.fromhex(report.head),
                is_local=lambda sha: sha.hex() in since.commits,
                has_event=since.event_ids.__contains__,
            )
            # the walk stops at the first known commit of every path: it meets since.head
            # exactly when the head descends from it (a commit after it is not below it)
            if since.head not in graph.nodes or graph.roots:
                raise NotDescendant
        report.merges = graph.merges
        if on_graph is not None:
            on_graph(graph)
        if since is None and len(graph.roots) != 1:
            raise IntegrityError(
                f"the ledger has {len(graph.roots)} root commits; exactly one is allowed"
            )
        root = graph.roots[0] if since is None else b""
        for event in graph.check_events(root, format_version):
            report.events += 1
            if on_event is not None:
                on_event(event)
        report.ok = True
    except IntegrityError as exc:
        report.error = exc
    except PerfledgerError as exc:
        report.error = IntegrityError(exc.message, hint=exc.hint)
    finally:
        reader.close()
        report.elapsed_s = time.perf_counter() - started
    return report


def _refuse_substitutions(controldir: str) -> None:
    """Refuse a repository in which git shows other objects than it holds: ``refs/replace/``
    (``git replace``) and ``info/grafts`` make ``git log``, ``git show`` and every git tool
    substitute commits (a verdict's subject, an event.json), while perfledger verifies the
    objects themselves. perfledger writes neither; a clone does not fetch them.
    Raises: IntegrityError naming what substitutes and how to remove it."""
    from dulwich.refs import DiskRefsContainer  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    replaced: list[str] = []
    with contextlib.suppress(OSError):  # loose and packed refs
        keys = DiskRefsContainer(controldir).keys(base=b"refs/replace")
        replaced = [key.decode(errors="replace") for key in keys]
    if replaced:
        raise IntegrityError(
            f"git replaces commit(s) {sorted(replaced)[:5]} of this repository with others "
            "(refs/replace/): git log and git show display the replacements, not the ledger "
            "that perfledger verifies",
            commit=sorted(replaced)[0],
            hint=f"inspect with `git replace -l`; remove with `git replace -d {sorted(replaced)[0]}`"
            " (a clone does not carry them)",
        )
    if os.path.exists(os.path.join(controldir, "info", "grafts")):
        raise IntegrityError(
            "the repository has info/grafts: git shows other parents than the ledger's commits "
            "hold",
            hint="remove info/grafts (perfledger never writes it; a clone does not carry it)",
        )


class CommitGraph:
    """The two passes verify and a pull (:func:`verify_incoming`) share, so that they never
    disagree about what a valid event is (shas binary).

    Pass 1 (the constructor) walks the commits reachable from ``tip``, each checked on its own
    (:func:`_read_commit`), no event in two commits; commits for which ``is_local`` is true
    (already verified) are not walked, and ``has_event`` names events a local commit carries.
    Pass 2 (:meth:`check_events`) checks every walked event in the total order. Attributes:
    ``nodes`` (sha -> :class:`CommitNode`), ``commit_of`` (event id -> sha), ``walked``,
    ``roots``, ``merges``, ``keys`` (sha -> Idempotency-Key).
    Raises: IntegrityError naming the first bad commit (and the event it claims).
    """

    def __init__(
        self,
        reader: ObjectReader,
        tip: bytes,
        *,
        is_local: Callable[[bytes], bool] | None = None,
        has_event: Callable[[str], bool] | None = None,
    ) -> None:
        self.reader = reader
        self.nodes: dict[bytes, CommitNode] = {}
        self.commit_of: dict[str, bytes] = {}
        self.walked: list[bytes] = []
        self.roots: list[bytes] = []
        self.merges = 0
        self.keys: dict[bytes, str] = {}
        #: sha -> the event commit pass 1 read (hash checked) and parsed, for pass 2 to check
        #: without reading and parsing it again; at most PARSED_KEPT kept (memory)
        self.parsed: dict[bytes, tuple[ParsedCommit, dict[str, str]]] = {}
        stack = [tip]
        while stack:
            sha = stack.pop()
            if sha in self.nodes:
                continue
            if is_local is not None and is_local(sha):
                self.node(sha)
                continue
            commit, trailers = _read_commit(reader, sha)
            event_id, parents = trailers.get("Event-Id"), commit.parents
            if event_id is None:
                self.nodes[sha] = CommitNode(None, 0, parents)
                self.merges += 1
            else:
                if event_id in self.commit_of or (has_event is not None and has_event(event_id)):
                    raise IntegrityError(
                        f"event {event_id} appears in two commits",
                        event_id=event_id,
                        commit=sha.hex(),
                    )
                self.commit_of[event_id] = sha
                self.nodes[sha] = CommitNode(event_id, int(trailers["Lamport"]), parents)
                if len(self.parsed) < PARSED_KEPT:
                    self.parsed[sha] = (commit, trailers)
                if "Idempotency-Key" in trailers:
                    self.keys[sha] = trailers["Idempotency-Key"]
            if not parents:
                self.roots.append(sha)
            self.walked.append(sha)
            stack.extend(parents)
        self.dag = EventHeads(self.node, self.commit_of.__getitem__)

    def node(self, sha: bytes) -> CommitNode:
        """The structure of commit ``sha``: a walked one's, else a verified local one's, read
        from git (never from the derived index)."""
        node = self.nodes.get(sha)
        if node is None:
            commit = parse_commit(
                sha, self.reader.read(sha, check=False, max_size=MAX_COMMIT_BYTES)[1]
            )
            event_id, lamport, _ = event_trailers(commit.message)
            node = self.nodes[sha] = CommitNode(event_id, max(lamport, 0), commit.parents)
            if event_id is not None:
                self.commit_of.setdefault(event_id, sha)
        return node

    def check_events(self, root: bytes, format_version: int) -> Iterator[RecordedEvent]:
        """Pass 2: check that every walked merge joins divergent heads, then check and decode
        every walked event in the total order and yield it; ``root`` is the root commit (b""
        when none was walked). Raises: IntegrityError naming the first bad event."""
        for sha in self.walked:  # every merge joins divergent heads (SPEC.md section 2)
            parents = self.nodes[sha].parents
            if self.nodes[sha].event_id is not None:
                continue
            if len(set(parents)) != len(parents):
                raise IntegrityError(
                    f"merge commit {sha.hex()} lists a parent twice", commit=sha.hex()
                )
            if len(self.dag.heads(sha)) < 2:
                raise IntegrityError(
                    f"merge commit {sha.hex()} joins no divergent heads (one side already "
                    "contains the other)",
                    commit=sha.hex(),
                )
            # its message names the heads it joins, and nothing else (git log shows it)
            joins = sorted({h for parent in parents for h in self.dag.heads(parent)})
            message = parse_commit(
                sha, self.reader.read(sha, check=False, max_size=MAX_COMMIT_BYTES)[1]
            ).message
            if message != _merge_message(joins):
                raise IntegrityError(
                    f"merge commit {sha.hex()} has the message "
                    f"{message.decode('utf-8', 'replace')[:200]!r}; perfledger writes "
                    f"{_merge_message(joins).decode()!r} on a merge of these heads, and the "
                    "message is covered by no event id",
                    commit=sha.hex(),
                )
        order = in_total_order(
            (node.lamport, node.event_id, sha)
            for sha in self.walked
            if (node := self.nodes[sha]).event_id is not None
        )
        for sha in order:
            envelope, message = self._check_event(sha, root)
            try:
                event = _decode_payload(envelope, format_version)
                _check_message(message, event)
            except IntegrityError as exc:
                raise _named(exc, envelope.id, sha) from None
            yield event

    def _check_event(self, sha: bytes, root: bytes) -> tuple[Envelope, bytes]:
        """Check the event commit ``sha`` but its schema and subject; return its envelope and
        its commit message. Raises: IntegrityError naming the event (and the commit)."""
        event_id = self.nodes[sha].event_id
        assert event_id is not None
        try:
            return _verify_event(self.reader, sha, self.dag, root, self.parsed.pop(sha, None))
        except _DagMismatch as exc:
            # The event is placed wrongly relative to its parents. When a parent's own
            # trailers disagree with its event.json (a forged Lamport trailer sorts it after
            # this child), the parent is the tampered one: name it.
            parent_commit = parse_commit(
                sha, self.reader.read(sha, check=False, max_size=MAX_COMMIT_BYTES)[1]
            ).parents[0]
            for parent_id in self.dag.heads(parent_commit):
                parent_sha = self.commit_of[parent_id]
                try:
                    _verify_event(self.reader, parent_sha, None, root)
                except IntegrityError as parent_exc:
                    raise _named(parent_exc, parent_id, parent_sha) from None
            raise _named(exc, event_id, sha) from None
        except IntegrityError as exc:
            raise _named(exc, event_id, sha) from None


#: The most event commits pass 1 keeps parsed for pass 2 (about 0.5 KiB each): a ledger of up to
#: this many events is read once; a longer one re-reads the rest (bounded memory).
PARSED_KEPT = 50_000


def _read_commit(reader: ObjectReader, sha: bytes) -> tuple[ParsedCommit, dict[str, str]]:
    """Read the commit ``sha`` through the checking reader, check it on its own (a merge has
    no ledger trailers, at least two parents and the empty tree; an event commit has
    well-formed Event-Id and Lamport trailers and at most one parent) and return it with its
    trailers. Raises: IntegrityError naming the commit (and the event it claims, if readable).
    """
    try:
        type_num, raw = reader.read(sha, max_size=MAX_COMMIT_BYTES)
    except IntegrityError as exc:
        raise _name_claimed_event(reader, sha, exc) from None
    if type_num != COMMIT:
        raise IntegrityError(
            f"{sha.hex()} is reachable as a commit but is not one", commit=sha.hex()
        )
    commit = parse_commit(sha, raw)
    trailers = parse_trailers(commit.message)
    event_id = trailers.get("Event-Id")
    unexpected = _unexpected_headers(raw)
    if unexpected:
        # outside the hashed event, yet git shows them (an encoding re-reads the message, a
        # signature claims a signer): perfledger writes none
        claimed = f"event {event_id} (commit {sha.hex()})" if event_id else f"commit {sha.hex()}"
        raise IntegrityError(
            f"{claimed} has commit header(s) {unexpected} that perfledger never writes (only "
            "tree, parent, author and committer)",
            commit=sha.hex(),
            event_id=event_id if event_id and is_valid_event_id(event_id) else None,
        )
    if event_id is None:
        if "Lamport" in trailers or "Idempotency-Key" in trailers:
            raise IntegrityError(
                f"commit {sha.hex()} has ledger trailers but no Event-Id", commit=sha.hex()
            )
        if len(commit.parents) < 2:
            raise IntegrityError(
                f"commit {sha.hex()} carries no event and is not a merge", commit=sha.hex()
            )
        if commit.tree.hex().encode() != EMPTY_TREE.id:
            raise IntegrityError(
                f"merge commit {sha.hex()} carries content; merges must carry no event",
                commit=sha.hex(),
            )
    else:
        if not is_valid_event_id(event_id) or not is_decimal(trailers.get("Lamport", "")):
            raise IntegrityError(
                f"event {event_id} (commit {sha.hex()}) has a malformed Event-Id or Lamport "
                "trailer",
                commit=sha.hex(),
                event_id=event_id,
            )
        if len(commit.parents) > 1:
            raise IntegrityError(
                f"event {event_id} (commit {sha.hex()}) has {len(commit.parents)} parent "
                "commits; an event has at most one",
                commit=sha.hex(),
                event_id=event_id,
            )
    return commit, trailers


#: The only commit headers perfledger writes, in git's order.
_HEADERS = (b"tree", b"parent", b"author", b"committer")


def _unexpected_headers(raw: bytes) -> list[str]:
    """The header names of commit ``raw`` other than :data:`_HEADERS` (each once, in order)."""
    header = raw.partition(b"\n\n")[0]
    names = [line.partition(b" ")[0] for line in header.split(b"\n") if not line.startswith(b" ")]
    return list(dict.fromkeys(n.decode("utf-8", "replace") for n in names if n not in _HEADERS))


def _merge_message(heads: list[str]) -> bytes:
    """The message perfledger writes on a merge joining the event ``heads`` (sorted)."""
    return (
        "Merge divergent ledger heads\n" + "".join(f"\nJoins: {h}" for h in heads) + "\n"
    ).encode()


def _fail(message: str) -> IntegrityError:
    return IntegrityError(message)


def _beyond_limits(problem: str) -> IntegrityError:
    """The failure of an object outside the storage format's limits (events.limits)."""
    return IntegrityError(
        f"event.json is outside the storage format's limits: {problem}", hint=LEDGER_LIMITS_HINT
    )


class _DagMismatch(IntegrityError):
    """An event's parents or Lamport clock do not match the commits it was appended on."""


def _named(exc: IntegrityError, event_id: str, sha: bytes) -> IntegrityError:
    """Return an IntegrityError naming the event and its commit (message and fields); a
    NewerLedger stays one (exit 7, not 5)."""
    if isinstance(exc, NewerLedger):
        return exc.naming(event_id, sha.hex())
    message = exc.message
    if not message.startswith(f"event {event_id}"):  # an id quoted later does not name it
        message = f"event {event_id} (commit {sha.hex()}): {message}"
    return IntegrityError(
        message, hint=exc.hint, event_id=exc.event_id or event_id, commit=exc.commit or sha.hex()
    )


def _name_claimed_event(reader: ObjectReader, sha: bytes, exc: IntegrityError) -> IntegrityError:
    """Name the event a corrupt commit claims to carry (its Event-Id trailer), if readable."""
    try:
        content = reader.read(sha, check=False, max_size=MAX_COMMIT_BYTES)[1]
    except IntegrityError:
        return exc
    event_id = parse_trailers(content.partition(b"\n\n")[2]).get("Event-Id")
    return exc if event_id is None else _named(exc, event_id, sha)


def _verify_event(
    reader: ObjectReader,
    sha: bytes,
    dag: EventHeads | None,
    root: bytes,
    parsed: tuple[ParsedCommit, dict[str, str]] | None = None,
) -> tuple[Envelope, bytes]:
    """Check one event commit (all but its payload's schema, :func:`_decode_payload`, and its
    subject, :func:`_check_message`) and return its envelope and commit message. ``dag`` None
    skips its place in the DAG; ``parsed``: the commit and its trailers as pass 1 read them
    (hash checked), else it is read again."""
    if parsed is None:
        commit = parse_commit(sha, reader.read(sha, check=False, max_size=MAX_COMMIT_BYTES)[1])
        trailers = parse_trailers(commit.message)
    else:
        commit, trailers = parsed
    type_num, tree_raw = reader.read(commit.tree, max_size=MAX_TREE_BYTES)
    if type_num != TREE:
        raise _fail("its tree is not a tree object")
    if len(tree_raw) == len(_PLAIN_TREE_PREFIX) + 20 and tree_raw.startswith(_PLAIN_TREE_PREFIX):
        # the common case, an event without artifacts: one entry, event.json
        entries = {EVENT_FILE: (0o100644, tree_raw[-20:])}
    else:
        entries = _tree_entries(tree_raw, "its tree")
    if (
        (len(entries) != 1 and (set(entries) - {EVENT_FILE, ARTIFACTS_DIR}))
        or EVENT_FILE not in entries
        or entries[EVENT_FILE][0] != _REGULAR_FILE
        or (ARTIFACTS_DIR in entries and entries[ARTIFACTS_DIR][0] != _DIRECTORY)
    ):
        raise _fail(
            "its tree must hold event.json (a regular file) and optionally artifacts/ (a "
            "directory), found "
            + ", ".join(
                f"{n.decode(errors='replace')} (mode {m:o})"
                for n, (m, _) in sorted(entries.items())
            )
        )
    type_num, data = reader.read(entries[EVENT_FILE][1], max_size=MAX_EVENT_BYTES)
    if type_num != BLOB:
        raise _fail("event.json is not a blob")

    # canonical bytes and content id. JSON has no NaN/Infinity literals, so a typed decode
    # followed by a canonical re-encode that gives back the same bytes, and integers within the
    # 64-bit range, prove the bytes canonical.
    problem = event_size_problem(len(data))
    if problem is not None:
        raise _beyond_limits(problem)
    try:
        envelope = _envelope_decoder.decode(data)
    except RecursionError:  # msgspec's own guard, far above MAX_DEPTH
        raise _beyond_limits(f"it nests deeper than {MAX_DEPTH} levels") from None
    except msgspec.DecodeError as exc:
        raise _fail(f"event.json is not a valid envelope: {exc}") from None
    problem = envelope_shape_problem(data, envelope)
    if problem is not None:
        raise _beyond_limits(problem)
    try:
        reencoded = canonical_encoder.encode(envelope)
    except UnicodeEncodeError:
        raise _fail("event.json holds text that is not valid Unicode") from None
    if reencoded != data:
        raise _fail("event.json is not in canonical form (bytes were edited)")
    # msgspec decodes and re-encodes integers beyond 64 bits unchanged: the range that append
    # and is_canonical() enforce is checked here too
    problem = integer_range_problem(data)
    if problem is not None:
        raise _beyond_limits(problem)
    try:
        validate_envelope_fields(envelope)
    except BadRequest as exc:
        raise _fail(f"event.json is not a valid envelope: {exc.message}") from None
    # In canonical bytes the id is the top-level key right after "artifacts" (keys are sorted and
    # no other key precedes it structurally with a string value): cut it out to get the bytes
    # the id was computed over.
    marker = b'},"id":"' + envelope.id.encode() + b'",'
    cut = data.find(marker)
    if cut < 0:
        raise _fail("event.json does not carry its id where canonical form puts it")
    hashed = data[: cut + 1] + data[cut + len(marker) - 1 :]
    computed = blake3.blake3(EVENT_ID_DOMAIN + hashed).hexdigest()
    if computed != envelope.id:
        raise _fail(f"its content hashes to {computed}, not to its id {envelope.id}")

    # trailers, identity, time
    if trailers.get("Event-Id") != envelope.id:
        raise _fail("the Event-Id trailer does not match event.json")
    lamport = trailers.get("Lamport")
    if lamport != str(envelope.lamport):
        raise _fail(f"the Lamport trailer says {lamport}, event.json says {envelope.lamport}")
    if trailers.get("Idempotency-Key") != envelope.idempotency_key:
        raise _fail("the Idempotency-Key trailer does not match event.json")
    first_line = commit.message.split(b"\n", 1)[0].decode("utf-8", "replace")
    if first_line != envelope.kind and not first_line.startswith(envelope.kind + ": "):
        raise _fail(f"the commit subject {first_line!r} does not name kind {envelope.kind}")
    expected = actor_ident(envelope.actor)
    seconds = _ts_seconds(envelope.ts)
    if seconds < 0 or not commit.author == commit.committer == b"%s %d +0000" % (expected, seconds):
        # not what perfledger writes: compare the parts (any time zone is accepted)
        author, author_s = split_ident(commit.author)
        committer, committer_s = split_ident(commit.committer)
        if author != expected or committer != expected:
            raise _fail(f"author/committer do not match actor {envelope.actor!r}")
        if author_s != seconds or committer_s != seconds:
            raise _fail("commit time does not match the event timestamp")

    # place in the DAG (skipped when re-checking a parent's own content: dag is None)
    if dag is not None and sha == root:
        if envelope.parents or envelope.lamport != 1 or envelope.kind != "LedgerInitialized":
            raise _fail("the root must be LedgerInitialized with no parents and Lamport 1")
    elif dag is not None:
        if envelope.kind == "LedgerInitialized":
            raise _fail("LedgerInitialized appears again after the root")
        parent_commit = commit.parents[0]
        heads = dag.heads(parent_commit)
        if envelope.parents != heads:
            raise _DagMismatch(
                "its parents do not match the events its commit was appended on "
                f"(event says {list(envelope.parents)}, commits say {list(heads)})"
            )
        expected_lamport = dag.lamport(parent_commit) + 1
        if envelope.lamport != expected_lamport:
            raise _DagMismatch(
                f"its Lamport clock is {envelope.lamport}, expected {expected_lamport}"
            )

    # artifacts
    digests = {ref.blake3: ref for ref in envelope.artifacts.values()}
    if not digests:
        if ARTIFACTS_DIR in entries:
            raise _fail("artifacts/ is present but the event declares no artifact")
    else:
        if ARTIFACTS_DIR not in entries:
            raise _fail("the event declares artifacts but its tree has no artifacts/")
        type_num, art_raw = reader.read(entries[ARTIFACTS_DIR][1], max_size=MAX_TREE_BYTES)
        if type_num != TREE:
            raise _fail("artifacts/ is not a tree")
        art = artifact_entries(art_raw)
        if set(art) != set(digests):
            raise _fail("artifacts/ does not hold exactly the declared artifacts")
        for digest, blob_sha in art.items():
            ref = digests[digest]
            type_num, blob = reader.read(blob_sha, max_size=ref.size)
            if (
                type_num != BLOB
                or len(blob) != ref.size
                or blake3.blake3(blob).hexdigest() != digest
            ):
                raise _fail(f"artifact {digest} does not match its blake3 or size")
    return envelope, commit.message


def _check_message(message: bytes, event: RecordedEvent) -> None:
    """The commit message must be what perfledger writes for the event: its subject, the
    kind and the summary of its payload (by this version's summary or one an earlier version
    wrote), then its trailers, nothing else. The message is outside the hashed event but
    ``git log`` and ``perfledger log`` show it, so a subject saying ``pass`` over an
    inconclusive verdict, or a paragraph added to it, must not verify.
    Raises: IntegrityError saying which part differs."""
    envelope = event.envelope
    spec = get_kind(envelope.kind)
    expected = b""
    for summarize in (spec.summary, *spec.legacy_summaries):
        try:
            summary = summarize(event.payload)
        except Exception:  # a summary that fails was written as the bare kind (ledger.base)
            summary = ""
        written = commit_message(envelope, summary)
        if written == message:
            return
        expected = expected or written
    got_subject, _, got_rest = message.partition(b"\n")
    want_subject, _, want_rest = expected.partition(b"\n")
    if got_subject != want_subject:
        raise _fail(
            f"its commit subject {got_subject.decode('utf-8', 'replace')!r} does not say what "
            f"the event records ({want_subject.decode('utf-8', 'replace')!r}); the subject is "
            "not covered by the event id, so it was written by something other than perfledger"
        )
    trailers = want_rest[1:]
    extra = got_rest[: -len(trailers)] if got_rest.endswith(trailers) else got_rest
    raise _fail(
        "its commit message holds more than the event's subject and trailers "
        f"({extra.strip().decode('utf-8', 'replace')[:200]!r}); the message is not covered by "
        "the event id, so that text was written by something other than perfledger"
    )


def _tree_entries(raw: bytes, where: str) -> dict[bytes, tuple[int, bytes]]:
    """Parse a tree object strictly: name -> (mode, binary sha). Raises: IntegrityError
    (``where`` names the tree) for a malformed entry, a name twice, or entries out of order,
    or a tree larger than the storage format's limit."""
    if len(raw) > MAX_TREE_BYTES:
        raise IntegrityError(
            f"{where} is {len(raw)} bytes, outside the storage format's limits (at most "
            f"{MAX_TREE_BYTES})",
            hint=LEDGER_LIMITS_HINT,
        )
    try:
        parsed = [
            (name, (mode, bytes.fromhex(h.decode())))
            for name, mode, h in parse_tree(raw, 20, strict=True)
        ]
    except (ObjectFormatException, ValueError) as exc:
        raise _fail(f"{where} is malformed: {exc}") from None
    entries = dict(parsed)
    if len(entries) != len(parsed):
        raise _fail(f"{where} is malformed: it lists a name twice")
    # git's order: by name, a subtree's name compared as if it ended in "/"
    keys = [name + b"/" if mode == _DIRECTORY else name for name, (mode, _) in parsed]
    if keys != sorted(keys):
        raise _fail(f"{where} is malformed: its entries are not in git's order")
    return entries


def artifact_entries(raw: bytes) -> dict[str, bytes]:
    """Parse an event's ``artifacts/`` tree: blake3 hex name -> blob sha (binary). Only
    regular non-executable files (100644) named by a blake3 are allowed: anything else would
    check out as other bytes than the event declares (SPEC.md section 2).
    Raises: IntegrityError for anything else, or a malformed tree."""
    art: dict[str, bytes] = {}
    for name, (mode, blob_sha) in _tree_entries(raw, "artifacts/").items():
        if mode != _REGULAR_FILE or _BLAKE3_NAME.fullmatch(name) is None:
            raise _fail(
                f"artifacts/ holds {name.decode(errors='replace')!r} with mode {mode:o}; "
                "only regular non-executable files (mode 100644) named by their blake3 "
                "are allowed"
            )
        art[name.decode()] = blob_sha
    return art


def _decode_payload(envelope: Envelope, format_version: int) -> RecordedEvent:
    """Upcast and decode the payload against its kind's schema; the root names
    ``format_version``. Raises: IntegrityError (a PerfledgerError from upcasting is turned
    into one by :func:`verify_store`)."""
    payload = upcast(envelope.kind, envelope.schema, envelope.payload)
    if isinstance(payload, LedgerInitialized) and payload.format_version != format_version:
        raise _fail(f"the ledger says format {payload.format_version}, expected {format_version}")
    return RecordedEvent(envelope, payload)


# ------------------------------------------------------------------- commits received by a pull
# Only the new commits are checked, as a whole ledger is (CommitGraph); the received objects stay
# in memory (IncomingReader) until they pass, so a refused pull leaves the ledger untouched.


class IncomingReader:
    """Objects received from a remote (binary sha -> (type, content), named from their
    content) in front of the local ``base`` reader (None for a clone); ``used`` collects the
    incoming shas read (what the verified commits reference)."""

    def __init__(self, incoming: dict[bytes, tuple[int, bytes]], base: ObjectReader | None):
        self.incoming = incoming
        self.base = base
        self.used: set[bytes] = set()

    def read(
        self, sha: bytes, *, check: bool = True, max_size: int | None = None
    ) -> tuple[int, bytes]:
        """Return (type number, content) of binary ``sha`` (``max_size``: as
        :meth:`ObjectReader.read`; what the remote sent was scanned by
        :func:`~perfledger.ledger.reader.scan_pack`); IntegrityError when missing."""
        hit = self.incoming.get(sha)
        if hit is not None:
            self.used.add(sha)
            return hit
        if self.base is None:
            raise IntegrityError(
                f"git object {sha.hex()} is missing from what the remote sent", commit=sha.hex()
            )
        return self.base.read(sha, check=check, max_size=max_size)


@dataclass
class IncomingReport:
    """What :func:`verify_incoming` checked (shas hex bytes): the new events (verified, in the
    total order), ``objects`` (what a pull stores), ``nodes`` (new commit ->
    :class:`CommitNode`) and ``keys`` (new commit -> Idempotency-Key)."""

    events: list[RecordedEvent]
    objects: list[RawObject]
    nodes: dict[bytes, CommitNode]
    keys: dict[bytes, str]


def verify_incoming(
    incoming: dict[bytes, tuple[int, bytes]],
    base: ObjectReader | None,
    tip: bytes,
    *,
    is_local: Callable[[bytes], bool],
    has_event: Callable[[str], bool],
    format_version: int,
) -> IncomingReport:
    """Verify every commit reachable from ``tip`` (hex) that is not local, reading the
    ``incoming`` objects (binary sha -> (type, content)) in front of the local ``base`` reader
    (``is_local``: hex sha -> reachable from the local head; ``has_event``: the local ledger
    holds that event id). For a clone (``base`` None) the new commits must hold exactly one
    root; otherwise none may be a root.
    Raises: IntegrityError naming the first bad event or commit (nothing was written).
    """
    clone = base is None
    reader = IncomingReader(incoming, base)
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
    events = list(graph.check_events(graph.roots[0] if clone else b"", format_version))
    objects = [RawObject(*incoming[sha], sha.hex().encode()) for sha in reader.used]
    if graph.merges:
        objects.append(EMPTY_TREE)
    nodes = {
        sha.hex().encode(): CommitNode(
            node.event_id, node.lamport, tuple(p.hex().encode() for p in node.parents)
        )
        for sha in graph.walked
        if (node := graph.nodes[sha])
    }
    keys = {sha.hex().encode(): key for sha, key in graph.keys.items()}
    return IncomingReport(events, objects, nodes, keys)
