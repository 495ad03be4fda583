"""One refusal, three callers (issue 33: the CLI and the MCP server are thin adapters over the
application layer): a Python caller of the application function, the CLI (``--json``, a real
subprocess) and the MCP server's tools (:class:`perfledger.commands.mcp.server.Tools`, in this
process) get the same refusal for the same request: its code, message, hint and exit code,
raised once in ``perfledger.app``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from perfledger.app.argv import refuse_evidence_form, refuse_misplaced_ledger
from perfledger.app.command_lines import refuse_unknown_tool, translate_hints
from perfledger.app.event_lookup import ArtifactGet, get_artifact
from perfledger.app.gc import collect_garbage
from perfledger.app.loop import dims_of
from perfledger.app.options import parse_words
from perfledger.app.request_options import measure_request
from perfledger.errors import PerfledgerError
from subprocess_env import isolated_env, perfledger_command

ACTOR = "contract-agent"


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A ledger made by ``perfledger init`` and the isolated environment the CLI runs in."""
    home = tmp_path_factory.mktemp("home")
    env = {**isolated_env(home), "PERFLEDGER_ACTOR": ACTOR}
    ledger = tmp_path_factory.mktemp("ledger")
    done = subprocess.run([*perfledger_command(), "init", str(ledger)], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return ledger, env


def _cli(setting: tuple[Path, dict[str, str]], *args: str) -> dict[str, Any]:
    """The CLI's ``--json`` error object of ``perfledger --ledger L ARGS --json``, with its exit
    code beside it."""
    ledger, env = setting
    done = subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args, "--json"],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    return {**error, "exit_code": done.returncode}


def _mcp(setting: tuple[Path, dict[str, str]], tool: str, arguments: dict[str, Any]) -> Any:
    """The MCP server's error object for one tool call (its ``exit_code`` included)."""
    pytest.importorskip("mcp_types", reason="the MCP SDK is the optional extra perfledger[mcp]")
    from perfledger.commands.cli.app import cli
    from perfledger.commands.mcp.server import Tools, _result

    ledger, _env = setting
    answer, is_error = _result(Tools(str(ledger), ACTOR, cli), tool, arguments)
    assert is_error, answer
    return answer["error"]


def _python(call: Any, *args: Any, **kw: Any) -> dict[str, Any]:
    """The error object of the refusal the application function raises."""
    with pytest.raises(PerfledgerError) as caught:
        call(*args, **kw)
    return {**caught.value.to_json()["error"], "exit_code": caught.value.exit_code}


def _same(
    python: dict[str, Any], cli: dict[str, Any] | None, mcp: dict[str, Any] | None = None
) -> None:
    """The CLI's and the MCP server's refusals are the Python caller's: the same code, rule,
    message, hint and exit code (the MCP server's with the tool form beside each quoted shell
    command, :func:`perfledger.app.command_lines.translate_hints`)."""
    keys = ("code", "rule", "message", "hint", "exit_code")
    assert python["exit_code"] == 2 and python["code"] in {"bad_request", "not_a_ledger"}
    if cli is not None:
        assert {k: cli.get(k) for k in keys} == {k: python.get(k) for k in keys}
    if mcp is not None:
        translated = translate_hints({"error": python})["error"]
        assert {k: mcp.get(k) for k in keys} == {k: translated.get(k) for k in keys}


def _actor(given: str | None) -> str:
    return given or ACTOR


def test_a_bad_unit_of_measure_workload_is_one_refusal_for_python_the_cli_and_mcp(
    setting: tuple[Path, dict[str, str]],
) -> None:
    args = ["--experiment", "e1", "--stage", "screen", "--ref", "a", "--cand", "b", "--unit", "x"]
    python = _python(measure_request, "workload", args, _actor)
    assert python["message"] == "--unit 'x': expected NAME=UNIT"
    _same(python, _cli(setting, "measure", "workload", *args),
          _mcp(setting, "cli", {"args": ["measure", "workload", *args]}))  # fmt: skip


def test_the_removed_explain_foreign_is_one_refusal_for_python_the_cli_and_mcp(
    setting: tuple[Path, dict[str, str]],
) -> None:
    args = ["--ref-url", "http://127.0.0.1:9/v1", "--requests", "r.jsonl",
            "--explain-foreign", "mine"]  # fmt: skip
    python = _python(measure_request, "serving", args, _actor)
    assert python["rule"] == "R17" or "R17" in python["message"]
    _same(python, _cli(setting, "measure", "serving", *args),
          _mcp(setting, "cli", {"args": ["measure", "serving", *args]}))  # fmt: skip


