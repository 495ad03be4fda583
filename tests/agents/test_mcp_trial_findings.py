"""What a new agent driving a CPU session through ``perfledger mcp`` alone needed to be told:
the R4 A/A refusal's figures and next steps, the driver's contract in the server's instructions
and the readiness schema, shell hints translated to tool calls, and descriptions on every read
tool's field."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from wf_scenario import CAND1

from perfledger.app.aa import resolution_refusal
from perfledger.errors import RuleRefused
from perfledger.events.workflow import Budget, MetricSpec, TargetDefinition


def _target(name: str = "wall_ms", unit: str = "ms") -> SimpleNamespace:
    """A Target view with what the refusal reads: its definition (minimum effect 5 %)."""
    definition = TargetDefinition(
        target_id="t1", title="t", min_effect=0.05, scope=("src/**",), risk_boundary="none",
        primary=MetricSpec(name=name, unit=unit, direction="lower_is_better"),
        budget=Budget(wall_s=60.0, gpu_s=0.0),
    )  # fmt: skip
    return SimpleNamespace(definition=definition)


def test_aa_refusal_states_runs_default_units_per_case_and_a_load_immune_metric() -> None:
    """R4: the refusal gives the resolution per case in percent and as the recorded ratio, says
    what --runs counts and its default, and on a loaded host with a wall-clock primary names the
    process's CPU time, and no readiness flag (R17: a typed flag waives nothing)."""
    with pytest.raises(RuleRefused) as refused:
        resolution_refusal(0.08, {"small": 0.08, "large": 0.03}, _target(), False,
                           runs=None, workload=True, load_per_cpu=2.0)  # fmt: skip
    exc = refused.value
    assert exc.rule == "R4"
    assert "8.00 % (ratio 0.0800" in exc.message and "small 8.00 % (ratio 0.0800)" in exc.message
    assert "large 3.00 % (ratio 0.0300)" in exc.message and "(ratio 0.0500)" in exc.message
    assert "A/A ABBA pairs per case; default: a stopping rule from 10" in exc.hint
    assert "--accept-resolution" in exc.hint
    # how many runs: the CI's width falls as 1/sqrt(runs); 10 runs at 8 % -> half of 5 % needs 103
    assert "about --runs 103 would bring this spread to half the minimum effect" in exc.hint
    assert "CPU time" in exc.hint and "allow_explained_foreign_activity" not in exc.hint
    # a quiet host, or a CPU-time primary: no metric advice; a kernel spec: its own default
    for target, load in ((_target(), 0.0), (_target("cpu_ms"), 2.0)):
        with pytest.raises(RuleRefused) as quiet:
            resolution_refusal(0.08, {"a": 0.08}, target, False, load_per_cpu=load)
        assert "CPU time" not in quiet.value.hint
    with pytest.raises(RuleRefused) as kernel:
        resolution_refusal(0.08, {"a": 0.08}, _target(), False, runs=7, workload=False)
    assert "comparisons per case; default 5, this A/A used 7" in kernel.value.hint
    resolution_refusal(0.04, {"a": 0.04}, _target(), False)  # below the minimum effect: no refusal
    resolution_refusal(0.08, {"a": 0.08}, _target(), True)  # --accept-resolution


