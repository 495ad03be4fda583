"""Verify accepts only the tree entries perfledger writes under an event, and only integers in
the one range that append and ``is_canonical()`` allow.

Each test forges a real ledger with the real git CLI (``hash-object --literally`` where git's
own tools refuse to write the malformed object), re-chains the descendants and moves the ref:
``perfledger verify`` must exit 5 with an error naming the event, in one process and with
pass 2 in worker processes alike.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.api import Ledger
from perfledger.errors import CanonicalEncodingError, IntegrityError
from perfledger.events.canonical import canonical_bytes, integer_range_problem, is_canonical
from perfledger.events.envelope import EVENT_ID_DOMAIN
from perfledger.ledger import verify as verify_mod
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.store import FORMAT_VERSION
from perfledger.ledger.verify import verify_store

GitRun = Callable[..., subprocess.CompletedProcess[bytes]]
CliRun = Callable[..., subprocess.CompletedProcess[str]]

#: Index (in the total order) of the event that carries two artifacts.
ARTIFACT_EVENT = 2


@dataclass(frozen=True)
class Built:
    """A linear ledger: its path, event ids and commit shas (hex), root first."""

    path: Path
    ids: list[str]
    commits: list[str]


def _build(path: Path) -> Built:
    """Root, a note, a note with two artifacts, two more notes; the last one carries a request
    (a free-form JSON value that the integer tests forge)."""
    with Ledger.init(path, name="trees", actor="founder") as ledger:
        for i in range(1, 5):
            artifacts = {}
            if i == ARTIFACT_EVENT:
                artifacts = {
                    "kernel.cu": Artifact(b"__global__ void k() {}\n", "text/x-cuda"),
                    "notes.txt": Artifact(b"two artifacts", "text/plain"),
                }
            request = {"n": 7} if i == 4 else None
            ledger.store.append(
                EventDraft(
                    "NoteRecorded",
                    {"text": f"note {i}", "tags": []},
                    "alice",
                    artifacts=artifacts,
                    request=request,
                )
            )
        ids = [e.id for e in ledger.events()]
        commits = [sha.decode() for sha in ledger.store.ordered_commits()]
    return Built(path, ids, commits)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    """A fresh ledger to forge."""
    return _build(tmp_path / "trees.git")


def _git_out(git_run: GitRun, repo: Path, *args: str, input: bytes | None = None) -> bytes:
    return git_run(repo, *args, input=input).stdout


def _write(git_run: GitRun, repo: Path, kind: str, content: bytes) -> str:
    """Write an object as it is (``--literally``: git would refuse some of these trees)."""
    out = _git_out(git_run, repo, "hash-object", "--literally", "-t", kind, "-w", "--stdin",
                   input=content)  # fmt: skip
    return out.decode().strip()


def _tree_raw(entries: list[tuple[bytes, bytes, str]]) -> bytes:
    """Raw tree bytes of (mode text, name, hex sha) entries, in the order given."""
    return b"".join(mode + b" " + name + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries)


def _ls_tree(git_run: GitRun, repo: Path, tree: str) -> list[tuple[bytes, bytes, str]]:
    """(mode text, name, hex sha) of each entry of ``tree``."""
    out = []
    for line in filter(None, _git_out(git_run, repo, "ls-tree", "-z", tree).split(b"\0")):
        meta, name = line.split(b"\t", 1)
        mode, _kind, sha = meta.split()
        out.append((mode.lstrip(b"0") or b"0", name, sha.decode()))
    return out


def _rechain(git_run: GitRun, built: Built, index: int, new_commit_raw: bytes) -> None:
    """Write the forged commit for ``built.commits[index]``, re-chain its descendants and move
    the ledger ref (checked against the old head)."""
    old_sha = built.commits[index]
    new_sha = _write(git_run, built.path, "commit", new_commit_raw)
    for sha in built.commits[index + 1 :]:
        raw = _git_out(git_run, built.path, "cat-file", "commit", sha)
        old_line = b"parent " + old_sha.encode() + b"\n"
        assert raw.count(old_line) == 1
        raw = raw.replace(old_line, b"parent " + new_sha.encode() + b"\n")
        old_sha, new_sha = sha, _write(git_run, built.path, "commit", raw)
    git_run(built.path, "update-ref", "refs/heads/ledger", new_sha, built.commits[-1])


def _forge_artifacts_tree(
    git_run: GitRun,
    built: Built,
    edit: Callable[[list[tuple[bytes, bytes, str]]], list[tuple[bytes, bytes, str]]],
) -> None:
    """Replace the artifact event's ``artifacts/`` tree by ``edit`` of its entries (its
    event.json untouched: the event id stays the same)."""
    commit = built.commits[ARTIFACT_EVENT]
    raw = _git_out(git_run, built.path, "cat-file", "commit", commit)
    tree = re.match(rb"tree ([0-9a-f]{40})\n", raw).group(1).decode()  # type: ignore[union-attr]
    top = _ls_tree(git_run, built.path, tree)
    new_top = []
    for mode, name, sha in top:
        if name == b"artifacts":
            entries = _ls_tree(git_run, built.path, sha)
            sha = _write(git_run, built.path, "tree", _tree_raw(edit(entries)))
        new_top.append((mode, name, sha))
    new_tree = _write(git_run, built.path, "tree", _tree_raw(new_top))
    _rechain(git_run, built, ARTIFACT_EVENT, raw.replace(tree.encode(), new_tree.encode(), 1))


def _forge_top_tree(
    git_run: GitRun,
    built: Built,
    edit: Callable[[list[tuple[bytes, bytes, str]]], list[tuple[bytes, bytes, str]]],
) -> None:
    """Replace the artifact event's own tree by ``edit`` of its entries (event.json and
    artifacts/ untouched: the event id stays the same)."""
    commit = built.commits[ARTIFACT_EVENT]
    raw = _git_out(git_run, built.path, "cat-file", "commit", commit)
    tree = raw[5:45].decode()  # the commit's first line: tree <sha>
    new_tree = _write(
        git_run, built.path, "tree", _tree_raw(edit(_ls_tree(git_run, built.path, tree)))
    )
    _rechain(git_run, built, ARTIFACT_EVENT, raw.replace(tree.encode(), new_tree.encode(), 1))


def _in_process(path: Path) -> dict[str, object] | None:
    """Verify through the library, in this process: the error object (None when clean)."""
    with Ledger.open(path) as ledger:
        report = verify_store(ledger.store, format_version=FORMAT_VERSION)
    if report.error is None:
        return None
    return report.error.to_json()["error"]  # type: ignore[return-value]


def _assert_refused(perfledger_run: CliRun, path: Path, event_id: str) -> dict[str, object]:
    """verify exits 5 naming ``event_id`` (JSON and text), and the library agrees."""
    proc = perfledger_run("--ledger", path, "verify", "--json")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "integrity" and error["event_id"] == event_id, error
    assert event_id in error["message"]
    text = perfledger_run("--ledger", path, "verify")
    assert text.returncode == 5 and event_id in text.stderr
    in_process = _in_process(path)
    assert in_process is not None
    assert {k: in_process[k] for k in ("message", "event_id")} == {
        k: error[k] for k in ("message", "event_id")
    }
    return error


def _set_mode(mode: bytes) -> Callable[[list[tuple[bytes, bytes, str]]], list]:
    def edit(entries: list[tuple[bytes, bytes, str]]) -> list[tuple[bytes, bytes, str]]:
        return [(mode if i == 0 else m, n, s) for i, (m, n, s) in enumerate(entries)]

    return edit


def test_untouched_ledger_verifies_clean(built: Built, perfledger_run: CliRun) -> None:
    """The ledger the forgeries start from verifies (the tests below are not vacuous)."""
    proc = perfledger_run("--ledger", built.path, "verify", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _in_process(built.path) is None


@pytest.mark.parametrize(
    "mode", [b"120000", b"100755", b"100664"], ids=["symlink", "executable", "group-writable"]
)
@pytest.mark.slow
def test_artifact_with_a_mode_other_than_a_regular_file_is_refused(
    built: Built, git_run: GitRun, perfledger_run: CliRun, mode: bytes
) -> None:
    """An artifact blob stored as a symlink or an executable (same bytes, same name) would
    check out as something else than the declared file: verify refuses it, naming the event."""
    _forge_artifacts_tree(git_run, built, _set_mode(mode))
    error = _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])
    assert "mode" in str(error["message"])


@pytest.mark.slow
def test_artifact_tree_with_a_zero_padded_mode_is_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """A malformed mode (``0100644``) under artifacts/ is exit 5 naming the event, not an
    unexpected error."""
    _forge_artifacts_tree(git_run, built, _set_mode(b"0100644"))
    error = _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])
    assert "malformed" in str(error["message"])


@pytest.mark.slow
def test_artifact_with_a_non_utf8_name_is_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """A name that is not UTF-8 (nor a blake3) under artifacts/ is exit 5 naming the event."""

    def edit(entries: list[tuple[bytes, bytes, str]]) -> list[tuple[bytes, bytes, str]]:
        mode, name, sha = entries[-1]
        return [*entries[:-1], (mode, b"\xff\xfe" + name[2:], sha)]

    _forge_artifacts_tree(git_run, built, edit)
    _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])


@pytest.mark.slow
def test_artifact_listed_twice_is_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """A tree naming one artifact twice (a duplicate git's fsck reports) is refused."""
    _forge_artifacts_tree(git_run, built, lambda entries: [entries[0], *entries])
    _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])


