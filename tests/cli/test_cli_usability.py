"""Smaller things a new user stumbled on, through the real console script:
``perfledger schema`` without an operation lists the operations, every ``--actor`` help
states the same default, and ``init --actor`` is remembered as the clone's default actor."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import click
import pytest


@pytest.mark.slow
def test_schema_without_operation_lists_the_operations(cli: Any) -> None:
    done = cli("schema")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("operations (perfledger schema OPERATION")
    assert "  experiment.create" in done.stdout and "  verdict.record" in done.stdout
    listed = json.loads(cli("schema", "--json").stdout)["operations"]
    assert "target.freeze" in listed and listed == sorted(listed)
    assert cli("schema", "verdict.record").stdout.lstrip().startswith("{")


@pytest.mark.parametrize(
    "command",
    [("init",), ("note",), ("target", "freeze"), ("handoff", "record"), ("measure", "aa"),
     ("evidence", "add"), ("resolve",), ("triage",), ("mcp",), ("loop", "setup")],
)  # fmt: skip
@pytest.mark.slow
def test_actor_help_states_one_default(cli: Any, command: tuple[str, ...]) -> None:
    text = " ".join(cli(*command, "--help").stdout.split())
    assert (
        "(default: $PERFLEDGER_ACTOR, else the clone's perfledger.actor set by `init --actor`, "
        "else $USER, else $LOGNAME, else this process's user; an empty name is refused)"
    ) in text


def _commands() -> list[tuple[str, click.Command]]:
    """Every command and subgroup of the CLI (lazily loaded ones included, not the top group),
    by its path."""
    from perfledger.commands.cli.app import cli as root

    found: list[tuple[str, click.Command]] = []

    def walk(command: click.Command, path: str, ctx: click.Context) -> None:
        if path:
            found.append((path, command))
        if not isinstance(command, click.Group):
            return
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            assert sub is not None, name
            walk(sub, f"{path} {name}".strip(), click.Context(sub, parent=ctx, info_name=name))

    walk(root, "", click.Context(root, info_name="perfledger"))
    return found


def _option(command: click.Command, flag: str) -> click.Option | None:
    return next((p for p in command.params if isinstance(p, click.Option) and flag in p.opts), None)


def test_every_writing_command_declares_actor_and_idempotency_key_the_same_way() -> None:
    from perfledger.commands.cli.common import ACTOR_HELP, IDEMPOTENCY_HELP

    actors = idempotent = 0
    for path, command in _commands():
        actor = _option(command, "--actor")
        key = _option(command, "--idempotency-key")
        if key is not None:
            idempotent += 1
            assert actor is not None, f"{path}: --idempotency-key without --actor"
            assert key.help == IDEMPOTENCY_HELP, path
            assert (key.default, key.envvar, key.required, key.opts) == (
                None, None, False, ["--idempotency-key"]), path  # fmt: skip
        if actor is not None:
            actors += 1
            assert actor.help is not None and actor.help.startswith(ACTOR_HELP), path
            assert (actor.default, actor.envvar, actor.required, actor.opts) == (
                None, None, False, ["--actor"]), path  # fmt: skip
    # Every write operation, the measure commands and a few others: not a walk that found none.
    assert actors >= 30 and idempotent >= 25, (actors, idempotent)


def _config_actor(ledger: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", ledger, "config", "perfledger.actor"],
                          capture_output=True, text=True, env=env)  # fmt: skip


@pytest.mark.slow
def test_init_actor_is_remembered_as_the_default_actor(
    cli: Any, cli_env: dict[str, str], tmp_path: Any
) -> None:
    """`init --actor` writes perfledger.actor to the clone's config; later commands that name
    no actor use it, before $USER; $PERFLEDGER_ACTOR and --actor still win."""
    ledger = str(tmp_path / "ledger")
    env = {**cli_env, "USER": ""}  # an empty $USER, as on the new user's machine
    assert cli("init", ledger, "--actor", "Jane Doe", env=env).returncode == 0
    assert _config_actor(ledger, env).stdout.strip() == "Jane Doe"
    env["PERFLEDGER_DIR"] = ledger
    assert cli("note", "remembered", env=env).returncode == 0
    assert cli("note", "still remembered", env={**env, "USER": "someone-else"}).returncode == 0
    assert cli("note", "named", "--actor", "bot-1", env=env).returncode == 0
    assert (
        cli("note", "from the environment", env={**env, "PERFLEDGER_ACTOR": "agent-2"}).returncode
        == 0
    )
    actors = [e["actor"] for e in json.loads(cli("log", "--json", env=env).stdout)["events"]]
    assert actors == ["agent-2", "bot-1", "Jane Doe", "Jane Doe", "Jane Doe"]


def test_init_without_actor_remembers_nothing(
    cli: Any, cli_env: dict[str, str], tmp_path: Any
) -> None:
    ledger = str(tmp_path / "ledger")
    assert cli("init", ledger, env=cli_env).returncode == 0
    got = _config_actor(ledger, cli_env)
    assert got.returncode == 1 and got.stdout == ""


def test_rate_is_shown_only_where_it_means_something() -> None:
    from perfledger.commands.cli.common import RATE_MIN_EVENTS, rate_text

    assert rate_text(22, 5.31) == ""  # a tiny ledger: the time is start-up, not the ledger
    assert rate_text(RATE_MIN_EVENTS, 0.5) == " (2,000 events/s)"
    assert rate_text(5_000, 0.0) == ""


@pytest.mark.slow
def test_dry_run_decides_and_appends_nothing(
    cli: Any, cli_env: dict[str, str], tmp_path: Any
) -> None:
    """`--dry-run` validates and decides on the current head: the event it would append, or
    the refusal (exit 3) a real run would get; the ledger head never moves."""
    from pathlib import Path

    requests = Path(__file__).resolve().parents[2] / "examples" / "requests"
    ledger = str(tmp_path / "ledger")
    assert cli("init", ledger).returncode == 0
    env = {**cli_env, "PERFLEDGER_DIR": ledger}

    def head() -> str:
        return json.loads(cli("log", "-n", "1", "--json", env=env).stdout)["events"][0]["commit"]

    before = head()
    freeze = str(requests / "01-target.freeze.json")
    done = cli("target", "freeze", "--request", freeze, "--dry-run", "--json", env=env)
    answer = json.loads(done.stdout)
    assert done.returncode == 0 and answer["dry_run"] and not answer["appended"]
    assert [e["kind"] for e in answer["events"]] == ["TargetFrozen"]
    assert head() == before
    refused = cli("readiness", "record", "--request", str(requests / "03-readiness.record.json"),
                  "--dry-run", "--json", env=env)  # fmt: skip
    assert refused.returncode == 3 and json.loads(refused.stdout)["error"]["rule"] == "R1"
    assert head() == before
    real = cli("target", "freeze", "--request", freeze, "--json", env=env)
    assert (
        real.returncode == 0
        and json.loads(real.stdout)["payload"] == answer["events"][0]["payload"]
    )


@pytest.mark.slow
def test_dry_run_with_a_used_idempotency_key_names_the_existing_event(
    cli: Any, cli_env: dict[str, str], tmp_path: Any
) -> None:
    """A real retry with a used key returns the first event; its dry run says so (it used to
    be refused as a duplicate)."""
    from pathlib import Path

    freeze = str(
        Path(__file__).resolve().parents[2] / "examples" / "requests" / "01-target.freeze.json"
    )
    ledger = str(tmp_path / "ledger")
    assert cli("init", ledger).returncode == 0
    env = {**cli_env, "PERFLEDGER_DIR": ledger}
    first = json.loads(cli("target", "freeze", "--request", freeze, "--idempotency-key", "k1",
                           "--json", env=env).stdout)  # fmt: skip
    dry = cli("target", "freeze", "--request", freeze, "--idempotency-key", "k1", "--dry-run",
              "--json", env=env)  # fmt: skip
    assert dry.returncode == 0, dry.stdout
    assert json.loads(dry.stdout)["events"][0]["existing_event_id"] == first["event_id"]


def test_a_write_without_request_says_to_pass_one(cli: Any, cli_env: dict[str, str],
                                                  tmp_path: Any) -> None:  # fmt: skip
    ledger = str(tmp_path / "ledger")
    assert cli("init", ledger).returncode == 0
    done = cli("--ledger", ledger, "target", "freeze", "--json")
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 2 and error["message"].startswith("no --request given")
    assert "--request FILE" in error["hint"]


@pytest.mark.slow
def test_init_with_a_bad_or_empty_actor_creates_nothing(cli: Any, tmp_path: Any) -> None:
    for actor in ("bad\nname", "", "x" * 5000):
        path = tmp_path / f"ledger-{len(actor)}"
        done = cli("init", str(path), "--actor", actor, "--json")
        error = json.loads(done.stdout)["error"]
        assert done.returncode == 2 and len(error["message"]) < 300, error
        assert not path.exists()


def test_every_command_declares_json_the_same_way() -> None:
    from perfledger.commands.cli.common import JSON_HELP

    answering = 0
    for path, command in _commands():
        option = _option(command, "--json")
        if option is not None:
            answering += 1
            assert (option.name, option.is_flag, option.help) == ("json_flag", True, JSON_HELP), (
                path
            )
    assert answering >= 60, answering  # nearly every command answers in JSON


#: Commands that read a request and decide nothing (no --dry-run): ``review content`` prints the
#: bytes a reviewer signs.
PRINTS_ONLY = {"review content"}


def test_every_command_taking_a_request_declares_request_and_dry_run_the_same_way() -> None:
    from perfledger.commands.cli.common import DRY_RUN_HELP
    from perfledger.commands.registry.operations import OPERATIONS

    deciding = 0
    for path, command in _commands():
        request = _option(command, "--request")
        if request is None:
            continue
        deciding += 1
        schema = re.fullmatch(
            r"The closed JSON request \(a file, or - for stdin; schema: `perfledger schema "
            r"([a-z.-]+)`\)(; .+)?\.",
            request.help or "",
        )
        assert schema is not None and schema.group(1) in OPERATIONS, (path, request.help)
        assert (request.name, request.metavar) == ("request_source", "FILE|-"), path
        if path in PRINTS_ONLY:
            continue
        dry_run = _option(command, "--dry-run")
        assert dry_run is not None and dry_run.help == DRY_RUN_HELP, path
        target = _option(command, "--target")
        if target is not None and path != "handoff record":  # handoff: the Target it derives
            assert target.help == "The Target id (sets target_id).", path
    assert deciding >= 20, deciding


@pytest.mark.parametrize("flag", ["--target", "--case", "--timeout-s", "--quiet"])
def test_measure_commands_that_run_the_targets_calls_declare_their_options_the_same_way(
    flag: str,
) -> None:
    commands = dict(_commands())
    declared = set()
    found = 0
    for path in ("measure aa", "measure baseline", "measure workload"):
        option = _option(commands[path], flag)
        if option is not None:  # workload takes no --target: the experiment names it
            found += 1
            declared.add((option.name, option.help, option.default, option.required,
                          option.multiple, repr(option.type)))  # fmt: skip
    assert found >= 2 and len(declared) == 1, declared


def test_aa_output_says_a_resolution_below_every_case_is_the_geomeans_noise() -> None:
    """The trial's A/A: 1.32 % overall below every case's (2.5, 2.6, 5.7 %) looked like a
    contradiction; the output's line says the overall one is the noise of the geometric mean
    over cases (docs/verdicts.md, "Resolution per case"). Control: where the overall one is the
    largest case's (a kernel spec, ``every_case``), it says that instead."""
    from perfledger.commands.cli.measure import aa_overall_line

    trial = {"large": 0.02504, "medium": 0.02556, "small": 0.05663}
    line = aa_overall_line(0.01318, trial, "geomean")
    assert "the noise of the geometric mean over cases" in line
    assert "each case's verdict uses its own" in line
    assert "largest case's" in aa_overall_line(0.05663, trial, "every_case")
    assert "largest case's" in aa_overall_line(0.05663, trial, None)  # a kernel spec
    # a second trial: 6.424 % between its cases' 5.525 % and 10.374 % was called "the largest
    # case's"; the aggregate's noise need not equal any case's
    between = aa_overall_line(0.06424, {"medium": 0.05525, "small": 0.10374}, "geomean")
    assert "the noise of the geometric mean over cases" in between
    assert "largest" not in between


def test_an_option_a_command_does_not_take_is_answered_with_the_options_it_takes(
    cli: Any,
) -> None:
    """A trial agent guessed ``report --output FILE`` and was told only to read ``perfledger
    COMMAND --help``: the hint now names the command and the options it takes."""
    out = cli("report", "--output", "x")
    assert out.returncode == 2
    assert "No such option '--output'" in out.stderr
    assert "perfledger report takes --html, --json, --target;" in out.stderr
    assert "`perfledger report --help`" in out.stderr
    unknown = cli("frobnicate")
    assert unknown.returncode == 2 and "`perfledger --help`" in unknown.stderr
