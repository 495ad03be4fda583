"""Sync with git remotes: clone, pull, push, sync (SPEC.md section 2, Sync), and the record of
what the last pull brought (``perfledger resume``). Any remote dulwich speaks to works.

Pull, step by step (nothing local changes until every step passed):

1. fetch ``refs/heads/ledger`` with an explicit ``determine_wants`` (dulwich's porcelain fetch
   maps ``refs/heads/*`` to its own names, GUIDE.md); the pack is read in memory, each object
   named from its content (thin-pack bases read from the local store);
2. verify the new commits only (:func:`perfledger.ledger.verify.verify_incoming`);
3. refuse a rewritten remote: its head must descend from the last head seen from it (the
   tracking ref ``refs/remotes/<name>/ledger``);
4. write the verified objects as one pack, move the tracking ref by compare-and-swap, then the
   ledger ref: a fast-forward, or a deterministic merge commit with both heads as parents and
   no event; a lost race against a local append is retried. Nothing is rebased or forced.

Push refuses a non-fast-forward (pull first); the remote moves its ref only from the value we
saw, so a concurrent push makes ours fail cleanly. ``sync`` = pull, then push, retried when
another machine pushed in between.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from dulwich.client import get_transport_and_path
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.object_store import ObjectStoreGraphWalker
from dulwich.objects import parse_tree
from dulwich.repo import Repo

from perfledger._version import __version__
from perfledger.errors import (
    BadRequest,
    ConcurrentAppend,
    IntegrityError,
    NewerLedger,
    PerfledgerError,
)
from perfledger.events.envelope import Envelope
from perfledger.ledger import layout
from perfledger.ledger.base import OPTIMISTIC_ATTEMPTS
from perfledger.ledger.cache import write_derived
from perfledger.ledger.checkpoints import (
    CHECKPOINT_REF_PREFIX,
    WITNESS_REF_PREFIX,
    CheckpointPolicy,
    SignedTag,
    check,
    published,
    read_trusted,
    ref_of,
    tag_object,
)
from perfledger.ledger.dag import CommitNode, descends_from, in_total_order
from perfledger.ledger.durable import first_missing_ancestor, fsync_dir, make_repository_durable
from perfledger.ledger.gitobj import RawObject, write_loose
from perfledger.ledger.reader import read_pack
from perfledger.ledger.refcas import read_ref
from perfledger.ledger.remotes import DEFAULT_REMOTE, Remote, add_remote, resolve_remote
from perfledger.ledger.store import FORMAT_VERSION, LEDGER_REF, GitStore, write_ledger_config
from perfledger.ledger.verify import IncomingReport, verify_incoming

#: The ref namespace of checkpoints and witness co-signatures that pull, push and clone carry.
CHECKPOINT_NAMESPACE = b"refs/perfledger/"
TAG_PREFIXES = (CHECKPOINT_REF_PREFIX, WITNESS_REF_PREFIX)
#: Pushes retried by :func:`sync` when another machine pushed between our pull and our push.
SYNC_ATTEMPTS = 20
#: Local compare-and-swap attempts when moving the ledger ref after a pull (the first
#: :data:`~perfledger.ledger.base.OPTIMISTIC_ATTEMPTS` optimistic, the rest under the writers' lock).
LOCAL_ATTEMPTS = 50


class RemoteRewritten(IntegrityError):
    """The remote's history no longer contains the last head we saw from it (exit 5)."""

    code = "remote_rewritten"


class NonFastForward(ConcurrentAppend):
    """The remote holds events this ledger has not pulled; a push would drop them (exit 4)."""

    code = "non_fast_forward"


@dataclass
class PullResult:
    """What a pull did: the local heads ``before`` and ``after`` it and the remote's (hex),
    ``action`` (``up_to_date``, ``fast_forward``, ``merged`` or ``cloned``), the merge commit
    written, the new events (verified, in the total order), objects received, wall time (s)."""

    remote: str
    url: str
    before: str
    after: str
    remote_head: str | None
    action: str
    merge_commit: str | None = None
    new_events: list[Envelope] = field(default_factory=list)
    fetched_objects: int = 0
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready summary (events as id, kind, lamport, actor, ts)."""
        events = [
            {"event_id": e.id, "kind": e.kind, "lamport": e.lamport, "actor": e.actor, "ts": e.ts}
            for e in self.new_events
        ]
        return {**_fields(self), "new_events": events}


def _fields(result: PullResult | PushResult) -> dict[str, Any]:
    """A result's fields as a JSON-ready dict (``elapsed_s`` rounded to the microsecond)."""
    data = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    return {**data, "elapsed_s": round(result.elapsed_s, 6)}


