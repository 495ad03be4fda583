"""The event-store contract (GUIDE.md, after eventsourcing's contract suites).

One abstract class, :class:`StoreContract`, states what every event store must do; it runs against
the on-disk git store (real repositories, real processes for concurrency, real ``git fsck``) and
against the in-memory store (threads for concurrency).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from hashlib import sha1
from pathlib import Path
from typing import Any

import pytest

from perfledger.api import Ledger
from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.envelope import Envelope, compute_event_id
from perfledger.ledger.base import Artifact, EventDraft, EventStore
from perfledger.ledger.memory import MemoryStore
from perfledger.ledger.store import GitStore

WRITERS = 10
APPENDS_PER_WRITER = 100
RETRYING_CLIENTS = 8

Note = Callable[..., EventDraft]


def _invalid_drafts() -> dict[str, EventDraft]:
    """Drafts that an append must refuse with BadRequest, each for one reason."""
    good = {"text": "ok", "tags": []}
    return {
        "payload-type": EventDraft("NoteRecorded", {"text": 5, "tags": []}, "a"),
        "payload-unknown-field": EventDraft("NoteRecorded", {**good, "extra": 1}, "a"),
        "payload-missing-field": EventDraft("NoteRecorded", {"tags": []}, "a"),
        "request-nan": EventDraft("NoteRecorded", good, "a", request={"x": float("nan")}),
        "request-inf": EventDraft("NoteRecorded", good, "a", request=[1.0, float("-inf")]),
        "unknown-kind": EventDraft("NoSuchKind", good, "a"),
        "bad-actor": EventDraft("NoteRecorded", good, "a <b>"),
        "bad-key": EventDraft("NoteRecorded", good, "a", idempotency_key="has space"),
        "bad-artifact-name": EventDraft(
            "NoteRecorded", good, "a", artifacts={"../etc": Artifact(b"x")}
        ),
    }


def _check_envelope(envelope: Envelope) -> None:
    """Assert that an envelope's id is the content id of its other fields."""
    assert compute_event_id(envelope) == envelope.id


