"""Crash safety with real processes and SIGKILL (SPEC.md section 2: "a crash at any point leaves
either the old head or the new one, never a broken ledger").

A child process (``tests/crash/_appender.py``, run with this interpreter) opens the ledger with
``Ledger.open`` and appends ``NoteRecorded`` events in a loop — single appends (loose objects),
batches of 8-12 (one pack each), events with artifacts (some contents shared, so the same blobs are
written again and again) — and prints each id after ``append`` returns. Its
``LOOSE_PACK_THRESHOLD`` is lowered to 30 so loose objects are packed and packs merged every few
appends. The parent kills it with SIGKILL at random moments (seeded) or at exact points, restarts
a new child on the same ledger, and checks after every kill and at the end:

- the ref points at a commit that exists and holds an event, and it never goes backwards;
- every id a child printed is in the ledger (read through the real ``git log``, independent of
  perfledger's derived index, and through ``Ledger.events``/``Ledger.get``);
- ``Ledger.verify()`` passes and the real ``git fsck --strict --full`` is clean;
- no child's append ever raised (a stale lock or leftover file from a killed writer must not make
  later appends fail), and a fresh append still works.
"""

from __future__ import annotations

import collections
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.ledger import packing
from perfledger.ledger.gitobj import make_blob

pytestmark = pytest.mark.slow

APPENDER = Path(__file__).with_name("_appender.py")
HEX64 = re.compile(r"[0-9a-f]{64}")
HEX40 = re.compile(r"[0-9a-f]{40}")
#: Loose objects a child leaves before packing (production: 3000): packing runs every few appends.
PACK_THRESHOLD = 30
#: Kills in the random-kill test (the issue asks for at least 50).
KILLS = 52
#: At most this many more kills aimed at packing where fewer than 3 of the first KILLS landed there.
EXTRA_PACK_KILLS = 24


# ---------------------------------------------------------------------------------- helpers