@dataclass
class PushResult:
    """What a push did: the remote's head ``before`` (None: no ledger branch) and ``after``
    (hex), ``pushed`` False when it already had our head, wall time in seconds, and the
    checkpoint and witness tags (hex) the remote lacked and received."""

    remote: str
    url: str
    before: str | None
    after: str
    pushed: bool
    elapsed_s: float = 0.0
    tags_pushed: list[str] = field(default_factory=list)

    to_json = _fields


# ------------------------------------------------------------------------------ transport


class RemoteError(PerfledgerError):
    """The remote could not be reached or read (exit 1): nothing changed locally."""

    code = "remote"


@contextlib.contextmanager
def client(url: str) -> Iterator[tuple[Any, str]]:
    """A dulwich client for ``url`` and the path on the remote; errors become
    :class:`RemoteError`. Raises: BadRequest for a URL dulwich cannot use."""
    try:
        remote, path = get_transport_and_path(url)
    except (ValueError, NotGitRepository) as exc:
        raise BadRequest(
            f"cannot use remote URL {url!r}: {exc}",
            hint="a remote is a path or a git URL (file://, ssh://, git://, https://)",
        ) from None
    try:
        yield remote, path
    except PerfledgerError:
        raise
    except Exception as exc:
        transport = (GitProtocolError, HangupException, NotGitRepository, OSError)
        if not isinstance(exc, transport) and not type(exc).__module__.startswith(
            ("urllib3", "http", "dulwich")  # urllib3 / http errors and the like
        ):
            raise
        raise RemoteError(
            f"remote {url} failed: {type(exc).__name__}: {exc}",
            hint="check the URL and that the server is running; nothing changed locally",
        ) from None
    finally:
        with contextlib.suppress(Exception):
            remote.close()


def fetch(
    store: GitStore | None,
    repo: Repo,
    target: Remote,
    local_heads: list[bytes],
    tag_refs: dict[bytes, bytes] | None = None,
) -> tuple[bytes, dict[bytes, tuple[int, bytes]]]:
    """Fetch the remote's ledger branch and its checkpoint and witness tags: objects unpacked
    in memory, nothing written to the object store. ``local_heads`` (hex) are offered as haves;
    ``store`` gives their parents (None for a clone); ``tag_refs`` receives the remote's refs
    under ``refs/perfledger/`` (name -> hex sha). Returns: (the remote's ledger head, the
    objects received: binary sha -> (type, content), each named from its content).
    Raises: BadRequest when the remote has no ledger branch; RemoteError; IntegrityError for
        a malformed pack."""
    holder: dict[str, bytes | None] = {"head": None}
    object_store = repo.object_store

    def determine_wants(refs: dict[bytes, bytes], depth: int | None = None) -> list[bytes]:
        holder["head"] = head = refs.get(LEDGER_REF)
        tags = {r: v for r, v in refs.items() if r.startswith(TAG_PREFIXES)}
        if tag_refs is not None:
            tag_refs.update(tags)
        wants = [] if head is None or head in object_store else [head]
        return wants + sorted({v for v in tags.values() if v not in object_store})

    def parents(sha: bytes) -> list[bytes]:  # of a local head (a clone offers none)
        return list(store.commit_node(sha).parents) if store is not None else []

    walker = ObjectStoreGraphWalker([h for h in local_heads if h in object_store], parents)
    # received in memory, as it is read anyway: a killed pull leaves no file behind
    received = bytearray()
    with client(target.url) as (remote, path):
        remote.fetch_pack(path, determine_wants, walker, received.extend)
    if holder["head"] is None:
        raise BadRequest(
            f"remote {target.name} ({target.url}) has no ledger branch (refs/heads/ledger)",
            hint=f"push a ledger to it first: perfledger push {target.name}",
        )
    return holder["head"], read_pack(received, object_store.get_raw) if received else {}


