"""Tampering with a ledger behind perfledger's back is detected by ``perfledger verify``.

Each test edits a real ledger the way an attacker (or a broken tool) would: rewriting an object
file in place under its old name, or rewriting history with git plumbing (new blobs, trees and
commits, re-chained descendants, ``git update-ref``) so that git itself sees a valid repository.
``perfledger verify`` must exit 5 with an error naming the affected event, and must leave the
repository byte-for-byte as it found it. The derived cache (``<gitdir>/perfledger/``) never
changes verify's verdict or state_hash.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from perfledger.api import Ledger
from perfledger.ledger import packing
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.cache import Snapshot, StateHash, load_snapshot, save_snapshot
from perfledger.ledger.store import FORMAT_VERSION
from perfledger.ledger.verify import verify_store

#: The ``git_run`` and ``perfledger_run`` fixtures of ``conftest.py``.
GitRun = Callable[..., subprocess.CompletedProcess[bytes]]
CliRun = Callable[..., subprocess.CompletedProcess[str]]
Snap = Callable[[Path], dict[str, tuple[int, bytes]]]

#: Index (in the total order) of the event that carries artifacts.
ARTIFACT_EVENT = 3
#: Index of the event most tests tamper with: neither the root nor the head.
MIDDLE = 4
KERNEL = b"".join(b"  y[%d] = a * x[%d] + y[%d];\n" % (i, i, i) for i in range(300))


@dataclass(frozen=True)
class Built:
    """A linear ledger: its path, event ids and commit shas (hex), root first."""

    path: Path
    ids: list[str]
    commits: list[str]


def _drafts() -> list[EventDraft]:
    drafts = []
    for i in range(1, 9):
        artifacts = {}
        if i == ARTIFACT_EVENT:
            artifacts = {
                "saxpy.cu": Artifact(KERNEL, "text/x-cuda"),
                "notes.txt": Artifact(b"small artifact", "text/plain"),
            }
        payload = {"text": f"note {i}", "tags": []}
        drafts.append(EventDraft("NoteRecorded", payload, "alice", artifacts=artifacts))
    return drafts


def _build(path: Path, *, packed: bool) -> Built:
    """Eight notes on the root. Loose: one append each. Packed: one batch (a pack), then the
    root's loose objects packed too, so that no loose object is left."""
    with Ledger.init(path, name="tamper", actor="founder") as ledger:
        if packed:
            ledger.append_batch(_drafts())
            packing.pack_loose(ledger.store)
            assert packing.pack_stats(ledger.store)["loose"] == 0
        else:
            for draft in _drafts():
                ledger.store.append(draft)
            assert packing.pack_stats(ledger.store)["packs"] == 0
        ids = [e.id for e in ledger.events()]
        commits = [sha.decode() for sha in ledger.store.ordered_commits()]
    return Built(path, ids, commits)


@pytest.fixture(scope="session")
def templates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Built]:
    """The two untampered ledgers, built once per session (tests tamper with copies)."""
    root = tmp_path_factory.mktemp("tamper-templates")
    return {
        "loose": _build(root / "loose.git", packed=False),
        "packed": _build(root / "packed.git", packed=True),
    }


def _copy(template: Built, target: Path) -> Built:
    shutil.copytree(template.path, target)
    return Built(target, list(template.ids), list(template.commits))


@pytest.fixture
def loose(tmp_path: Path, templates: dict[str, Built]) -> Built:
    """A private copy of a ledger whose objects are all loose."""
    return _copy(templates["loose"], tmp_path / "loose.git")


@pytest.fixture
def packed(tmp_path: Path, templates: dict[str, Built]) -> Built:
    """A private copy of a ledger whose objects are all in packs."""
    return _copy(templates["packed"], tmp_path / "packed.git")


