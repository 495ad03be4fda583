"""A large batch's git objects built and packed in a forked child process while this one builds
the envelopes: the two halves of an append's CPU work run on two CPUs.

Why: a batched append is CPU-bound and its work is two chains. Each envelope's id hashes its
parent's id (:func:`perfledger.ledger.base.build_envelope`, ~47 µs an event here), and each
commit names its parent commit (blob, tree, commit and their share of the pack: ~65 µs). The
second chain needs only the first's output, event by event, so a child process consumes the
envelopes as they are made (through a pipe, in chunks) while the parent makes the next ones.

The same child also packs a single-append writer's loose objects when they reach the packing
threshold (:meth:`PackerProcess.start_loose_packing`): listing, reading back and packing ~3,000
loose objects, then moving their files into the pool of spares, cost the appending process
~50-70 ms each time here, ~5 % of its single appends; the child does it on the other CPU while
appends go on.

Safety: per batch the child writes one pack, exactly as
:func:`perfledger.ledger.gitobj.write_pack` does for an ordinary batch, and nothing else; the
parent moves the ref only after the child reported success, so a child that fails or dies
leaves at most an unreferenced pack (merged or ignored later) and the ledger as it was. The
child is forked once per store, when no other thread runs; it closes every inherited file but
its two pipes, dies with its parent (``PR_SET_PDEATHSIG``) and never runs the parent's exit
handlers (``os._exit``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import os
import pickle
import select
import signal
import sys
from typing import Any, NamedTuple

from perfledger.errors import PerfledgerError, resource_error
from perfledger.ledger.base import BuiltEvent
from perfledger.ledger.gitobj import PackBuilder
from perfledger.ledger.objects import build_event_objects

#: Batches of at least this many events are packed in a forked process (below it, the fork,
#: ~3 ms here, costs more than the overlap saves).
PIPELINE_MIN_EVENTS = 256
#: Events sent to the child at a time (about the pipe's 64 KiB buffer for small events).
CHUNK_EVENTS = 128
#: Bytes the pipe to the child may hold (Linux caps it at ``/proc/sys/fs/pipe-max-size``,
#: 1 MiB by default: about 1,800 small events).
_PIPE_BYTES = 1 << 20
#: ``prctl`` option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1


def pipeline_available() -> bool:
    """True where the packing child can be forked: Linux, and not disabled with
    ``PERFLEDGER_APPEND_FORK=0``."""
    return sys.platform == "linux" and os.environ.get("PERFLEDGER_APPEND_FORK", "1") != "0"


class _EnvelopeFields(NamedTuple):
    """The envelope fields a commit is built from (what :func:`build_event_objects` reads)."""

    actor: str
    kind: str
    id: str
    lamport: int
    idempotency_key: str | None


class PackerProcess:
    """A forked child that builds and packs the git objects of large batches, kept for the
    store's life: forking per batch cost more than it saved (after a fork both processes take
    a copy-on-write fault on each page they write: ~50 µs an event of a 1,000-event batch
    here), while a child forked once pays that once.

    Per batch: :meth:`begin`, :meth:`add` each built event in chain order, :meth:`finish`; a
    batch left without :meth:`finish` must be :meth:`abort`-ed (the child drops it, writing
    nothing). :meth:`close` ends the child. Fork it only when no other thread runs.
    """

    def __init__(self) -> None:
        to_read, to_write = os.pipe()
        back_read, back_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller's code
            code = 1
            try:
                with contextlib.suppress(Exception):
                    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                _close_inherited_files(keep={0, 1, 2, to_read, back_write})
                # the inherited heap is never collected here: a full collection would write to
                # every inherited object, copying each page the parent still shares; the loop
                # makes no reference cycles, so reference counting frees all it allocates
                gc.freeze()
                gc.disable()
                code = _child(to_read, back_write)
            finally:
                os._exit(code)
        os.close(to_read)
        os.close(back_write)
        with contextlib.suppress(OSError, AttributeError):
            # room for a whole batch in the pipe (64 KiB is ~120 events): this process then
            # never waits for the child while it sends, and does its own deferred work
            # (index save, pack merges) while the child catches up
            fcntl.fcntl(to_write, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        self.pid = pid
        self._to_child = os.fdopen(to_write, "wb")
        self._from_child = os.fdopen(back_read, "rb")
        self._pending: list[tuple[Any, ...]] = []
        #: a loose-object packing sent to the child whose reply is not read yet
        self._loose_job = False

    def begin(self, head: bytes, pack_dir: str, *, fsync: bool) -> None:
        """Start a batch appended on commit ``head`` (hex sha, bytes), packed into
        ``pack_dir``; ``fsync``: fsync the pack and index (else the caller's ``syncfs``)."""
        self.loose_packing_done(wait=True)  # its reply must not be taken for the batch's
        self._pending = []
        self._send(("begin", head, pack_dir, fsync))

    def start_loose_packing(self, controldir: str, derived_dir: str, repo_path: str) -> None:
        """Have the child pack the loose objects of the repository at ``repo_path`` (git dir
        ``controldir``, derived directory ``derived_dir``, where the pool of spares and the
        packing lock live) into one fsynced pack, move their files into the pool of spares
        (:mod:`perfledger.ledger.loosepool`) and merge packs, as
        :func:`perfledger.ledger.packing.maybe_pack` does in process; this returns at once.
        Read the outcome with :meth:`loose_packing_done`.

        Raises: PerfledgerError when the child has died.
        """
        self.loose_packing_done(wait=True)
        self._send(("pack_loose", controldir, derived_dir, repo_path))
        self._loose_job = True

    def loose_packing_running(self) -> bool:
        """True while a loose packing was sent and its reply not read."""
        return self._loose_job

    def loose_packing_done(self, *, wait: bool) -> tuple[Any, ...] | None:
        """The outcome of the loose packing in progress: ``("ok", objects packed)``,
        ``("busy",)`` (another process held the packing lock: nothing done), ``("failed",
        why)``; None while it runs (``wait=False``) or when none was started."""
        if not self._loose_job:
            return None
        if not wait:
            ready, _, _ = select.select([self._from_child], [], [], 0)
            if not ready:
                return None
        self._loose_job = False
        try:
            outcome: tuple[Any, ...] = pickle.load(self._from_child)
        except (EOFError, OSError, pickle.UnpicklingError):
            outcome = ("failed", "the packing process died")
        return outcome

    def add(self, built: BuiltEvent) -> None:
        """Hand one built event to the child (sent in chunks of :data:`CHUNK_EVENTS`)."""
        envelope = built.envelope
        self._pending.append(  # a plain tuple: the cheapest to pickle
            (
                built.data,
                built.blobs,
                built.seconds,
                built.summary,
                envelope.actor,
                envelope.kind,
                envelope.id,
                envelope.lamport,
                envelope.idempotency_key,
            )
        )
        if len(self._pending) >= CHUNK_EVENTS:
            self._flush()

    def finish(self) -> list[bytes]:
        """Wait for the batch's pack; return the commit of each event (hex shas), in order.

        Raises: ResourceError for a full disk, a read-only filesystem or a refused permission;
            PerfledgerError when the child failed otherwise or died (nothing was appended).
        """
        self._flush()
        self._send(("finish",))
        try:
            outcome = pickle.load(self._from_child)
        except (EOFError, OSError, pickle.UnpicklingError):
            outcome = ("failed", "the packing process died")
        if outcome[0] != "ok":
            resource = (
                resource_error(OSError(*outcome[2])) if len(outcome) > 2 and outcome[2] else None
            )
            if resource is not None:
                raise resource
            raise PerfledgerError(
                f"writing the batch's git objects failed: {outcome[1]}",
                hint="nothing was appended; retry (PERFLEDGER_APPEND_FORK=0 packs in process)",
            )
        commits: list[bytes] = outcome[1]
        return commits

    def abort(self) -> None:
        """Drop the batch in progress (the child writes nothing for it)."""
        self._pending = []
        with contextlib.suppress(PerfledgerError):
            self._send(("abort",))

    def alive(self) -> bool:
        """True while the child runs."""
        try:
            pid, _status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return pid == 0

    def close(self) -> None:
        """End the child (it exits on end of input) and reap it."""
        with contextlib.suppress(OSError):
            self._to_child.close()
        with contextlib.suppress(OSError):
            self._from_child.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)

    def flush(self) -> None:
        """Send the events added so far (the child can work on them while this process does
        something else)."""
        self._flush()

    def _flush(self) -> None:
        if self._pending:
            self._send(("events", self._pending))
            self._pending = []

    def _send(self, message: tuple[Any, ...]) -> None:
        try:
            pickle.dump(message, self._to_child, protocol=pickle.HIGHEST_PROTOCOL)
            self._to_child.flush()
        except (BrokenPipeError, ValueError):
            raise PerfledgerError(
                "the packing process died before the batch was written",
                hint="nothing was appended; retry (PERFLEDGER_APPEND_FORK=0 packs in process)",
            ) from None