@pytest.mark.slow
def test_artifacts_out_of_git_order_are_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """The two artifact entries swapped (a tree git's fsck reports as unsorted) is refused."""
    _forge_artifacts_tree(git_run, built, lambda entries: entries[::-1])
    error = _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])
    assert "order" in str(error["message"])


@pytest.mark.slow
def test_artifact_in_a_subdirectory_is_refused(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """An artifact moved into a subtree of artifacts/ is refused."""

    def edit(entries: list[tuple[bytes, bytes, str]]) -> list[tuple[bytes, bytes, str]]:
        sub = _write(git_run, built.path, "tree", _tree_raw(entries[:1]))
        return [(b"40000", entries[0][1], sub), *entries[1:]]

    _forge_artifacts_tree(git_run, built, edit)
    _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])


def _top_edit(
    name: bytes, mode: bytes
) -> Callable[[list[tuple[bytes, bytes, str]]], list[tuple[bytes, bytes, str]]]:
    def edit(entries: list[tuple[bytes, bytes, str]]) -> list[tuple[bytes, bytes, str]]:
        return [(mode if n == name else m, n, sha) for m, n, sha in entries]

    return edit


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "mode"),
    [
        (b"event.json", b"0100644"),
        (b"event.json", b"100755"),
        (b"event.json", b"120000"),
        (b"artifacts", b"040000"),
        (b"artifacts", b"100644"),
    ],
    ids=[
        "event-zero-padded",
        "event-executable",
        "event-symlink",
        "dir-zero-padded",
        "dir-as-file",
    ],
)
def test_event_tree_with_a_wrong_or_malformed_mode_is_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun, name: bytes, mode: bytes
) -> None:
    """The event's own tree: event.json must be a regular file and artifacts/ a directory,
    each with git's exact mode; anything else is exit 5 naming the event."""
    _forge_top_tree(git_run, built, _top_edit(name, mode))
    _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])


