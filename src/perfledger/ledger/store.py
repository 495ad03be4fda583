"""The git-backed event store (SPEC.md section 2; docs/storage.md). Names on disk:
:mod:`perfledger.ledger.layout`; an event as git objects: :mod:`perfledger.ledger.objects`.

Append: build the objects, write them durably (loose, or one pack for a batch), compare-and-swap
the ref from the head the decision was made on (:mod:`perfledger.ledger.refcas`), fsync the
ref's directory. A crash leaves the old head or the new one (unreachable objects are garbage,
never a broken ledger); a lost race re-runs the decision on the new head. Packing
(:mod:`perfledger.ledger.packing`) runs after the ref moved.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import random
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import blake3

from perfledger.errors import (
    AmbiguousId,
    BadRequest,
    ConcurrentAppend,
    IntegrityError,
    NewerLedger,
    NotALedger,
    resource_error,
)
from perfledger.events.envelope import Envelope, decode_envelope, validate_draft_fields
from perfledger.events.kinds import UPGRADE_HINT, LedgerInitialized
from perfledger.events.limits import (
    LEDGER_LIMITS_HINT,
    MAX_COMMIT_BYTES,
    MAX_EVENT_BYTES,
    MAX_TREE_BYTES,
)
from perfledger.ledger import layout
from perfledger.ledger.base import (
    DEFAULT_MAX_ATTEMPTS,
    OPTIMISTIC_ATTEMPTS,
    Decide,
    EventDraft,
    EventStore,
    HeadView,
    artifact_ref,
    build_envelope,
    check_batch_keys,
    idempotent_replay,
)
from perfledger.ledger.dag import CommitNode, EventHeads
from perfledger.ledger.durable import first_missing_ancestor, make_repository_durable
from perfledger.ledger.gc import hold_open_guard
from perfledger.ledger.gitdir import (
    GitLocation,
    find_controldir,
    read_section,
    refuse_incomplete_clone,
)
from perfledger.ledger.gitobj import RawObject, write_loose, write_pack
from perfledger.ledger.index import CommitIndex, IndexEntry, entry_from_raw
from perfledger.ledger.objects import (
    EMPTY_TREE,
    ParsedCommit,
    build_event_objects,
    build_merge_commit,
    event_trailers,
    parse_commit,
    split_ident,
)
from perfledger.ledger.packing import maybe_pack
from perfledger.ledger.reader import ObjectReader
from perfledger.ledger.refcas import RefLocked, break_dead_lock, lock_ref, read_ref

if TYPE_CHECKING:  # dulwich is imported where it is used: opening a ledger does not need it
    from dulwich.repo import Repo

LEDGER_REF = layout.LEDGER_REF
FORMAT_VERSION = layout.FORMAT_VERSION
#: Batches of at least this many events are written as one pack instead of loose objects.
PACK_BATCH_THRESHOLD = 8
#: How long an append waits for a ref lock that another program (git) holds before it reports
#: it (seconds). The lock is never broken; this bounds only the wait.
REF_LOCK_WAIT_S = 2.0
_log = logging.getLogger("perfledger")
#: The derived index is saved (besides at close) once this many commits were indexed since the
#: last save, or a third of the index if more (a save costs O(ledger): a fixed interval made
#: long runs of batches quadratic). A writer killed before saving loses speed only.
_INDEX_SAVE_EVERY = 256
#: At close the index is saved once it lags the head by this many commits (every later
#: command would walk them again).
_INDEX_SAVE_AT_CLOSE = 64


def _tree_entry(tree: bytes, name: bytes) -> bytes | None:
    """The binary sha of entry ``name`` in raw tree content (``<mode> <name>\\0<20 bytes>``
    entries), or None when absent or the content is malformed."""
    pos = 0
    while pos < len(tree):
        space = tree.find(b" ", pos)
        nul = tree.find(b"\0", space + 1)
        if space < 0 or nul < 0 or nul + 21 > len(tree):
            return None
        if tree[space + 1 : nul] == name:
            return tree[nul + 1 : nul + 21]
        pos = nul + 21
    return None


def write_ledger_config(repo: Repo, *, actor: str | None = None) -> None:
    """Mark ``repo`` as a ledger in its config: ``perfledger.formatVersion``, ``core.fsync =
    committed`` (so that git's own writes to it, a push say, are durable too) and, when given,
    ``perfledger.actor`` (the CLI's default actor on this clone)."""
    config = repo.get_config()
    config.set((layout.CONFIG_SECTION,), b"formatVersion", str(FORMAT_VERSION).encode())
    config.set((b"core",), b"fsync", b"committed")
    if actor is not None:
        config.set((layout.CONFIG_SECTION,), b"actor", actor.encode())
    config.write_to_path()


def _no_ledger_branch(path: str, controldir: str | os.PathLike[str]) -> NotALedger:
    """The error for a repository without the ledger branch; when it holds a remote's ledger
    branch (a plain ``git clone`` of a ledger whose HEAD names another branch), the hint says
    how to audit it."""
    from dulwich.refs import DiskRefsContainer  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    tracked: list[str] = []
    with contextlib.suppress(OSError):  # loose and packed refs: "<remote>/ledger"
        remotes = DiskRefsContainer(os.fspath(controldir)).keys(base=b"refs/remotes")
        tracked = sorted(
            name.decode(errors="replace")
            for ref in remotes
            for name, sep, branch in [ref.partition(b"/")]
            if sep and branch == b"ledger"
        )
    if tracked:
        return NotALedger(
            f"{path} is a git clone but has no ledger branch (refs/heads/ledger); its remote "
            f"{tracked[0]!r} has one",
            hint=f"create it: `git -C {path} branch ledger {tracked[0]}/ledger` (or clone with "
            "`git clone --branch ledger URL`), then run the command again",
        )
    return NotALedger(
        f"{path} is a git repository but not a ledger (no refs/heads/ledger)",
        hint="create one with `perfledger init PATH`",
    )


def _check_format(path: str, version: bytes | None) -> None:
    """Refuse a ledger written in another storage format (checked before anything is read)."""
    if version is not None and version != str(FORMAT_VERSION).encode():
        if version.isdigit() and int(version) > FORMAT_VERSION:  # a newer perfledger's ledger
            raise NewerLedger(
                f"{path} uses ledger format {version.decode()}, newer than this perfledger "
                f"reads ({FORMAT_VERSION}): a newer perfledger wrote it",
                hint=UPGRADE_HINT,
            )
        raise NotALedger(
            f"{path} uses ledger format {version.decode(errors='replace')}, this perfledger "
            f"reads format {FORMAT_VERSION}",
            hint="upgrade perfledger",
        )


def _refuse_object_format(repo: Repo, path: str) -> None:
    """Refuse a repository whose objects are not named by SHA-1 (``git init
    --object-format=sha256``): every ledger object is a SHA-1 object (docs/storage.md), and
    writing them into such a repository would leave objects git cannot read.
    Raises: BadRequest (exit 2), nothing written."""
    try:
        object_format = repo.get_config().get((b"extensions",), b"objectformat")
    except KeyError:
        return
    if object_format.lower() != b"sha1":
        raise BadRequest(
            f"{path} is a git repository with object format "
            f"{object_format.decode(errors='replace')}; a ledger's objects are SHA-1",
            hint="run `perfledger init` on a new directory (it makes its own repository), or "
            "on a repository made by a plain `git init`",
        )


class GitStore(EventStore):
    """The on-disk event store: one git repository, events on ``refs/heads/ledger``.

    Use :meth:`init` to create a ledger and :meth:`open` to open one. Instances are not
    thread-safe; processes may share a ledger freely (appends serialize by compare-and-swap).
    """

    def __init__(self, repo: Repo | GitLocation) -> None:
        """Use an open dulwich ``Repo``, or a :class:`GitLocation` (opened through dulwich on
        first use of :attr:`repo`); :meth:`open` checked the format version."""
        self._repo: Repo | None = None
        self._finalizer: weakref.finalize | None = None
        if isinstance(repo, GitLocation):
            self.path, self.controldir = repo.path, repo.controldir
        else:
            self._adopt(repo)
            self.path = repo.path
            # a linked work tree keeps its objects and refs in the main repository's git dir
            self.controldir = repo.commondir()
        self.derived_dir = os.path.join(self.controldir, layout.DERIVED_DIR)
        # gc's open guard, held shared until close (or until the store is collected)
        guard = hold_open_guard(self.controldir)
        self._release_guard = weakref.finalize(self, os.close, guard) if guard is not None else None
        self._objects_dir = os.path.join(self.controldir, "objects")
        self._index_file = os.path.join(self.derived_dir, layout.INDEX_FILE)
        # the derived index (perfledger.ledger.index)
        self._index = CommitIndex()
        self._dag = EventHeads(self._node, self._index.all_events.__getitem__)
        self._loose_written = 0
        self._packs_written = 0
        self._lock_depth = 0
        self._lock_fd: int | None = None
        self._bulk: ObjectReader | None = None

    @property
    def repo(self) -> Repo:
        """The dulwich repository, opened on first use (sync, packing, object reads)."""
        if self._repo is None:
            from dulwich.repo import Repo  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

            self._adopt(Repo(self.path))
        assert self._repo is not None
        return self._repo

    def _adopt(self, repo: Repo) -> None:
        self._repo = repo
        # closed when the store is collected or at exit: no noise from dulwich's finalizers
        self._finalizer = weakref.finalize(self, repo.close)

    def object_reader(self, *, sparse: bool = False) -> ObjectReader:
        """A bulk :class:`ObjectReader` of this ledger's objects (``sparse``: for a few hundred
        reads). Close it after use."""
        return ObjectReader(lambda: self.repo.object_store, self._objects_dir, sparse=sparse)

    # ------------------------------------------------------------------ opening

    @classmethod
    def init(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        actor: str = "perfledger",
        bare: bool = True,
        remember_actor: bool = False,
    ) -> GitStore:
        """Create a ledger at ``path`` (a new repository, bare unless ``bare`` is False, or an
        existing git repository) and append the root ``LedgerInitialized`` event named ``name``
        (default: the directory's name) by ``actor``; ``remember_actor`` also writes ``actor``
        to the config as ``perfledger.actor`` (the CLI's default actor on this clone); returns
        the opened store.
        Raises: BadRequest when ``path`` already holds a ledger or is not usable, or ``actor`` is
            not a valid actor (checked before anything is created); ResourceError.
        """
        path = os.fspath(path)
        validate_draft_fields(actor, None, {})  # before anything is created on disk
        try:
            return cls._init(path, name=name, actor=actor, bare=bare, remember_actor=remember_actor)
        except OSError as exc:
            resource = resource_error(exc)  # a full disk is not a bad request: exit 1
            if resource is not None:
                raise resource from None
            raise BadRequest(
                f"cannot create a ledger at {path}: {exc.strerror or exc}",
                hint="choose a writable directory",
            ) from None

    @classmethod
    def _init(
        cls, path: str, *, name: str | None, actor: str, bare: bool, remember_actor: bool
    ) -> GitStore:
        from dulwich.errors import NotGitRepository  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)
        from dulwich.repo import Repo  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

        created = first_missing_ancestor(path)
        try:
            repo = Repo(path)
        except NotGitRepository:
            os.makedirs(path, exist_ok=True)
            if os.listdir(path):
                raise BadRequest(
                    f"{path} exists, is not empty and is not a git repository",
                    hint="choose an empty directory or an existing git repository",
                ) from None
            repo = Repo.init_bare(path) if bare else Repo.init(path)
            repo.refs.set_symbolic_ref(b"HEAD", LEDGER_REF)
        if LEDGER_REF in repo.refs:
            raise BadRequest(
                f"{path} already holds a ledger", hint="use it, or choose another path"
            )
        _refuse_object_format(repo, path)
        write_ledger_config(repo, actor=actor if remember_actor else None)
        # the skeleton durable before the first event (its appends fsync nothing above it)
        make_repository_durable(repo.controldir(), os.path.dirname(created or path))
        store = cls(repo)
        ledger_name = name or os.path.basename(os.path.abspath(path).rstrip(os.sep)) or "ledger"
        draft = EventDraft(
            "LedgerInitialized",
            LedgerInitialized(name=ledger_name, format_version=FORMAT_VERSION, creator=actor),
            actor=actor,
        )
        built = build_envelope(draft, (), 1)
        commit, objects = build_event_objects(built, [])
        store._write_objects(objects, batch=False)
        if not store._compare_and_swap(None, commit.id):
            raise ConcurrentAppend(f"another process initialised {path} at the same time")
        store._index.add(commit.id, IndexEntry(built.envelope.id, 1, [], None))
        store._index.head = commit.id
        store._index.loaded = True
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GitStore:
        """Open the ledger at ``path`` (a git repository with ``refs/heads/ledger``).
        Raises: NotALedger naming the path when it is not a git repository, has no ledger
            branch, or was written in an unknown format version.
        """
        path = os.fspath(path)
        location = find_controldir(path)
        config = read_section(location.controldir, layout.CONFIG_SECTION) if location else None
        if location is None or config is None:
            return cls._open_through_dulwich(path)
        if read_ref(location.controldir, LEDGER_REF) is None:
            raise _no_ledger_branch(path, location.controldir)
        _check_format(path, config.get(b"formatversion"))
        refuse_incomplete_clone(location.controldir)  # else "object missing" further on
        return cls(location)

    @classmethod
    def _open_through_dulwich(cls, path: str) -> GitStore:
        """:meth:`open` for the layouts :func:`find_controldir` leaves to dulwich."""
        from dulwich.errors import NotGitRepository  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)
        from dulwich.repo import Repo  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

        try:
            repo = Repo(path)
        except (NotGitRepository, FileNotFoundError, NotADirectoryError):
            if os.path.isdir(path) and not os.access(path, os.R_OK | os.X_OK):
                # not "not a ledger": perfledger may not look (docs/workflow.md, surroundings)
                denied = resource_error(PermissionError(errno.EACCES, "denied", path))
                assert denied is not None
                raise denied from None
            raise NotALedger(
                f"{path} is not a ledger (not a git repository)",
                hint="create one with `perfledger init PATH`, or pass --ledger",
            ) from None
        try:
            if LEDGER_REF not in repo.refs:
                raise _no_ledger_branch(path, repo.controldir())
            try:
                version = repo.get_config().get((layout.CONFIG_SECTION,), b"formatVersion")
            except KeyError:
                version = None
            _check_format(path, version)
            refuse_incomplete_clone(repo.commondir())
        except (NotALedger, IntegrityError):
            repo.close()
            raise
        return cls(repo)

    def close(self) -> None:
        """Save the derived index if it lags the head by at least ``_INDEX_SAVE_AT_CLOSE``
        commits (or none is saved yet: a few are cheaper to walk again than to save), and
        release the repository's files."""
        if self._index.unsaved >= _INDEX_SAVE_AT_CLOSE or not os.path.exists(self._index_file):
            with contextlib.suppress(OSError):
                self._index.save(self._index_file)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._finalizer is not None:  # dulwich's files (the repo reopens on next use)
            self._finalizer()
            self._finalizer = None
        self._repo = None
        if self._release_guard is not None:  # last: gc may collect once every store is closed
            self._release_guard()  # a finalizer runs once: a second close does nothing

    def __enter__(self) -> GitStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ reading

    def read_head(self) -> bytes:
        """Return the current commit sha (hex bytes) of ``refs/heads/ledger``.
        Raises: NotALedger when the ref has disappeared.
        """
        try:
            head = read_ref(self.controldir, LEDGER_REF)
        except OSError as exc:
            raise IntegrityError(
                f"{self.path}: refs/heads/ledger is unreadable: {exc}",
                hint="restore the ref from a clone (git update-ref refs/heads/ledger <commit>)",
            ) from None
        if head is None:
            raise NotALedger(
                f"{self.path}: refs/heads/ledger is missing",
                hint="`perfledger init DIR` makes a ledger; `perfledger clone URL DIR` copies one",
            )
        if len(head) != 40 or head.translate(None, b"0123456789abcdef"):
            raise IntegrityError(
                f"{self.path}: refs/heads/ledger does not hold a commit id ({head[:60]!r})",
                hint="restore the ref from a clone (git update-ref refs/heads/ledger <commit>)",
            )
        return head

    @contextlib.contextmanager
    def _objects(self) -> Iterator[ObjectReader]:
        """The reader every object read of the store goes through: the walk's bulk reader when
        one is open, else a sparse one for the duration."""
        if self._bulk is not None:
            yield self._bulk
            return
        reader = self.object_reader(sparse=True)
        try:
            yield reader
        finally:
            reader.close()

    def _read_commit(self, reader: ObjectReader, sha: bytes, *, check: bool = True) -> bytes:
        """The raw content of commit ``sha`` (hex bytes).
        Raises: IntegrityError when it is missing, corrupt or not a commit."""
        type_num, raw = reader.read(
            bytes.fromhex(sha.decode()), check=check, max_size=MAX_COMMIT_BYTES
        )
        if type_num != 1:
            raise IntegrityError(f"{sha.decode()} is not a commit", commit=sha.decode())
        return raw

    def head_view(self) -> HeadView:
        """Return the :class:`HeadView` at the current head (catching the index up first)."""
        head = self.read_head()
        self._catch_up(head)
        heads = self._dag.heads(head)
        return HeadView(head.decode(), heads, self._dag.lamport(head))

    def event_commit(self, event_id: str) -> bytes:
        """Return the commit sha of ``event_id``.
        Raises: BadRequest when no event with that id (or unique id prefix) exists.
        """
        self._catch_up(self.read_head())
        sha = self._index.by_event.get(event_id)
        if sha is not None:
            return sha
        if 4 <= len(event_id) < 64:
            matches = [e for e in self._index.by_event if e.startswith(event_id)]
            if len(matches) == 1:
                return self._index.by_event[matches[0]]
            if len(matches) > 1:
                raise AmbiguousId(
                    f"event id prefix {event_id!r} is ambiguous ({len(matches)} events)",
                    hint="give more characters of the event id",
                )
        if len(event_id) < 4:
            raise BadRequest(
                f"event id prefix {event_id!r} is too short", hint="give at least 4 characters"
            )
        raise BadRequest(
            f"no event {event_id[:80]!r} in this ledger",
            hint="give an event id (`perfledger log`) or a ledger commit sha (`git log ledger`)",
        )

    def read_envelope(self, commit_sha: bytes) -> Envelope:
        """Read and decode the envelope stored in ``commit_sha``, each object checked.
        Raises: IntegrityError when the commit has no ``event.json``.
        """
        with self._objects() as reader:
            return self._envelope_from(reader, commit_sha, check=True)

    def read_envelopes(self, commit_shas: Iterable[bytes]) -> Iterator[Envelope]:
        """The envelopes of ``commit_shas`` (hex bytes), in that order, read through one
        reader without re-hashing the objects: for a caller that verified them in this pass
        (the audit's fold of an event's ancestors). Raises: IntegrityError as
        :meth:`read_envelope`."""
        with self._objects() as reader:
            for sha in commit_shas:
                yield self._envelope_from(reader, sha, check=False)

    def get_event(self, event_id: str) -> Envelope:
        """Return the event ``event_id`` (a full id or a unique prefix of at least 4 chars).
        Raises: BadRequest when absent or ambiguous.
        """
        envelope = self.read_envelope(self.event_commit(event_id))
        if not envelope.id.startswith(event_id):
            self._drop_index()  # a derived index pointing at the wrong commit
            envelope = self.read_envelope(self.event_commit(event_id))
        return envelope

    def find_by_idempotency_key(self, key: str) -> Envelope | None:
        """Return the event carrying idempotency key ``key``, or None (SPEC.md section 2): of
        several (concurrent branches, merged), the first in the total order
        (:meth:`CommitIndex.mark_reachable`)."""
        self._catch_up(self.read_head())
        return self._recorded(key)

    def ordered_commits(self, head: bytes | None = None) -> list[bytes]:
        """Return the event commits reachable from ``head`` (default: the current head), in the
        total order (lamport, id)."""
        head = head or self.read_head()
        self._catch_up(head)
        return self._index.ordered()

    def iter_events(self, head: bytes | None = None) -> Iterator[Envelope]:
        """Yield every event reachable from ``head`` (default: the current head) in the total
        order (lamport, id) (:func:`perfledger.ledger.dag.in_total_order`)."""
        reader = self.object_reader()
        try:
            for sha in self.ordered_commits(head):
                yield self._envelope_from(reader, sha, check=False)
        finally:
            reader.close()

    def _envelope_from(self, reader: ObjectReader, commit_sha: bytes, *, check: bool) -> Envelope:
        """Read the envelope of ``commit_sha`` through ``reader`` (``check``: re-hash objects).
        Raises: IntegrityError for a missing or malformed commit, tree or ``event.json``."""
        blob_sha = _tree_entry(self._tree_of(reader, commit_sha, check), layout.EVENT_FILE)
        if blob_sha is None:
            raise IntegrityError(
                f"commit {commit_sha.decode()} has no event.json", commit=commit_sha.decode()
            )
        _, data = reader.read(blob_sha, check=check, max_size=MAX_EVENT_BYTES)
        try:
            return decode_envelope(data)
        except BadRequest as exc:
            raise IntegrityError(
                f"commit {commit_sha.decode()}: {exc.message}",
                commit=commit_sha.decode(),
                hint=LEDGER_LIMITS_HINT if "limits" in exc.message else exc.hint,
            ) from None

    def _tree_of(self, reader: ObjectReader, commit_sha: bytes, check: bool) -> bytes:
        """The raw tree of commit ``commit_sha``. Raises: IntegrityError (missing, corrupt)."""
        raw = self._read_commit(reader, commit_sha, check=check)
        return reader.read(bytes.fromhex(raw[5:45].decode()), check=check, max_size=MAX_TREE_BYTES)[
            1
        ]

    def iter_recent(self, limit: int) -> Iterator[tuple[bytes, ParsedCommit, str, int]]:
        """Yield up to ``limit`` event commits newest first (descending (lamport, id)) as (hex
        sha, parsed commit, event id, Lamport clock), walking back from the head with a
        max-heap: reads only ``limit`` + frontier commits."""
        import heapq  # noqa: PLC0415 (heapq: off `perfledger experiment list`'s start-up path)

        heap: list[tuple[int, str, bytes, ParsedCommit, str, int]] = []
        seen: set[bytes] = set()

        def push(reader: ObjectReader, sha: bytes) -> None:
            if sha in seen:
                return
            seen.add(sha)
            commit = parse_commit(sha, self._read_commit(reader, sha))
            event_id, lamport, _ = event_trailers(commit.message)
            parents = [p.hex().encode() for p in commit.parents]
            if event_id is None:  # merge commit: expand its parents
                for parent in parents:
                    push(reader, parent)
                return
            # a max-heap of (lamport, id): both keys negated (the id's hex digits reversed)
            key = event_id.translate(_REVERSE_HEX)
            heapq.heappush(heap, (-lamport, key, sha, commit, event_id, lamport))

        with self._objects() as reader:
            push(reader, self.read_head())
            produced = 0
            while heap and produced < limit:
                _, _, sha, commit, event_id, lamport = heapq.heappop(heap)
                yield sha, commit, event_id, lamport
                produced += 1
                for parent in commit.parents:
                    push(reader, parent.hex().encode())

    def read_artifact(self, event_id: str, name: str) -> bytes:
        """Return the checked bytes of artifact ``name`` of event ``event_id``.
        Raises: BadRequest when the event has no such artifact; IntegrityError on a mismatch.
        """
        commit_sha = self.event_commit(event_id)
        with self._objects() as reader:
            ref = artifact_ref(self._envelope_from(reader, commit_sha, check=True), name)
            art_tree_sha = _tree_entry(
                self._tree_of(reader, commit_sha, True), layout.ARTIFACTS_DIR
            )
            art_tree = (
                reader.read(art_tree_sha, max_size=MAX_TREE_BYTES)[1]
                if art_tree_sha is not None
                else b""
            )
            blob_sha = _tree_entry(art_tree, ref.blake3.encode())
            if blob_sha is None:
                raise IntegrityError(
                    f"event {event_id}: artifact {name!r} blob is missing", event_id=event_id
                )
            data = reader.read(blob_sha, max_size=ref.size)[1]
        if len(data) != ref.size or blake3.blake3(data).hexdigest() != ref.blake3:
            raise IntegrityError(
                f"event {event_id}: artifact {name!r} does not match its blake3 or size",
                event_id=event_id,
            )
        return data

    # ------------------------------------------------------------------ appending

    def transact(
        self, decide: Decide, *, max_attempts: int = DEFAULT_MAX_ATTEMPTS
    ) -> list[Envelope]:
        """Run ``decide`` on the current head and append what it returns, atomically: the ref
        moves by compare-and-swap from the head ``decide`` saw; on a lost race ``decide`` runs
        again on the new head. Drafts whose idempotency keys are all recorded return the
        recorded events (:func:`perfledger.ledger.base.idempotent_replay`).
        Returns: the envelopes appended (or found), in draft order.
        Raises: BadRequest for malformed drafts; ConcurrentAppend after ``max_attempts`` lost
            races, or when another program (git) held the ref's lock too long; ResourceError
            when the disk is full, read-only or refuses permission; whatever ``decide`` raises
            (a refusal, say), with nothing appended.
        """
        for attempt in range(max_attempts):
            # Optimistic first; after a few lost races, decide and write while holding the
            # writers' lock, so that a writer under heavy contention is guaranteed to progress.
            pessimistic = attempt >= OPTIMISTIC_ATTEMPTS
            with self.writers_lock() if pessimistic else contextlib.nullcontext():
                try:
                    result = self._attempt(decide)
                except OSError as exc:
                    # a full disk, a read-only filesystem or a refused permission: the ref did
                    # not move (objects are written before the swap), so say what to do
                    resource = resource_error(exc)
                    if resource is None:
                        raise
                    raise resource from exc
            if result is not None:
                return result
            time.sleep(random.uniform(0, 0.0005 * min(attempt + 1, 20)))
        raise ConcurrentAppend(
            f"could not append after {max_attempts} attempts: other writers kept moving the ledger",
            hint="retry later; the ledger is unchanged",
        )

    def _attempt(self, decide: Decide) -> list[Envelope] | None:
        """One read-decide-write-swap round; None when the compare-and-swap lost a race."""
        head = self.read_head()
        self._catch_up(head)
        self._check_index_at(head)
        view = HeadView(head.decode(), self._dag.heads(head), self._dag.lamport(head))
        drafts = list(decide(view))
        if not drafts:
            return []
        check_batch_keys(drafts)
        existing = idempotent_replay(drafts, self._recorded)
        if existing is not None:
            return existing
        envelopes, objects, new_head, entries = self._build_chain(head, drafts)
        self._write_objects(objects, batch=len(drafts) >= PACK_BATCH_THRESHOLD)
        if not self._compare_and_swap(head, new_head):
            return None
        for sha, entry in entries:
            self._index.add(sha, entry)
        self._index.head = self._index.checked_head = new_head
        self._index.unsaved += len(entries)
        if self._index.unsaved >= max(_INDEX_SAVE_EVERY, len(self._index.commits) // 3):
            with contextlib.suppress(OSError):
                self._index.save(self._index_file)
        self._pack_if_due()
        return envelopes

    def _pack_if_due(self) -> None:
        """Pack or merge when a threshold is crossed. Runs after the ref moved: a packing
        failure is logged and retried later, never reported as a failed append (a caller
        retrying without an idempotency key would duplicate it)."""
        try:
            self._loose_written, self._packs_written = maybe_pack(
                self, self._loose_written, self._packs_written
            )
        except Exception as exc:  # see the docstring
            _log.warning("packing the ledger's objects failed (will retry): %s", exc)

    def _recorded(self, key: str) -> Envelope | None:
        """The event the caught-up index records under idempotency key ``key``, or None."""
        event_id = self._index.keys.get(key)
        return None if event_id is None else self.get_event(event_id)

    def _build_chain(
        self, head: bytes, drafts: list[EventDraft]
    ) -> tuple[list[Envelope], list[RawObject], bytes, list[tuple[bytes, IndexEntry]]]:
        """Build the envelopes and git objects of ``drafts`` chained on commit ``head``.
        Returns (envelopes, objects, the last commit, index entries)."""
        parents, lamport = self._dag.heads(head), self._dag.lamport(head)
        parent_commit = head
        envelopes: list[Envelope] = []
        objects: list[RawObject] = []
        entries: list[tuple[bytes, IndexEntry]] = []
        for draft in drafts:
            lamport += 1
            built = build_envelope(draft, parents, lamport)
            envelope = built.envelope
            commit, objs = build_event_objects(built, [parent_commit])
            objects.extend(objs)
            envelopes.append(envelope)
            entry = IndexEntry(envelope.id, lamport, [parent_commit], envelope.idempotency_key)
            entries.append((commit.id, entry))
            parents = (envelope.id,)
            parent_commit = commit.id
        return envelopes, objects, parent_commit, entries

    def _write_objects(self, objects: Sequence[RawObject], *, batch: bool) -> None:
        """Write ``objects`` durably: one pack for a batch, loose objects otherwise (counted
        for :meth:`_pack_if_due`).
        Raises: OSError from the filesystem (nothing is renamed into place half-written)."""
        if batch:
            write_pack(os.path.join(self._objects_dir, layout.PACK_DIR), objects)
            self._packs_written += 1
        else:
            write_loose(self._objects_dir, objects)
            self._loose_written += len(objects)

    @contextlib.contextmanager
    def writers_lock(self) -> Iterator[None]:
        """Hold the writers' advisory ``flock`` (re-entrant within this store): every ref swap
        holds it, and so does a read-decide-swap sequence that must not lose the race forever
        (a pessimistic :meth:`transact` round, a pull joining a remote head). The kernel
        releases it when a writer dies, so a ref lock file found while holding it belongs to a
        dead perfledger writer or to a git process."""
        if self._lock_fd is None:  # opened once, kept for the store's life
            os.makedirs(self.derived_dir, exist_ok=True)
            path = os.path.join(self.derived_dir, layout.APPEND_LOCK_FILE)
            self._lock_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fd = self._lock_fd
        if not self._lock_depth:
            fcntl.flock(fd, fcntl.LOCK_EX)
        self._lock_depth += 1
        try:
            yield
        finally:
            self._lock_depth -= 1
            if not self._lock_depth:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _compare_and_swap(self, expected: bytes | None, new: bytes) -> bool:
        """Move the ledger ref from ``expected`` to ``new`` durably (:mod:`refcas`, then the
        ref's directory fsynced) under the writers' lock; False on a lost race. A dead
        perfledger writer's ref lock is removed (:func:`break_dead_lock`); another program's
        is waited for, at most :data:`REF_LOCK_WAIT_S`.
        Raises: ConcurrentAppend naming the lock when another program held it all that time;
            OSError (the ref unchanged).
        """
        with self.writers_lock():
            deadline: float | None = None
            while True:
                try:
                    held = lock_ref(
                        self.controldir, LEDGER_REF, expected, new, owner_dir=self.derived_dir
                    )
                    if held is None:  # the ref moved since ``expected`` was read
                        return False
                    held.commit()  # durable: it fsyncs the ref's directory
                    return True
                except RefLocked as exc:
                    (lock,) = exc.args
                # we hold the append lock, so no live perfledger writer is inside a swap
                if break_dead_lock(lock, self.derived_dir):
                    continue
                now = time.monotonic()
                if deadline is None:
                    deadline = now + REF_LOCK_WAIT_S
                elif now >= deadline:
                    raise ConcurrentAppend(
                        f"{lock} is held by another process (a git command?) and was not "
                        f"released within {REF_LOCK_WAIT_S:g} s; the ledger is unchanged",
                        hint="retry once that process has finished; if no git or perfledger "
                        f"process is using this ledger, the lock is a leftover: remove {lock}",
                    )
                time.sleep(0.01)

    # ------------------------------------------------------------------ derived index

    def _ensure_index(self) -> None:
        if not self._index.loaded:
            self._index.load(self._index_file, self._head_exists)

    def _head_exists(self, head: bytes) -> bool:
        """True when commit ``head`` (hex) is in the object store."""
        try:
            with self._objects() as reader:
                self._read_commit(reader, head)
        except (IntegrityError, ValueError):
            return False
        return True

    def _entry(self, sha: bytes) -> IndexEntry:
        """Return the index entry of commit ``sha``, reading the commit when it is not known."""
        entry = self._index.commits.get(sha)
        if entry is None:
            entry = self._read_entry(sha)
            self._index.know(sha, entry)
        return entry

    def _catch_up(self, head: bytes) -> None:
        """Make the event maps describe exactly the commits reachable from ``head``: walk the
        new commits when the ref moved forward, else rebuild the maps."""
        self._ensure_index()
        if head == self._index.head:
            return
        previous = self._index.head
        with self._bulk_reading():
            # moved back or sideways inside what we knew, or forward from elsewhere: rebuild
            if head in self._index.reachable or not self._index.walk_new(
                head, previous, self._entry
            ):
                self._index.rebuild(head, self._entry)

    def _read_entry(self, sha: bytes) -> IndexEntry:
        """Read commit ``sha`` (hex) into an index entry (not re-hashed inside a walk).
        Raises: IntegrityError when it is missing, corrupt or not a commit."""
        with self._objects() as reader:
            return entry_from_raw(
                self._read_commit(reader, sha, check=self._bulk is None), sha.decode()
            )

    def _check_index_at(self, head: bytes) -> None:
        """Cross-check the derived index against git where a new event takes its parents and
        Lamport clock from (the head and, for a merge, the commits it joins); one that
        disagrees is rebuilt, so derived data never changes what is written. Once per head."""
        if head == self._index.checked_head:
            return
        todo = [head]
        while todo:
            sha = todo.pop()
            entry = self._index.commits[sha]
            found = self._read_entry(sha)
            if (found.event_id, found.lamport, found.parents) != (
                entry.event_id,
                entry.lamport if entry.event_id is not None else found.lamport,
                entry.parents,
            ):
                _log.warning("the derived index disagrees with the ledger; rebuilding it")
                self._drop_index()
                self._catch_up(head)
                return
            if entry.event_id is None:
                todo.extend(entry.parents)
        self._index.checked_head = head

    def _drop_index(self) -> None:
        """Forget every derived entry (in memory and on disk)."""
        self._index = CommitIndex()
        self._index.loaded = True  # empty: rebuilt from the commits
        self._dag = EventHeads(self._node, self._index.all_events.__getitem__)
        with contextlib.suppress(OSError):
            os.unlink(self._index_file)

    @contextlib.contextmanager
    def _bulk_reading(self) -> Iterator[None]:
        """Read commits through one :class:`ObjectReader` for a walk (sparse when a saved
        index is only caught up)."""
        if self._bulk is not None:
            yield
            return
        self._bulk = self.object_reader(sparse=self._index.head is not None)
        try:
            yield
        finally:
            self._bulk.close()
            self._bulk = None

    def _node(self, sha: bytes) -> CommitNode:
        entry = self._entry(sha)
        return CommitNode(entry.event_id, entry.lamport, tuple(entry.parents))

    # ------------------------------------------------------------------ low level (tests, sync)

    def build_on(
        self, parent_commit: bytes, drafts: Sequence[EventDraft]
    ) -> tuple[list[Envelope], bytes]:
        """Write ``drafts`` as a chain of event commits on ``parent_commit`` without moving the
        ledger ref. Returns: (the envelopes, the last commit sha). Raises: as :meth:`transact`.
        """
        self._ensure_index()
        self._entry(parent_commit)  # structure only: the maps of visible events stay as they are
        envelopes, objects, new_head, entries = self._build_chain(parent_commit, list(drafts))
        self._write_objects(objects, batch=len(drafts) >= PACK_BATCH_THRESHOLD)
        self._pack_if_due()
        for sha, entry in entries:  # visible once the ref reaches them (set_head)
            self._index.know(sha, entry)
        return envelopes, new_head

    def write_merge(self, commits: Sequence[bytes], *, actor: str = "perfledger") -> bytes:
        """Write the merge commit joining ``commits`` (hex bytes) without moving the ref.
        Deterministic (SPEC.md section 2, Sync): parents sorted, time = their latest commit time.
        Returns: the merge commit sha. Raises: BadRequest for fewer than two distinct commits.
        """
        parents = sorted(set(commits))
        if len(parents) < 2:
            raise BadRequest(
                "a merge joins at least two distinct commits",
                hint="merge two different heads (`perfledger sync` does it for a remote)",
            )
        self._ensure_index()
        heads = tuple(sorted({h for sha in parents for h in self._dag.heads(sha)}))
        with self._objects() as reader:
            seconds = max(
                split_ident(parse_commit(sha, self._read_commit(reader, sha)).committer)[1]
                for sha in parents
            )
        merge = build_merge_commit(parents, heads, actor, seconds)
        self._write_objects([EMPTY_TREE, merge], batch=False)
        self._index.commits[merge.id] = IndexEntry(None, 0, list(parents), None)
        self._pack_if_due()
        return merge.id

    def set_head(self, expected: bytes, new: bytes) -> bool:
        """Compare-and-swap the ledger ref from ``expected`` to ``new`` (sync and tests).
        Returns: False on a lost race (the ref no longer points at ``expected``).
        """
        ok = self._compare_and_swap(expected, new)
        if ok:
            self._catch_up(new)
        return ok

    def commits_since(self, old_head: bytes, head: bytes | None = None) -> list[bytes] | None:
        """Return the event commits after ``old_head`` up to ``head`` (default: the current
        head), oldest first, when they are a chain of event commits; None otherwise."""
        head = head or self.read_head()
        self._catch_up(head)
        chain: list[bytes] = []
        sha = head
        while sha != old_head:
            entry = self._entry(sha)
            if len(entry.parents) != 1 or entry.event_id is None:
                return None
            chain.append(sha)
            sha = entry.parents[0]
        chain.reverse()
        return chain

    def count(self) -> int:
        """Return the number of events reachable from the head."""
        self._catch_up(self.read_head())
        return len(self._index.by_event)

    # ------------------------------------------------------------------ sync support

    def commit_node(self, sha: bytes) -> CommitNode:
        """Return the :class:`CommitNode` of commit ``sha`` (hex bytes), from the derived index
        or else the commit. Raises: IntegrityError when it is missing or not a commit."""
        self._ensure_index()
        return self._node(sha)

    def reaches(self, sha: bytes, head: bytes | None = None) -> bool:
        """True when commit ``sha`` (hex bytes) is reachable from ``head`` (default: the
        current head; pass the head already read to skip reading the ref again)."""
        self._catch_up(head or self.read_head())
        return sha in self._index.reachable

    def has_event(self, event_id: str, head: bytes | None = None) -> bool:
        """True when the event ``event_id`` (a full id) is reachable from ``head`` (default:
        the current head)."""
        self._catch_up(head or self.read_head())
        return event_id in self._index.by_event

    def adopt(
        self, objects: Sequence[RawObject], nodes: dict[bytes, CommitNode], keys: dict[bytes, str]
    ) -> None:
        """Store verified objects received from a remote as one new pack (then keep the pack
        count bounded), and record their commits' structure (hex sha -> node, and -> key) in
        the derived index. Nothing refers to them, and no event is visible, until a ref moves."""
        if objects:
            self._write_objects(list(objects), batch=True)
            self.repo.object_store.packs  # noqa: B018  (dulwich rescans the pack directory)
            self._pack_if_due()
        self._ensure_index()
        for sha, node in nodes.items():
            if sha not in self._index.commits:
                entry = IndexEntry(node.event_id, node.lamport, list(node.parents), keys.get(sha))
                self._index.know(sha, entry)


_REVERSE_HEX = str.maketrans("0123456789abcdef", "fedcba9876543210")


__all__ = ["FORMAT_VERSION", "LEDGER_REF", "GitStore"]
