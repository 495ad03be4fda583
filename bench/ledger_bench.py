#!/usr/bin/env python3
"""perfledger storage benchmark: appends, cold verify, warm state, CLI latency, 1M-event verify,
side by side with reference stores measured in the same run on the same events.

Figures (perfledger, each printed next to its goal with PASS/MISS):

- single durable appends (``Ledger.append``) on a fresh ledger, events/s;
- batched appends (``Ledger.append_batch``, batches of 1,000) on a fresh ledger, events/s;
- cold replay + verify of an ``--events`` ledger (``Ledger.verify`` in a fresh process, derived
  cache ``<gitdir>/perfledger/`` deleted first), events/s; cold ``Ledger.state()`` likewise;
- warm state load (``Ledger.open`` + ``state()`` with a fresh cache, in process, median) and the
  wall time of ``perfledger --ledger L state --json`` and ``perfledger --ledger L log -n 20``
  (subprocesses, median of 5 after one untimed warm-up);
- verify of a ``--big`` ledger (default 1,000,000 events) in a child process: its peak RSS
  (``os.wait4`` rusage of that child alone) and events/s.

References on the same payloads: the ``eventsourcing`` package on SQLite (WAL, ``synchronous=
FULL``) through an ``Application`` + ``Aggregate`` and through its ``ApplicationRecorder``
directly; JSONL with one ``fsync`` per line (batched: one per batch); the git CLI making one
commit per event (``hash-object -w`` + ``mktree`` + ``commit-tree`` + ``update-ref``,
``core.fsync=committed``).

Single appends (every system) and perfledger's batched appends are measured in ``--rounds``
alternated rounds (3; this machine's speed drifts within minutes) and the median round is
reported, each round's figure beside it.

"Cold" means no perfledger derived data and a fresh process; the OS page cache is warm (the
benchmark cannot drop it without root), so cold figures are CPU-bound, not disk-bound.

Usage::

    python bench/ledger_bench.py                  # full run (100k + 1M events)
    python bench/ledger_bench.py --quick          # smoke run, well under a minute
    python bench/ledger_bench.py --big 0          # skip the 1M run
    python bench/ledger_bench.py --workdir ~/.cache/plbench --json figures.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ACTOR = "bench"
BATCH_SIZE = 1000
#: Bump when the payloads or the layout of cached ledgers change (cached ledgers are rebuilt).
#: 2: small objects stored uncompressed in packs (what appends write since session 5).
WORKDIR_FORMAT = 2

# Goals from the issue: (figure key, comparison, threshold, unit label).
GOALS: dict[str, tuple[str, float, str]] = {
    "single_append_eps": (">=", 250, "events/s"),
    "batch_append_eps": (">=", 10_000, "events/s"),
    "cold_verify_eps": (">=", 10_000, "events/s"),
    "warm_state_s": ("<=", 0.1, "s"),
    "cli_log_s": ("<=", 0.3, "s"),
    "big_verify_rss_mib": ("<=", 1024, "MiB"),
}


# --------------------------------------------------------------------------- payloads


def payloads(start: int, count: int) -> list[dict[str, Any]]:
    """Deterministic NoteRecorded payloads; every system stores exactly these."""
    out = []
    for i in range(start, start + count):
        out.append(
            {
                "text": f"observation {i}: tile {i % 17}x{i % 29} moved {i % 997} us; "
                f"see run r{i // 100}",
                "tags": ["bench", f"t{i % 10}"],
            }
        )
    return out


def batches(total: int, size: int = BATCH_SIZE) -> Iterator[tuple[int, int]]:
    """Yield (start, count) covering ``total`` events in chunks of ``size``."""
    start = 0
    while start < total:
        count = min(size, total - start)
        yield start, count
        start += count


# --------------------------------------------------------------------------- helpers


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's waited-for children: verify's forked
    workers."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def packer_cpu_s(store: Any) -> float:
    """CPU seconds (user + system) used so far by the store's packing child, read from
    ``/proc``; 0.0 when there is none (perfledger now packs in process; older trees, measured
    side by side with ``append_ab.py``, forked one: it is reaped only when the store closes,
    after the timed block)."""
    packer = getattr(store, "_packer", None)
    if packer is None:
        return 0.0
    try:
        with open(f"/proc/{packer.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # after the command name: state is field 3, utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stopwatch:
    """Accumulates wall time and CPU time (user + system) of this process and of the children
    it waited for inside the block (verify's forked workers); the appends' packing child is
    added by its caller (:func:`packer_cpu_s`).

    On a shared machine the wall figure absorbs other processes' load; the CPU figure does not
    (but it also leaves out time spent waiting on fsync), so both are reported.
    """

    def __init__(self) -> None:
        self.wall_s = 0.0
        self.cpu_s = 0.0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time() + _children_cpu_s()
        try:
            yield
        finally:
            self.wall_s += time.perf_counter() - wall
            self.cpu_s += time.process_time() + _children_cpu_s() - cpu

    def rate(self, events: int) -> dict[str, Any]:
        return {
            "events": events,
            "elapsed_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "eps": events / self.wall_s if self.wall_s else None,
            "cpu_eps": events / self.cpu_s if self.cpu_s else None,
        }


@contextlib.contextmanager
def maybe_profile(name: str) -> Iterator[None]:
    """cProfile the block when $LEDGER_BENCH_PROFILE names a directory; print the top 25."""
    out_dir = os.environ.get("LEDGER_BENCH_PROFILE")
    if not out_dir:
        yield
        return
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"{name}.prof")
        profiler.dump_stats(path)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
        sys.stderr.write(f"--- profile {name} ({path}) ---\n{text.getvalue()}\n")


def perfledger_cli() -> list[str]:
    """The perfledger console script next to this interpreter, else ``python -m perfledger``."""
    script = Path(sys.executable).parent / "perfledger"
    if script.exists():
        return [str(script)]
    found = shutil.which("perfledger")
    return [found] if found else [sys.executable, "-m", "perfledger"]


def time_subprocess(argv: list[str], runs: int, *, check_json: bool = False) -> dict[str, Any]:
    """Median wall time (and CPU time, user + system) of ``runs`` executions of ``argv``,
    after one untimed warm-up."""
    import resource

    subprocess.run(argv, check=True, capture_output=True)
    times, cpu = [], []
    last = b""
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime))
        last = done.stdout
    if check_json:
        json.loads(last)
    return {
        "median_s": median(times),
        "samples_s": times,
        "cpu_median_s": median(cpu),
        "stdout_bytes": len(last),
    }


def run_child(args: list[str], timeout_s: float | None = None) -> dict[str, Any]:
    """Run this script as a child with ``args``; return its JSON line plus its own peak RSS
    and CPU time (``os.wait4`` gives that child's rusage alone)."""
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"timed out after {timeout_s:.0f} s", "wall_s": timeout_s}
    # communicate() already reaped the child; its rusage is in RUSAGE_CHILDREN only as a max.
    # Use the RSS the child measured itself (ru_maxrss of RUSAGE_SELF, taken at exit).
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.decode()[-2000:]}", "wall_s": wall}
    if err:
        sys.stderr.write(err.decode())
    result = json.loads(out.decode().strip().splitlines()[-1])
    result["child_wall_s"] = wall
    return result


