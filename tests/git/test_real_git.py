"""Ledgers written by perfledger are ordinary git repositories (SPEC.md section 2).

For every storage scenario (single appends, batches through the pack path, artifacts, packing with
geometric pack merges, merge commits) the real git CLI must agree: ``git fsck --strict --full``
is clean, ``git log ledger`` lists exactly one readable commit per event with the subject and
trailers of the spec, and ``git clone`` / ``git gc --aggressive`` copies verify with the same
state_hash as the original.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3
import pytest

from perfledger.api import Ledger
from perfledger.ledger import packing
from perfledger.ledger.base import Artifact, EventDraft

#: The ``git_run`` and ``perfledger_run`` fixtures of ``conftest.py``.
GitRun = Callable[..., subprocess.CompletedProcess[bytes]]
CliRun = Callable[..., subprocess.CompletedProcess[str]]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
_FIELD, _RECORD = "\x1f", "\x1e"


def _note(text: str, actor: str = "alice", **artifacts: Artifact) -> EventDraft:
    return EventDraft("NoteRecorded", {"text": text, "tags": ["git"]}, actor, artifacts=artifacts)


def _append(ledger: Ledger, text: str, actor: str = "alice", **artifacts: Artifact) -> None:
    ledger.append("NoteRecorded", {"text": text, "tags": ["git"]}, actor=actor, artifacts=artifacts)


# ----------------------------------------------------------------------------- scenarios


def _build_single(ledger: Ledger) -> None:
    """Five single appends (loose objects), two actors (one non-ASCII)."""
    for i in range(5):
        _append(ledger, f"single append number {i}", actor="zoë" if i % 2 else "alice")


def _build_batch(ledger: Ledger) -> None:
    """A 12-event batch (the pack path), a single append, then a 7-event batch (loose)."""
    ledger.append_batch([_note(f"batched event {i}", "bob") for i in range(12)])
    assert packing.pack_stats(ledger.store)["packs"] == 1, "a batch of >= 8 writes one pack"
    _append(ledger, "single after batch")
    ledger.append_batch([_note(f"small batch {i}", "carol") for i in range(7)])
    assert packing.pack_stats(ledger.store)["packs"] == 1, "a batch of < 8 stays loose"


def _kernel(i: int) -> bytes:
    body = "".join(f"  out[i + {k}] = in[i + {k}] * {i}.0f;\n" for k in range(400))
    return f"__global__ void scale_{i}(float* out, const float* in) {{\n{body}}}\n".encode()


def _build_artifacts(ledger: Ledger) -> None:
    """Artifacts on single appends and in a packed batch: large (deflated) and small (stored)
    blobs, several per event, an empty file, and the same bytes attached to two events."""
    shared = Artifact(b"shared log line\n", "text/plain")
    _append(
        ledger,
        "kernel v1",
        **{
            "scale.cu": Artifact(_kernel(1), "text/x-cuda"),
            "run.log": shared,
            "empty.txt": Artifact(b"", "text/plain"),
        },
    )
    _append(ledger, "kernel v1 again", **{"copy.log": shared})
    ledger.append_batch(
        [
            _note(
                f"batched kernel {i}",
                "bob",
                **{
                    "scale.cu": Artifact(_kernel(i), "text/x-cuda"),
                    "samples.json": Artifact(json.dumps([i, i + 1]).encode(), "application/json"),
                    "same.log": shared,
                },
            )
            for i in range(2, 10)
        ]
    )
    _append(ledger, "after the artifact batch", **{"bin": Artifact(os.urandom(3000))})


def _build_packing(ledger: Ledger) -> None:
    """Single appends past a lowered loose-object threshold, many times, with batches between:
    loose objects are packed repeatedly and packs are merged geometrically."""
    packs_written = 0
    for round_ in range(7):
        for i in range(11):  # 33 loose objects: crosses LOOSE_PACK_THRESHOLD = 30
            _append(ledger, f"round {round_} note {i}")
        packs_written += 1
        ledger.append_batch([_note(f"round {round_} batch {i}", "bob") for i in range(8 + round_)])
        packs_written += 1
    stats = packing.pack_stats(ledger.store)
    assert stats["loose"] < packing.LOOSE_PACK_THRESHOLD
    # Without geometric merges every packing and every batch would have left its own pack.
    assert stats["packs"] < packs_written
    assert stats["packs"] <= 2 * packing.MAX_PACKS


def _build_merges(ledger: Ledger) -> None:
    """Divergent branches joined by merge commits (GitStore.build_on / write_merge / set_head):
    a two-way merge, events on top of it, then a three-way merge with a packed branch."""
    store = ledger.store
    _append(ledger, "before divergence")
    base = store.read_head()
    _, left = store.build_on(base, [_note("left 1", "alice"), _note("left 2", "alice")])
    _, right = store.build_on(base, [_note("right 1", "bob")])
    merge = store.write_merge([left, right], actor="merger")
    assert store.set_head(base, merge)
    _append(ledger, "on top of the merge")
    base = store.read_head()
    _, a = store.build_on(base, [_note("a", "alice")])
    _, b = store.build_on(base, [_note(f"b {i}", "bob") for i in range(9)])  # packed
    _, c = store.build_on(base, [_note("c", "carol", **{"c.txt": Artifact(b"c" * 2000)})])
    merge = store.write_merge([a, b, c], actor="merger")
    assert store.set_head(base, merge)
    _append(ledger, "after the three-way merge")


@dataclass(frozen=True)
class Scenario:
    """A ledger built by one scenario, and what its own verification said."""

    name: str
    path: Path
    events: int
    merges: int
    state_hash: str


SCENARIOS: dict[str, Callable[[Ledger], None]] = {
    "single": _build_single,
    "batch": _build_batch,
    "artifacts": _build_artifacts,
    "packing": _build_packing,
    "merges": _build_merges,
}


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """Build one scenario's ledger (shared by the read-only tests of this module)."""
    name: str = request.param
    path = tmp_path_factory.mktemp(name) / "ledger.git"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(packing, "LOOSE_PACK_THRESHOLD", 30)
        mp.setattr(packing, "MAX_PACKS", 3)
        with Ledger.init(path, name=name, actor="founder") as ledger:
            SCENARIOS[name](ledger)
    with Ledger.open(path) as ledger:
        report = ledger.verify()
    assert report.ok, report.error
    return Scenario(name, path, report.events, report.merges, str(report.extra["state_hash"]))