@pytest.fixture
def assert_refused(perfledger_run: CliRun, snapshot: Snap) -> Callable[..., dict[str, Any]]:
    """Run ``verify --json`` (and, with ``text=True``, plain ``verify``) on a tampered ledger:
    exit 5, one JSON object whose error names ``event_id`` (in ``event_id`` and in the
    message), and the repository byte-for-byte unchanged. Returns the error object."""

    def check(path: Path, event_id: str, *, text: bool = False) -> dict[str, Any]:
        before = snapshot(path)
        proc = perfledger_run("--ledger", path, "verify", "--json")
        assert proc.returncode == 5, proc.stdout + proc.stderr
        report = json.loads(proc.stdout)
        assert report["ok"] is False and "state_hash" not in report
        error = report["error"]
        assert error["code"] == "integrity"
        assert set(error) >= {"code", "rule", "message", "hint", "event_id"}
        assert error["event_id"] == event_id, error
        assert event_id in error["message"], error
        if text:
            proc = perfledger_run("--ledger", path, "verify")
            assert proc.returncode == 5
            assert event_id in proc.stderr and "state_hash" not in proc.stdout
        ok, _events, in_process = _in_process(path)  # the same first failure, as a library
        assert not ok and in_process is not None
        assert {k: in_process[k] for k in ("message", "event_id", "hint")} == {
            k: error[k] for k in ("message", "event_id", "hint")
        }
        assert snapshot(path) == before, "a refused verify changed the repository"
        return error

    return check


# ----------------------------------------------------------------------------- plumbing


def _rev_parse(git_run: GitRun, repo: Path, name: str) -> str:
    return git_run(repo, "rev-parse", "--verify", name).stdout.decode().strip()


def _loose_path(repo: Path, sha: str) -> Path:
    return repo / "objects" / sha[:2] / sha[2:]