def self_rss_mib() -> float:
    import resource

    # ru_maxrss is KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def children_rss_mib() -> float:
    """The largest peak RSS of any waited-for child (verify's workers), MiB; 0 without any."""
    import resource

    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


# --------------------------------------------------------------------------- perfledger


def pl_single(path: str, n: int) -> dict[str, Any]:
    from perfledger.api import Ledger
    from perfledger.ledger.packing import pack_stats

    items = payloads(0, n)
    ledger = Ledger.init(path, actor=ACTOR)
    try:
        watch = Stopwatch()
        with maybe_profile("single_append"), watch.running():
            for payload in items:
                ledger.append("NoteRecorded", payload, actor=ACTOR)
        watch.cpu_s += packer_cpu_s(ledger.store)  # its loose packing, on the other CPU
        stats = pack_stats(ledger.store)
    finally:
        ledger.close()
    return {**watch.rate(n), "pack_stats": stats}


def pl_batched(path: str, n: int, *, progress: Callable[[int], None] | None = None) -> dict:
    from perfledger.api import Ledger
    from perfledger.ledger.base import EventDraft
    from perfledger.ledger.packing import pack_stats

    ledger = Ledger.init(path, actor=ACTOR)
    try:
        watch = Stopwatch()
        with maybe_profile(f"batch_append_{n}"):
            for start, count in batches(n):
                drafts = [
                    EventDraft("NoteRecorded", {"text": p["text"], "tags": p["tags"]}, ACTOR)
                    for p in payloads(start, count)
                ]
                with watch.running():
                    ledger.append_batch(drafts)
                if progress is not None:
                    progress(start + count)
        watch.cpu_s += packer_cpu_s(ledger.store)  # the pipelined batches' other half
        stats = pack_stats(ledger.store)
        head = ledger.head()
    finally:
        ledger.close()
    return {**watch.rate(n), "pack_stats": stats, "head": head}


def cached_ledger(workdir: str, n: int, log: Callable[[str], None]) -> tuple[str, dict | None]:
    """Return (path, build figures or None when reused) of an n-event ledger under workdir."""
    from perfledger import __version__

    path = os.path.join(workdir, ledger_dir_name(n))
    meta_path = path + ".json"
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            meta = json.load(f)
        if meta.get("perfledger") == __version__ and _ledger_head(path) == meta.get("head"):
            log(f"reusing the {n:,}-event ledger at {path}")
            return path, None
        log(f"cached ledger at {path} is stale; rebuilding")
    shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(meta_path)
    log(f"building a {n:,}-event ledger at {path} (batched appends of {BATCH_SIZE:,})")
    last = [time.perf_counter()]

    def progress(done: int) -> None:
        if time.perf_counter() - last[0] > 15:
            last[0] = time.perf_counter()
            log(f"  ... {done:,} / {n:,} events")

    built = pl_batched(path, n, progress=progress)
    with open(meta_path, "w") as f:
        json.dump({"perfledger": __version__, "head": built["head"], "events": n}, f)
    return path, built


def ledger_dir_name(n: int) -> str:
    """Cached ledgers are keyed by size, this script's layout and the storage format."""
    from perfledger.ledger.store import FORMAT_VERSION

    return f"ledger-{n}-w{WORKDIR_FORMAT}-f{FORMAT_VERSION}"