# ------------------------------------------------------------------------------ last pull


class LastPull(msgspec.Struct):
    """The record of the last pull or clone that brought events (derived data): where from,
    the local heads around it (hex; ``before`` empty after a clone), its action, UTC time."""

    remote: str
    url: str
    before: str
    after: str
    action: str
    at: str


def record_pull(store: GitStore, result: PullResult) -> None:
    """Write the record of a pull or clone that brought events (best effort: derived data)."""
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    record = LastPull(result.remote, result.url, result.before, result.after, result.action, at)
    path = os.path.join(store.derived_dir, layout.LAST_PULL_FILE)
    with contextlib.suppress(OSError):
        write_derived(path, msgspec.json.encode(record))


def last_pull(store: GitStore) -> LastPull | None:
    """Return the record of this ledger's last pull or clone, or None (never pulled)."""
    try:
        with open(os.path.join(store.derived_dir, layout.LAST_PULL_FILE), "rb") as f:
            return msgspec.json.decode(f.read(), type=LastPull)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def changes_since(
    store: GitStore, old_head: str | None, new_head: str | None = None
) -> list[Envelope]:
    """Return the events reachable from ``new_head`` (default: the current head) and not
    from ``old_head`` (hex; None or empty: every event), in the total order.
    Raises: BadRequest when ``old_head`` is not a commit of this ledger.
    """
    head = (new_head or store.read_head().decode()).encode()
    if old_head:
        try:
            store.commit_node(old_head.encode())
        except IntegrityError:
            raise BadRequest(
                f"{old_head} is not a commit of this ledger",
                hint="`perfledger log` lists the commits of this ledger",
            ) from None
    haves = [old_head.encode()] if old_head else []
    nodes = [(store.commit_node(sha), sha) for sha in _commits_between(store, haves, [head])]
    found = in_total_order((n.lamport, n.event_id, sha) for n, sha in nodes if n.event_id)
    return [store.read_envelope(sha) for sha in found]


def changes_since_last_pull(store: GitStore) -> tuple[LastPull | None, list[Envelope]]:
    """Return (the last pull's record, the events new since the local head before it); the
    events are empty when this ledger was never pulled or cloned."""
    record = last_pull(store)
    if record is None:
        return None, []
    return record, changes_since(store, record.before or None, record.after)


# ------------------------------------------------------------------------------ pull


def pull(
    store: GitStore, remote: str | None = None, *, policy: CheckpointPolicy | None = None
) -> PullResult:
    """Fetch the ledger of ``remote`` (a configured name, default ``origin``, a URL or a
    path), verify what is new, check its checkpoints (and ``policy``: signers, a witness's
    copies, required signers, distance), and join it to the local head.
    Returns: a :class:`PullResult`.
    Raises: BadRequest for an unknown remote or one without a ledger branch; RemoteError;
        IntegrityError naming the first bad event or checkpoint; RemoteRewritten;
        ConcurrentAppend when local appends kept winning the race. On failure the local refs
        and objects are unchanged.
    """
    started = time.perf_counter()
    target = resolve_remote(store.repo, remote)
    repo = store.repo
    before = store.read_head()
    last_seen = read_ref(store.controldir, target.tracking_ref)
    tag_refs: dict[bytes, bytes] = {}
    remote_head, objects = fetch(
        store, repo, target, [before] + ([last_seen] if last_seen else []), tag_refs
    )
    report = _verify_and_check(store, target, remote_head, objects, last_seen)
    new_tags = _check_checkpoints(
        store, target, _node_function(store, report), remote_head, objects, tag_refs, policy
    )
    if report.nodes:
        store.adopt(report.objects, report.nodes, report.keys)
    _move_tracking_ref(repo, target, last_seen, remote_head)
    after, action, merge = _join(store, remote_head, _node_function(store, report))
    publish_tags(repo, new_tags)
    result = PullResult(
        remote=target.name,
        url=target.url,
        before=before.decode(),
        after=after.decode(),
        remote_head=remote_head.decode(),
        action=action,
        merge_commit=merge.decode() if merge else None,
        new_events=[e.envelope for e in report.events] if action != "up_to_date" else [],
        fetched_objects=len(objects),
        elapsed_s=time.perf_counter() - started,
    )
    if action != "up_to_date":  # keep the record of the last pull that brought something
        record_pull(store, result)
    return result


