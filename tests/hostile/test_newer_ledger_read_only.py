"""A ledger this perfledger cannot fully read (an event of an unknown kind, or of a schema
version newer than it knows) is read-only for it (SPEC.md section 6, exit 7): every writer
refuses with one message naming the kind and version and what to upgrade, and the head does
not move. The writers are enumerated, not listed: every operation of the registry (through the
CLI and through the MCP tool of the same name), every tool the MCP server lists as a write,
and the library's three ways to append. A control beside each: the same call on a readable
ledger gets past the check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_forge import forge_event, git, run_cli

from perfledger.api import Ledger
from perfledger.commands.mcp import Tools
from perfledger.commands.registry.operations import OPERATIONS
from perfledger.commands.registry.request_examples import example
from perfledger.errors import NewerLedger

NEWER = {"unknown-kind": {"kind": "KindFromTheFuture"}, "newer-schema": {"schema": 99}}


@pytest.fixture(scope="module", params=sorted(NEWER))
def newer(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger whose head event was written by a newer perfledger."""
    path = tmp_path_factory.mktemp("newer") / "ledger"
    Ledger.init(path, name="newer", actor="t").close()
    forge_event(path, **NEWER[request.param])
    return path


def _head(path: Path) -> bytes:
    return git(path, "rev-parse", "refs/heads/ledger")


def _assert_newer_message(text: str) -> None:
    assert "newer perfledger" in text and "upgrade perfledger" in text, text
    assert "KindFromTheFuture" in text or "schema version 99" in text, text


def _cli_commands_taking_a_request() -> dict[str, list[str]]:
    """Operation -> its CLI words, for every operation whose command in the click tree takes
    ``--request`` (the loop's attempt and profile have no command: a measurement records them;
    they are covered by their MCP tool and the library below)."""
    import click

    from perfledger.commands.cli.app import cli

    ctx = click.Context(cli, info_name="perfledger")
    found = {}
    for op, operation in OPERATIONS.items():
        words = [w for w in (operation.group, operation.verb) if w]
        command: click.Command | None = cli
        for word in words:
            assert isinstance(command, click.Group)
            command = command.get_command(ctx, word)
            if command is None:
                break
        if command is not None and any("--request" in p.opts for p in command.params):
            found[op] = words
    return found


@pytest.mark.slow
def test_every_operation_is_refused_through_the_cli_with_exit_7(
    newer: Path, tmp_path: Path
) -> None:
    before = _head(newer)
    commands = _cli_commands_taking_a_request()
    assert len(commands) >= len(OPERATIONS) - 5, sorted(set(OPERATIONS) - set(commands))
    for op, words in sorted(commands.items()):
        request = tmp_path / f"{op}.json"
        request.write_text(json.dumps(example(op)))
        proc = run_cli(tmp_path, "--ledger", newer, *words, "--request", request, "--actor", "a")
        assert proc.returncode == 7, (op, proc.stdout, proc.stderr)
        _assert_newer_message(proc.stderr)
        assert _head(newer) == before, op


def test_every_mcp_write_tool_is_refused(newer: Path) -> None:
    tools = Tools(str(newer), "agent")
    writes = [name for name, _, _ in tools.listing() if name in tools.writes]
    assert len(writes) == len(OPERATIONS)  # every operation has its tool
    before = _head(newer)
    for name in writes:
        with pytest.raises(NewerLedger) as caught:
            tools.call(name, example(tools.writes[name]))
        assert caught.value.exit_code == 7
        _assert_newer_message(caught.value.message + caught.value.hint)
        assert _head(newer) == before, name


def test_the_library_and_note_are_refused(newer: Path, tmp_path: Path) -> None:
    from perfledger.ledger.base import EventDraft

    before = _head(newer)
    note = {"text": "x", "tags": []}
    with Ledger.open(newer) as ledger:
        for write in (
            lambda: ledger.append("NoteRecorded", note, actor="a"),
            lambda: ledger.append_batch([EventDraft("NoteRecorded", note, "a")]),
            lambda: ledger.transact(lambda view: [EventDraft("NoteRecorded", note, "a")]),
        ):
            with pytest.raises(NewerLedger):
                write()
    proc = run_cli(tmp_path, "--ledger", newer, "note", "hello")
    assert proc.returncode == 7, proc.stderr
    _assert_newer_message(proc.stderr)
    assert _head(newer) == before


@pytest.mark.parametrize("command", ["state", "verify", "audit"])
def test_readers_answer_exit_7_not_5(newer: Path, tmp_path: Path, command: str) -> None:
    proc = run_cli(tmp_path, "--ledger", newer, command)
    assert proc.returncode == 7, proc.stdout + proc.stderr
    _assert_newer_message(proc.stdout + proc.stderr)


def test_control_a_readable_ledger_takes_a_note(tmp_path: Path) -> None:
    path = tmp_path / "ok"
    Ledger.init(path, name="ok", actor="t").close()
    forge_event(path)  # a forged but readable event: the check is about versions, not forgery
    assert run_cli(tmp_path, "--ledger", path, "note", "hello").returncode == 0


def test_a_newer_format_version_in_the_config_is_exit_7(tmp_path: Path) -> None:
    path = tmp_path / "fmt"
    Ledger.init(path, name="fmt", actor="t").close()
    git(path, "config", "perfledger.formatVersion", "2")
    for command in (["note", "x"], ["state"]):
        proc = run_cli(tmp_path, "--ledger", path, *command)
        assert proc.returncode == 7, proc.stderr
        assert "format 2" in proc.stderr and "upgrade perfledger" in proc.stderr


@pytest.mark.slow
def test_a_mixed_version_team_pull_sync_clone_refuse_push_waits_gc_works(tmp_path: Path) -> None:
    """docs/sync.md: a remote holding events of a newer perfledger is not pulled (exit 7,
    nothing changes here), so this ledger stays readable and writable; push then waits for the
    pull (exit 4, as for any remote ahead); gc touches no event and runs."""
    remote, local = tmp_path / "remote", tmp_path / "local"
    Ledger.init(remote, name="team", actor="t").close()
    assert run_cli(tmp_path, "clone", remote, local).returncode == 0
    event_id, _ = forge_event(remote, schema=99)
    assert run_cli(tmp_path, "--ledger", local, "note", "mine").returncode == 0
    before = _head(local)
    for command in ("pull", "sync"):
        proc = run_cli(tmp_path, "--ledger", local, command)
        assert proc.returncode == 7, (command, proc.stderr)
        assert event_id in proc.stderr and "nothing was pulled" in proc.stderr
        assert "upgrade perfledger" in proc.stderr
        assert _head(local) == before
    clone = run_cli(tmp_path, "clone", remote, tmp_path / "second")
    assert clone.returncode == 7 and not (tmp_path / "second" / "refs/heads/ledger").exists()
    assert run_cli(tmp_path, "--ledger", local, "push").returncode == 4
    assert run_cli(tmp_path, "--ledger", local, "note", "still mine").returncode == 0
    assert run_cli(tmp_path, "--ledger", local, "gc").returncode == 0
    assert run_cli(tmp_path, "--ledger", local, "verify").returncode == 0