class Writer:
    """One appender child process; its stdout, stderr and phase markers go to files."""

    def __init__(self, ledger: Path, workdir: Path, name: str, seed: int, *extra: str) -> None:
        self.name = name
        self.out_path = workdir / f"{name}.out"
        self.err_path = workdir / f"{name}.err"
        self.phases_path = workdir / f"{name}.phases"
        argv = [
            sys.executable,
            str(APPENDER),
            str(ledger),
            "--seed",
            str(seed),
            "--tag",
            name,
            "--threshold",
            str(PACK_THRESHOLD),
            "--phases",
            str(self.phases_path),
            *extra,
        ]
        self.phases_path.touch()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.started = time.monotonic()
        self._phase_offset = 0

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while "ready " not in self.output():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode} before it was ready:\n"
                    f"{self.stderr()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name} not ready after {timeout_s}s")
            time.sleep(0.002)

    def wait_phase(self, markers: tuple[str, ...], timeout_s: float) -> bool:
        """Wait until one of ``markers`` is written (after the last call); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with open(self.phases_path, "rb") as f:
            while time.monotonic() < deadline and self.proc.poll() is None:
                f.seek(self._phase_offset)
                chunk = f.read()
                end = chunk.rfind(b"\n") + 1
                self._phase_offset += end
                lines = chunk[:end].decode().splitlines()
                if any(line in markers for line in lines):
                    return True
                time.sleep(0.0005)
        return False

    def kill(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(timeout=30)

    def ids(self) -> list[str]:
        """Every id the child printed (complete lines only)."""
        lines = self.output().split("\n")[:-1]  # the text after the last newline is incomplete
        return [line for line in lines if HEX64.fullmatch(line)]

    def errors(self) -> list[str]:
        return [line for line in self.output().splitlines() if line.startswith("ERR ")]

    def phases(self) -> list[str]:
        return self.phases_path.read_text().splitlines()

    def phase_at_death(self) -> str:
        """The innermost phase open when the child died: ``startup`` (before the ledger was
        open), ``write``/``cas``/``pack``/``merge``, ``append`` (elsewhere inside an append),
        ``idle`` (between appends), or ``crash <point>`` for a self-inflicted kill."""
        stack: list[str] = []
        opened = False
        for line in self.phases():
            if line.startswith("crash "):
                return line
            if line == "open-":
                opened = True
            elif line == "append!":
                stack.clear()
            elif line.endswith("+"):
                stack.append(line[:-1])
            elif line.endswith("-") and stack and stack[-1] == line[:-1]:
                stack.pop()
        if not opened:
            return "startup"
        return stack[-1] if stack else "idle"

    def last_pre_head(self) -> str | None:
        """The head the last append the child started was decided on."""
        pres = [line.split()[1] for line in self.phases() if line.startswith("pre ")]
        return pres[-1] if pres else None


_GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    "LC_ALL": "C",
}


def git(path: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The real git CLI, with a neutral configuration."""
    return subprocess.run(
        ["git", *args],
        cwd=path,
        env=_GIT_ENV,
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


def read_ref(path: Path) -> str:
    """The ledger ref as stored on disk (a loose ref: dulwich never packs it)."""
    text = (path / "refs" / "heads" / "ledger").read_text()
    assert HEX40.fullmatch(text.strip()) and text.endswith("\n"), f"malformed ref: {text!r}"
    return text.strip()


def git_event_ids(path: Path) -> set[str]:
    """Event ids reachable from the ledger ref, read by the real git (no perfledger code)."""
    out = git(
        path, "log", "refs/heads/ledger", "--format=%(trailers:key=Event-Id,valueonly)"
    ).stdout
    return set(HEX64.findall(out))


def check_head(path: Path, previous: str | None) -> str:
    """The ref points at an event commit that git reads and perfledger decodes, whose Event-Id
    trailer matches its envelope; it descends from ``previous`` (the ref never goes back)."""
    head = read_ref(path)
    assert git(path, "cat-file", "-t", head).stdout.strip() == "commit"
    trailer = git(path, "log", "-1", "--format=%(trailers:key=Event-Id,valueonly)", head).stdout
    with Ledger.open(path) as ledger:  # another writer may have moved the ref since: fine
        envelope = ledger.store.read_envelope(head.encode())
    assert trailer.strip() == envelope.id
    if previous is not None and previous != head:
        ancestor = git(path, "merge-base", "--is-ancestor", previous, head, check=False)
        assert ancestor.returncode == 0, f"the ref went from {previous} to {head}, not a descendant"
    return head


def full_verify(path: Path) -> int:
    with Ledger.open(path) as ledger:
        report = ledger.verify()
        assert report.ok, f"verify failed: {report.error and report.error.to_json()}"
        assert report.head == read_ref(path)
        return report.events


def git_fsck_clean(path: Path) -> None:
    """The real ``git fsck --strict --full``: exit 0 and nothing reported but dangling objects
    (unreachable objects of killed appends are expected garbage); ``git verify-pack`` on every
    pack; and after ``perfledger gc``, ``git count-objects -v`` counts no garbage."""
    result = git(path, "fsck", "--strict", "--full", "--no-dangling", "--no-progress", check=False)
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and not line.startswith(("dangling ", "notice:"))
    ]
    assert result.returncode == 0 and not problems, (result.returncode, problems[:20])
    # git fsck does not reject a pack that holds the same object twice; git verify-pack (and
    # git index-pack, which a dumb-http clone runs on every pack it downloads) does
    for idx in sorted((path / "objects" / "pack").glob("*.idx")):
        if idx.with_suffix(".pack").exists():
            check = git(path, "verify-pack", str(idx), check=False)
            assert check.returncode == 0, f"git verify-pack {idx.name}: {check.stderr.strip()}"
    # what the killed writers left is reclaimed by gc: git then counts no garbage
    from perfledger.ledger.gc import collect

    assert collect(str(path)).guard_held
    counted = git(path, "count-objects", "-v").stdout
    assert "\ngarbage: 0\n" in counted, counted