def source_version() -> str:
    """The perfledger source measured: git commit, plus a hash of uncommitted changes to src/."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        diff = subprocess.run(
            ["git", "-C", str(root), "diff", "HEAD", "--", "src"],
            capture_output=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    if not diff:
        return head
    import hashlib

    return f"{head}+dirty:{hashlib.sha1(diff).hexdigest()[:8]}"


def _ledger_head(path: str) -> str | None:
    try:
        from perfledger.api import Ledger

        with Ledger.open(path) as ledger:
            return ledger.head()
    except Exception:
        return None


def drop_derived(path: str) -> None:
    """Delete ``<gitdir>/perfledger/`` (derived index and state cache)."""
    from perfledger.api import Ledger

    with Ledger.open(path) as ledger:
        derived = ledger.store.derived_dir
    shutil.rmtree(derived, ignore_errors=True)


# child-process entry points: each prints one JSON line --------------------------------------


def child_verify(path: str) -> dict[str, Any]:
    from perfledger.api import Ledger

    drop_derived(path)
    watch = Stopwatch()
    with maybe_profile(f"cold_verify_{os.path.basename(path)}"), watch.running():
        ledger = Ledger.open(path)
        report = ledger.verify()
    # close() only saves the derived index when it grew; verify never builds it.
    ledger.close()
    return {
        "ok": report.ok,
        **watch.rate(report.events),
        "merges": report.merges,
        "report_elapsed_s": report.elapsed_s,
        "state_hash": report.extra.get("state_hash"),
        "error": None if report.error is None else report.error.message,
        "peak_rss_mib": self_rss_mib(),
        "worker_peak_rss_mib": children_rss_mib(),
    }


def child_state(path: str) -> dict[str, Any]:
    from perfledger.api import Ledger
    from perfledger.projections.ledger_state import state_hash

    drop_derived(path)
    watch = Stopwatch()
    with maybe_profile(f"cold_state_{os.path.basename(path)}"):
        with watch.running():
            ledger = Ledger.open(path)
            state = ledger.state()
        close_started = time.perf_counter()
        ledger.close()  # saves the derived index (part of a cold CLI call's cost)
        close_s = time.perf_counter() - close_started
    return {
        **watch.rate(state.event_count),
        "close_s": close_s,
        "state_hash": state_hash(state),
        "peak_rss_mib": self_rss_mib(),
    }


def child_build(path: str, n: int, mode: str) -> dict[str, Any]:
    """Build an n-event ledger with batched appends.

    ``mode="api"``: exactly as a user's batched appends run (the store merges packs as it goes).
    ``mode="deferred"``: the store's incremental pack merging and its periodic save of the
    derived index are switched off for the build (both cost O(ledger) per batch: a 1M-event
    build took about an hour on 2 cores), then one ``git repack -a -d --window=0`` leaves one
    pack without deltas, the layout a merged ledger has. Events, commits and ref updates are
    written by ``Ledger.append_batch`` either way.
    """
    from perfledger import __version__

    shutil.rmtree(path, ignore_errors=True)
    patched: list[str] = []
    if mode == "deferred":
        import perfledger.ledger.store as store_module

        if hasattr(store_module, "maybe_pack"):
            store_module.maybe_pack = lambda store, *counts: (  # type: ignore[assignment]
                0 if len(counts) == 1 else (0,) * len(counts)
            )
            patched.append("maybe_pack")
        if hasattr(store_module, "_INDEX_SAVE_EVERY"):
            store_module._INDEX_SAVE_EVERY = 1 << 62  # type: ignore[attr-defined]
            patched.append("_INDEX_SAVE_EVERY")
    last = [time.perf_counter()]

    def progress(done: int) -> None:
        if time.perf_counter() - last[0] > 30:
            last[0] = time.perf_counter()
            sys.stderr.write(f"  ... {done:,} / {n:,} events\n")
            sys.stderr.flush()

    built = pl_batched(path, n, progress=progress)
    built["mode"] = mode
    built["patched"] = patched
    if mode == "deferred":
        started = time.perf_counter()
        subprocess.run(
            ["git", "-C", path, "repack", "-a", "-d", "-f", "-q", "--window=0", "--depth=0"],
            check=True,
        )
        built["repack_s"] = time.perf_counter() - started
        from perfledger.api import Ledger
        from perfledger.ledger.packing import pack_stats

        with Ledger.open(path) as ledger:
            built["pack_stats_after_repack"] = pack_stats(ledger.store)
    with open(path + ".json", "w") as f:
        json.dump({"perfledger": __version__, "head": built["head"], "events": n, "mode": mode}, f)
    built["peak_rss_mib"] = self_rss_mib()
    return built


def pl_warm(path: str, runs: int) -> dict[str, Any]:
    from perfledger.api import Ledger

    # prime: make sure the state cache and the derived index are fresh
    with Ledger.open(path) as ledger:
        ledger.state()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        ledger = Ledger.open(path)
        state = ledger.state()
        times.append(time.perf_counter() - started)
        ledger.close()
    # replay without verification, through the derived index (for the reference table)
    watch = Stopwatch()
    with Ledger.open(path) as ledger, watch.running():
        count = sum(1 for _ in ledger.events())
    return {
        "median_s": median(times),
        "samples_s": times,
        "events": state.event_count,
        "replay": watch.rate(count),
    }


# --------------------------------------------------------------------------- references


def _event_record(payload: dict[str, Any], seq: int) -> dict[str, Any]:
    return {"kind": "NoteRecorded", "seq": seq, "actor": ACTOR, "ts": time.time(), **payload}


def jsonl_single(path: str, n: int) -> dict[str, Any]:
    items = payloads(0, n)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    watch = Stopwatch()
    try:
        with watch.running():
            for i, payload in enumerate(items):
                os.write(fd, (json.dumps(_event_record(payload, i)) + "\n").encode())
                os.fsync(fd)
    finally:
        os.close(fd)
    return watch.rate(n)


def fs_floor(path: str, n: int) -> dict[str, Any]:
    """The disk's floor for one durable git append with loose objects, without perfledger's
    Python work: the system calls of a single append as :mod:`perfledger.ledger.store` makes
    them (the one durability method: fsync each file, then its directory). Per append: three
    ~400-byte object files written and fsynced, renamed into their fan-out directories, those
    directories fsynced; the ref's new value written to a new file and fsynced, linked as the
    lock, renamed over the ref, the ref's directory fsynced."""
    os.makedirs(os.path.join(path, "refs"), exist_ok=True)
    os.makedirs(os.path.join(path, "owner"), exist_ok=True)
    for i in range(256):
        os.makedirs(os.path.join(path, f"{i:02x}"), exist_ok=True)
    ref = os.path.join(path, "refs", "ledger")
    data = os.urandom(400)
    watch = Stopwatch()
    with watch.running():
        for i in range(n):
            directories = set()
            for j in range(3):
                directory = os.path.join(path, f"{(3 * i + j) % 256:02x}")
                tmp = os.path.join(directory, f"tmp_{i}_{j}")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
                os.replace(tmp, os.path.join(directory, f"obj_{i}_{j}"))
                directories.add(directory)
            for directory in directories:
                fsync_dir_path(directory)
            owner = os.path.join(path, "owner", f"lock-{i}")
            fd = os.open(owner, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b"%040x\n" % (i + 1))
            os.fsync(fd)
            os.link(owner, ref + ".lock")
            os.replace(ref + ".lock", ref)
            os.unlink(owner)
            os.close(fd)
            fsync_dir_path(os.path.dirname(ref))
    return {**watch.rate(n), "method": "fsync"}