class StoreContract(ABC):
    """What every event store must do. Subclasses provide the store and the concurrency drivers."""

    # -- what a subclass provides ----------------------------------------------------------------

    @pytest.fixture
    @abstractmethod
    def store(self, tmp_path: Path) -> Iterator[EventStore]:
        """A fresh store holding only its root event."""

    @abstractmethod
    def corrupt_artifact(self, store: Any, envelope: Envelope, name: str, data: bytes) -> None:
        """Replace the stored bytes of artifact ``name`` of ``envelope`` with ``data``."""

    @abstractmethod
    def concurrent_appends(self, store: Any, writers: int, per_writer: int) -> list[list[str]]:
        """Run ``writers`` concurrent writers appending ``per_writer`` notes each (texts
        ``w<i>-<j>``); return the event ids each writer was given."""

    @abstractmethod
    def concurrent_retries(self, store: Any, clients: int, key: str) -> list[str]:
        """Have ``clients`` concurrent clients append the same note with idempotency ``key``;
        return the event id each was given."""

    def check_integrity(self, store: Any) -> None:
        """End-to-end checks after heavy concurrent use: every id recomputes, the order is
        (lamport, id) (stores add their own checks)."""
        events = list(store.iter_events())
        for envelope in events:
            _check_envelope(envelope)
        keys = [(e.lamport, e.id) for e in events]
        assert keys == sorted(keys)

    @pytest.fixture(autouse=True)
    def _git_cli(self, git: Callable[..., Any]) -> None:
        """Keep the real-git helper at hand for :meth:`check_integrity`."""
        self.git = git

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def snapshot(store: Any) -> tuple[str | None, int, list[str]]:
        """(head, count, ids in order): what must not change when an append is refused."""
        return store.head_view().head, store.count(), [e.id for e in store.iter_events()]

    # -- single appends --------------------------------------------------------------------------

    def test_append_returns_envelope_whose_id_recomputes(self, store: Any, note: Note) -> None:
        """The appended envelope's id is the domain-separated blake3 of its content."""
        root = store.head_view()
        envelope = store.append(note("first", tags=["x"]))
        _check_envelope(envelope)
        assert envelope.kind == "NoteRecorded"
        assert envelope.payload == {"text": "first", "tags": ["x"]}
        assert envelope.parents == root.event_heads
        assert envelope.lamport == root.lamport + 1 == 2
        assert store.count() == 2
        assert store.get_event(envelope.id) == envelope
        assert store.head_view().event_heads == (envelope.id,)

    def test_root_is_lamport_one_ledger_initialized(self, store: Any) -> None:
        """A fresh store holds exactly its root: LedgerInitialized at Lamport 1 with no parents."""
        (root,) = list(store.iter_events())
        _check_envelope(root)
        assert (root.kind, root.lamport, root.parents) == ("LedgerInitialized", 1, ())
        assert store.head_view().lamport == 1

    def test_second_root_is_refused(self, store: Any) -> None:
        """A ledger has exactly one root (SPEC.md s.2): appending another LedgerInitialized is a
        BadRequest and leaves the store unchanged."""
        before = self.snapshot(store)
        with pytest.raises(BadRequest):
            store.append(
                EventDraft(
                    "LedgerInitialized",
                    {"name": "again", "format_version": 1, "creator": "x"},
                    "x",
                )
            )
        assert self.snapshot(store) == before

    def test_get_event_of_unknown_id_is_bad_request(self, store: Any) -> None:
        """Asking for an event that is not there is a BadRequest, not a KeyError."""
        with pytest.raises(BadRequest):
            store.get_event("0" * 64)

    # -- idempotency -----------------------------------------------------------------------------

    def test_idempotency_key_returns_existing_event(self, store: Any, note: Note) -> None:
        """A retried request with a known key returns the first event and appends nothing."""
        first = store.append(note("once", idempotency_key="req-1"))
        before = self.snapshot(store)
        time.sleep(0.001)  # a retry happens later: another timestamp, so another id if appended
        again = store.append(note("once", idempotency_key="req-1"))
        assert again == first
        assert self.snapshot(store) == before
        assert store.find_by_idempotency_key("req-1") == first
        assert store.find_by_idempotency_key("req-2") is None

    def test_idempotent_batch_replay(self, store: Any, note: Note) -> None:
        """A retried batch whose keys are all known returns the first events, appends nothing;
        a batch only partly known is a BadRequest."""
        drafts = [note(f"b{i}", idempotency_key=f"batch-{i}") for i in range(3)]
        first = store.append_batch(drafts)
        before = self.snapshot(store)
        assert store.append_batch(drafts) == first
        assert self.snapshot(store) == before
        with pytest.raises(BadRequest):
            store.append_batch([drafts[0], note("new", idempotency_key="batch-new")])
        assert self.snapshot(store) == before
        assert store.find_by_idempotency_key("batch-new") is None

    def test_same_key_different_request_is_bad_request(self, store: Any, note: Note) -> None:
        """Reusing a key for a different request is refused and appends nothing."""
        store.append(note("original", idempotency_key="req-1"))
        before = self.snapshot(store)
        with pytest.raises(BadRequest, match="req-1"):
            store.append(note("different", idempotency_key="req-1"))
        assert self.snapshot(store) == before

    def test_same_key_twice_in_one_batch_is_bad_request(self, store: Any, note: Note) -> None:
        """A batch carrying one key twice is refused before anything is written."""
        before = self.snapshot(store)
        with pytest.raises(BadRequest):
            store.append_batch([note("a", idempotency_key="k"), note("b", idempotency_key="k")])
        assert self.snapshot(store) == before

    # -- batches ---------------------------------------------------------------------------------

    @pytest.mark.parametrize("size", [3, 9])
    @pytest.mark.parametrize("position", ["first", "last"])
    @pytest.mark.parametrize("reason", sorted(_invalid_drafts()))
    def test_batch_with_invalid_draft_appends_nothing(
        self, store: Any, note: Note, reason: str, position: str, size: int
    ) -> None:
        """One invalid draft makes the whole batch a BadRequest: count, head, order unchanged,
        and the valid drafts' keys are not burnt."""
        valid = [note(f"v{i}", idempotency_key=f"valid-{i}") for i in range(size - 1)]
        bad = _invalid_drafts()[reason]
        batch = [bad, *valid] if position == "first" else [*valid, bad]
        before = self.snapshot(store)
        with pytest.raises(BadRequest):
            store.append_batch(batch)
        assert self.snapshot(store) == before
        assert all(store.find_by_idempotency_key(f"valid-{i}") is None for i in range(size - 1))
        appended = store.append_batch(valid)  # nothing of the failed batch lingers
        assert [e.lamport for e in appended] == list(range(2, size + 1))

    @pytest.mark.parametrize("reason", sorted(_invalid_drafts()))
    def test_single_invalid_append_is_bad_request(self, store: Any, reason: str) -> None:
        """An invalid single append is a BadRequest and changes nothing."""
        before = self.snapshot(store)
        with pytest.raises(BadRequest):
            store.append(_invalid_drafts()[reason])
        assert self.snapshot(store) == before

    @pytest.mark.parametrize("size", [1, 5, 9, 20])
    def test_batch_appends_all_with_consecutive_lamports(
        self, store: Any, note: Note, size: int
    ) -> None:
        """A batch appends every draft, in order, each on the previous one, clocks consecutive."""
        store.append(note("before"))
        view, count = store.head_view(), store.count()
        envelopes = store.append_batch([note(f"n{i}", tags=[str(i)]) for i in range(size)])
        assert [e.lamport for e in envelopes] == list(range(3, 3 + size))
        assert [e.payload["text"] for e in envelopes] == [f"n{i}" for i in range(size)]
        assert envelopes[0].parents == view.event_heads
        for prev, cur in itertools.pairwise(envelopes):
            assert cur.parents == (prev.id,)
        for envelope in envelopes:
            _check_envelope(envelope)
        assert store.count() == count + size
        assert list(store.iter_events())[-size:] == envelopes
        assert store.head_view().event_heads == (envelopes[-1].id,)

    def test_empty_batch_appends_nothing(self, store: Any) -> None:
        """An empty batch is a no-op."""
        before = self.snapshot(store)
        assert store.append_batch([]) == []
        assert self.snapshot(store) == before

    # -- order -----------------------------------------------------------------------------------

    def test_iteration_order_is_lamport_then_id(self, store: Any, note: Note) -> None:
        """iter_events yields every event once, sorted by (lamport, id), parents first."""
        appended = [store.append(note(f"single {i}")) for i in range(4)]
        appended += store.append_batch([note(f"batch {i}") for i in range(4)])
        events = list(store.iter_events())
        keys = [(e.lamport, e.id) for e in events]
        assert keys == sorted(keys)
        assert len(set(keys)) == len(keys) == 9
        assert [e.id for e in events[1:]] == [e.id for e in appended]
        seen: set[str] = set()
        for event in events:
            assert set(event.parents) <= seen
            seen.add(event.id)

    # -- artifacts -------------------------------------------------------------------------------

    def test_read_artifact_returns_bytes(self, store: Any, note: Note) -> None:
        """Artifacts come back byte for byte; their refs carry blake3, size and media type."""
        big = os.urandom(5000)  # compressed in git (above the stored-uncompressed threshold)
        arts = {
            "kernel.cu": Artifact(b"__global__ void k() {}\n", "text/x-cuda"),
            "samples.bin": Artifact(big),
            "empty.txt": Artifact(b"", "text/plain"),
        }
        envelope = store.append(note("with files", artifacts=arts))
        _check_envelope(envelope)
        for name, artifact in arts.items():
            assert store.read_artifact(envelope.id, name) == artifact.data
            ref = envelope.artifacts[name]
            assert (ref.size, ref.media_type) == (len(artifact.data), artifact.media_type)
        with pytest.raises(BadRequest):
            store.read_artifact(envelope.id, "missing.txt")

    @pytest.mark.parametrize("replacement", ["same-size", "other-size"])
    def test_read_artifact_detects_corruption(
        self, store: Any, note: Note, replacement: str
    ) -> None:
        """A stored artifact whose bytes changed is reported as an IntegrityError on read."""
        data = b"the original artifact bytes\n" * 3
        envelope = store.append(note("art", artifacts={"log.txt": Artifact(data, "text/plain")}))
        other = store.append(note("other", artifacts={"b.txt": Artifact(b"unrelated bytes")}))
        assert store.read_artifact(envelope.id, "log.txt") == data
        evil = bytes(reversed(data)) if replacement == "same-size" else data + b"tampered"
        self.corrupt_artifact(store, envelope, "log.txt", evil)
        with pytest.raises(IntegrityError):
            store.read_artifact(envelope.id, "log.txt")
        assert store.read_artifact(other.id, "b.txt") == b"unrelated bytes"

    # -- concurrency -----------------------------------------------------------------------------

    @pytest.mark.slow
    def test_concurrent_writers_lose_nothing(self, store: Any) -> None:
        """10 writers x 100 appends: exactly 1,000 new events, none lost or duplicated, Lamport
        clocks 2..1001 each exactly once, every id recomputes."""
        ids_per_writer = self.concurrent_appends(store, WRITERS, APPENDS_PER_WRITER)
        total = WRITERS * APPENDS_PER_WRITER
        returned = [i for ids in ids_per_writer for i in ids]
        assert len(returned) == len(set(returned)) == total
        events = list(store.iter_events())
        assert store.count() == len(events) == total + 1
        new = [e for e in events if e.kind == "NoteRecorded"]
        assert {e.id for e in new} == set(returned)
        texts = sorted(e.payload["text"] for e in new)
        expected = sorted(f"w{w}-{j}" for w in range(WRITERS) for j in range(APPENDS_PER_WRITER))
        assert texts == expected
        assert sorted(e.lamport for e in new) == list(range(2, total + 2))
        for envelope in events:
            _check_envelope(envelope)
        # each writer's own appends appear in the order it made them
        position = {e.id: n for n, e in enumerate(events)}
        for ids in ids_per_writer:
            assert [position[i] for i in ids] == sorted(position[i] for i in ids)
        self.check_integrity(store)

    @pytest.mark.slow
    def test_concurrent_retries_with_one_key_append_once(self, store: Any) -> None:
        """The same request retried with its key by several clients at once: exactly one event."""
        before = store.count()
        ids = self.concurrent_retries(store, RETRYING_CLIENTS, "retry-key-1")
        assert len(ids) == RETRYING_CLIENTS
        assert len(set(ids)) == 1
        assert store.count() == before + 1
        found = store.find_by_idempotency_key("retry-key-1")
        assert found is not None and found.id == ids[0]
        self.check_integrity(store)