def _rewrite_loose(path: Path, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite a loose object in place, under the same name: inflate, edit the content, fix the
    header's length, deflate, and write it back with the file's mode restored."""
    header, _, content = zlib.decompress(path.read_bytes()).partition(b"\0")
    new_content = edit(content)
    assert new_content != content
    kind = header.split(b" ")[0]
    data = zlib.compress(kind + b" " + str(len(new_content)).encode() + b"\0" + new_content)
    mode = stat.S_IMODE(path.stat().st_mode)
    path.chmod(0o644)
    path.write_bytes(data)
    path.chmod(mode)


def _bump_ts_digit(content: bytes) -> bytes:
    """Change one byte of event.json: the last microsecond digit of ``ts`` (still canonical)."""
    match = re.search(rb'"ts":"[^"]*(\d)Z"', content)
    assert match is not None
    pos = match.start(1)
    digit = (content[pos] - ord("0") + 1) % 10
    return content[:pos] + bytes([ord("0") + digit]) + content[pos + 1 :]


def _flip_middle_byte(content: bytes) -> bytes:
    pos = len(content) // 2
    return content[:pos] + bytes([content[pos] ^ 0x01]) + content[pos + 1 :]


def _write_object(git_run: GitRun, repo: Path, kind: str, content: bytes) -> str:
    out = git_run(repo, "hash-object", "-t", kind, "-w", "--stdin", input=content)
    return out.stdout.decode().strip()


def _replace_in_tree(git_run: GitRun, repo: Path, tree: str, path: list[str], new: str) -> str:
    """Return a new tree: ``tree`` with the entry at ``path`` pointing at object ``new``."""
    listing = git_run(repo, "ls-tree", "-z", tree).stdout.split(b"\0")
    entries = []
    for entry in filter(None, listing):
        meta, name = entry.split(b"\t", 1)
        mode, kind, sha = meta.split()
        if name.decode() == path[0]:
            sha = (
                new
                if len(path) == 1
                else _replace_in_tree(git_run, repo, sha.decode(), path[1:], new)
            ).encode()
        entries.append(mode + b" " + kind + b" " + sha + b"\t" + name)
    out = git_run(repo, "mktree", "-z", input=b"\0".join(entries) + b"\0")
    return out.stdout.decode().strip()


def _cat_commit(git_run: GitRun, repo: Path, sha: str) -> bytes:
    return git_run(repo, "cat-file", "commit", sha).stdout


def _replace_once(raw: bytes, old: bytes, new: bytes) -> bytes:
    assert raw.count(old) == 1, (old, raw)
    return raw.replace(old, new)


def _rewrite_history(
    git_run: GitRun, repo: Path, chain: list[str], index: int, edit: Callable[[bytes], bytes]
) -> str:
    """Rewrite commit ``chain[index]`` with ``edit`` (on its raw bytes), re-chain every
    descendant onto the rewritten commit, and move refs/heads/ledger there with
    ``git update-ref`` (checked against the old head). Returns the new head."""
    old_sha = chain[index]
    new_sha = _write_object(git_run, repo, "commit", edit(_cat_commit(git_run, repo, old_sha)))
    for sha in chain[index + 1 :]:
        raw = _replace_once(
            _cat_commit(git_run, repo, sha),
            b"parent " + old_sha.encode() + b"\n",
            b"parent " + new_sha.encode() + b"\n",
        )
        old_sha, new_sha = sha, _write_object(git_run, repo, "commit", raw)
    git_run(repo, "update-ref", "refs/heads/ledger", new_sha, chain[-1])
    return new_sha


def _fsck_accepts(git_run: GitRun, repo: Path) -> None:
    """git's own check passes: the tampering is valid git, only perfledger can catch it."""
    proc = git_run(
        repo, "fsck", "--strict", "--full", "--no-dangling", "--no-progress", check=False
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), proc.stdout + proc.stderr


def _fsck_rejects(git_run: GitRun, repo: Path) -> None:
    """git's own check fails too: the object really was corrupted (the test is not vacuous)."""
    proc = git_run(
        repo, "fsck", "--strict", "--full", "--no-dangling", "--no-progress", check=False
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr


def _verifies(path: Path) -> str:
    with Ledger.open(path) as ledger:
        report = ledger.verify()
    assert report.ok, report.error
    assert _in_process(path) == (True, report.events, None)
    return str(report.extra["state_hash"])


def _in_process(path: Path) -> tuple[bool, int, dict[str, object] | None]:
    """Verify through the library, in this process: (ok, events, error object). It must
    agree with the CLI."""
    with Ledger.open(path) as ledger:
        report = verify_store(ledger.store, format_version=FORMAT_VERSION)
    error = None if report.error is None else report.error.to_json()["error"]
    return report.ok, report.events, error  # type: ignore[return-value]


# ----------------------------------------------------------------------------- (a) event blob


@pytest.mark.parametrize("index", [0, MIDDLE, -1], ids=["root", "middle", "head"])
def test_event_blob_byte_changed_in_place_loose(
    loose: Built,
    index: int,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """One byte of a loose event.json object rewritten under its old name: verify names it."""
    blob = _rev_parse(git_run, loose.path, f"{loose.commits[index]}:event.json")
    _rewrite_loose(_loose_path(loose.path, blob), _bump_ts_digit)
    _fsck_rejects(git_run, loose.path)
    error = assert_refused(loose.path, loose.ids[index], text=index == MIDDLE)
    assert blob in error["message"] or "rewritten" in error["message"]


def test_event_blob_byte_changed_in_place_in_pack(
    packed: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """One byte inside a packed event.json entry changed in the .pack file itself (located
    with ``git verify-pack -v``); git's fsck rejects the pack, and verify names the event."""
    blob = _rev_parse(git_run, packed.path, f"{packed.commits[MIDDLE]}:event.json")
    for idx in (packed.path / "objects" / "pack").glob("*.idx"):
        for line in git_run(packed.path, "verify-pack", "-v", idx).stdout.decode().splitlines():
            fields = line.split()
            if fields and fields[0] == blob:
                pack = idx.with_suffix(".pack")
                size_in_pack, offset = int(fields[3]), int(fields[4])
                break
        else:
            continue
        break
    else:
        raise AssertionError(f"{blob} is in no pack")
    data = bytearray(pack.read_bytes())
    data[offset + size_in_pack // 2] ^= 0x01  # past the entry header, inside the zlib stream
    mode = stat.S_IMODE(pack.stat().st_mode)
    pack.chmod(0o644)
    pack.write_bytes(bytes(data))
    pack.chmod(mode)
    _fsck_rejects(git_run, packed.path)
    assert_refused(packed.path, packed.ids[MIDDLE])


@pytest.mark.slow
def test_event_blob_byte_changed_by_rewriting_history_packed(
    packed: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """The edited event.json written as a new blob, new tree, new commit, descendants
    re-chained and the ref moved: valid git, but the content no longer hashes to its id."""
    commit = packed.commits[MIDDLE]
    tree = _rev_parse(git_run, packed.path, f"{commit}^{{tree}}")
    content = git_run(packed.path, "cat-file", "blob", f"{commit}:event.json").stdout
    blob = _write_object(git_run, packed.path, "blob", _bump_ts_digit(content))
    new_tree = _replace_in_tree(git_run, packed.path, tree, ["event.json"], blob)
    _rewrite_history(
        git_run,
        packed.path,
        packed.commits,
        MIDDLE,
        lambda raw: _replace_once(raw, f"tree {tree}\n".encode(), f"tree {new_tree}\n".encode()),
    )
    _fsck_accepts(git_run, packed.path)
    assert_refused(packed.path, packed.ids[MIDDLE], text=True)


def _flip_subject_byte(content: bytes) -> bytes:
    """Change the first character of the commit subject's summary ("note 4" -> "Note 4")."""
    start = content.index(b"\n\n") + 2 + len(b"NoteRecorded: ")
    assert content[start : start + 4] == b"note"
    return content[:start] + b"N" + content[start + 1 :]


@pytest.mark.slow
@pytest.mark.parametrize("what", ["commit", "tree"])
def test_commit_or_tree_object_changed_in_place_loose(
    loose: Built,
    what: str,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """One byte of an event's loose commit object (its subject) or tree object rewritten under
    its old name: verify names the event that commit carries."""
    commit = loose.commits[MIDDLE]
    if what == "commit":
        sha, edit = commit, _flip_subject_byte
    else:
        sha, edit = _rev_parse(git_run, loose.path, f"{commit}^{{tree}}"), _flip_middle_byte
    _rewrite_loose(_loose_path(loose.path, sha), edit)
    _fsck_rejects(git_run, loose.path)
    assert_refused(loose.path, loose.ids[MIDDLE])


# ----------------------------------------------------------------------------- (b) artifact blob


def _artifact_blob(git_run: GitRun, built: Built) -> tuple[str, str]:
    """Return (artifacts/<blake3> path, blob sha) of the large artifact."""
    listing = git_run(built.path, "ls-tree", "-r", built.commits[ARTIFACT_EVENT]).stdout.decode()
    for line in listing.splitlines():
        meta, name = line.split("\t")
        sha = meta.split()[2]
        if name.startswith("artifacts/"):
            size = int(git_run(built.path, "cat-file", "-s", sha).stdout)
            if size == len(KERNEL):
                return name, sha
    raise AssertionError("no kernel artifact")


@pytest.mark.slow
def test_artifact_blob_changed_in_place_loose(
    loose: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """An artifact's loose blob rewritten in place: verify names the event it belongs to."""
    _, blob = _artifact_blob(git_run, loose)
    _rewrite_loose(_loose_path(loose.path, blob), _flip_middle_byte)
    _fsck_rejects(git_run, loose.path)
    assert_refused(loose.path, loose.ids[ARTIFACT_EVENT], text=True)


@pytest.mark.slow
def test_artifact_blob_replaced_by_rewriting_history_packed(
    packed: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """An artifact swapped for edited bytes under the old name (new blob, new trees, commits
    re-chained): valid git, but the blob no longer matches its blake3."""
    name, blob = _artifact_blob(git_run, packed)
    content = git_run(packed.path, "cat-file", "blob", blob).stdout
    new_blob = _write_object(git_run, packed.path, "blob", _flip_middle_byte(content))
    commit = packed.commits[ARTIFACT_EVENT]
    tree = _rev_parse(git_run, packed.path, f"{commit}^{{tree}}")
    new_tree = _replace_in_tree(git_run, packed.path, tree, name.split("/"), new_blob)
    _rewrite_history(
        git_run,
        packed.path,
        packed.commits,
        ARTIFACT_EVENT,
        lambda raw: _replace_once(raw, f"tree {tree}\n".encode(), f"tree {new_tree}\n".encode()),
    )
    _fsck_accepts(git_run, packed.path)
    error = assert_refused(packed.path, packed.ids[ARTIFACT_EVENT])
    assert "artifact" in error["message"]


# ----------------------------------------------------------------------------- (c) (d) parents


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["loose", "packed"])
def test_commit_forged_onto_a_side_branch(
    layout: str,
    request: pytest.FixtureRequest,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """An event commit re-parented (git plumbing) onto a valid event commit of another branch:
    the event's recorded parents no longer match the commit graph."""
    built: Built = request.getfixturevalue(layout)
    with Ledger.open(built.path) as ledger:
        drafts = [EventDraft("NoteRecorded", {"text": "side", "tags": []}, "mallory")]
        _, side = ledger.store.build_on(built.commits[1].encode(), drafts)
    old_parent = built.commits[MIDDLE - 1]
    _rewrite_history(
        git_run,
        built.path,
        built.commits,
        MIDDLE,
        lambda raw: _replace_once(
            raw, f"parent {old_parent}\n".encode(), b"parent " + side + b"\n"
        ),
    )
    _fsck_accepts(git_run, built.path)
    assert_refused(built.path, built.ids[MIDDLE], text=layout == "loose")


@pytest.mark.slow
def test_commit_forged_with_a_second_parent(
    loose: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """An event commit given a second parent line: an event has at most one parent commit."""
    old_parent = loose.commits[MIDDLE - 1]
    extra = loose.commits[1]
    _rewrite_history(
        git_run,
        loose.path,
        loose.commits,
        MIDDLE,
        lambda raw: _replace_once(
            raw,
            f"parent {old_parent}\n".encode(),
            f"parent {old_parent}\nparent {extra}\n".encode(),
        ),
    )
    _fsck_accepts(git_run, loose.path)
    assert_refused(loose.path, loose.ids[MIDDLE], text=True)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["loose", "packed"])
def test_event_dropped_from_the_middle(
    layout: str,
    request: pytest.FixtureRequest,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """History rewritten without one event (its child re-parented onto its parent): the child
    is named, and the message names the missing event it still records as its parent."""
    built: Built = request.getfixturevalue(layout)
    dropped, child = MIDDLE, MIDDLE + 1
    _rewrite_history(
        git_run,
        built.path,
        built.commits,
        child,
        lambda raw: _replace_once(
            raw,
            f"parent {built.commits[dropped]}\n".encode(),
            f"parent {built.commits[dropped - 1]}\n".encode(),
        ),
    )
    _fsck_accepts(git_run, built.path)
    log = git_run(built.path, "log", "--format=%(trailers:key=Event-Id,valueonly)", "ledger")
    assert built.ids[dropped] not in log.stdout.decode()
    error = assert_refused(built.path, built.ids[child])
    assert built.ids[dropped] in error["message"]


def test_root_dropped(
    loose: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """The root event cut off (its child made a parentless commit): the ledger has no
    LedgerInitialized root any more, and the new root event is named."""
    _rewrite_history(
        git_run,
        loose.path,
        loose.commits,
        1,
        lambda raw: _replace_once(raw, f"parent {loose.commits[0]}\n".encode(), b""),
    )
    _fsck_accepts(git_run, loose.path)
    assert_refused(loose.path, loose.ids[1])


# ----------------------------------------------------------------------------- (e) Lamport


@pytest.mark.slow
@pytest.mark.parametrize(
    ("index", "delta"),
    [(MIDDLE, 5), (MIDDLE, -1), (-1, 1)],
    ids=["middle-raised", "middle-lowered", "head-raised"],
)
def test_lamport_trailer_edited(
    loose: Built,
    index: int,
    delta: int,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """A commit's ``Lamport:`` trailer rewritten (and descendants re-chained): verify names
    the edited event, not one of its intact descendants."""
    position = index % len(loose.commits)
    lamport = position + 1
    _rewrite_history(
        git_run,
        loose.path,
        loose.commits,
        position,
        lambda raw: _replace_once(
            raw, f"\nLamport: {lamport}\n".encode(), f"\nLamport: {lamport + delta}\n".encode()
        ),
    )
    _fsck_accepts(git_run, loose.path)
    assert_refused(loose.path, loose.ids[position], text=True)


# ----------------------------------------------------------------------------- derived cache


def _warm_cache(path: Path) -> str:
    """Fold the state (what ``perfledger state`` does) so that the derived index and the state
    cache exist; returns the state_hash."""
    with Ledger.open(path) as ledger:
        state_hash = ledger.state_hash()
    derived = path / "perfledger"
    assert any((derived / "cache").iterdir()) and any(derived.glob("index*"))
    return state_hash


def _forge_cache(path: Path) -> None:
    """Replace the derived data with plausible lies: a state snapshot for the current head with
    wrong counts, a cached state_hash that is not the state's, and an index that swaps two
    events' commits and forgets the rest."""
    cache_dir = path / "perfledger" / "cache"
    snapshot_file = cache_dir / "workflow.msgpack"
    (hash_file,) = cache_dir.glob("*.hash.msgpack")
    cached_hash = msgspec.msgpack.decode(hash_file.read_bytes(), type=StateHash)
    hash_file.write_bytes(
        msgspec.msgpack.encode(StateHash(cached_hash.head, cached_hash.code_version, "0" * 64))
    )
    code_version = msgspec.msgpack.decode(snapshot_file.read_bytes())["code_version"]
    loaded = load_snapshot(str(path / "perfledger"), snapshot_file.stem, code_version)
    assert loaded is not None
    forged = {"event_count": 999, "notes": 998, "name": "forged"}
    sections = {**loaded.sections, **{k: msgspec.msgpack.encode(v) for k, v in forged.items()}}
    save_snapshot(
        str(path / "perfledger"),
        snapshot_file.stem,
        Snapshot(loaded.head, loaded.code_version, 999, 999, "f" * 64, sections),
    )
    index_files = list((path / "perfledger").glob("index*"))
    assert index_files, "no derived index to forge"
    for index_file in index_files:
        index = msgspec.msgpack.decode(index_file.read_bytes())
        commits = list(index["commits"].items())
        (sha_a, entry_a), (sha_b, entry_b) = commits[1], commits[2]
        entry_a[0], entry_b[0] = entry_b[0], entry_a[0]
        index["commits"] = {sha_a: entry_a, sha_b: entry_b}
        index_file.write_bytes(msgspec.msgpack.encode(index))


def _garble_cache(path: Path) -> None:
    for root, _, names in os.walk(path / "perfledger"):
        for name in names:
            if name.endswith(".lock"):
                continue
            Path(root, name).write_bytes(b"\x00garbage\xff" * 7)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["deleted", "garbage", "forged"])
def test_derived_cache_never_changes_verify(
    how: str,
    loose: Built,
    cli_verify: Callable[[Path], tuple[int, Any]],
    snapshot: Snap,
) -> None:
    """With the derived cache deleted, garbled, or forged to say something else, verify gives
    the same verdict and state_hash as before, and the repository itself is untouched."""
    code, before = cli_verify(loose.path)
    assert code == 0 and before["state_hash"] == _warm_cache(loose.path)
    repository = snapshot(loose.path)
    if how == "deleted":
        shutil.rmtree(loose.path / "perfledger")
    elif how == "garbage":
        _garble_cache(loose.path)
    else:
        _forge_cache(loose.path)
    code, after = cli_verify(loose.path)
    assert code == 0, after
    assert after["state_hash"] == before["state_hash"]
    assert (after["events"], after["head"]) == (before["events"], before["head"])
    assert snapshot(loose.path) == repository
    if how != "forged":  # a forged snapshot keyed by the head is served by `state` by design
        assert _warm_cache(loose.path) == before["state_hash"]


@pytest.mark.parametrize("cache", ["warm", "deleted"])
def test_cache_never_vouches_for_a_tampered_ledger(
    cache: str,
    loose: Built,
    git_run: GitRun,
    assert_refused: Callable[..., dict[str, Any]],
) -> None:
    """A cache warmed before the tampering does not make verify pass, and the verdict is the
    same with the cache gone."""
    _warm_cache(loose.path)
    if cache == "deleted":
        shutil.rmtree(loose.path / "perfledger")
    blob = _rev_parse(git_run, loose.path, f"{loose.commits[MIDDLE]}:event.json")
    _rewrite_loose(_loose_path(loose.path, blob), _bump_ts_digit)
    assert_refused(loose.path, loose.ids[MIDDLE])


def test_append_after_a_forged_index_still_verifies(loose: Built) -> None:
    """The derived index is data perfledger wrote for speed; when it lies (here: the head's
    Lamport clock), the next append must still produce a ledger that verifies. Otherwise a
    corrupted cache file corrupts the immutable history for good."""
    _warm_cache(loose.path)
    (index_file,) = (loose.path / "perfledger").glob("index*")
    index = msgspec.msgpack.decode(index_file.read_bytes())
    entry = index["commits"][index["head"]]
    assert entry[0] == loose.ids[-1] and entry[1] == len(loose.ids)
    entry[1] = 100
    index_file.write_bytes(msgspec.msgpack.encode(index))
    with Ledger.open(loose.path) as ledger:
        appended = ledger.append("NoteRecorded", {"text": "after", "tags": []}, actor="bob")
        report = ledger.verify()
    assert appended.lamport == len(loose.ids) + 1
    assert report.ok, report.error


def test_untampered_ledgers_verify(loose: Built, packed: Built) -> None:
    """Control: the fixtures themselves verify, so every refusal above is due to the tampering."""
    assert _verifies(loose.path) and _verifies(packed.path)


@pytest.mark.slow
def test_envelope_with_a_malformed_parent_id_names_the_field(
    packed: Built, git_run: GitRun, assert_refused: Callable[..., dict[str, Any]]
) -> None:
    """An event.json whose parent id is upper-cased, its own id recomputed and its commit
    re-chained (valid git, a consistent content id): verify reports the malformed field, not
    only the DAG mismatch it also causes (verify checks the field's form only when a later check
    fails, and must then report what checking it first reports)."""
    import msgspec

    from perfledger.events.envelope import Envelope, compute_event_id, encode_envelope

    commit = packed.commits[MIDDLE]
    tree = _rev_parse(git_run, packed.path, f"{commit}^{{tree}}")
    content = git_run(packed.path, "cat-file", "blob", f"{commit}:event.json").stdout
    envelope = msgspec.json.decode(content, type=Envelope)
    forged = msgspec.structs.replace(
        envelope, parents=tuple(p.upper() for p in envelope.parents), id=""
    )
    forged = msgspec.structs.replace(forged, id=compute_event_id(forged))
    blob = _write_object(git_run, packed.path, "blob", encode_envelope(forged))
    new_tree = _replace_in_tree(git_run, packed.path, tree, ["event.json"], blob)

    def edit(raw: bytes) -> bytes:
        raw = _replace_once(raw, f"tree {tree}\n".encode(), f"tree {new_tree}\n".encode())
        return _replace_once(raw, envelope.id.encode(), forged.id.encode())

    _rewrite_history(git_run, packed.path, packed.commits, MIDDLE, edit)
    _fsck_accepts(git_run, packed.path)
    error = assert_refused(packed.path, forged.id)
    assert "is not 64 lowercase hex characters" in error["message"], error