def fsync_dir_path(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def jsonl_batched(path: str, n: int) -> dict[str, Any]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    watch = Stopwatch()
    try:
        for start, count in batches(n):
            items = payloads(start, count)
            with watch.running():
                chunk = "".join(
                    json.dumps(_event_record(p, start + i)) + "\n" for i, p in enumerate(items)
                )
                os.write(fd, chunk.encode())
                os.fsync(fd)
    finally:
        os.close(fd)
    return watch.rate(n)


def jsonl_replay(path: str) -> dict[str, Any]:
    watch = Stopwatch()
    count = 0
    with watch.running(), open(path, "rb") as f:
        for line in f:
            json.loads(line)
            count += 1
    return watch.rate(count)


def _es_setup() -> None:
    """Force ``PRAGMA synchronous=FULL`` on every SQLite connection eventsourcing opens (its
    default build already uses FULL with WAL; this makes the durability setting explicit)."""
    import eventsourcing.sqlite as es_sqlite

    pool_cls = es_sqlite.SQLiteConnectionPool
    if getattr(pool_cls, "_bench_patched", False):
        return
    original = pool_cls._create_connection

    def create(self: Any) -> Any:
        conn = original(self)
        conn._sqlite_conn.execute("PRAGMA synchronous=FULL")
        return conn

    pool_cls._create_connection = create  # type: ignore[method-assign]
    pool_cls._bench_patched = True  # type: ignore[attr-defined]


def _es_app(db_path: str) -> Any:
    from eventsourcing.application import Application

    _es_setup()
    return Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": db_path})


def _es_sync_mode(app: Any) -> str:
    with app.recorder.datastore.transaction(commit=False) as cursor:
        cursor.execute("PRAGMA synchronous")
        sync = cursor.fetchone()[0]
        cursor.execute("PRAGMA journal_mode")
        journal = cursor.fetchone()[0]
    return f"journal_mode={journal}, synchronous={ {0: 'OFF', 1: 'NORMAL', 2: 'FULL', 3: 'EXTRA'}.get(sync, sync) }"


def _notebook_class() -> type:
    from eventsourcing.domain import Aggregate, event

    class Notebook(Aggregate):
        @event("Started")
        def __init__(self, name: str) -> None:
            self.name = name
            self.notes = 0
            self.tags: dict[str, int] = {}

        @event("NoteRecorded")
        def record(self, text: str, tags: list[str]) -> None:
            self.notes += 1
            for tag in tags:
                self.tags[tag] = self.tags.get(tag, 0) + 1

    return Notebook


_NOTEBOOK: type | None = None


def notebook_class() -> type:
    global _NOTEBOOK
    if _NOTEBOOK is None:
        _NOTEBOOK = _notebook_class()
    return _NOTEBOOK


def es_app_single(db_path: str, n: int) -> dict[str, Any]:
    app = _es_app(db_path)
    watch = Stopwatch()
    try:
        notebook = notebook_class()("bench")
        app.save(notebook)
        with watch.running():
            for payload in payloads(0, n):
                notebook.record(text=payload["text"], tags=payload["tags"])
                app.save(notebook)
        mode = _es_sync_mode(app)
    finally:
        app.close()
    return {**watch.rate(n), "sqlite": mode}


def es_app_batched(db_path: str, n: int) -> dict[str, Any]:
    app = _es_app(db_path)
    watch = Stopwatch()
    try:
        notebook = notebook_class()("bench")
        app.save(notebook)
        for start, count in batches(n):
            items = payloads(start, count)
            with watch.running():
                for payload in items:
                    notebook.record(text=payload["text"], tags=payload["tags"])
                app.save(notebook)
        aggregate_id = notebook.id
    finally:
        app.close()
    return {**watch.rate(n), "aggregate_id": aggregate_id}


def es_app_replay(db_path: str, aggregate_id: Any) -> dict[str, Any]:
    app = _es_app(db_path)
    watch = Stopwatch()
    try:
        with watch.running():
            notebook = app.repository.get(aggregate_id)
    finally:
        app.close()
    return watch.rate(notebook.notes)


def _es_recorder(db_path: str) -> Any:
    from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

    _es_setup()
    datastore = SQLiteDatastore(db_path)
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    return recorder


def _stored(payload: dict[str, Any], originator: Any, version: int) -> Any:
    from eventsourcing.persistence import StoredEvent

    return StoredEvent(
        originator_id=originator,
        originator_version=version,
        topic="bench:NoteRecorded",
        state=json.dumps(_event_record(payload, version)).encode(),
    )


def es_rec_single(db_path: str, n: int) -> dict[str, Any]:
    import uuid

    recorder = _es_recorder(db_path)
    originator = uuid.uuid4()
    watch = Stopwatch()
    try:
        with watch.running():
            for i, payload in enumerate(payloads(0, n)):
                recorder.insert_events([_stored(payload, originator, i + 1)])
    finally:
        recorder.datastore.close()
    return watch.rate(n)


def es_rec_batched(db_path: str, n: int) -> dict[str, Any]:
    import uuid

    recorder = _es_recorder(db_path)
    originator = uuid.uuid4()
    watch = Stopwatch()
    try:
        for start, count in batches(n):
            items = payloads(start, count)
            with watch.running():
                recorder.insert_events(
                    [_stored(p, originator, start + i + 1) for i, p in enumerate(items)]
                )
    finally:
        recorder.datastore.close()
    return {**watch.rate(n), "originator": originator}


def es_rec_replay(db_path: str, originator: Any) -> dict[str, Any]:
    recorder = _es_recorder(db_path)
    watch = Stopwatch()
    count = 0
    try:
        with watch.running():
            for stored in recorder.select_events(originator):
                json.loads(stored.state)
                count += 1
    finally:
        recorder.datastore.close()
    return watch.rate(count)


def git_cli_single(path: str, n: int) -> dict[str, Any]:
    """One commit per event with plumbing commands: 4 git processes per event, objects and
    the ref fsynced (``core.fsync=committed``, as perfledger's own ledgers configure)."""
    env = dict(
        os.environ,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME=ACTOR,
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME=ACTOR,
        GIT_COMMITTER_EMAIL="bench@example.invalid",
    )
    subprocess.run(["git", "init", "-q", "--bare", path], check=True, env=env)
    subprocess.run(["git", "-C", path, "config", "core.fsync", "committed"], check=True, env=env)
    subprocess.run(["git", "-C", path, "config", "core.fsyncMethod", "fsync"], check=True, env=env)

    def git(*args: str, stdin: bytes | None = None) -> str:
        done = subprocess.run(
            ["git", "-C", path, *args], input=stdin, capture_output=True, check=True, env=env
        )
        return done.stdout.decode().strip()

    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    watch = Stopwatch()
    with watch.running():
        _git_commits(git, n)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU of the git processes themselves (RUSAGE_CHILDREN sums user and system time).
    watch.cpu_s += (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return watch.rate(n)


def _git_commits(git: Callable[..., str], n: int) -> None:
    parent = ""
    for i, payload in enumerate(payloads(0, n)):
        blob = git(
            "hash-object", "-w", "--stdin", stdin=json.dumps(_event_record(payload, i)).encode()
        )
        tree = git("mktree", stdin=f"100644 blob {blob}\tevent.json\n".encode())
        args = ["commit-tree", tree, "-m", f"NoteRecorded: {payload['text'][:40]}"]
        if parent:
            args += ["-p", parent]
        commit = git(*args)
        git("update-ref", "refs/heads/ledger", commit, *([parent] if parent else []))
        parent = commit


# --------------------------------------------------------------------------- the run


def cpu_check_ms() -> float:
    """Milliseconds a fixed pure-Python loop (1,000,000 additions) takes now: how fast the
    host lets this machine's CPU run at this moment."""
    started = time.perf_counter()
    total = 0
    for i in range(1_000_000):
        total += i
    return round((time.perf_counter() - started) * 1e3, 1)


def measure(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    from perfledger import __version__

    def checkpoint() -> None:
        """Write the figures so far (a killed run keeps what it measured)."""
        figures["config"]["loadavg_1m"].append(round(os.getloadavg()[0], 2))
        figures["config"]["cpu_check_ms"].append(cpu_check_ms())
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(figures, f, indent=2, default=str)

    figures: dict[str, Any] = {
        "config": {
            "quick": args.quick,
            "single_events": args.single,
            "batched_events": args.batched,
            "events": args.events,
            "big_events": args.big,
            "git_cli_events": args.git_events,
            "rounds": args.rounds,
            "batch_size": BATCH_SIZE,
            "perfledger": __version__,
            "python": platform.python_version(),
            "source": source_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
            # Other work on the machine skews every figure: the 1-minute load average is
            # recorded at the start and at each checkpoint.
            "loadavg_1m": [round(os.getloadavg()[0], 2)],
            # This is a virtual machine whose CPUs the host may slow down (the same loop took
            # from ~0.7 s to ~3 s per 10 million iterations within one session): a fixed loop is
            # timed at the start and at each checkpoint, so runs can be compared.
            "cpu_check_ms": [cpu_check_ms()],
        }
    }
    workdir = args.workdir or tempfile.mkdtemp(prefix="plbench-")
    os.makedirs(workdir, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="scratch-", dir=workdir)
    figures["config"]["workdir"] = workdir
    try:
        # ---- appends on fresh stores, in alternated rounds: this machine's speed drifts
        # within minutes, so each system's single appends (and perfledger's batched appends)
        # are measured once per round, and the median round is reported with all of them
        runs: dict[str, list[dict[str, Any]]] = {key: [] for key in ROUND_FIGURES}
        for r in range(args.rounds):
            here = os.path.join(scratch, f"round-{r}")
            os.makedirs(here)
            log(
                f"round {r + 1}/{args.rounds}: {args.single:,} single durable appends "
                "(perfledger, eventsourcing Application and Recorder, JSONL, the disk's floor); "
                f"perfledger: {args.batched:,} batched appends"
            )
            runs["pl_single"].append(pl_single(os.path.join(here, "pl-single"), args.single))
            runs["es_app_single"].append(
                es_app_single(os.path.join(here, "es-app-1.db"), args.single)
            )
            runs["es_rec_single"].append(
                es_rec_single(os.path.join(here, "es-rec-1.db"), args.single)
            )
            runs["jsonl_single"].append(jsonl_single(os.path.join(here, "1.jsonl"), args.single))
            runs["fs_floor"].append(fs_floor(os.path.join(here, "floor"), args.single))
            batched = pl_batched(os.path.join(here, "pl-batched"), args.batched)
            batched.pop("head")
            runs["pl_batched"].append(batched)
        for key, measured in runs.items():
            figures[key] = median_round(measured)
        checkpoint()

        log(f"eventsourcing Application/SQLite: {args.events:,} batched")
        es_batched = es_app_batched(os.path.join(scratch, "es-app-n.db"), args.events)
        aggregate_id = es_batched.pop("aggregate_id")
        figures["es_app_batched"] = es_batched
        figures["es_app_replay"] = es_app_replay(os.path.join(scratch, "es-app-n.db"), aggregate_id)

        log("eventsourcing ApplicationRecorder/SQLite")
        rec_batched = es_rec_batched(os.path.join(scratch, "es-rec-n.db"), args.events)
        originator = rec_batched.pop("originator")
        figures["es_rec_batched"] = rec_batched
        figures["es_rec_replay"] = es_rec_replay(os.path.join(scratch, "es-rec-n.db"), originator)

        log("JSONL + fsync")
        figures["jsonl_batched"] = jsonl_batched(os.path.join(scratch, "n.jsonl"), args.events)
        figures["jsonl_replay"] = jsonl_replay(os.path.join(scratch, "n.jsonl"))
        checkpoint()

        if args.git_events > 0 and shutil.which("git"):
            log(f"git CLI: {args.git_events:,} commits, one per event")
            figures["git_cli_single"] = git_cli_single(
                os.path.join(scratch, "git-cli.git"), args.git_events
            )

        # ---- the N-event ledger
        path, built = cached_ledger(workdir, args.events, log)
        figures["pl_build"] = (
            {k: v for k, v in built.items() if k != "head"} if built is not None else None
        )
        log("perfledger: cold verify (fresh process, derived cache deleted)")
        figures["pl_cold_verify"] = run_child(["--child-verify", path])
        log("perfledger: cold state (fresh process, derived cache deleted)")
        figures["pl_cold_state"] = run_child(["--child-state", path])
        log("perfledger: warm state, CLI state/log")
        figures["pl_warm"] = pl_warm(path, args.warm_runs)
        cli = perfledger_cli()
        figures["cli_state"] = time_subprocess(
            [*cli, "--ledger", path, "state", "--json"], args.cli_runs, check_json=True
        )
        figures["cli_log"] = time_subprocess(
            [*cli, "--ledger", path, "log", "-n", "20"], args.cli_runs
        )
        figures["cli_version"] = time_subprocess([*cli, "--version"], args.cli_runs)
        figures["python_startup"] = time_subprocess([sys.executable, "-c", "pass"], args.cli_runs)
        from perfledger.api import Ledger
        from perfledger.ledger.packing import pack_stats

        with Ledger.open(path) as ledger:
            figures["pl_pack_stats"] = pack_stats(ledger.store)
            figures["pl_ledger_events"] = ledger.store.count()
            checkpoint()

        # ---- the big ledger
        if args.big > 0:
            big_path = os.path.join(workdir, ledger_dir_name(args.big))
            if _ledger_head(big_path) is not None and _big_meta_ok(big_path):
                log(f"reusing the {args.big:,}-event ledger at {big_path}")
                figures["big_build"] = None
            else:
                log(
                    f"building a {args.big:,}-event ledger at {big_path} (child process, "
                    f"--big-build {args.big_build})"
                )
                figures["big_build"] = run_child(
                    ["--child-build", big_path, str(args.big), args.big_build]
                )
                figures["big_build"].pop("head", None)
                checkpoint()
            log(f"perfledger: verify of {args.big:,} events (child process)")
            figures["big_verify"] = run_child(["--child-verify", big_path], args.big_timeout)
            with contextlib.suppress(Exception), Ledger.open(big_path) as ledger:
                figures["big_pack_stats"] = pack_stats(ledger.store)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return figures


#: Figures measured once per round (``--rounds``), alternated between the systems.
ROUND_FIGURES = ("pl_single", "es_app_single", "es_rec_single", "jsonl_single", "fs_floor")
ROUND_FIGURES += ("pl_batched",)


def median_round(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median wall rate (the lower middle one of an even count), with every
    round's wall rate in ``rounds_eps`` (events/s, in the order measured)."""
    ranked = sorted(measured, key=lambda fig: fig["eps"])
    return {**ranked[(len(ranked) - 1) // 2], "rounds_eps": [fig["eps"] for fig in measured]}


def _rounds(fig: dict[str, Any]) -> str:
    """'median of N rounds: a, b, c ev/s' detail of a figure measured in rounds."""
    eps = fig.get("rounds_eps") or []
    if len(eps) < 2:
        return ""
    return f"median of {len(eps)} rounds: " + ", ".join(f"{x:,.0f}" for x in eps) + " ev/s; "


def _big_meta_ok(path: str) -> bool:
    from perfledger import __version__

    try:
        with open(path + ".json") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return False
    return meta.get("perfledger") == __version__ and meta.get("head") == _ledger_head(path)


# --------------------------------------------------------------------------- report


def verdicts(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Return {goal key: {value, goal, pass}} for the perfledger figures measured (wall time)."""
    values: dict[str, float | None] = {
        "single_append_eps": figures["pl_single"]["eps"],
        "batch_append_eps": figures["pl_batched"]["eps"],
        "cold_verify_eps": figures["pl_cold_verify"].get("eps"),
        "warm_state_s": figures["pl_warm"]["median_s"],
        "cli_log_s": figures["cli_log"]["median_s"],
    }
    big = figures.get("big_verify")
    if big is not None:
        values["big_verify_rss_mib"] = big.get("peak_rss_mib") if big.get("ok") else None
    out = {}
    for key, value in values.items():
        op, threshold, unit = GOALS[key]
        ok = value is not None and (value >= threshold if op == ">=" else value <= threshold)
        out[key] = {"value": value, "goal": f"{op} {threshold:,} {unit}", "pass": ok}
    return out


def _eps(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f} ev/s"


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f} s"


def _cpu(fig: dict[str, Any] | None) -> str:
    """'CPU-time rate' detail of a figure (robust to other load on the machine)."""
    if not fig or fig.get("cpu_eps") is None:
        return ""
    return f"{fig['cpu_eps']:,.0f} ev/s per CPU-second"


def render(figures: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    cfg = figures["config"]
    n = cfg["events"]
    console.print(
        f"[bold]perfledger {cfg['perfledger']}[/] storage benchmark - {cfg['machine']}, "
        f"Python {cfg['python']}; source {cfg.get('source', '?')}"
    )
    console.print(
        "1-min load average at the checkpoints: "
        + ", ".join(f"{x:.1f}" for x in cfg.get("loadavg_1m", []))
        + f" (on {os.cpu_count()} CPUs: above that, wall figures include waiting for a CPU)"
    )
    if cfg.get("cpu_check_ms"):
        console.print(
            "CPU check, a fixed 1,000,000-iteration Python loop at the checkpoints: "
            + ", ".join(f"{x:.0f} ms" for x in cfg["cpu_check_ms"])
            + " (the host's speed for this run: the higher, the slower every figure)"
        )
    v = verdicts(figures)

    def mark(key: str) -> str:
        if key not in v:
            return "-"
        return "[green]PASS[/]" if v[key]["pass"] else "[red]MISS[/]"

    def goal(key: str) -> str:
        return v[key]["goal"] if key in v else "-"

    goals = Table(title="perfledger against the issue's goals (wall time)", title_justify="left")
    for col in ("figure", "measured", "goal", "verdict", "detail"):
        goals.add_column(col, justify="right" if col == "measured" else "left")
    single, batched = figures["pl_single"], figures["pl_batched"]
    goals.add_row(
        f"single durable appends ({single['events']:,}, Ledger.append)",
        _eps(single["eps"]),
        goal("single_append_eps"),
        mark("single_append_eps"),
        f"{_rounds(single)}{1e3 / single['eps']:.2f} ms/append; {_cpu(single)}; "
        f"after: {single['pack_stats']}",
    )
    floor = figures.get("fs_floor")
    if floor is not None:
        goals.add_row(
            "  context: the disk's floor for one durable git append",
            _eps(floor["eps"]),
            "-",
            "-",
            f"{_rounds(floor)}{1e3 / floor['eps']:.2f} ms: perfledger's system calls without "
            "its Python work "
            "(each file fsynced, then its directory: 3 loose objects and their fan-out "
            "directories, the ref's lock, rename, fsync(dir)); "
            f"{_cpu(floor)}",
        )
    goals.add_row(
        f"batched appends ({batched['events']:,}, batches of {cfg['batch_size']:,})",
        _eps(batched["eps"]),
        goal("batch_append_eps"),
        mark("batch_append_eps"),
        f"{_rounds(batched)}{_cpu(batched)}; after: {batched['pack_stats']}",
    )
    cold = figures["pl_cold_verify"]
    goals.add_row(
        f"cold replay+verify of {n:,} events (fresh process)",
        _eps(cold.get("eps")),
        goal("cold_verify_eps"),
        mark("cold_verify_eps"),
        (
            f"{cold['elapsed_s']:.2f} s; {_cpu(cold)} (workers included); ok={cold.get('ok')}; "
            f"peak RSS {cold['peak_rss_mib']:.0f} MiB"
            + (
                f" (+ each worker <= {cold['worker_peak_rss_mib']:.0f} MiB)"
                if cold.get("worker_peak_rss_mib")
                else ""
            )
            + (f"; error: {cold['error']}" if cold.get("error") else "")
        )
        if "elapsed_s" in cold
        else str(cold.get("error")),
    )
    cstate = figures["pl_cold_state"]
    goals.add_row(
        f"cold Ledger.state() of {n:,} events (fresh process)",
        _secs(cstate.get("elapsed_s")),
        "-",
        "-",
        f"{_eps(cstate['eps'])}; {_cpu(cstate)}; then close() saving the index "
        f"{cstate['close_s']:.2f} s"
        if "elapsed_s" in cstate
        else str(cstate.get("error")),
    )
    warm = figures["pl_warm"]
    goals.add_row(
        f"warm state load of {n:,} (open + state, in process)",
        _secs(warm["median_s"]),
        goal("warm_state_s"),
        mark("warm_state_s"),
        f"median of {len(warm['samples_s'])}; max {max(warm['samples_s']):.4f} s",
    )
    cli_state = figures["cli_state"]
    goals.add_row(
        "`perfledger --ledger L state --json` wall",
        _secs(cli_state["median_s"]),
        "<= 0.1 s (state load)",
        "[green]PASS[/]" if cli_state["median_s"] <= 0.1 else "[red]MISS[/]",
        f"median of {len(cli_state['samples_s'])} subprocesses (interpreter start included); "
        f"CPU {cli_state.get('cpu_median_s', float('nan')):.3f} s",
    )
    cli_log = figures["cli_log"]
    goals.add_row(
        "`perfledger --ledger L log -n 20` wall",
        _secs(cli_log["median_s"]),
        goal("cli_log_s"),
        mark("cli_log_s"),
        f"median of {len(cli_log['samples_s'])} subprocesses; "
        f"CPU {cli_log.get('cpu_median_s', float('nan')):.3f} s",
    )
    goals.add_row(
        "  context: `perfledger --version` wall",
        _secs(figures["cli_version"]["median_s"]),
        "-",
        "-",
        f"`python -c pass`: {figures['python_startup']['median_s']:.4f} s",
    )
    big = figures.get("big_verify")
    if big is not None:
        big_n = cfg["big_events"]
        if big.get("ok"):
            goals.add_row(
                f"verify of {big_n:,} events: peak RSS (child process)",
                f"{big['peak_rss_mib']:,.0f} MiB",
                goal("big_verify_rss_mib"),
                mark("big_verify_rss_mib"),
                f"{_eps(big['eps'])} ({big['elapsed_s']:.1f} s); {_cpu(big)}; "
                f"packs: {figures.get('big_pack_stats')}",
            )
        else:
            goals.add_row(
                f"verify of {big_n:,} events",
                "failed",
                goal("big_verify_rss_mib"),
                "[red]MISS[/]",
                str(big.get("error"))[:300],
            )
        bb = figures.get("big_build")
        if bb:
            extra = (
                f"; pack merging deferred, then git repack {bb.get('repack_s', 0):.0f} s -> "
                f"{bb.get('pack_stats_after_repack')}"
                if bb.get("mode") == "deferred"
                else ""
            )
            goals.add_row(
                f"  building the {big_n:,}-event ledger (batched, --big-build {bb.get('mode')})",
                _eps(bb.get("eps")),
                "-",
                "-",
                f"{bb.get('elapsed_s', 0):.0f} s; {_cpu(bb)}; packs before repack: "
                f"{bb.get('pack_stats')}{extra}; builder peak RSS "
                f"{bb.get('peak_rss_mib', 0):.0f} MiB"
                if "eps" in bb
                else str(bb.get("error"))[:300],
            )
    build = figures.get("pl_build")
    goals.add_row(
        f"  pack count in the {n:,}-event ledger",
        str(figures["pl_pack_stats"]["packs"]),
        "-",
        "-",
        f"{figures['pl_pack_stats']}; "
        + (
            f"built this run at {_eps(build['eps'])} ({_cpu(build)})"
            if build
            else "reused from --workdir"
        ),
    )
    console.print(goals)

    # ---- side by side
    systems = [
        ("perfledger", "pl"),
        ("eventsourcing\nApplication+SQLite", "es_app"),
        ("eventsourcing\nRecorder+SQLite", "es_rec"),
        ("JSONL+fsync", "jsonl"),
        ("git CLI\n(4 procs/commit)", "git_cli"),
    ]
    pl = {
        "single": figures["pl_single"],
        "batched": figures["pl_batched"],
        "replay": figures["pl_cold_verify"],
    }
    table = Table(
        title="side by side, same payloads. Cell: events/s (wall), then perfledger / reference; "
        "[dim]per CPU-second and its ratio below[/]",
        title_justify="left",
    )
    table.add_column("figure")
    for name, _ in systems:
        table.add_column(name, justify="right")
    rows = [
        (
            "single",
            f"single durable appends ({cfg['single_events']:,}; git CLI {cfg['git_cli_events']:,})",
        ),
        ("batched", f"batched appends, batches of {cfg['batch_size']:,}"),
        ("replay", f"replay of {n:,} (perfledger: cold verify)"),
    ]
    for key, label in rows:
        cells = []
        mine = pl[key]
        for _, prefix in systems:
            if prefix == "pl":
                cells.append(f"{_eps(mine.get('eps'))}\n[dim]{_eps(mine.get('cpu_eps'))} cpu[/]")
                continue
            fig = figures.get(f"{prefix}_{key}")
            if not fig or fig.get("eps") is None:
                cells.append("-")
                continue
            ratio = mine["eps"] / fig["eps"] if mine.get("eps") else float("nan")
            cpu_ratio = (
                mine["cpu_eps"] / fig["cpu_eps"]
                if mine.get("cpu_eps") and fig.get("cpu_eps")
                else float("nan")
            )
            cells.append(
                f"{_eps(fig['eps'])}  pl {ratio:.2f}x\n"
                f"[dim]{_eps(fig.get('cpu_eps'))} cpu  pl {cpu_ratio:.2f}x[/]"
            )
        table.add_row(label, *cells)
    replay = figures["pl_warm"]["replay"]
    table.add_row(
        f"perfledger replay of {n:,}, no verify (Ledger.events, warm index)",
        f"{_eps(replay['eps'])}\n[dim]{_eps(replay['cpu_eps'])} cpu[/]",
        *["" for _ in systems[1:]],
    )
    console.print(table)
    es_mode = figures.get("es_app_single", {}).get("sqlite")
    if es_mode:
        console.print(f"eventsourcing SQLite settings: {es_mode}")
    if cfg.get("rounds", 1) > 1:
        console.print(
            f"note: single appends (every system) and perfledger's batched appends: the median of "
            f"{cfg['rounds']} alternated rounds (perfledger's rounds in the goals table, every "
            "round in the --json file); the references' batched appends and replays: one run."
        )
    if cfg["batched_events"] != n:
        console.print(
            f"note: perfledger's batched appends are measured on a fresh ledger of "
            f"{cfg['batched_events']:,} events, the references' on {n:,} (they are replayed)."
        )
    console.print(
        "note: 'cold' = fresh process without perfledger's derived data; the OS page cache is "
        "warm. References replay without any hashing or checks; perfledger's replay verifies."
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run (< 1 min)")
    parser.add_argument("--events", type=int, default=None, help="replay ledger size (100,000)")
    parser.add_argument(
        "--big", type=int, default=None, help="big verify size (1,000,000; 0 skips)"
    )
    parser.add_argument("--single", type=int, default=None, help="single appends (2,000)")
    parser.add_argument("--batched", type=int, default=None, help="batched appends (20,000)")
    parser.add_argument("--git-events", type=int, default=None, help="git CLI commits (300)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="alternated rounds of the single-append figures and of perfledger's batched "
        "appends; the median round is reported (3)",
    )
    parser.add_argument("--warm-runs", type=int, default=None, help="warm state loads (9)")
    parser.add_argument("--cli-runs", type=int, default=None, help="CLI runs per median (5)")
    parser.add_argument("--big-timeout", type=float, default=1800, help="big verify limit, s")
    parser.add_argument(
        "--big-build",
        choices=("deferred", "api"),
        default="deferred",
        help="how to build the big ledger: 'api' = plain batched appends (about an hour for 1M "
        "on 2 cores), 'deferred' = batched appends with pack merging deferred to one git repack "
        "(default)",
    )
    parser.add_argument("--render", default=None, help="print the tables of a --json file")
    parser.add_argument("--workdir", default=None, help="keep built ledgers here between runs")
    parser.add_argument("--json", dest="json_out", default=None, help="write all figures here")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "events": 1_000 if quick else 100_000,
        "big": 0 if quick else 1_000_000,
        "single": 50 if quick else 2_000,
        "batched": 2_000 if quick else 20_000,
        "git_events": 10 if quick else 300,
        "rounds": 1 if quick else 3,
        "warm_runs": 5 if quick else 9,
        "cli_runs": 3 if quick else 5,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # child-process modes (one JSON line on stdout)
    if argv and argv[0] == "--child-verify":
        print(json.dumps(child_verify(argv[1])))
        return 0
    if argv and argv[0] == "--child-state":
        print(json.dumps(child_state(argv[1])))
        return 0
    if argv and argv[0] == "--child-build":
        print(json.dumps(child_build(argv[1], int(argv[2]), argv[3])))
        return 0

    from rich.console import Console

    args = parse_args(argv)
    if args.render:
        with open(args.render) as f:
            figures = json.load(f)
        render(figures, Console(width=None if sys.stdout.isatty() else 170))
        return 0
    # Wide enough for the side-by-side table when the output is piped (rich defaults to 80).
    console = Console(width=None if sys.stdout.isatty() else 170)
    err = Console(stderr=True)
    started = time.perf_counter()

    def log(message: str) -> None:
        err.print(f"[dim]{time.perf_counter() - started:7.1f} s[/] {message}")

    figures = measure(args, log)
    figures["total_s"] = time.perf_counter() - started
    figures["verdicts"] = verdicts(figures)
    render(figures, console)
    console.print(f"total {figures['total_s']:.1f} s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(figures, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