# ------------------------------------------------------------------------------- memory store


class TestMemoryStore(StoreContract):
    """The contract on :class:`perfledger.ledger.memory.MemoryStore` (threads for concurrency)."""

    @pytest.fixture
    def store(self, memory_store: MemoryStore) -> Iterator[MemoryStore]:
        """A fresh in-memory store."""
        yield memory_store

    def corrupt_artifact(self, store: Any, envelope: Envelope, name: str, data: bytes) -> None:
        """Swap the bytes kept under the artifact's digest."""
        store._blobs[envelope.artifacts[name].blake3] = data

    @staticmethod
    def _run_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
        barrier = threading.Barrier(count)
        results: list[Any] = [None] * count
        errors: list[BaseException] = []

        def run(index: int) -> None:
            try:
                barrier.wait()
                results[index] = work(index)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not errors, errors
        assert not any(t.is_alive() for t in threads)
        return results

    def concurrent_appends(self, store: Any, writers: int, per_writer: int) -> list[list[str]]:
        """Threads sharing the one store."""

        def work(w: int) -> list[str]:
            ids = []
            for j in range(per_writer):
                payload = {"text": f"w{w}-{j}", "tags": []}
                ids.append(store.append(EventDraft("NoteRecorded", payload, f"w{w}")).id)
            return ids

        return self._run_threads(writers, work)

    def concurrent_retries(self, store: Any, clients: int, key: str) -> list[str]:
        """Threads sending the same keyed request."""
        payload = {"text": "retried", "tags": []}

        def work(_: int) -> str:
            draft = EventDraft("NoteRecorded", payload, "client", payload, idempotency_key=key)
            return store.append(draft).id

        return self._run_threads(clients, work)