def _verify_and_check(
    store: GitStore | None,
    target: Remote,
    remote_head: bytes,
    objects: dict[bytes, tuple[int, bytes]],
    last_seen: bytes | None,
) -> IncomingReport:
    """Verify the fetched commits and refuse a rewritten remote (report.objects: what to keep)."""
    base = store.object_reader() if store is not None else None
    try:
        head = store.read_head() if store is not None else b""
        try:
            report = verify_incoming(
                objects,
                base,
                remote_head,
                is_local=lambda sha: store is not None and store.reaches(sha, head),
                has_event=lambda event_id: store is not None and store.has_event(event_id, head),
                format_version=FORMAT_VERSION,
            )
        except NewerLedger as exc:  # a mixed-version team: nothing is brought in (docs/sync.md)
            raise NewerLedger(
                f"remote {target.name} ({target.url}) holds event {exc.event_id} ({exc.kind}, "
                f"schema version {exc.schema}), written by a newer perfledger than this one "
                f"({__version__}): nothing was pulled and this ledger is unchanged; upgrade "
                "perfledger to pull it",
                hint="upgrade perfledger (pip install --upgrade perfledger) to the version that "
                "wrote them, then pull again; until then this ledger takes new events as before, "
                "and a push waits for the pull",
                kind=exc.kind,
                schema=exc.schema,
                event_id=exc.event_id,
                commit=exc.commit,
            ) from None
        if last_seen is not None and last_seen != remote_head:
            node = _node_function(store, report)
            if not descends_from(node, last_seen, remote_head):
                raise RemoteRewritten(
                    f"remote {target.name} ({target.url}) was rewritten: its ledger head "
                    f"{remote_head.decode()} does not contain {last_seen.decode()}, the "
                    "last head seen from it",
                    commit=remote_head.decode(),
                    hint="nothing changed locally; find out who force-pushed, and restore the "
                    "remote by pushing from a clone that has the full history",
                )
    finally:
        if base is not None:
            base.close()
    return report


def local_tags(store: GitStore) -> dict[str, SignedTag]:
    """The checkpoint and witness tags this ledger publishes (checked: see
    :func:`perfledger.ledger.checkpoints.published`)."""
    refs = {
        CHECKPOINT_NAMESPACE + k: v
        for k, v in store.repo.refs.as_dict(CHECKPOINT_NAMESPACE).items()
    }
    if not refs:
        return {}
    reader = store.object_reader()
    try:
        return published(refs, reader.read)
    finally:
        reader.close()


def _check_checkpoints(
    store: GitStore | None,
    target: Remote,
    node: Any,
    remote_head: bytes,
    objects: dict[bytes, tuple[int, bytes]],
    tag_refs: dict[bytes, bytes],
    policy: CheckpointPolicy | None,
) -> list[SignedTag]:
    """Check the remote's checkpoints with this ledger's and the policy's trusted ones
    against the remote's history (SPEC.md section 2, Checkpoints). Returns: the remote's tags
    this ledger lacks. Raises: IntegrityError naming the remote and the checkpoint."""
    policy = policy or CheckpointPolicy()
    base = store.object_reader() if store is not None else None

    def read(binary: bytes) -> tuple[int, bytes]:
        hit = objects.get(binary)
        if hit is not None or base is None:
            if hit is None:
                raise IntegrityError(f"the remote did not send tag {binary.hex()}")
            return hit
        return base.read(binary)

    try:
        remote_tags = published(tag_refs, read)
    except IntegrityError as exc:
        raise _from_remote(exc, target) from None
    finally:
        if base is not None:
            base.close()
    mine = local_tags(store) if store is not None else {}
    trusted = read_trusted(policy.trusted_dir) if policy.trusted_dir else {}
    tags = {**mine, **trusted, **remote_tags}
    if tags or policy.demands:
        optional = frozenset(mine) - set(remote_tags) - set(trusted)
        try:
            check(tags, node, remote_head, policy, optional=optional)
        except IntegrityError as exc:
            raise _from_remote(exc, target) from None
    return [t for sha, t in remote_tags.items() if sha not in mine]