# ----------------------------------------------------------------------------- git's view


def _log(git_run: GitRun, repo: Path, *options: str) -> list[dict[str, str]]:
    fields = {
        "sha": "%H",
        "parents": "%P",
        "tree": "%T",
        "an": "%an",
        "ae": "%ae",
        "at": "%at",
        "cn": "%cn",
        "ce": "%ce",
        "ct": "%ct",
        "subject": "%s",
        "event_id": "%(trailers:key=Event-Id,valueonly,separator=%x2C)",
        "lamport": "%(trailers:key=Lamport,valueonly,separator=%x2C)",
        "trailers": "%(trailers:only,unfold,separator=%x2C)",
    }
    fmt = "%x1f".join(fields.values()) + "%x1e"
    out = git_run(repo, "log", "ledger", *options, f"--format={fmt}", "--").stdout.decode()
    rows = [r.strip("\n") for r in out.split(_RECORD) if r.strip("\n")]
    return [dict(zip(fields, row.split(_FIELD), strict=True)) for row in rows]


def _cat_batch(git_run: GitRun, repo: Path, names: list[str]) -> list[bytes]:
    """Read objects with one ``git cat-file --batch``; fails on a missing one."""
    out = git_run(repo, "cat-file", "--batch", input="".join(n + "\n" for n in names).encode())
    data, contents = out.stdout, []
    pos = 0
    for name in names:
        header_end = data.index(b"\n", pos)
        header = data[pos:header_end].split()
        assert header[-1] != b"missing", name
        size = int(header[2])
        contents.append(data[header_end + 1 : header_end + 1 + size])
        pos = header_end + 1 + size + 1
    return contents


def _ts_seconds(ts: str) -> int:
    return int(datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp())


def test_fsck_strict_full_is_clean(
    scenario: Scenario, assert_fsck_clean: Callable[[Path], None]
) -> None:
    """git fsck --strict --full finds nothing to report in a ledger perfledger wrote."""
    assert_fsck_clean(scenario.path)


def test_git_log_lists_one_readable_commit_per_event(scenario: Scenario, git_run: GitRun) -> None:
    """Every event is one commit: subject ``<kind>: <summary>``, trailers Event-Id and Lamport
    matching event.json as git reads it, author = committer = actor, commit time = event time."""
    with Ledger.open(scenario.path) as ledger:
        events = {e.id: e.envelope for e in ledger.events()}
    rows = _log(git_run, scenario.path, "--no-merges")
    assert len(rows) == len(events) == scenario.events
    assert sorted(r["event_id"] for r in rows) == sorted(events)
    blobs = _cat_batch(git_run, scenario.path, [f"{r['sha']}:event.json" for r in rows])
    for row, blob in zip(rows, blobs, strict=True):
        envelope = events[row["event_id"]]
        stored = json.loads(blob)
        assert stored["id"] == row["event_id"]
        assert stored["lamport"] == envelope.lamport == int(row["lamport"])
        assert stored["kind"] == envelope.kind
        assert row["subject"].startswith(f"{envelope.kind}: ")
        if envelope.kind == "NoteRecorded":
            assert row["subject"] == f"NoteRecorded: {envelope.payload['text']}"
        else:
            assert row["subject"] == f"LedgerInitialized: ledger {scenario.name!r} (format 1)"
        assert row["an"] == row["cn"] == envelope.actor
        assert row["ae"] == row["ce"] == "perfledger"
        assert int(row["at"]) == int(row["ct"]) == _ts_seconds(envelope.ts)
        assert len(row["parents"].split()) == (0 if envelope.kind == "LedgerInitialized" else 1)
    assert sum(1 for r in rows if not r["parents"]) == 1, "exactly one root"