# ---------------------------------------------------------------------------------- git store

#: Run by each writer process: open the ledger itself, wait for the start signal, append.
_WRITER = """
import json, os, sys, time
from perfledger.ledger.base import EventDraft
from perfledger.ledger.store import GitStore

path, writer, count, key, ready, go = sys.argv[1:7]
store = GitStore.open(path)
open(ready, "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no start signal")
    time.sleep(0.001)
ids = []
for j in range(int(count)):
    text = "retried" if key else f"w{writer}-{j}"
    payload = {"text": text, "tags": []}
    draft = EventDraft("NoteRecorded", payload, f"w{writer}", payload, key or None)
    ids.append(store.append(draft).id)
store.close()
print(json.dumps(ids))
"""


def _run_writer_processes(path: str, workdir: Path, count: int, per: int, key: str) -> list[Any]:
    """Start ``count`` writer processes on the ledger at ``path``, release them at once, and
    return each one's list of event ids."""
    go = workdir / "go"
    procs = []
    readies = []
    for w in range(count):
        ready = workdir / f"ready-{w}"
        readies.append(ready)
        argv = [sys.executable, "-c", _WRITER, path, str(w), str(per), key, str(ready), str(go)]
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    try:
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in readies):
            assert time.monotonic() < deadline, "writers did not start"
            assert all(p.poll() is None for p in procs), "a writer died before the start"
            time.sleep(0.005)
        go.touch()
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, f"writer failed ({proc.returncode}):\n{err}"
            results.append(json.loads(out))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