def _from_remote(exc: IntegrityError, target: Remote) -> IntegrityError:
    """``exc`` with the remote named and the promise that nothing changed."""
    return IntegrityError(
        f"remote {target.name} ({target.url}) refused: {exc.message}; nothing was pulled and "
        "this ledger is unchanged",
        hint=exc.hint,
        commit=exc.commit,
        event_id=exc.event_id,
    )


def publish_tags(repo: Repo, tags: list[SignedTag]) -> None:
    """Write checked tags (loose objects, fsynced) and create their refs; an existing ref is
    never moved (its name is its value)."""
    if not tags:
        return
    write_loose(os.path.join(repo.controldir(), "objects"), [tag_object(t.raw) for t in tags])
    for tag in sorted(tags, key=lambda t: t.is_witness):  # checkpoints before their witnesses
        repo.refs.add_if_new(ref_of(tag), tag.sha.encode())


def _node_function(store: GitStore | None, report: IncomingReport) -> Any:
    """hex sha -> CommitNode over the verified incoming commits, then the local store."""

    def node(sha: bytes) -> CommitNode:
        hit = report.nodes.get(sha)
        if hit is not None:
            return hit
        if store is None:
            raise IntegrityError(f"commit {sha.decode()} is missing", commit=sha.decode())
        return store.commit_node(sha)

    return node


def _move_tracking_ref(repo: Repo, target: Remote, last_seen: bytes | None, head: bytes) -> None:
    """Compare-and-swap the tracking ref from ``last_seen`` to ``head``."""
    if last_seen == head:
        return
    ref = target.tracking_ref
    ok = (
        repo.refs.add_if_new(ref, head)
        if last_seen is None
        else repo.refs.set_if_equals(ref, last_seen, head)
    )
    if not ok:
        raise ConcurrentAppend(
            f"another process moved {ref.decode()} during this pull",
            hint="pull again; the verified objects are kept, the ledger ref did not move",
        )


def _join(store: GitStore, remote_head: bytes, node: Any) -> tuple[bytes, str, bytes | None]:
    """Move the ledger ref to include ``remote_head``: nothing, a fast-forward or a merge.
    Returns (new head, action, merge commit or None)."""
    for attempt in range(LOCAL_ATTEMPTS):
        # optimistic first; after a few lost races, under the writers' lock (as transact does)
        pessimistic = attempt >= OPTIMISTIC_ATTEMPTS
        with store.writers_lock() if pessimistic else contextlib.nullcontext():
            local = store.read_head()
            if local == remote_head or store.reaches(remote_head, local):
                return local, "up_to_date", None
            if descends_from(node, local, remote_head):
                if store.set_head(local, remote_head):
                    return remote_head, "fast_forward", None
            else:
                merge = store.write_merge([local, remote_head])
                if store.set_head(local, merge):
                    return merge, "merged", merge
        time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
    raise ConcurrentAppend(
        f"could not move the ledger ref after {LOCAL_ATTEMPTS} attempts: local writers kept "
        "moving it",
        hint="pull again; the pulled events are kept under the tracking ref",
    )


# ------------------------------------------------------------------------------ push


