"""The library interface: ``perfledger.open(path)`` returns a :class:`Ledger` (SPEC.md section 6).

The CLI is a thin skin over this module: nothing the CLI does is impossible from Python.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from perfledger._version import __version__
from perfledger.errors import BadRequest, NotALedger, PerfledgerError
from perfledger.events.envelope import Envelope
from perfledger.events.kinds import RecordedEvent, kinds_fingerprint, recorded
from perfledger.ledger.base import Artifact, Decide, EventDraft
from perfledger.ledger.cache import (
    CACHE_FORMAT,
    LazyStruct,
    Snapshot,
    StateHash,
    encode_fields,
    load_rendering,
    load_snapshot,
    load_state_hash,
    save_rendering,
    save_snapshot,
    save_state_hash,
)
from perfledger.ledger.gc import collect_dead_temporaries
from perfledger.ledger.objects import split_ident
from perfledger.ledger.refcas import read_ref
from perfledger.ledger.store import FORMAT_VERSION, GitStore

if TYPE_CHECKING:
    from perfledger.ledger.checkpoints import CheckpointPolicy
    from perfledger.ledger.sync import LastPull, PullResult, PushResult, SyncResult
    from perfledger.ledger.verify import CommitGraph, VerifyReport
    from perfledger.projections.base import Projection

#: Environment variable naming the ledger when ``--ledger`` is not given.
LEDGER_ENV = "PERFLEDGER_DIR"


def find_ledger_path(explicit: str | os.PathLike[str] | None = None, cwd: str | None = None) -> str:
    """Find the ledger: ``explicit`` (``--ledger``), else ``$PERFLEDGER_DIR``, else the git
    repository containing ``cwd`` (default: the current directory).

    Raises: NotALedger when none is found.
    """
    if explicit is not None:
        path = os.fspath(explicit)
        if not path:
            raise NotALedger("--ledger was given an empty path", hint="pass the ledger's directory")
        return path
    from_env = os.environ.get(LEDGER_ENV)
    if from_env:
        return from_env
    from dulwich.errors import NotGitRepository  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)
    from dulwich.repo import Repo  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    start = cwd or os.getcwd()
    try:
        repo = Repo.discover(start)
    except NotGitRepository:
        below = ledgers_below(start)
        found = (
            f"found a ledger in ./{below[0]}: pass --ledger {below[0]} or export "
            f"{LEDGER_ENV}={os.path.abspath(os.path.join(start, below[0]))}; else "
            if len(below) == 1
            else ""
        )
        raise NotALedger(
            f"no ledger here: {start} is not inside a git repository",
            hint=found + f"pass --ledger PATH, set {LEDGER_ENV}, or run `perfledger init PATH`",
        ) from None
    path = repo.path
    repo.close()
    return path


#: How many entries of a directory :func:`ledgers_below` looks at (a hint, not a search).
_BELOW_MAX_ENTRIES = 200


def ledgers_below(directory: str) -> list[str]:
    """The names of ``directory``'s immediate subdirectories that hold a ledger (a git
    repository, bare or not, with the ``ledger`` branch), sorted; at most
    :data:`_BELOW_MAX_ENTRIES` entries are looked at. For the hint of a command run beside the
    ledger that ``perfledger init DIR`` made, not inside it."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)[:_BELOW_MAX_ENTRIES]
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        for gitdir in (entry.path, os.path.join(entry.path, ".git")):
            if os.path.isfile(os.path.join(gitdir, "HEAD")) and _has_ledger_branch(gitdir):
                out.append(entry.name)
                break
    return out


def _has_ledger_branch(gitdir: str) -> bool:
    """Whether the git directory ``gitdir`` has the ``ledger`` branch, loose or in
    ``packed-refs`` (read by the store's one ref reader, bounded; any failure: no)."""
    try:
        return read_ref(gitdir, b"refs/heads/ledger") is not None
    except (OSError, PerfledgerError):
        return False


#: Folded events after which the in-memory state is written to the derived cache.
_SAVE_EVERY_EVENTS = 512


@dataclass
class _Memo:
    """The state this Ledger holds in memory: at ``head``, ``count`` events folded, the last
    one's (lamport, id) ``last``, ``dirty`` events folded since the cache was written, under the
    code version (perfledger, projection and kind schema versions) ``code_version``."""

    head: str
    state: Any
    count: int
    last: tuple[int, str]
    dirty: int
    code_version: str