def _close_inherited_files(keep: set[int]) -> None:
    """Close every descriptor the child inherited but ``keep`` (the parent's packs, locks and
    repository files are none of its business)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return
    for name in names:
        fd = int(name)
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _child(read_fd: int, write_fd: int) -> int:
    """The child's loop: per batch, build each event's objects on the previous commit, write one
    pack, send back the commits (or why it failed). Returns the exit code at end of input."""
    incoming = os.fdopen(read_fd, "rb")
    outgoing = os.fdopen(write_fd, "wb")
    builder = PackBuilder()
    commits: list[bytes] = []
    parent = b""
    pack_dir, fsync, failure = "", False, ""
    os_error: tuple[Any, ...] | None = None
    # what writing the first pack imports (dulwich's GitFile, numpy for the index encoder):
    # before any batch waits
    import dulwich.file  # noqa: F401
    import numpy  # noqa: F401

    import perfledger.ledger.packindex  # noqa: F401

    while True:
        try:
            message = pickle.load(incoming)
        except EOFError:
            return 0  # the store closed (or its process died): nothing half-written
        kind = message[0]
        if kind == "begin":
            _, parent, pack_dir, fsync = message
            builder, commits, failure = PackBuilder(), [], ""
        elif kind == "events":
            if failure:
                continue
            try:
                for data, blobs, seconds, summary, *fields in message[1]:
                    envelope = _EnvelopeFields(*fields)
                    built = BuiltEvent(envelope, data, blobs, seconds, summary)  # type: ignore[arg-type]
                    commit, built_objects = build_event_objects(built, [parent])
                    builder.add(built_objects)  # the pack entries, prepared as they come
                    commits.append(commit.id)
                    parent = commit.id
            except Exception as exc:  # reported at finish
                failure = f"{type(exc).__name__}: {exc}"
        elif kind == "abort":
            builder, commits = PackBuilder(), []
        elif kind == "pack_loose":
            reply = _pack_loose_here(*message[1:])
            pickle.dump(reply, outgoing, protocol=pickle.HIGHEST_PROTOCOL)
            outgoing.flush()
        elif kind == "finish":
            if not failure:
                try:
                    builder.write(pack_dir, fsync=fsync)
                except Exception as exc:  # reported: the parent refuses the append
                    failure = f"{type(exc).__name__}: {exc}"
                    # a full disk, say: the parent raises its ResourceError
                    os_error = (
                        (exc.errno, exc.strerror, exc.filename)
                        if isinstance(exc, OSError)
                        else None
                    )
            reply = ("failed", failure, os_error) if failure else ("ok", commits)
            os_error = None
            builder, commits = PackBuilder(), []
            pickle.dump(reply, outgoing, protocol=pickle.HIGHEST_PROTOCOL)
            outgoing.flush()


class _PackingStore:
    """What :mod:`perfledger.ledger.packing` needs of a store, in the child: its directories,
    its pool of spares, a dulwich repository opened on first use (pack merges), and
    "background" jobs run at once (the child has nothing else to do)."""

    def __init__(self, controldir: str, derived_dir: str, repo_path: str) -> None:
        from perfledger.ledger.loosepool import LoosePool

        self.controldir = controldir
        self.derived_dir = derived_dir
        self._objects_dir = os.path.join(controldir, "objects")
        self._repo_path = repo_path
        self._repo: Any = None
        self.loose_pool = LoosePool(self.derived_dir)

    @property
    def repo(self) -> Any:
        if self._repo is None:
            from dulwich.repo import Repo

            self._repo = Repo(self._repo_path)
        return self._repo

    def run_in_background(self, fn: Any, *args: Any) -> None:
        fn(*args)

    def wait_background(self) -> None:
        pass

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None


_packing_stores: dict[str, _PackingStore] = {}


def _pack_loose_here(controldir: str, derived_dir: str, repo_path: str) -> tuple[Any, ...]:
    """The child's loose packing (see :meth:`PackerProcess.start_loose_packing`); returns the
    reply. Never raises: a failure is reported, and the loose objects stay for a later try."""
    from perfledger.ledger import packing

    store = _packing_stores.get(controldir)
    if store is None:
        store = _packing_stores[controldir] = _PackingStore(controldir, derived_dir, repo_path)
    try:
        with packing._try_lock(store) as locked:  # type: ignore[arg-type]
            if not locked:
                return ("busy",)
            packed = packing.pack_loose(store, background=True)  # type: ignore[arg-type]
            packing.merge_packs(store)  # type: ignore[arg-type]
    except Exception as exc:  # reported: the appending process logs it
        store.close()
        _packing_stores.pop(controldir, None)
        return ("failed", f"{type(exc).__name__}: {exc}")
    return ("ok", packed)