def check_all_printed_present(path: Path, printed: set[str]) -> None:
    """Every acknowledged id is in the ledger: through git, Ledger.events and Ledger.get."""
    in_git = git_event_ids(path)
    missing = printed - in_git
    assert not missing, f"{len(missing)} acknowledged events lost, e.g. {sorted(missing)[:3]}"
    with Ledger.open(path) as ledger:
        in_events = {event.envelope.id for event in ledger.events()}
        assert in_events == in_git, "Ledger.events() disagrees with git log after crashes"
        for event_id in random.Random(7).sample(sorted(printed), min(200, len(printed))):
            assert ledger.get(event_id).id == event_id


def fresh_append(path: Path, text: str) -> str:
    with Ledger.open(path) as ledger:
        envelope = ledger.append("NoteRecorded", {"text": text}, actor="crash-test")
    with Ledger.open(path) as ledger:
        assert ledger.get(envelope.id).id == envelope.id
    return envelope.id


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    path = tmp_path / "ledger"
    Ledger.init(path, name="crash").close()
    return path


@pytest.fixture
def tmpfs_ledger_path(tmp_path: Path) -> Iterator[Path]:
    """A ledger on tmpfs (/dev/shm) when there is one, else in ``tmp_path``: where fsync costs
    nothing, as on a fast NVMe disk, retries run at full speed, so time-based limits show."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        path = tmp_path / "ledger"
        Ledger.init(path, name="crash").close()
        yield path
        return
    base = Path(tempfile.mkdtemp(prefix="perfledger-crash-", dir=shm))
    try:
        Ledger.init(base / "ledger", name="crash").close()
        yield base / "ledger"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _describe_errors(errors: list[tuple[str, str]], writers: dict[str, Writer]) -> str:
    kinds = collections.Counter(err.split()[1] for _, err in errors)
    lines = [
        f"{len(errors)} failed appends in {len({n for n, _ in errors})} writers: {dict(kinds)}"
    ]
    lines += [f"{name}: {err}" for name, err in errors[:8]]
    first = writers.get(errors[0][0]) if errors else None
    if first is not None:
        lines.append(f"--- stderr of {first.name} ---\n{first.stderr()[-4000:]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- tests


@pytest.mark.slow
@pytest.mark.serial  # kills aimed at the pack and merge phases: another test's load skews them
def test_sigkill_appender_50_times_loses_no_acknowledged_event(
    ledger_path: Path, tmp_path: Path
) -> None:
    """The issue's test: a child appends in a loop and prints each id after ``append`` returns;
    it is SIGKILLed at random moments (>= 50 times, every phase: startup, writing objects, the
    ref compare-and-swap, packing loose objects, merging packs); afterwards verify passes, every
    printed id is in the ledger, git fsck is clean and a fresh append works."""
    rng = random.Random(20240611)
    printed: set[str] = set()
    errors: list[tuple[str, str]] = []
    writers: dict[str, Writer] = {}
    phases: collections.Counter[str] = collections.Counter()
    head = check_head(ledger_path, None)
    started = time.monotonic()
    k = 0
    # after KILLS kills, more aimed at packing (at most EXTRA_PACK_KILLS) until 3 landed there:
    # the aim is a race with the child's phase markers, which a busy host can make it lose
    while k < KILLS or (phases["pack"] + phases["merge"] < 3 and k < KILLS + EXTRA_PACK_KILLS):
        # writers whose compare-and-swap is aimed at hold the ref's lock 5 ms longer: the swap
        # itself can take well under the 0.5 ms this process needs to notice it has started
        extra = (
            ("--cas-delay", "0.005") if k < KILLS and k % 10 not in (0, 5) and k % 4 == 3 else ()
        )
        writer = Writer(ledger_path, tmp_path, f"w{k:02d}", 1000 + k, *extra)
        writers[writer.name] = writer
        if k >= KILLS:
            writer.wait_ready()
            writer.wait_phase(("pack+", "merge+"), timeout_s=4.0)
            time.sleep(rng.uniform(0.0, 0.004))
        elif k % 10 == 0:
            # during interpreter start-up or opening the ledger
            time.sleep(rng.uniform(0.0, 0.08))
        elif k % 10 == 5:
            # opening the ledger or the very first appends
            time.sleep(rng.uniform(0.1, 0.5))
        elif k % 4 == 1:
            # aimed at packing: as soon as a pack or a merge starts, plus a few ms
            writer.wait_ready()
            writer.wait_phase(("pack+", "merge+"), timeout_s=4.0)
            time.sleep(rng.uniform(0.0, 0.004))
        elif k % 4 == 3:
            # aimed at the ref update: as a compare-and-swap starts, plus up to 2 ms
            writer.wait_ready()
            time.sleep(rng.uniform(0.0, 0.3))
            writer.wait_phase(("cas+",), timeout_s=4.0)
            time.sleep(rng.uniform(0.0, 0.003))
        else:
            writer.wait_ready()
            time.sleep(rng.uniform(0.0, 0.6))
        rc = writer.kill()
        assert rc == -signal.SIGKILL, (
            f"{writer.name} exited by itself with {rc}:\n{writer.stderr()[-3000:]}"
        )
        phases[writer.phase_at_death()] += 1
        printed.update(writer.ids())
        errors.extend((writer.name, e) for e in writer.errors())
        # after every kill: the ref holds an event commit that descends from the previous head,
        # and everything this child acknowledged is reachable from it
        head = check_head(ledger_path, head)
        missing = set(writer.ids()) - git_event_ids(ledger_path)
        assert not missing, f"after kill {k} ({writer.phase_at_death()}): lost {missing}"
        if k % 13 == 12:
            full_verify(ledger_path)
        k += 1
    kill_time_s = time.monotonic() - started

    # a fresh append right after the last kill, in this process
    printed.add(fresh_append(ledger_path, "after the kills"))
    # a fresh child that runs to the end (packing and merging over the debris), not killed
    survivor = Writer(ledger_path, tmp_path, "final", 99, "--max-appends", "40")
    writers[survivor.name] = survivor
    assert survivor.proc.wait(timeout=60) == 0, survivor.stderr()[-3000:]
    assert survivor.output().endswith("done\n")
    printed.update(survivor.ids())
    errors.extend((survivor.name, e) for e in survivor.errors())

    events = full_verify(ledger_path)
    check_all_printed_present(ledger_path, printed)
    print(
        f"\n{k} kills in {kill_time_s:.1f}s, {len(printed)} acknowledged events, "
        f"{events} in the ledger; kills by phase: {dict(phases)}"
    )
    # the kills did land in every phase (the markers are written by the child)
    assert phases["startup"] >= 1, phases
    assert phases["write"] >= 1, phases
    assert phases["cas"] >= 1, phases
    assert phases["pack"] + phases["merge"] >= 3, phases
    assert not errors, "appends failed after earlier kills:\n" + _describe_errors(errors, writers)
    git_fsck_clean(ledger_path)


#: (crash point, hit count) for the exact-point test; see tests/crash/_appender.py.
CRASH_POINTS = [
    ("before_cas", 1),
    ("after_cas", 1),
    ("before_cas", 7),
    ("after_cas", 9),
    ("in_loose_write", 11),
    ("after_pack_write", 1),
    ("mid_loose_delete", 2),
    ("mid_merge", 1),
    ("mid_merge", 2),
    ("in_ref_lock", 3),
    ("before_cas", 4),
    ("after_pack_write", 2),
]
#: Points where the ref has not moved yet (the in-flight append must leave the old head).
BEFORE_REF_MOVES = {"before_cas", "in_ref_lock", "in_loose_write"}


@pytest.mark.slow
def test_killed_writer_leaves_old_head_or_new_head(ledger_path: Path, tmp_path: Path) -> None:
    """SIGKILL at exact points of an append (objects written but ref not moved, inside the ref
    lock, right after the ref moved, in the middle of packing and of a pack merge) leaves the ref
    at the head the append started on or at the append's new commit; after every kill the whole
    ledger verifies and every acknowledged id is there; the next writer appends normally.
    Packing runs after the ref moved, so a kill inside it leaves the append's new commit."""
    printed: set[str] = set()
    errors: list[tuple[str, str]] = []
    writers: dict[str, Writer] = {}
    head = check_head(ledger_path, None)
    for i, (point, after) in enumerate(CRASH_POINTS):
        writer = Writer(
            ledger_path,
            tmp_path,
            f"x{i:02d}-{point}",
            500 + i,
            "--crash-at",
            point,
            "--crash-after",
            str(after),
        )
        writers[writer.name] = writer
        try:
            rc = writer.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            writer.kill()
            pytest.fail(f"{writer.name} never reached {point}:\n{writer.stderr()[-2000:]}")
        assert rc == -signal.SIGKILL, f"{writer.name} exited with {rc}:\n{writer.stderr()[-3000:]}"
        assert writer.phase_at_death() == f"crash {point}"
        printed.update(writer.ids())
        errors.extend((writer.name, e) for e in writer.errors())

        old = writer.last_pre_head()
        assert old is not None
        new_head = check_head(ledger_path, head)
        if point in BEFORE_REF_MOVES:
            assert new_head == old, f"{point}: the ref moved to {new_head}, expected old {old}"
        else:
            assert new_head != old, f"{point}: the ref stayed at {old}, expected the new commit"
            ancestor = git(ledger_path, "merge-base", "--is-ancestor", old, new_head, check=False)
            assert ancestor.returncode == 0
        if point == "in_ref_lock":
            assert (ledger_path / "refs" / "heads" / "ledger.lock").exists()
        head = new_head
        full_verify(ledger_path)
        missing = printed - git_event_ids(ledger_path)
        assert not missing, f"after {point}: lost {sorted(missing)[:3]}"

    printed.add(fresh_append(ledger_path, "after the exact kills"))
    check_all_printed_present(ledger_path, printed)
    assert not errors, "appends failed after earlier kills:\n" + _describe_errors(errors, writers)
    git_fsck_clean(ledger_path)