def test_mcp_instructions_and_readiness_schema_state_the_driver_contract_and_output_formats() -> (
    None
):
    """The driver's contract (the worker protocol) and the {output} formats (with what exact and allclose
    compare) are where an MCP-only agent looks: the server's instructions and the readiness
    request's driver and accuracy descriptions; the instructions name the host monitor for a CPU
    workload's formal stages, and another actor's review (never a typed text) as what explains
    foreign activity (R17)."""
    from perfledger.commands.mcp import INSTRUCTIONS
    from perfledger.commands.registry.operations import json_schema

    contract = "perfledger.subject.serve(setup, call)"  # the worker protocol (R5, issue 34)
    formats = (".npy", ".npz", "JSON", "exact = same shape, dtype and values", "allclose")
    properties = json_schema("readiness.record")["properties"]
    for text in (INSTRUCTIONS, properties["driver"]["description"]):
        assert contract in text and "$PERFLEDGER_CASE" in text and "wall_time" in text
        assert '"correct": bool' not in text  # the self-timed driver's: it decides nothing
    for text in (INSTRUCTIONS, properties["accuracy"]["description"]):
        assert all(f in text for f in formats) and "atol + rtol * |ref|" in text
    assert '"--monitor", "host"' in INSTRUCTIONS and '"--explain-foreign"' not in INSTRUCTIONS
    assert "review_record" in INSTRUCTIONS and "activity_explain" in INSTRUCTIONS


def test_mcp_answers_name_the_tool_call_beside_each_shell_command() -> None:
    """A hint, warning or message quoting a perfledger command gets the tool call beside it
    (write tools with their flags as fields, read models as read tools, the rest as the cli
    tool); a verdict's record command gets record_mcp; recorded payloads are not touched."""
    from perfledger.commands.mcp import tool_call, translate_hints

    assert tool_call("perfledger verdict record --samples e1-screen-1") == (
        'verdict_record {"samples_id": "e1-screen-1"}'
    )
    assert tool_call("perfledger activity explain --samples ID --request -") == (
        'activity_explain {"samples_id": "ID", ...the request\'s fields}'
    )
    assert tool_call("perfledger status") == "status {}"
    assert tool_call("perfledger champion show t1") == 'champion {"target_id": "t1"}'
    assert tool_call("perfledger measure aa --target T --cmd CMD --record") == (
        'cli {"args": ["measure", "aa", "--target", "T", "--cmd", "CMD", "--record"]}'
    )
    assert tool_call("perfledger --ledger L mcp") is None  # starting a server is no tool call
    assert tool_call("git status") is None and tool_call("perfledger 'unclosed") is None
    answer = {
        "error": {"hint": "`perfledger status` lists them", "rule": None},
        "warnings": ["explain it: `perfledger activity explain --samples S --request -` with"],
        "explanation": {"record": "perfledger verdict record --samples S"},
        "events": [{"payload": {"notes": "`perfledger status`"}}],
    }
    out = translate_hints(answer)
    assert out["error"]["hint"] == "`perfledger status` (MCP: `status {}`) lists them"
    assert '(MCP: `activity_explain {"samples_id": "S", ' in out["warnings"][0]
    assert out["explanation"]["record"] == "perfledger verdict record --samples S"
    assert out["explanation"]["record_mcp"] == 'verdict_record {"samples_id": "S"}'
    assert out["events"] == answer["events"]
    # status's next step names its recommended command, and the tool form beside it
    step = translate_hints({"command": "perfledger measure baseline --target t1 --cmd CMD"})
    assert step["command_mcp"] == (
        'cli {"args": ["measure", "baseline", "--target", "t1", "--cmd", "CMD"]}'
    )


def test_r6_refusal_of_a_claim_without_coverage_evidence_names_the_used_for_values() -> None:
    """R6: a numeric claim whose evidence backs local_speedup but not coverage is refused, and
    the hint says each figure needs its own cited entry with a matching used_for, and the
    values used_for takes."""
    from perfledger.commands.workflow.rules import r6_bound_inputs

    with pytest.raises(RuleRefused) as refused:
        r6_bound_inputs([("ev1", "same_boundary", "local_speedup")], tail=False)
    assert refused.value.rule == "R6" and "claim's coverage" in refused.value.message
    hint = refused.value.hint
    assert '"used_for": "coverage"' in hint and "coverage and local_speedup" in hint
    assert all(v in hint for v in ("added_cost", "exposure", "context", "conservative_upper"))
    r6_bound_inputs(  # both backed: accepted
        [("ev1", "same_boundary", "local_speedup"), ("ev2", "same_boundary", "coverage")],
        tail=False,
    )