def push(store: GitStore, remote: str | None = None) -> PushResult:
    """Push the local ledger head to ``remote`` (as :func:`pull`), fast-forward only.
    Returns: a :class:`PushResult`.
    Raises: NonFastForward when the remote holds events not pulled yet, or another push moved
        its ref during ours; RemoteError when it cannot be reached. Never forces.
    """
    started = time.perf_counter()
    target = resolve_remote(store.repo, remote)
    local = store.read_head()
    holder: dict[str, bytes | None] = {"before": None}
    node = store.commit_node
    object_store = store.repo.object_store
    tags = {t.sha.encode(): t for t in local_tags(store).values()}
    sent_tags: list[str] = []
    remote_tags: set[bytes] = set()

    def update_refs(refs: dict[bytes, bytes]) -> dict[bytes, bytes]:
        current = refs.get(LEDGER_REF)
        holder["before"] = current
        remote_tags.update(v for r, v in refs.items() if r.startswith(CHECKPOINT_NAMESPACE))
        # a checkpoint ref is only ever created: one the remote has is left as it is
        updates = {ref_of(t): sha for sha, t in tags.items() if ref_of(t) not in refs}
        sent_tags[:] = sorted(sha.decode() for sha in updates.values())
        if current == local:
            return updates
        if current is not None and (
            current not in object_store or not descends_from(node, current, local)
        ):
            raise NonFastForward(
                f"remote {target.name} has ledger events this ledger has not pulled "
                f"(its head {current.decode()})",
                hint=f"pull first (perfledger pull {target.name}), or use perfledger sync",
            )
        return {LEDGER_REF: local, **updates}

    def generate_pack_data(
        have: Any, want: Any, *, ofs_delta: bool = False, progress: Any = None
    ) -> Any:
        haves = [h for h in have if h in object_store and h not in remote_tags]
        extra = [tag_object(tags[w].raw) for w in want if w in tags]
        return _pack_records(store, [w for w in want if w not in tags], haves, extra)

    with client(target.url) as (remote_client, path):
        result = remote_client.send_pack(path, update_refs, generate_pack_data)
    before = holder["before"]
    status = (result.ref_status or {}).get(LEDGER_REF)
    if before != local and status is not None:
        raise NonFastForward(
            f"remote {target.name} refused the update of refs/heads/ledger: {status}",
            hint="another machine pushed meanwhile: pull, then push (perfledger sync)",
        )
    with contextlib.suppress(Exception):  # the tracking ref only ever moves forward
        last_seen = read_ref(store.controldir, target.tracking_ref)
        if last_seen is None or descends_from(node, last_seen, local):
            _move_tracking_ref(store.repo, target, last_seen, local)
    return PushResult(
        remote=target.name,
        url=target.url,
        before=before.decode() if before else None,
        after=local.decode(),
        pushed=before != local,
        elapsed_s=time.perf_counter() - started,
        tags_pushed=sent_tags,
    )


def _commits_between(store: GitStore, haves: list[bytes], wants: list[bytes]) -> list[bytes]:
    """The commits reachable from ``wants`` and not from ``haves`` (hex shas), as the walk meets
    them (children before parents along each path)."""
    known: set[bytes] = set()
    stack = list(haves)
    while stack:
        sha = stack.pop()
        if sha not in known:
            known.add(sha)
            stack.extend(store.commit_node(sha).parents)
    commits: list[bytes] = []
    stack, seen = list(wants), set()
    while stack:
        sha = stack.pop()
        if sha in seen or sha in known:
            continue
        seen.add(sha)
        commits.append(sha)
        stack.extend(store.commit_node(sha).parents)
    return commits


def _pack_records(
    store: GitStore, wants: list[bytes], haves: list[bytes], extra: list[RawObject]
) -> tuple[int, Any]:
    """The objects of the commits reachable from ``wants`` and not from ``haves`` (hex shas),
    and the ``extra`` objects (checkpoint tags),
    read through the bulk :class:`ObjectReader`, as dulwich pack records without deltas
    (dulwich's ``generate_pack_data`` parses every object in Python: far slower)."""
    from dulwich.pack import UnpackedObject  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    commits = _commits_between(store, haves, wants)
    reader = store.object_reader()
    records: list[Any] = [
        UnpackedObject(o.type_num, delta_base=None, crc32=None, decomp_chunks=[o.raw],
                       sha=bytes.fromhex(o.id.decode()))
        for o in extra
    ]  # fmt: skip
    sent: set[bytes] = set()

    def add(binary: bytes) -> tuple[int, bytes]:
        type_num, raw = reader.read(binary)
        if binary not in sent:
            sent.add(binary)
            records.append(
                UnpackedObject(
                    type_num, delta_base=None, crc32=None, decomp_chunks=[raw], sha=binary
                )
            )
        return type_num, raw

    try:
        for sha in reversed(commits):
            _, raw = add(bytes.fromhex(sha.decode()))
            trees = [bytes.fromhex(raw[5:45].decode())]
            while trees:
                _, tree_raw = add(trees.pop())
                for _name, mode, entry in parse_tree(tree_raw, 20):
                    binary = bytes.fromhex(entry.decode())
                    if mode == 0o40000:
                        trees.append(binary)
                    else:
                        add(binary)
    finally:
        reader.close()
    return len(records), iter(records)