@pytest.mark.slow
def test_two_writers_one_repeatedly_killed_survivor_loses_nothing(
    ledger_path: Path, tmp_path: Path
) -> None:
    """Two processes append concurrently (both packing and merging); one is SIGKILLed again and
    again (and restarted). The survivor never fails an append, and nothing either of them
    acknowledged is missing afterwards."""
    rng = random.Random(77)
    stop = tmp_path / "stop"
    survivor = Writer(ledger_path, tmp_path, "survivor", 1, "--stop-file", str(stop))
    writers = {survivor.name: survivor}
    survivor.wait_ready()
    printed: set[str] = set()
    errors: list[tuple[str, str]] = []
    head = check_head(ledger_path, None)
    try:
        for k in range(12):
            victim = Writer(ledger_path, tmp_path, f"v{k:02d}", 2000 + k)
            writers[victim.name] = victim
            if k % 3 == 1:
                victim.wait_ready()
                victim.wait_phase(("pack+", "merge+", "cas+"), timeout_s=4.0)
                time.sleep(rng.uniform(0.0, 0.004))
            else:
                victim.wait_ready()
                time.sleep(rng.uniform(0.0, 0.5))
            assert victim.kill() == -signal.SIGKILL, victim.stderr()[-3000:]
            printed.update(victim.ids())
            errors.extend((victim.name, e) for e in victim.errors())
            assert survivor.proc.poll() is None, (
                f"the survivor died with {survivor.proc.returncode}:\n{survivor.stderr()[-3000:]}"
            )
            head = check_head(ledger_path, head)
    finally:
        stop.touch()
        try:
            rc = survivor.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rc = survivor.kill()
    assert rc == 0, f"survivor exited with {rc}:\n{survivor.stderr()[-3000:]}"
    assert survivor.output().endswith("done\n")
    survivor_ids = set(survivor.ids())
    assert len(survivor_ids) > 50, "the survivor barely appended: the test proves nothing"
    printed |= survivor_ids
    errors.extend((survivor.name, e) for e in survivor.errors())

    full_verify(ledger_path)
    check_all_printed_present(ledger_path, printed)
    printed.add(fresh_append(ledger_path, "after the duel"))
    assert not errors, "appends failed:\n" + _describe_errors(errors, writers)
    git_fsck_clean(ledger_path)


