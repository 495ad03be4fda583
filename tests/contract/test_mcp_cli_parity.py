"""The MCP server's ``cli`` tool answers in this process what ``perfledger ... --json`` answers
in a subprocess (issue: the MCP server calls the application layer in-process): on one scripted
ledger, each command's answer (or error object and exit code) through
:class:`perfledger.commands.mcp.server.Tools` equals the CLI's, the words read by the CLI's own
click command; and no command of the list reaches the subprocess path, which keeps only the
documented :data:`perfledger.commands.mcp.answers.SUBPROCESS` (and ``--help``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
from rm_session import scripted_ledger

from perfledger.app.command_lines import translate_hints
from subprocess_env import isolated_env, perfledger_command

pytest.importorskip("mcp_types", reason="the MCP SDK is the optional extra perfledger[mcp]")

from perfledger.commands.cli.app import cli as cli_group
from perfledger.commands.mcp.answers import ANSWERS, NO_JSON, SUBPROCESS
from perfledger.commands.mcp.server import IN_PROCESS, MEASURES, Tools, _result

#: The scripted session is built through the deciders (seconds): left to `make test`.
pytestmark = pytest.mark.slow

ACTOR = "parity-agent"

#: Commands answered alike (reads, dry runs and refusals: nothing appended by either caller).
COMMANDS: list[list[str]] = [
    ["log"], ["log", "-n", "3"], ["log", "--ledger", "{tmp}/ledger"], ["--ledger={tmp}/ledger", "state"], ["show", "HEAD"], ["state"], ["verify"], ["status"],
    ["status", "--target", "t1"], ["claims"], ["claims", "--target", "t1"], ["rejected"],
    ["champion", "show"], ["champion", "show", "t1"], ["champion", "lineage", "t1"],
    ["target", "show"], ["target", "show", "t1"], ["experiment", "list"],
    ["experiment", "show", "e1"], ["verdict", "explain", "e1-target"], ["evidence", "list"],
    ["evidence", "show", "ev-ncu"], ["review", "list"], ["artifact", "list", "HEAD"],
    ["remote", "list"], ["schema"], ["schema", "experiment.create"],
    ["schema", "reject", "--example"], ["handoff"], ["handoff", "--md"], ["resume"],
    ["gc", "--dry-run"], ["audit", "--full"],
    ["handoff", "record", "--dry-run", "--gpu-used", "0", "--stop-reason", "done",
     "--feedback", "none"],
    ["reject", "--dry-run"], ["experiment", "create", "--dry-run", "--target", "t1"],
    ["conflict", "resolve", "--dry-run", "--conflict", "nope", "--keep", "a", "--reason", "r"],
    ["checkpoint", "list"], ["skill", "install", "{tmp}/skill"],
    ["report", "--html", "{tmp}/r.html"],
    ["knowledge", "check"], ["knowledge", "show", "ampere.cp_async"], ["knowledge", "query"],
    ["knowledge", "query", "--phenomenon", "x"],
    # refusals: the CLI's error object and exit code
    ["loop", "state", "--run", "nope"], ["push"], ["pull"], ["sync"],
    ["clone", "/nonexistent/l", "{tmp}/clone"], ["evidence", "add", "--kind", "ncu"],
    ["evidence", "add", "--kind", "ncu", "/nonexistent/r.csv", "--evidence-id", "x"],
    ["triage", "/nonexistent/t.json"], ["review", "record", "--dry-run"],
    ["review", "record", "--dry-run", "--sign-with", "/nonexistent/key"],
    ["loop", "setup", "--baseline", "/nonexistent/k.cu", "--ref", "/nonexistent/r.py", "--dims", "{"],
    # commands that take no --json: the CLI's refusal of it
    ["skill", "--print"], ["review", "content", "--request", "-"], ["loop", "summary", "--run", "r"],
    ["loop", "propose", "--run", "r", "--iter", "1"],
    ["remote", "remove", "nope"], ["checkout", "nope", "{tmp}/out"],
    ["attest", "e1", "--key", "/nonexistent/key"], ["artifact", "get", "HEAD", "x"],
    ["verify-attestation", "/nonexistent/a.json", "--signers", "/nonexistent/s"],
    ["checkpoint", "sign", "--key", "/nonexistent/key"], ["report", "--html", "/nonexistent/r.html"],
    ["show", "nope"], ["claims", "--bogus"], ["nosuch"], ["champion", "show", "nope"],
    ["log", "-n", "x"], ["experiment", "show"], ["champion"],
]  # fmt: skip
#: Fields whose value is a wall time: different on every run.
VOLATILE = {"elapsed_s", "seconds"}


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    ledger = scripted_ledger(tmp_path_factory.mktemp("parity") / "ledger")
    home = tmp_path_factory.mktemp("home")
    return ledger, {**isolated_env(home), "PERFLEDGER_ACTOR": ACTOR}


def _masked(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: "<volatile>" if k in VOLATILE else _masked(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_masked(v) for v in data]
    return data


def _cli(setting: tuple[Path, dict[str, str]], args: list[str], stdin: str = "") -> Any:
    """``perfledger --ledger L ARGS --json``'s answer (an error object with its exit code)."""
    ledger, env = setting
    done = subprocess.run([*perfledger_command(), "--ledger", str(ledger), *args, "--json"],
                          env=env, input=stdin, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    try:
        answer = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        answer = {"output": done.stdout}
    if done.returncode != 0:
        answer["error"]["exit_code"] = done.returncode
    return translate_hints(answer)


def _mcp(setting: tuple[Path, dict[str, str]], args: list[str], stdin: str | None = None) -> Any:
    """The ``cli`` tool's answer in this process; the subprocess path fails the test."""
    tools = Tools(str(setting[0]), ACTOR, cli_group)

    def no_subprocess(*_: Any) -> Any:
        raise AssertionError(f"cli {args} ran a subprocess")

    tools._subprocess = no_subprocess  # type: ignore[method-assign]
    arguments: dict[str, Any] = {"args": args}
    if stdin is not None:
        arguments["stdin"] = stdin
    answer, _is_error = _result(tools, "cli", arguments)
    return answer


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_the_cli_tool_answers_in_process_what_the_cli_answers(
    setting: tuple[Path, dict[str, str]], args: list[str]
) -> None:
    words = [w.replace("{tmp}", str(setting[0].parent)) for w in args]  # files either writes
    assert _masked(_mcp(setting, words)) == _masked(_cli(setting, words))


def _paths(command: click.Command, path: tuple[str, ...]) -> list[tuple[str, ...]]:
    if not isinstance(command, click.Group):
        return [path]
    ctx = click.Context(command)
    found = [path] if command.invoke_without_command and path else []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        assert sub is not None
        found += _paths(sub, (*path, name))
    return found


def test_only_the_documented_commands_run_as_a_subprocess() -> None:
    """Every command of the CLI is answered in this process (:data:`ANSWERS`, the server's
    ``IN_PROCESS`` and ``MEASURES``) or listed, with its reason, in :data:`SUBPROCESS`."""
    in_process = {*ANSWERS, *IN_PROCESS, *NO_JSON, *(("measure", name) for name in MEASURES)}
    left = {p for p in _paths(cli_group, ()) if p not in in_process}
    assert left == set(SUBPROCESS)
    assert all(SUBPROCESS.values()) and all(NO_JSON.values())
    assert not set(NO_JSON) & set(ANSWERS)  # refused before any answer: none is written


@pytest.mark.parametrize(
    "stdin", ["{}", '{"experiment_id": "e1"}', "not json", '{"experiment_id": "e3", "reason": "r"}']
)
def test_a_request_on_stdin_is_read_from_the_tools_stdin_as_the_cli_reads_its_own(
    setting: tuple[Path, dict[str, str]], stdin: str
) -> None:
    args = ["reject", "--request", "-", "--dry-run"]
    assert _mcp(setting, args, stdin) == _cli(setting, args, stdin)