@dataclass(frozen=True)
class LogEntry:
    """One line of ``perfledger log``: an event's identity and subject."""

    event_id: str
    commit: str
    kind: str
    lamport: int
    ts: str
    actor: str
    subject: str


class Ledger:
    """An opened ledger: typed append, read, state, verify.

    Args:
        store: the git store it wraps.
        projection: the projection ``state`` folds (default: the ledger projection).
    """

    def __init__(self, store: GitStore, projection: Projection | None = None) -> None:
        self.store = store
        self._projection = projection
        self._memo: _Memo | None = None
        self._tidied = False

    @property
    def projection(self) -> Projection:
        """The projection :meth:`state` folds (imported on first use: ``log`` never needs it)."""
        if self._projection is None:
            from perfledger.projections.base import DEFAULT_PROJECTION  # noqa: PLC0415 (off `perfledger evidence list`'s start-up path)

            self._projection = DEFAULT_PROJECTION
        return self._projection

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        actor: str = "perfledger",
        remember_actor: bool = False,
    ) -> Ledger:
        """Create a ledger at ``path`` (see :meth:`GitStore.init`) and open it; with
        ``remember_actor``, ``actor`` is written to the clone's git config
        (``perfledger.actor``) as the CLI's default actor."""
        return cls(GitStore.init(path, name=name, actor=actor, remember_actor=remember_actor))

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Ledger:
        """Open the ledger at ``path``; raises NotALedger naming the path otherwise."""
        return cls(GitStore.open(path))

    def close(self) -> None:
        """Release files (saves the derived index and the state cache)."""
        self._maybe_save(force=True)
        self.store.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        """The repository path."""
        return self.store.path

    # -- writing -----------------------------------------------------------------------------

    def append(
        self,
        kind: str,
        payload: Any,
        *,
        actor: str,
        request: Any = None,
        idempotency_key: str | None = None,
        artifacts: dict[str, Artifact] | None = None,
    ) -> Envelope:
        """Append one event durably and return its envelope (or the existing event when
        ``idempotency_key`` is already in the ledger).

        Decisions of the workflow (``TargetFrozen``, ``ChampionSelected``, ...) are refused here:
        they go through their operation, whose decider checks the rules
        (:func:`perfledger.commands.registry.operations.execute`, or the CLI).

        Raises: BadRequest for a malformed payload or field, or for a decision kind;
            ConcurrentAppend when compare-and-swap retries are exhausted; NewerLedger (exit 7)
            when the ledger holds an event this perfledger cannot read (read-only for it).
        """
        _refuse_decision_kinds([kind])
        self._refuse_if_unreadable()
        self._tidy_once()
        return self.store.append(
            EventDraft(kind, payload, actor, request, idempotency_key, dict(artifacts or {}))
        )

    def append_batch(self, drafts: Sequence[EventDraft]) -> list[Envelope]:
        """Append drafts atomically (all or none); see :meth:`GitStore.append_batch`. Decision
        kinds are refused as in :meth:`append`."""
        _refuse_decision_kinds([draft.kind for draft in drafts])
        self._refuse_if_unreadable()
        self._tidy_once()
        return self.store.append_batch(drafts)

    def transact(self, decide: Decide) -> list[Envelope]:
        """Run ``decide`` on the current head and append its drafts; re-decided on a lost race.

        When the state is in memory (``decide`` read it), the appended events are folded into
        it at once, so that the state cache written at :meth:`close` is at the new head: the
        next command then starts from it instead of reading these events back and folding
        them itself."""
        self._refuse_if_unreadable()
        self._tidy_once()
        envelopes = self.store.transact(decide)
        if envelopes and self._memo is not None:
            self._fold_forward(self._memo, self.head())
        return envelopes

    def _refuse_if_unreadable(self) -> None:
        """Refuse to write a ledger this perfledger cannot fully read (SPEC.md section 6): one
        holding an event of a kind it does not know or of a newer schema version is read-only
        for it, so that no writer appends on top of what its rules could not see. Folds the
        state at the head (from the cache, cheap when warm), which reads every event.
        Raises: NewerLedger (exit 7) naming the event, its kind and version."""
        self.state_at(self.head(), lazy=True)

    def _tidy_once(self) -> None:
        """The cheap part of ``perfledger gc``, once per opened ledger that writes: the dead
        writers' temporaries in ``objects/pack`` (one directory listing)."""
        if not self._tidied:
            self._tidied = True

            collect_dead_temporaries(os.path.join(self.store.controldir, "objects", "pack"))

    # -- reading -----------------------------------------------------------------------------

    def head(self) -> str:
        """The current head commit (hex)."""
        return self.store.read_head().decode()

    def events(self) -> Iterator[RecordedEvent]:
        """Yield every event in the total order (lamport, id), payloads upcast and decoded."""
        for envelope in self.store.iter_events():
            yield recorded(envelope)

    def events_at(self, head: str) -> Iterator[RecordedEvent]:
        """Yield the events reachable from commit ``head`` in the total order."""
        for envelope in self.store.iter_events(head.encode()):
            yield recorded(envelope)

    def get(self, event_id: str) -> Envelope:
        """Return the event with ``event_id`` (full id or unique prefix of >= 4 characters)."""
        return self.store.get_event(event_id)

    def payload(self, event_id: str) -> Any:
        """Return the payload of event ``event_id`` decoded as its kind's current Struct (old
        schema versions upcast). Raises: BadRequest for an unknown id; IntegrityError for a
        payload that does not fit its schema."""
        return recorded(self.get(event_id)).payload

    def artifact(self, event_id: str, name: str) -> bytes:
        """Return an event's artifact after checking its blake3 and size."""
        return self.store.read_artifact(event_id, name)

    def log(self, limit: int | None = None) -> list[LogEntry]:
        """Return up to ``limit`` events, newest first (descending (lamport, id)); reads only
        the commits it shows (plus the frontier)."""

        entries = []
        for sha, commit, event_id, lamport in self.store.iter_recent(
            limit if limit is not None else 1 << 62
        ):
            subject = commit.message.split(b"\n", 1)[0].decode("utf-8", "replace")
            actor = commit.author.rsplit(b" <", 1)[0].decode("utf-8", "replace")
            seconds = split_ident(commit.committer)[1]
            ts = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            entries.append(
                LogEntry(
                    event_id=event_id,
                    commit=sha.decode(),
                    kind=subject.split(":", 1)[0],
                    lamport=lamport,
                    ts=ts,
                    actor=actor,
                    subject=subject,
                )
            )
        return entries

    # -- state ---------------------------------------------------------------------------------

    def _code_version(self) -> str:
        return (
            f"{__version__}/{CACHE_FORMAT}/{self.projection.name}:{self.projection.version}/"
            f"{kinds_fingerprint()}"
        )

    def state(self) -> Any:
        """Return the projection's state at the current head (see :meth:`state_at`)."""
        return self.state_at(self.head())

    def state_at(self, head: str, *, lazy: bool = False) -> Any:
        """Return the projection's state at commit ``head`` (hex) of the ledger branch.

        The state is read-only for the caller (this ledger keeps folding new events into it).
        With ``lazy``, a state read from the cache may come back as a
        :class:`~perfledger.ledger.cache.LazyStruct` that decodes a field on first access
        (what a decider reads, not the whole state): for the deciders of a write.
        Sources, cheapest first: the state held in memory when the head moved linearly past it
        (appends in this process); the derived cache on disk when its key matches; the cache
        plus the new events when the head moved linearly past it; a fold from zero otherwise.
        The cache on disk is rewritten when a fold did real work, and at :meth:`close`, not
        after every append: rewriting a large state per append made appends quadratic.
        """
        memo = self._memo
        if memo is not None and memo.code_version != self._code_version():
            memo = self._memo = None  # a kind's schema version changed: refold
        if memo is not None and (memo.head == head or self._fold_forward(memo, head)):
            return self._handed_out(memo, lazy)
        code_version = self._code_version()
        snapshot = load_snapshot(self.store.derived_dir, self.projection.name, code_version)
        if snapshot is not None:
            start = _Memo(
                snapshot.head,
                LazyStruct(self.projection.state_type, snapshot.sections),
                snapshot.count,
                (snapshot.last_lamport, snapshot.last_id),
                dirty=0,
                code_version=code_version,
            )
            if snapshot.head == head or self._fold_forward(start, head):
                self._memo = start
                self._maybe_save()
                return self._handed_out(start, lazy)
        state = self.projection.initial()
        count, last = 0, (0, "")
        for event in self.events_at(head):
            state = self.projection.evolve(state, event)
            count, last = count + 1, (event.envelope.lamport, event.envelope.id)
        self._memo = _Memo(head, state, count, last, dirty=count or 1, code_version=code_version)
        self._maybe_save()
        return state

    @staticmethod
    def _handed_out(memo: _Memo, lazy: bool) -> Any:
        """The memo's state as a caller gets it: a LazyStruct only where ``lazy`` asks for it;
        otherwise materialized once, in place, into the projection's Struct."""
        if not lazy and isinstance(memo.state, LazyStruct):
            memo.state = memo.state.materialize()
        return memo.state

    def _fold_forward(self, memo: _Memo, head: str) -> bool:
        """Fold the events between ``memo.head`` and ``head`` into ``memo`` when the head moved
        linearly past it and every new event sorts after the folded ones; False otherwise (the
        memo is then left as it was)."""
        new = self.store.commits_since(memo.head.encode(), head.encode())
        if new is None:
            return False
        envelopes = [self.store.read_envelope(sha) for sha in new]
        last = memo.last
        for envelope in envelopes:
            if (envelope.lamport, envelope.id) <= last:
                return False
            last = (envelope.lamport, envelope.id)
        for envelope in envelopes:
            memo.state = self.projection.evolve(memo.state, recorded(envelope))
        memo.head, memo.count, memo.last = head, memo.count + len(envelopes), last
        memo.dirty += len(envelopes)
        return True

    def _maybe_save(self, *, force: bool = False) -> None:
        """Write the in-memory state to the derived cache when enough events were folded since
        the last write (or when ``force``)."""
        memo = self._memo
        if memo is None or memo.dirty == 0 or (not force and memo.dirty < _SAVE_EVERY_EVENTS):
            return
        sections = encode_fields(memo.state)
        snapshot = Snapshot(memo.head, self._code_version(), memo.count, *memo.last, sections)
        with contextlib.suppress(OSError):  # a read-only ledger only loses speed
            save_snapshot(self.store.derived_dir, self.projection.name, snapshot)
        memo.dirty = 0

    def state_json(self, head: str | None = None) -> bytes:
        """Return ``{"head", "state_hash", "state"}`` at ``head`` (default: the current head)
        as compact JSON bytes with sorted keys: what ``perfledger state --json`` prints.

        Cached as derived data beside the state snapshot, keyed like it (head and code
        version): a warm call reads it back instead of decoding the snapshot and encoding the
        state again, which cost most of a call on a large ledger. Never used by verify/audit.
        """

        head = head or self.head()
        derived, name = self.store.derived_dir, f"{self.projection.name}.state-json"
        version = self._code_version()
        cached = load_rendering(derived, name, head, version)
        if cached is not None:
            return cached
        data = {"head": head, "state_hash": self.state_hash_at(head), "state": self.state_at(head)}
        raw = msgspec.json.encode(data, order="sorted")  # Structs encode natively: no copy
        with contextlib.suppress(OSError):  # a read-only ledger only loses speed
            save_rendering(derived, name, head, version, raw)
        return raw

    def state_hash(self) -> str:
        """Return the blake3 hash (hex) of the canonical encoding of :meth:`state`."""
        return self.state_hash_at(self.head())

    def state_hash_at(self, head: str) -> str:
        """Return the blake3 hash (hex) of the canonical encoding of :meth:`state_at` ``head``.

        Cached beside the state snapshot (derived data: ``verify`` and ``audit`` recompute it
        from zero): hashing a large state costs seconds, and it changes only with the head.
        """
        from perfledger.projections.ledger_state import state_hash  # noqa: PLC0415 (off `perfledger evidence list`'s start-up path)

        derived, name, version = self.store.derived_dir, self.projection.name, self._code_version()
        cached = load_state_hash(derived, name, head, version)
        if cached is not None:
            return cached
        value = state_hash(self.state_at(head))
        with contextlib.suppress(OSError):  # a read-only ledger only loses speed
            save_state_hash(derived, name, StateHash(head, version, value))
        return value

    # -- verification ------------------------------------------------------------------------

    def verify(self, *, on_graph: Callable[[CommitGraph], None] | None = None) -> VerifyReport:
        """Verify the whole ledger from zero (never the cache) and fold it on the way; the
        report's ``extra`` holds ``state_hash`` when it passed. ``on_graph`` gets the verified
        commit graph (see :func:`perfledger.ledger.verify.verify_store`)."""
        state = self.projection.initial()
        holder = [state]

        def on_event(event: RecordedEvent) -> None:
            holder[0] = self.projection.evolve(holder[0], event)

        from perfledger.ledger.verify import verify_store  # noqa: PLC0415 (dulwich via perfledger.ledger.verify)
        from perfledger.projections.ledger_state import state_hash  # noqa: PLC0415 (off `perfledger evidence list`'s start-up path)

        report = verify_store(
            self.store, on_event=on_event, on_graph=on_graph, format_version=FORMAT_VERSION
        )
        if report.ok:
            report.extra["state_hash"] = state_hash(holder[0])
        return report

    # -- sync ----------------------------------------------------------------------------

    @classmethod
    def clone(
        cls,
        url: str,
        path: str | os.PathLike[str],
        *,
        remote: str = "origin",
        policy: CheckpointPolicy | None = None,
    ) -> tuple[Ledger, PullResult]:
        """Clone the ledger at ``url`` (a path, ``file://``, ``git://``, ``ssh://``,
        ``http(s)://``) into a new bare repository at ``path``, verified (its checkpoints
        against ``policy`` too) before its ref is written; see
        :func:`perfledger.ledger.sync.clone`. Returns (the ledger, what came)."""
        store, result = _ledger_sync().clone(url, path, name=remote, policy=policy)
        return cls(store), result

    def pull(
        self, remote: str | None = None, *, policy: CheckpointPolicy | None = None
    ) -> PullResult:
        """Fetch, verify and join the remote's events (fast-forward or a merge commit that
        carries no event) and checkpoints (checked against ``policy``: docs/checkpoints.md);
        see :func:`perfledger.ledger.sync.pull` for the errors."""
        return _ledger_sync().pull(self.store, remote, policy=policy)

    def push(self, remote: str | None = None) -> PushResult:
        """Push the head to the remote, fast-forward only (NonFastForward: pull first); see
        :func:`perfledger.ledger.sync.push`."""
        return _ledger_sync().push(self.store, remote)

    def sync(
        self, remote: str | None = None, *, policy: CheckpointPolicy | None = None
    ) -> SyncResult:
        """Pull (its checkpoints checked against ``policy``) then push, retried when another
        machine pushed in between; see :func:`perfledger.ledger.sync.sync`."""
        return _ledger_sync().sync(self.store, remote, policy=policy)

    def changes_since(self, old_head: str | None, new_head: str | None = None) -> list[Envelope]:
        """The events reachable from ``new_head`` (default: the head) and not from ``old_head``
        (hex; None: all), in the total order; see :func:`perfledger.ledger.sync.changes_since`."""
        return _ledger_sync().changes_since(self.store, old_head, new_head)

    def changes_since_last_pull(self) -> tuple[LastPull | None, list[Envelope]]:
        """(the last pull's record, the events it brought that were not in the local head
        before it); (None, []) when never pulled. For ``perfledger resume``."""
        return _ledger_sync().changes_since_last_pull(self.store)