# ------------------------------------------------------- debris a killed writer leaves behind


def test_stale_ref_lock_of_killed_writer_does_not_fail_the_next_append(
    tmpfs_ledger_path: Path, tmp_path: Path
) -> None:
    """A writer SIGKILLed inside the ref update leaves ``refs/heads/ledger.lock``. The next
    append (issued at once) must succeed without waiting: the lock is recognised as a dead
    perfledger writer's by what it held (its owner name, its free flock), not by its age."""
    ledger_path = tmpfs_ledger_path
    writer = Writer(ledger_path, tmp_path, "locked", 3, "--crash-at", "in_ref_lock")
    assert writer.proc.wait(timeout=30) == -signal.SIGKILL, writer.stderr()[-3000:]
    lock = ledger_path / "refs" / "heads" / "ledger.lock"
    assert lock.exists()
    event_id = fresh_append(ledger_path, "right after a writer died holding the ref lock")
    assert not lock.exists()
    full_verify(ledger_path)
    assert event_id in git_event_ids(ledger_path)


def test_loose_object_lock_of_killed_writer_does_not_block_the_same_blob(
    ledger_path: Path, tmp_path: Path
) -> None:
    """A writer SIGKILLed while writing a loose object leaves its temporary file behind (with
    dulwich's ``GitFile``: ``objects/xx/<rest>.lock``). The same object is written again whenever
    an event attaches the same artifact (a kernel source attached to many events); that append
    must still succeed, and git fsck must not complain about the leftover."""
    content = b"__global__ void scale(float* x, float a, int n) { /* v0 */ }\n"
    sha = make_blob(content).id.decode()
    writer = Writer(
        ledger_path,
        tmp_path,
        "blob",
        3,
        "--crash-at",
        "in_loose_write",
        "--crash-match",
        sha,
    )
    assert writer.proc.wait(timeout=30) == -signal.SIGKILL, writer.stderr()[-3000:]
    # killed after writing the object's temporary (or lock) file, before it was renamed in
    fanout = ledger_path / "objects" / sha[:2]
    assert not (fanout / sha[2:]).exists()
    assert [p.name for p in fanout.iterdir()], "the killed writer left no temporary file"
    from perfledger.ledger.base import Artifact

    with Ledger.open(ledger_path) as ledger:
        envelope = ledger.append(
            "NoteRecorded",
            {"text": "same kernel again"},
            actor="crash-test",
            artifacts={"kernel.cu": Artifact(content, "text/plain")},
        )
        assert ledger.artifact(envelope.id, "kernel.cu") == content
    full_verify(ledger_path)
    git_fsck_clean(ledger_path)


@pytest.mark.slow
def test_objects_left_in_two_packs_by_a_killed_packer_are_merged_once(
    ledger_path: Path, tmp_path: Path
) -> None:
    """A writer SIGKILLed after packing its loose objects but before deleting them leaves those
    objects both loose and packed; the next packing packs them again. A pack merge must still
    write every object once: git verify-pack and git index-pack (run by a dumb-http clone on each
    downloaded pack) reject a pack that holds an object twice, although git fsck accepts it."""
    killed = Writer(ledger_path, tmp_path, "packer", 5, "--crash-at", "after_pack_write")
    assert killed.proc.wait(timeout=30) == -signal.SIGKILL, killed.stderr()[-3000:]
    printed = set(killed.ids())
    follower = Writer(ledger_path, tmp_path, "follower", 6, "--max-appends", "30")
    assert follower.proc.wait(timeout=60) == 0, follower.stderr()[-3000:]
    assert not follower.errors(), follower.errors()
    printed |= set(follower.ids())
    with Ledger.open(ledger_path) as ledger:
        assert packing.merge_packs(ledger.store, force=True) >= 2
    full_verify(ledger_path)
    check_all_printed_present(ledger_path, printed)
    git_fsck_clean(ledger_path)