class TestGitStore(StoreContract):
    """The contract on :class:`perfledger.ledger.store.GitStore` (processes for concurrency)."""

    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[GitStore]:
        """A fresh bare git ledger at ``tmp_path/"l"``."""
        store = GitStore.init(tmp_path / "l", name="contract", actor="tester")
        try:
            yield store
        finally:
            store.close()

    def corrupt_artifact(self, store: Any, envelope: Envelope, name: str, data: bytes) -> None:
        """Rewrite the artifact's loose blob file in place with other content (git's own format,
        so only the content, not the framing, is wrong)."""
        original = store.read_artifact(envelope.id, name)
        header = b"blob %d\0" % len(original)
        sha = sha1(header + original).hexdigest()
        path = Path(store.path) / "objects" / sha[:2] / sha[2:]
        assert path.is_file(), "a single append writes loose objects"
        path.chmod(0o644)
        path.write_bytes(zlib.compress(b"blob %d\0" % len(data) + data))
        path.chmod(0o444)

    def concurrent_appends(self, store: Any, writers: int, per_writer: int) -> list[list[str]]:
        """Real processes, each opening the ledger itself."""
        workdir = Path(store.path).parent
        return _run_writer_processes(store.path, workdir, writers, per_writer, "")

    def concurrent_retries(self, store: Any, clients: int, key: str) -> list[str]:
        """Real processes sending the same keyed request once each."""
        workdir = Path(store.path).parent
        results = _run_writer_processes(store.path, workdir, clients, 1, key)
        return [ids[0] for ids in results]

    def check_integrity(self, store: Any) -> None:
        """Also the real ``git fsck --strict --full`` and perfledger verify, from a fresh open."""
        super().check_integrity(store)
        self.git("fsck", "--strict", "--full", "--no-dangling", cwd=store.path)
        ledger = Ledger.open(store.path)
        try:
            report = ledger.verify()
            assert report.ok, report.error
            assert report.events == store.count()
            assert [e.id for e in ledger.events()] == [e.id for e in store.iter_events()]
        finally:
            ledger.close()

    def test_corrupt_artifact_fails_verify_and_fsck(
        self, store: Any, note: Note, git: Callable[..., Any]
    ) -> None:
        """The same corruption is caught by perfledger verify and by the real git fsck."""
        data = b"some artifact\n" * 4
        envelope = store.append(note("art", artifacts={"a.txt": Artifact(data)}))
        ledger = Ledger.open(store.path)
        try:
            assert ledger.verify().ok
            self.corrupt_artifact(store, envelope, "a.txt", bytes(reversed(data)))
            report = ledger.verify()
        finally:
            ledger.close()
        assert not report.ok
        assert report.error is not None and report.error.event_id == envelope.id
        assert git("fsck", "--strict", "--full", cwd=store.path, check=False).returncode != 0