@pytest.mark.slow
def test_event_tree_with_an_extra_non_utf8_entry_is_an_integrity_failure(
    built: Built, git_run: GitRun, perfledger_run: CliRun
) -> None:
    """An extra entry with a non-UTF-8 name beside event.json is exit 5 naming the event."""

    def edit(entries: list[tuple[bytes, bytes, str]]) -> list[tuple[bytes, bytes, str]]:
        blob = next(sha for _, n, sha in entries if n == b"event.json")
        return sorted([*entries, (b"100644", b"\xff\xfe", blob)], key=lambda e: e[1])

    _forge_top_tree(git_run, built, edit)
    _assert_refused(perfledger_run, built.path, built.ids[ARTIFACT_EVENT])


def _forge_head_request(git_run: GitRun, built: Built, literal: bytes) -> str:
    """Rewrite the head event's request ``{"n": 7}`` to ``{"n": <literal>}``, with its id
    recomputed (so the only fault is the integer), as a new head commit; returns the new id."""
    commit = built.commits[-1]
    data = _git_out(git_run, built.path, "cat-file", "blob", f"{commit}:event.json")
    old_id = built.ids[-1]
    assert data.count(b'"request":{"n":7}') == 1
    data = data.replace(b'"request":{"n":7}', b'"request":{"n":' + literal + b"}")
    marker = b',"id":"' + old_id.encode() + b'"'
    hashed = data.replace(marker, b"")
    new_id = blake3.blake3(EVENT_ID_DOMAIN + hashed).hexdigest()
    data = data.replace(old_id.encode(), new_id.encode())
    blob = _write(git_run, built.path, "blob", data)
    tree = _write(git_run, built.path, "tree", _tree_raw([(b"100644", b"event.json", blob)]))
    raw = _git_out(git_run, built.path, "cat-file", "commit", commit)
    old_tree = re.match(rb"tree ([0-9a-f]{40})\n", raw).group(1)  # type: ignore[union-attr]
    raw = raw.replace(old_tree, tree.encode(), 1).replace(old_id.encode(), new_id.encode())
    _rechain(git_run, built, len(built.commits) - 1, raw)
    return new_id