@dataclass
class SyncResult:
    """A :func:`sync`: its last pull and its push, and how many rounds it took."""

    pull: PullResult
    push: PushResult
    rounds: int

    def to_json(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {"pull": self.pull.to_json(), "push": self.push.to_json(), "rounds": self.rounds}


def sync(
    store: GitStore,
    remote: str | None = None,
    *,
    attempts: int = SYNC_ATTEMPTS,
    policy: CheckpointPolicy | None = None,
) -> SyncResult:
    """Pull, then push; when another machine pushed in between, pull and push again.
    Returns: a :class:`SyncResult`. Raises: as :func:`pull` and :func:`push`; ConcurrentAppend
        when ``attempts`` rounds all lost the race.
    """
    for attempt in range(attempts):
        pulled = pull(store, remote, policy=policy)
        try:
            pushed = push(store, remote)
        except NonFastForward:
            time.sleep(random.uniform(0, 0.05 * min(attempt + 1, 10)))
            continue
        return SyncResult(pulled, pushed, attempt + 1)
    raise ConcurrentAppend(
        f"sync lost the race {attempts} times: other machines kept pushing",
        hint="run perfledger sync again",
    )


# ------------------------------------------------------------------------------ clone


def clone(
    url: str,
    path: str | os.PathLike[str],
    *,
    name: str = DEFAULT_REMOTE,
    policy: CheckpointPolicy | None = None,
) -> tuple[GitStore, PullResult]:
    """Clone the ledger at ``url`` into a new bare repository at ``path``, verified end to end
    (its checkpoints too, against ``policy``) before the ledger ref is written; ``url`` becomes
    remote ``name``.
    Returns: (the opened store, a :class:`PullResult` with action ``cloned``).
    Raises: BadRequest when ``path`` is not empty or the remote has no ledger; RemoteError;
        IntegrityError (nothing is left at ``path``).
    """
    path = os.fspath(path)
    if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise BadRequest(f"{path} exists and is not an empty directory", hint="choose a new path")
    created = not os.path.exists(path)
    created_top = first_missing_ancestor(path)
    os.makedirs(path, exist_ok=True)
    try:
        return _clone(url, path, name, created_top, policy)
    except BaseException:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        else:  # empty the directory the caller gave
            for entry in os.scandir(path):
                (shutil.rmtree if entry.is_dir(follow_symlinks=False) else os.unlink)(entry.path)
        raise


def _clone(
    url: str, path: str, name: str, created_top: str | None, policy: CheckpointPolicy | None
) -> tuple[GitStore, PullResult]:
    started = time.perf_counter()
    repo = Repo.init_bare(path)
    repo.refs.set_symbolic_ref(b"HEAD", LEDGER_REF)
    write_ledger_config(repo)
    target = add_remote(repo, name, url)
    # the skeleton durable before its ref (see perfledger.ledger.durable)
    make_repository_durable(repo.controldir(), os.path.dirname(created_top or path))
    tag_refs: dict[bytes, bytes] = {}
    remote_head, objects = fetch(None, repo, target, [], tag_refs)
    report = _verify_and_check(None, target, remote_head, objects, None)
    tags = _check_checkpoints(
        None, target, _node_function(None, report), remote_head, objects, tag_refs, policy
    )
    store = GitStore(repo)
    store.adopt(report.objects, report.nodes, report.keys)
    _move_tracking_ref(repo, target, None, remote_head)
    if not repo.refs.add_if_new(LEDGER_REF, remote_head):
        raise ConcurrentAppend(f"another process created {path}'s ledger during the clone")
    fsync_dir(os.path.dirname(repo.refs.refpath(LEDGER_REF)))
    publish_tags(repo, tags)
    result = PullResult(
        remote=name,
        url=target.url,
        before="",
        after=remote_head.decode(),
        remote_head=remote_head.decode(),
        action="cloned",
        new_events=[e.envelope for e in report.events],
        fetched_objects=len(objects),
        elapsed_s=time.perf_counter() - started,
    )
    record_pull(store, result)
    return store, result


__all__ = [
    "LastPull",
    "NonFastForward",
    "PullResult",
    "PushResult",
    "RemoteError",
    "RemoteRewritten",
    "SyncResult",
    "changes_since",
    "changes_since_last_pull",
    "clone",
    "last_pull",
    "pull",
    "push",
    "sync",
]
