"""The command-line contract of SPEC.md section 6, through real subprocesses of the console script.

Exit codes: 0 done, 2 bad request, 5 integrity failure. ``--json`` answers are one JSON object;
errors are ``{"error": {"code", "rule", "message", "hint"}}``. No traceback ever reaches stderr
(the ``cli`` fixture asserts it on every call). Ledger discovery: ``--ledger PATH``, else
``$PERFLEDGER_DIR``, else the git repository containing the current directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

import perfledger
from perfledger.api import Ledger
from perfledger.errors import AmbiguousId
from perfledger.ledger.base import EventDraft

Cli = Callable[..., subprocess.CompletedProcess[str]]
Git = Callable[..., str]
ParseJson = Callable[[str], Any]
HEX64 = re.compile(r"^[0-9a-f]{64}$")
ERROR_KEYS = {"code", "rule", "message", "hint"}


class CliLedger(Protocol):
    """The ``cli_ledger`` fixture: a ledger made through the CLI (root + three notes)."""

    path: Path
    root: str
    notes: list[str]

    @property
    def ids(self) -> list[str]:
        """Every event id, oldest first."""
        ...


def _tree_snapshot(path: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``path`` (derived data included): relative path -> (mode, bytes)."""
    files = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = Path(root) / name
            files[str(full.relative_to(path))] = (full.stat().st_mode, full.read_bytes())
    return files


def _assert_json_error(
    proc: subprocess.CompletedProcess[str], parse_json: ParseJson, code: str, *, exit_code: int = 2
) -> dict[str, Any]:
    """The process exited ``exit_code`` with exactly one ``{"error": {...}}`` object on stdout."""
    assert proc.returncode == exit_code, proc.stdout + proc.stderr
    data = parse_json(proc.stdout)
    assert set(data) == {"error"}, data
    error = data["error"]
    assert set(error) >= ERROR_KEYS, error
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


# ----------------------------------------------------------------------------- version, init