def test_git_log_merge_commits_carry_no_event(scenario: Scenario, git_run: GitRun) -> None:
    """Merge commits have two or more parents, the empty tree, no Event-Id/Lamport trailers,
    and name the event heads they join (``Joins:`` trailers) among the ledger's events."""
    event_ids = {r["event_id"] for r in _log(git_run, scenario.path, "--no-merges")}
    merges = _log(git_run, scenario.path, "--merges")
    assert len(merges) == scenario.merges
    assert scenario.merges == (2 if scenario.name == "merges" else 0)
    for row in merges:
        assert len(row["parents"].split()) >= 2
        assert row["tree"] == EMPTY_TREE
        assert row["event_id"] == row["lamport"] == ""
        keys = {t.split(": ")[0] for t in row["trailers"].split(",")}
        assert keys == {"Joins"}
        joined = {t.split(": ")[1] for t in row["trailers"].split(",")}
        assert len(joined) >= 2 and joined <= event_ids
    total = git_run(scenario.path, "rev-list", "--count", "ledger").stdout.decode()
    assert int(total) == scenario.events + scenario.merges


@pytest.mark.slow
def test_artifacts_are_blobs_named_by_blake3(scenario: Scenario, git_run: GitRun) -> None:
    """Each event tree holds event.json and artifacts/<blake3 of the blob's bytes>, nothing else;
    every declared artifact is present with its size."""
    rows = _log(git_run, scenario.path, "--no-merges")
    for row in rows:
        listing = git_run(scenario.path, "ls-tree", "-r", "-l", row["sha"]).stdout.decode()
        entries = {}
        for line in listing.splitlines():
            meta, name = line.split("\t")
            _mode, kind, sha, size = meta.split()
            assert kind == "blob"
            entries[name] = (sha, int(size))
        (event,) = _cat_batch(git_run, scenario.path, [entries["event.json"][0]])
        declared = json.loads(event)["artifacts"]
        expected = {"event.json"} | {f"artifacts/{a['blake3']}" for a in declared.values()}
        assert set(entries) == expected
        for ref in declared.values():
            sha, size = entries[f"artifacts/{ref['blake3']}"]
            (data,) = _cat_batch(git_run, scenario.path, [sha])
            assert size == ref["size"] == len(data)
            assert blake3.blake3(data).hexdigest() == ref["blake3"]


# ----------------------------------------------------------------------------- copies


#: Scenarios copied by git: single appends and batches are covered by "packing".
COPIED = ["artifacts", "merges", "packing"]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", COPIED, indirect=True)
@pytest.mark.parametrize(
    "how",
    [
        pytest.param(["--bare"], id="bare"),
        pytest.param([], id="non-bare"),
        pytest.param(["--bare", "--no-local"], id="bare-no-local"),
    ],
)
def test_clone_verifies_with_the_same_state_hash(
    scenario: Scenario,
    how: list[str],
    tmp_path: Path,
    git_run: GitRun,
    cli_verify: Callable[[Path], tuple[int, Any]],
    assert_fsck_clean: Callable[[Path], None],
) -> None:
    """A ``git clone`` (bare, non-bare, or through the pack protocol with --no-local) opens with
    perfledger and verifies with the original's state_hash, event and merge counts."""
    clone = tmp_path / "clone"
    source = scenario.path.as_uri() if "--no-local" in how else str(scenario.path)
    git_run(tmp_path, "clone", "--quiet", *how, source, clone)
    assert_fsck_clean(clone)
    code, report = cli_verify(clone)
    assert code == 0, report
    assert report["ok"] is True
    assert report["state_hash"] == scenario.state_hash
    assert (report["events"], report["merges"]) == (scenario.events, scenario.merges)
    with Ledger.open(scenario.path) as original:
        assert report["head"] == original.head()


def _delta_count(git_run: GitRun, repo: Path) -> int:
    pack_dir = Path(git_run(repo, "rev-parse", "--git-dir").stdout.decode().strip())
    if not pack_dir.is_absolute():
        pack_dir = repo / pack_dir
    deltas = 0
    for idx in (pack_dir / "objects" / "pack").glob("*.idx"):
        out = git_run(repo, "verify-pack", "-v", idx).stdout.decode()
        # "<sha> <type> <size> <size-in-pack> <offset> <depth> <base-sha>" for a delta entry.
        deltas += sum(1 for line in out.splitlines() if len(line.split()) == 7)
    return deltas