def test_every_read_tool_field_has_a_description_and_schema_takes_a_tool_name(
    tmp_path: Path,
) -> None:
    """The read tools' fields (target_id, markdown, operation, args, stdin) carry descriptions,
    and the schema tool answers for a tool name as for an operation name."""
    from perfledger.commands.mcp import READ_TOOLS, Tools

    for name, (_text, schema) in READ_TOOLS.items():
        for field, spec in schema["properties"].items():
            assert spec.get("description"), f"{name}.{field} has no description"
    tools = Tools(str(tmp_path), "agent")
    assert tools.call("schema", {"operation": "experiment_create"}) == tools.call(
        "schema", {"operation": "experiment.create"}
    )


def test_content_hash_descriptions_say_what_to_hash_and_what_binds_the_code() -> None:
    """original.content_hash says what to hash, that perfledger does not recompute it, and that
    the snapshot binds the code (R11); candidate.content_hash says perfledger computes it from
    candidate.subject where the Target is bound to code, and is declared elsewhere."""
    from perfledger.commands.registry.operations import json_schema

    original = json_schema("readiness.record")["$defs"]["Original"]["properties"]
    candidate = json_schema("experiment.create")["$defs"]["Candidate"]["properties"]
    text = original["content_hash"]["description"]
    assert "does not recompute it" in text and "snapshot" in text and "R11" in text
    text = candidate["content_hash"]["description"]
    assert "perfledger computes it from candidate.subject" in text and "declared" in text
    assert "snapshots every file" in candidate["subject"]["description"]


def test_a_second_verdict_on_the_same_samples_is_refused_by_r12_with_where_to_read_it(
    ready: Any,
) -> None:
    """R12: the verdict of samples is derived once; recording it again is refused with the
    rule and a hint naming how to read the recorded one, and nothing is appended."""
    ready.passed("e1", CAND1, gain=0.2)
    head = ready.ledger.head()
    with pytest.raises(RuleRefused) as refused:
        ready.run("verdict.record", {"samples_id": "e1-target"})
    assert refused.value.rule == "R12" and "already recorded" in refused.value.message
    assert "`perfledger verdict explain e1-target`" in refused.value.hint
    assert ready.ledger.head() == head


def test_init_through_the_cli_tool_says_it_made_a_bare_ledger_and_where(tmp_path: Path) -> None:
    """``cli ["init"]`` (in the server's process) answers with what it made of the server's ledger
    path: a bare git repository holding the ledger, acted on by this server's tools."""
    from perfledger.commands.mcp import Tools

    path = tmp_path / "ledger"
    from perfledger.commands.cli.app import cli

    answer = Tools(str(path), "agent", cli).call("cli", {"args": ["init"]})
    assert answer["path"] == str(path)
    assert answer["message"].startswith(f"made {path} a perfledger ledger: a bare git repository")
    assert "this server's tools act on it" in answer["message"]
    assert (path / "HEAD").is_file() and not (path / ".git").exists()


def test_a_server_started_beside_files_says_to_init_a_new_directory_and_then_acts_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second trial: the server was started in a directory holding the agent's code; `status`
    said to run ``init`` there, which refuses a directory that is not empty, and the ledger made
    in a new directory was not the one the server acted on."""
    from perfledger.commands.mcp import Tools
    from perfledger.errors import PerfledgerError

    (tmp_path / "work.py").write_text("print('code')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PERFLEDGER_DIR", raising=False)
    from perfledger.commands.cli.app import cli

    tools = Tools(None, "agent", cli)
    with pytest.raises(PerfledgerError) as refused:
        tools.call("status", {})
    assert '["init", "ledger"]' in (refused.value.hint or "")
    answer = tools.call("cli", {"args": ["init", "ledger"]})
    assert "this server's tools act on it" in answer["message"]
    assert tools.call("status", {})["targets"] == []