def test_version(cli: Cli, cli_env: dict[str, str]) -> None:
    """``perfledger --version`` (and ``python -m perfledger --version``) print the version."""
    proc = cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"perfledger, version {perfledger.__version__}"
    module = subprocess.run(
        [sys.executable, "-m", "perfledger", "--version"],
        env=cli_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert module.returncode == 0 and module.stdout == proc.stdout


@pytest.mark.slow
def test_init_creates_a_bare_ledger_with_one_root(
    tmp_path: Path, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """``init PATH`` on a new directory makes a bare repository whose HEAD is the ledger branch,
    holding exactly the root event; ``--json`` answers path, head and root."""
    path = tmp_path / "new" / "ledger.git"
    proc = cli("init", path, "--actor", "alice", "--json")
    assert proc.returncode == 0, proc.stderr
    answer = parse_json(proc.stdout)
    assert answer["path"] == str(path)
    assert git_cli("-C", path, "rev-parse", "--is-bare-repository") == "true"
    assert git_cli("-C", path, "symbolic-ref", "HEAD") == "refs/heads/ledger"
    assert answer["head"] == git_cli("-C", path, "rev-parse", "refs/heads/ledger")
    assert git_cli("-C", path, "rev-list", "--count", "ledger") == "1"
    assert (
        git_cli("-C", path, "log", "-1", "--format=%(trailers:key=Event-Id,valueonly)", "ledger")
        == answer["root"]
    )
    assert git_cli("-C", path, "log", "-1", "--format=%s|%an", "ledger") == (
        "LedgerInitialized: ledger 'ledger.git' (format 1)|alice"
    )

    text = cli("init", tmp_path / "plain", "--name", "named")
    assert text.returncode == 0
    assert str(tmp_path / "plain") in text.stdout
    root = next(x for x in text.stdout.splitlines() if x.startswith("root event ")).split()[-1]
    assert HEX64.match(root)
    state = parse_json(cli("--ledger", tmp_path / "plain", "state", "--json").stdout)
    assert state["state"]["name"] == "named" and state["state"]["event_count"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("json_mode", [False, True], ids=["text", "json"])
def test_init_on_an_existing_ledger_exits_2_and_changes_nothing(
    cli_ledger: CliLedger, cli: Cli, parse_json: ParseJson, json_mode: bool
) -> None:
    """A second ``init`` is a bad request naming the path; not one byte of the repository (nor
    of its derived data) changes."""
    cli("--ledger", cli_ledger.path, "state")  # derived data exists too
    before = _tree_snapshot(cli_ledger.path)
    proc = cli("init", cli_ledger.path, *(["--json"] if json_mode else []))
    if json_mode:
        error = _assert_json_error(proc, parse_json, "bad_request")
        assert str(cli_ledger.path) in error["message"]
    else:
        assert proc.returncode == 2
        assert str(cli_ledger.path) in proc.stderr and proc.stdout == ""
    assert _tree_snapshot(cli_ledger.path) == before


def test_init_in_a_non_empty_plain_directory_exits_2(tmp_path: Path, cli: Cli) -> None:
    """``init`` refuses a directory that holds files but is not a git repository."""
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    before = _tree_snapshot(target)
    proc = cli("init", target)
    assert proc.returncode == 2 and str(target) in proc.stderr
    assert _tree_snapshot(target) == before


# ----------------------------------------------------------------------------- reading


@pytest.mark.slow
def test_log_lists_events_newest_first(
    cli_ledger: CliLedger, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """``log`` prints one line per event, newest first; ``-n N`` the first N of them;
    ``--json`` the same events with their fields, in the order of ``git log``."""
    newest_first = cli_ledger.ids[::-1]
    proc = cli("--ledger", cli_ledger.path, "log")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [i[:12] for i in newest_first]
    assert "NoteRecorded: note 2" in lines[0] and "bob" in lines[0]
    assert "LedgerInitialized" in lines[-1]

    for n in (0, 2, 10):
        limited = cli("--ledger", cli_ledger.path, "log", "-n", str(n))
        assert limited.returncode == 0
        assert limited.stdout.splitlines() == lines[:n]

    data = parse_json(cli("--ledger", cli_ledger.path, "log", "--json").stdout)
    events = data["events"]
    assert [e["event_id"] for e in events] == newest_first
    assert [e["lamport"] for e in events] == [4, 3, 2, 1]
    assert [e["kind"] for e in events] == ["NoteRecorded"] * 3 + ["LedgerInitialized"]
    assert {e["actor"] for e in events[:3]} == {"bob"}
    git_commits = git_cli("-C", cli_ledger.path, "log", "--format=%H", "ledger").split()
    assert [e["commit"] for e in events] == git_commits
    assert (
        parse_json(cli("--ledger", cli_ledger.path, "--json", "log", "-n", "1").stdout)["events"]
        == events[:1]
    )


@pytest.mark.slow
def test_show_by_id_and_by_prefix(cli_ledger: CliLedger, cli: Cli, parse_json: ParseJson) -> None:
    """``show ID`` and ``show PREFIX`` (4 or more characters) show the same event."""
    target = cli_ledger.notes[1]
    full = parse_json(cli("--ledger", cli_ledger.path, "show", target, "--json").stdout)
    event = full["event"]
    assert event["id"] == target and event["kind"] == "NoteRecorded"
    assert event["payload"] == {"text": "note 1", "tags": ["t"]}
    assert event["actor"] == "bob" and event["lamport"] == 3
    for prefix in (target[:4], target[:63]):
        shown = cli("--ledger", cli_ledger.path, "show", prefix, "--json")
        assert shown.returncode == 0, shown.stderr
        assert parse_json(shown.stdout) == full
    text = cli("--ledger", cli_ledger.path, "show", target[:8])
    assert text.returncode == 0 and parse_json(text.stdout) == event


@pytest.mark.slow
def test_show_unknown_or_too_short_prefix_exits_2(
    cli_ledger: CliLedger, cli: Cli, parse_json: ParseJson
) -> None:
    """An id or prefix matching no event, a prefix under 4 characters, or a non-hex string is
    a bad request (exit 2) naming what was asked; with --json, one error object."""
    present = {i[:4] for i in cli_ledger.ids}
    absent = next(f"{n:04x}" for n in range(1 << 16) if f"{n:04x}" not in present)
    for query in (absent, "f" * 64, cli_ledger.root[:3], "zzzz", "NOTE"):
        proc = cli("--ledger", cli_ledger.path, "show", query)
        assert proc.returncode == 2 and proc.stdout == "" and query in proc.stderr
    for query in (absent, cli_ledger.root[:3]):
        proc = cli("--ledger", cli_ledger.path, "show", query, "--json")
        assert query in _assert_json_error(proc, parse_json, "bad_request")["message"]


@pytest.mark.slow
def test_show_ambiguous_prefix_exits_2(tmp_path: Path, cli: Cli, parse_json: ParseJson) -> None:
    """A 4-character prefix shared by two events is ambiguous: exit 2, even when it also
    starts exactly one commit's sha (``show`` never reads an ambiguous event prefix as a commit:
    with 1,501 commits that happened to about 2 % of runs); a longer prefix that tells them
    apart shows one. (1,500 events make a shared 4-hex prefix a near certainty: the chance of
    none is about 4e-8.)"""
    path = tmp_path / "many.git"
    with Ledger.init(path, actor="alice") as ledger:
        ledger.append_batch(
            [EventDraft("NoteRecorded", {"text": f"n{i}"}, "alice") for i in range(1500)]
        )
        ids = [e.id for e in ledger.events()]
    by_prefix: dict[str, list[str]] = defaultdict(list)
    for event_id in ids:
        by_prefix[event_id[:4]].append(event_id)
    prefix, clash = next((p, v) for p, v in sorted(by_prefix.items()) if len(v) > 1)
    proc = cli("--ledger", path, "show", prefix)
    assert proc.returncode == 2 and "ambiguous" in proc.stderr and prefix in proc.stderr
    # every ambiguous event prefix, whatever the commit shas: never shown as a commit's event
    with Ledger.open(path) as ledger:
        for ambiguous in (p for p, v in by_prefix.items() if len(v) > 1):
            with pytest.raises(AmbiguousId):
                ledger.get(ambiguous)
    commits = subprocess.run(
        ["git", "rev-list", "refs/heads/ledger"],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for ambiguous in (p for p, v in by_prefix.items() if len(v) > 1):
        if sum(c.startswith(ambiguous) for c in commits) == 1:  # the case that was misread
            misread = cli("--ledger", path, "show", ambiguous)
            assert misread.returncode == 2 and "ambiguous" in misread.stderr
    error = _assert_json_error(
        cli("--ledger", path, "--json", "show", prefix), parse_json, "bad_request"
    )
    assert "ambiguous" in error["message"]
    unique = next(
        clash[0][:n] for n in range(5, 65) if sum(i.startswith(clash[0][:n]) for i in ids) == 1
    )
    shown = cli("--ledger", path, "show", unique, "--json")
    assert shown.returncode == 0 and parse_json(shown.stdout)["event"]["id"] == clash[0]


@pytest.mark.slow
def test_verify_and_state_agree(
    cli_ledger: CliLedger, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """``verify`` exits 0 and prints the state_hash; ``verify --json`` and ``state --json``
    report the same state_hash and head (git's ``refs/heads/ledger``)."""
    head = git_cli("-C", cli_ledger.path, "rev-parse", "refs/heads/ledger")
    text = cli("--ledger", cli_ledger.path, "verify")
    assert text.returncode == 0
    assert text.stdout.startswith("ok: 4 events, 0 merges verified")
    report = parse_json(cli("--ledger", cli_ledger.path, "verify", "--json").stdout)
    assert report["ok"] is True and report["events"] == 4 and report["merges"] == 0
    assert report["head"] == head and HEX64.match(report["state_hash"])
    assert re.search(rf"^state_hash\s+{report['state_hash']}$", text.stdout, re.M)
    assert re.search(rf"^head\s+{head}$", text.stdout, re.M)
    state = parse_json(cli("--ledger", cli_ledger.path, "state", "--json").stdout)
    assert state["head"] == head
    assert state["state_hash"] == report["state_hash"]
    assert state["state"]["event_count"] == 4 and state["state"]["notes"] == 3
    assert state["state"]["last_event_id"] == cli_ledger.notes[-1]
    cached = parse_json(cli("--ledger", cli_ledger.path, "--json", "state").stdout)
    assert cached == state


# ----------------------------------------------------------------------------- writing


@pytest.mark.slow
def test_note_with_idempotency_key_is_appended_once(
    cli_ledger: CliLedger, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """A repeated ``note --idempotency-key K`` returns the first event's id and appends
    nothing; the same key with another text is a bad request; a new key appends."""
    args = ("--ledger", cli_ledger.path, "note", "retry me", "--idempotency-key", "job-42")
    first = cli(*args, "--json")
    assert first.returncode == 0, first.stderr
    answer = parse_json(first.stdout)
    assert HEX64.match(answer["event_id"]) and answer["lamport"] == 5
    head = git_cli("-C", cli_ledger.path, "rev-parse", "ledger")

    again = cli(*args, "--json")
    assert again.returncode == 0 and parse_json(again.stdout) == answer
    plain = cli(*args)
    assert plain.returncode == 0 and plain.stdout.strip() == answer["event_id"]
    assert git_cli("-C", cli_ledger.path, "rev-parse", "ledger") == head

    clash = cli(
        "--ledger", cli_ledger.path, "--json", "note", "other text", "--idempotency-key", "job-42"
    )
    error = _assert_json_error(clash, parse_json, "bad_request")
    assert "job-42" in error["message"]
    bad_key = cli("--ledger", cli_ledger.path, "note", "x", "--idempotency-key", "has space")
    assert bad_key.returncode == 2
    assert git_cli("-C", cli_ledger.path, "rev-parse", "ledger") == head

    fresh = cli("--ledger", cli_ledger.path, "note", "retry me", "--idempotency-key", "job-43")
    assert fresh.returncode == 0 and fresh.stdout.strip() != answer["event_id"]
    keys = git_cli(
        "-C", cli_ledger.path, "log", "--format=%(trailers:key=Idempotency-Key,valueonly)", "ledger"
    ).split()
    assert keys == ["job-43", "job-42"]
    report = parse_json(cli("--ledger", cli_ledger.path, "verify", "--json").stdout)
    assert report["ok"] is True and report["events"] == 6


# ----------------------------------------------------------------------------- discovery


def _root_of(cli: Cli, parse_json: ParseJson, **kwargs: Any) -> str:
    proc = cli("log", "--json", **kwargs)
    assert proc.returncode == 0, proc.stderr
    return parse_json(proc.stdout)["events"][-1]["event_id"]


@pytest.mark.slow
def test_discovery_order_ledger_flag_then_env_then_cwd(
    tmp_path: Path, cli: Cli, parse_json: ParseJson
) -> None:
    """``--ledger`` wins over ``PERFLEDGER_DIR``, which wins over the repository around the
    current directory; each alone finds its ledger."""
    roots: dict[str, str] = {}
    for name in ("flag", "env", "cwd"):
        with Ledger.init(tmp_path / name) as ledger:
            roots[name] = ledger.log(1)[0].event_id
    inside = tmp_path / "cwd" / "refs"  # a directory inside the bare "cwd" ledger
    env = {"PERFLEDGER_DIR": str(tmp_path / "env")}
    assert _root_of(cli, parse_json, cwd=inside) == roots["cwd"]
    assert _root_of(cli, parse_json, cwd=inside, env=env) == roots["env"]
    proc = cli("--ledger", tmp_path / "flag", "log", "--json", cwd=inside, env=env)
    assert parse_json(proc.stdout)["events"][-1]["event_id"] == roots["flag"]
    # --ledger (a relative path here) wins even when PERFLEDGER_DIR names no ledger.
    broken = {"PERFLEDGER_DIR": str(tmp_path / "nowhere")}
    proc = cli("--ledger", "flag", "log", "--json", cwd=tmp_path, env=broken)
    assert proc.returncode == 0, proc.stderr
    assert parse_json(proc.stdout)["events"][-1]["event_id"] == roots["flag"]


@pytest.mark.slow
def test_discovery_from_a_subdirectory_of_a_working_repository(
    tmp_path: Path, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """``git init`` a normal repository, ``perfledger init`` inside it (no PATH), then run
    commands from a nested subdirectory: they find the repository's ledger."""
    repo = tmp_path / "project"
    git_cli("init", "--quiet", repo)
    proc = cli("init", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    root = parse_json(proc.stdout)["root"]
    assert git_cli("-C", repo, "rev-parse", "--is-bare-repository") == "false"
    assert not (repo / "objects").exists(), "init made a nested bare repository"
    assert (repo / ".git" / "refs" / "heads" / "ledger").exists()

    sub = repo / "src" / "deep"
    sub.mkdir(parents=True)
    assert _root_of(cli, parse_json, cwd=sub) == root
    note = cli("note", "from a subdirectory", "--json", cwd=sub)
    assert note.returncode == 0, note.stderr
    event_id = parse_json(note.stdout)["event_id"]
    trailer = git_cli(
        "-C", repo, "log", "-1", "--format=%(trailers:key=Event-Id,valueonly)", "ledger"
    )
    assert trailer == event_id
    report = parse_json(cli("verify", "--json", cwd=sub).stdout)
    assert report["ok"] is True and report["events"] == 2
    assert git_cli("-C", repo, "status", "--porcelain") == "", "the work tree was touched"


def _not_a_ledger(kind: str, tmp_path: Path, git_cli: Git) -> Path:
    path = tmp_path / kind
    if kind == "plain-dir":
        path.mkdir()
    elif kind == "git-repo":
        git_cli("init", "--quiet", path)
    elif kind == "bare-repo":
        git_cli("init", "--quiet", "--bare", path)
    elif kind == "file":
        path.write_text("not a repository")
    return path


KINDS = ["nonexistent", "plain-dir", "git-repo", "bare-repo", "file"]
COMMANDS = [["log"], ["verify"], ["state"], ["show", "abcd"], ["note", "lost"], ["log", "-n", "1"]]


#: (kind, source) pairs; the current directory can only be an existing directory.
NOT_A_LEDGER = [
    (kind, source)
    for kind in KINDS
    for source in ("flag", "env", "cwd")
    if not (source == "cwd" and kind in ("nonexistent", "file"))
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "source"), NOT_A_LEDGER, ids=[f"{k}-{s}" for k, s in NOT_A_LEDGER]
)
def test_not_a_ledger_exits_2_naming_the_path(
    kind: str, source: str, tmp_path: Path, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """A path that is not a ledger (missing, a plain directory, a git repository without
    refs/heads/ledger, a file), whether given by --ledger, PERFLEDGER_DIR or the current
    directory, is exit 2 with a message naming it; with --json, exactly one error object.
    Nothing is created there."""
    path = _not_a_ledger(kind, tmp_path, git_cli)
    if source == "cwd" and kind == "plain-dir":
        outer = subprocess.run(["git", "-C", path, "rev-parse"], capture_output=True, check=False)
        if outer.returncode == 0:
            pytest.skip(f"{tmp_path} is itself inside a git repository")
    before = _tree_snapshot(path) if path.is_dir() else None
    command = COMMANDS[(KINDS.index(kind) + len(source)) % len(COMMANDS)]
    prefix: list[str | Path] = ["--ledger", path] if source == "flag" else []
    kwargs: dict[str, Any] = {"cwd": path if source == "cwd" else tmp_path}
    if source == "env":
        kwargs["env"] = {"PERFLEDGER_DIR": str(path)}

    if source == "flag" or kind == "plain-dir":  # the text rendering does not depend on source
        text = cli(*prefix, *command, **kwargs)
        assert text.returncode == 2, text.stdout + text.stderr
        assert str(path) in text.stderr
        assert text.stdout == ""

    error = _assert_json_error(
        cli(*prefix, "--json", *command, **kwargs), parse_json, "not_a_ledger"
    )
    assert str(path) in error["message"]
    assert error["rule"] is None and error["hint"]
    if before is not None:
        assert _tree_snapshot(path) == before
    else:
        assert path.is_file() or not path.exists()


# ----------------------------------------------------------------------------- bad input


BAD_ARGV = [
    ["log", "--bogus"],
    ["--bogus", "log"],
    ["log", "-n", "many"],
    ["log", "-n", "-1"],
    ["show"],
    ["note"],
    ["frobnicate"],
    ["verify", "extra"],
    ["note", "x", "--tag"],
    ["init", "--name"],
]


@pytest.mark.parametrize("argv", BAD_ARGV, ids=[" ".join(a) for a in BAD_ARGV])
def test_bad_flags_exit_2_without_traceback(
    argv: list[str], cli_ledger: CliLedger, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """Unknown options, bad values, missing or extra arguments, unknown commands: exit 2 with
    a message on stderr (one JSON error object with --json), and the ledger unchanged."""
    head = git_cli("-C", cli_ledger.path, "rev-parse", "ledger")
    proc = cli("--ledger", cli_ledger.path, *argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip() and proc.stdout == ""
    _assert_json_error(cli("--ledger", cli_ledger.path, "--json", *argv), parse_json, "bad_request")
    assert git_cli("-C", cli_ledger.path, "rev-parse", "ledger") == head


@pytest.mark.slow
def test_integrity_failure_exits_5_with_one_json_object(
    cli_ledger: CliLedger, cli: Cli, git_cli: Git, parse_json: ParseJson
) -> None:
    """A ledger whose newest event commit was re-written with a wrong Lamport trailer fails
    ``verify`` with exit 5; ``--json`` gives the report with its error object."""
    head = git_cli("-C", cli_ledger.path, "rev-parse", "ledger")
    raw = subprocess.run(
        ["git", "-C", cli_ledger.path, "cat-file", "commit", head], capture_output=True, check=True
    ).stdout
    forged = raw.replace(b"\nLamport: 4\n", b"\nLamport: 40\n")
    assert forged != raw
    new = subprocess.run(
        ["git", "-C", cli_ledger.path, "hash-object", "-t", "commit", "-w", "--stdin"],
        input=forged,
        capture_output=True,
        check=True,
    )
    git_cli(
        "-C", cli_ledger.path, "update-ref", "refs/heads/ledger", new.stdout.decode().strip(), head
    )
    text = cli("--ledger", cli_ledger.path, "verify")
    assert text.returncode == 5 and cli_ledger.notes[-1] in text.stderr
    proc = cli("--ledger", cli_ledger.path, "verify", "--json")
    assert proc.returncode == 5
    report = parse_json(proc.stdout)
    assert report["ok"] is False
    assert set(report["error"]) >= ERROR_KEYS | {"event_id"}
    assert report["error"]["code"] == "integrity"
    assert report["error"]["event_id"] == cli_ledger.notes[-1]