@pytest.mark.slow
@pytest.mark.parametrize("scenario", COPIED, indirect=True)
def test_git_gc_aggressive_copy_verifies_and_accepts_appends(
    scenario: Scenario,
    tmp_path: Path,
    git_run: GitRun,
    cli_verify: Callable[[Path], tuple[int, Any]],
    assert_fsck_clean: Callable[[Path], None],
) -> None:
    """``git gc --aggressive`` repacks a copy into delta-compressed packs; perfledger still
    verifies it with the same state_hash, and appends to it keep git and perfledger happy."""
    copy = tmp_path / "copy.git"
    shutil.copytree(scenario.path, copy)
    git_run(copy, "gc", "--aggressive", "--prune=now", "--quiet")
    assert _delta_count(git_run, copy) > 0, "gc wrote no deltas: the reader's delta path is idle"
    assert not any((copy / "objects").glob("[0-9a-f][0-9a-f]/*")), "gc left loose objects"
    code, report = cli_verify(copy)
    assert code == 0, report
    assert report["state_hash"] == scenario.state_hash
    assert report["events"] == scenario.events

    with Ledger.open(copy) as ledger:
        _append(ledger, "after gc", actor="gc-user")
        after = ledger.verify()
    assert after.ok and after.events == scenario.events + 1, after.error
    assert_fsck_clean(copy)


@pytest.mark.slow
def test_non_bare_clone_resumes_work(
    tmp_path: Path,
    git_run: GitRun,
    perfledger_run: CliRun,
    cli_verify: Callable[[Path], tuple[int, Any]],
    assert_fsck_clean: Callable[[Path], None],
) -> None:
    """A person clones a ledger (non-bare) and appends through the CLI from inside the clone:
    git and perfledger accept the result, and the original is untouched."""
    origin = tmp_path / "origin.git"
    with Ledger.init(origin, actor="alice") as ledger:
        _append(ledger, "first")
        origin_head = ledger.head()
    clone = tmp_path / "work"
    git_run(tmp_path, "clone", "--quiet", origin, clone)
    note = perfledger_run("note", "from the clone", "--actor", "bob", cwd=clone)
    assert note.returncode == 0, note.stderr
    assert_fsck_clean(clone)
    code, report = cli_verify(clone)
    assert code == 0 and report["events"] == 3, report
    last = _log(git_run, clone, "-1")[0]
    assert last["subject"] == "NoteRecorded: from the clone" and last["an"] == "bob"
    assert last["event_id"] == note.stdout.strip()
    with Ledger.open(origin) as ledger:
        assert ledger.head() == origin_head


@pytest.fixture
def lowered_pack_thresholds(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Pack after 30 loose objects and merge beyond 3 packs, so a test crosses both quickly."""
    monkeypatch.setattr(packing, "LOOSE_PACK_THRESHOLD", 30)
    monkeypatch.setattr(packing, "MAX_PACKS", 3)
    yield


def test_pack_count_stays_bounded_and_every_object_survives(
    lowered_pack_thresholds: None,
    tmp_path: Path,
    git_run: GitRun,
    assert_fsck_clean: Callable[[Path], None],
) -> None:
    """Interleaved single appends and packed batches: the pack count stays bounded (it goes
    down when packs are merged), and after a forced merge git counts exactly three objects per
    event (blob, tree, commit), all in packs, with fsck clean."""
    path = tmp_path / "ledger.git"
    history: list[int] = []
    with Ledger.init(path, actor="founder") as ledger:
        for round_ in range(6):
            for i in range(11):
                _append(ledger, f"round {round_} note {i}")
                history.append(packing.pack_stats(ledger.store)["packs"])
            ledger.append_batch([_note(f"round {round_} batch {j}", "bob") for j in range(8)])
            history.append(packing.pack_stats(ledger.store)["packs"])
        assert max(history) <= 2 * packing.MAX_PACKS, history
        assert any(after < before for before, after in itertools.pairwise(history)), history
        packing.pack_loose(ledger.store)
        packing.merge_packs(ledger.store, force=True)
        assert packing.pack_stats(ledger.store) == {"packs": 1, "loose": 0}
        report = ledger.verify()
    assert report.ok and report.events == 1 + 6 * (11 + 8), report.error
    assert_fsck_clean(path)
    counts = dict(
        line.split(": ")
        for line in git_run(path, "count-objects", "-v").stdout.decode().splitlines()
    )
    assert (counts["count"], counts["packs"]) == ("0", "1")
    assert int(counts["in-pack"]) == 3 * report.events  # blob + tree + commit per event