def test_an_option_measure_does_not_take_is_refused_by_the_app_for_mcp_as_for_python(
    setting: tuple[Path, dict[str, str]],
) -> None:
    """The MCP server reads ``cli ["measure", ...]`` with the application layer's parser, not
    the CLI's click commands: the same BadRequest for a Python caller and an MCP client; the
    CLI refuses it with the same exit code and code."""
    args = ["--experiment", "e1", "--stage", "bogus", "--ref", "a", "--cand", "b"]
    python = _python(measure_request, "workload", args, _actor)
    assert "bogus" in python["message"] and python["message"].startswith("perfledger measure")
    _same(python, None, _mcp(setting, "cli", {"args": ["measure", "workload", *args]}))
    cli = _cli(setting, "measure", "workload", *args)
    assert (cli["code"], cli["exit_code"]) == ("bad_request", 2) and "bogus" in cli["message"]


def test_env_with_an_option_it_does_not_take_is_one_refusal_for_python_the_cli_and_mcp(
    setting: tuple[Path, dict[str, str]],
) -> None:
    """The ``cli`` tool's words are read by the CLI's own click command
    (:func:`perfledger.app.options.parse_words`): the CLI's usage error, word for word."""
    from perfledger.commands.cli.app import cli

    python = _python(parse_words, cli, ["env", "--bogus"])
    assert "--bogus" in python["message"]
    _same(python, _cli(setting, "env", "--bogus"),
          _mcp(setting, "cli", {"args": ["env", "--bogus"]}))  # fmt: skip


def test_artifact_get_json_without_output_is_one_refusal_for_python_the_cli_and_mcp(
    setting: tuple[Path, dict[str, str]],
) -> None:
    def never_opened() -> Any:
        raise AssertionError("the refusal comes before the ledger is opened")

    python = _python(get_artifact, ArtifactGet(event="HEAD", name="x", json=True),
                     open_ledger=never_opened)  # fmt: skip
    assert python["message"].startswith("--json needs -o FILE")
    _same(python, _cli(setting, "artifact", "get", "HEAD", "x"),
          _mcp(setting, "cli", {"args": ["artifact", "get", "HEAD", "x"]}))  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "report", "args"),
    [(None, "report.txt", ["report.txt"]), ("ncu", None, ["--kind", "ncu"])],
)
def test_a_mixed_evidence_add_form_is_one_refusal_for_python_the_cli_and_mcp(
    setting: tuple[Path, dict[str, str]], kind: str | None, report: str | None, args: list[str]
) -> None:
    python = _python(refuse_evidence_form, kind, report)
    _same(python, _cli(setting, "evidence", "add", *args),
          _mcp(setting, "cli", {"args": ["evidence", "add", *args]}))  # fmt: skip


def test_loop_dims_that_are_not_a_json_object_are_one_refusal_for_python_and_the_cli(
    setting: tuple[Path, dict[str, str]],
) -> None:
    python = _python(dims_of, "[1]")
    assert python["message"] == "--dims must be a JSON object of integers"
    _same(python, _cli(setting, "loop", "setup", "--baseline", "b", "--ref", "r", "--dims", "[1]"))


def test_an_unknown_tool_is_refused_by_the_app_for_the_mcp_server(
    setting: tuple[Path, dict[str, str]],
) -> None:
    python = _python(refuse_unknown_tool, "nosuch", {"status": None})
    _same(python, None, _mcp(setting, "nosuch", {}))


def test_a_ledger_option_that_took_a_command_is_one_refusal_for_python_and_the_cli(
    setting: tuple[Path, dict[str, str]],
) -> None:
    _, env = setting
    args = ["schema", "--ledger", "experiment.create", "--example"]
    python = _python(refuse_misplaced_ledger, args, ["experiment", "schema"])
    assert python["message"].startswith("--ledger took 'experiment.create' as its path")
    done = subprocess.run([*perfledger_command(), *args, "--json"], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    _same(python, {**json.loads(done.stdout)["error"], "exit_code": done.returncode})


def test_gc_of_a_place_that_is_no_ledger_is_one_refusal_for_python_and_the_cli(
    setting: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    python = _python(collect_garbage, str(tmp_path))
    assert python["code"] == "not_a_ledger"
    _same(python, _cli((tmp_path, setting[1]), "gc"))