def _ledger_sync() -> ModuleType:
    """:mod:`perfledger.ledger.sync`, imported on first use."""
    from perfledger.ledger import sync  # noqa: PLC0415 (dulwich via perfledger.ledger.sync)

    return sync


def _refuse_decision_kinds(kinds: Sequence[str]) -> None:
    """BadRequest when a workflow decision would bypass its decider (the rules R1-R18)."""
    from perfledger.events.vocabulary import DECISION_KINDS  # noqa: PLC0415 (off `perfledger show`'s start-up path)

    if DECISION_KINDS.isdisjoint(kinds):
        return
    decided = sorted(set(kinds) & DECISION_KINDS)
    raise BadRequest(
        f"{', '.join(decided)} records a decision; it is appended through its operation so "
        "that the rules are checked",
        hint="use the CLI (e.g. `perfledger champion select`) or "
        "perfledger.commands.registry.operations.execute",
    )


def open(path: str | os.PathLike[str] | None = None) -> Ledger:
    """Open the ledger at ``path`` (or the one :func:`find_ledger_path` finds) as a
    :class:`Ledger`.

    Raises: NotALedger naming the path when it is not a ledger.
    """
    return Ledger.open(find_ledger_path(path))


def init(
    path: str | os.PathLike[str], *, name: str | None = None, actor: str = "perfledger"
) -> Ledger:
    """Create a ledger at ``path`` and open it (see :meth:`Ledger.init`)."""
    return Ledger.init(path, name=name, actor=actor)