@pytest.mark.slow
@pytest.mark.parametrize(
    "literal", [b"18446744073709551616", b"-9223372036854775809", b"123456789012345678901234"]
)
def test_integer_outside_64_bits_is_refused_by_verify(
    built: Built, git_run: GitRun, perfledger_run: CliRun, literal: bytes
) -> None:
    """An integer outside [-2**63, 2**64 - 1] in an event (its id recomputed) fails verify as
    it fails ``is_canonical()`` and append."""
    new_id = _forge_head_request(git_run, built, literal)
    error = _assert_refused(perfledger_run, built.path, new_id)
    assert "64-bit" in str(error["message"])


@pytest.mark.parametrize("literal", [b"18446744073709551615", b"-9223372036854775808"])
def test_integer_at_the_64_bit_limits_verifies(
    built: Built, git_run: GitRun, perfledger_run: CliRun, literal: bytes
) -> None:
    """The range's ends are inside it: the same forgery with them verifies clean."""
    _forge_head_request(git_run, built, literal)
    proc = perfledger_run("--ledger", built.path, "verify", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _in_process(built.path) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**80), max_value=2**80))
def test_integer_range_is_the_same_for_append_verify_and_is_canonical(value: int) -> None:
    """Append's encoder (``canonical_bytes``), ``is_canonical()`` and verify's range check
    accept exactly the same integers."""
    data = b'{"n":%d}' % value
    try:
        canonical_bytes({"n": value})
        appendable = True
    except CanonicalEncodingError:
        appendable = False
    assert appendable == is_canonical(data) == (integer_range_problem(data) is None)
    assert appendable == (-(2**63) <= value <= 2**64 - 1)


_MODES = st.sampled_from(
    [b"100644", b"100755", b"120000", b"40000", b"160000", b"0100644", b"100664", b"644"]
)
_BLAKE3 = st.binary(min_size=8, max_size=8).map(lambda b: blake3.blake3(b).hexdigest().encode())
_NAMES = st.one_of(_BLAKE3, st.binary(min_size=1, max_size=70).filter(lambda b: b"\0" not in b))


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_MODES, _NAMES), min_size=1, max_size=4))
def test_artifacts_tree_accepts_only_regular_files_named_by_blake3(
    entries: list[tuple[bytes, bytes]],
) -> None:
    """Any ``artifacts/`` tree: accepted exactly when every entry is mode 100644 with a blake3
    name, in git's order, no name repeated; otherwise an IntegrityError, never another
    exception."""
    raw = _tree_raw([(mode, name, "ab" * 20) for mode, name in entries])
    names = [name for _, name in entries]
    valid = names == sorted(set(names)) and all(
        mode == b"100644" and re.fullmatch(rb"[0-9a-f]{64}", name) for mode, name in entries
    )
    try:
        art = verify_mod.artifact_entries(raw)
    except IntegrityError:
        assert not valid
    else:
        assert valid and sorted(art) == sorted(n.decode() for n in names)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_as_an_artifacts_tree_is_refused_or_parsed_never_unexpected(raw: bytes) -> None:
    """Arbitrary bytes as a tree: an IntegrityError or parsed entries, nothing else."""
    try:
        art = verify_mod.artifact_entries(raw)
    except IntegrityError:
        return
    assert all(len(name) == 64 and len(sha) == 20 for name, sha in art.items())
