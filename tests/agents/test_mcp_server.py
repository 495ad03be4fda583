"""``perfledger mcp`` driven by the MCP SDK's own client over stdio (a real subprocess, a real
ledger): list the tools, run a session's decisions, get a refusal as a tool error carrying its
rule and hint, read the status and the handoff, and run the audit through the ``cli`` tool."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is the optional extra perfledger[mcp]")

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from wf_scenario import (
    CAND1,
    T1,
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    record_measured_aa,
    record_measured_baseline,
    resolution,
    samples,
    target_freeze,
)

from perfledger.api import Ledger


def _answer(result: Any) -> Any:
    """The JSON answer of a tool call (its text content, which equals the structured one)."""
    text = result.content[0].text
    data = json.loads(text)
    assert result.structured_content == data
    return data


async def _session(ledger: Path, steps: Any) -> Any:
    env = {**os.environ, "PERFLEDGER_ACTOR": "mcp-agent"}
    env.pop("PERFLEDGER_DIR", None)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "perfledger", "--ledger", str(ledger), "mcp"],
        env=env,
    )  # fmt: skip
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await steps(session)


@pytest.mark.slow
def test_mcp_server_lists_tools_runs_decisions_and_refuses_with_the_rule(tmp_path: Path) -> None:
    Ledger.init(tmp_path / "ledger", name="mcp", actor="setup").close()

    async def steps(session: ClientSession) -> dict[str, Any]:
        out: dict[str, Any] = {}
        listed = await session.list_tools()
        out["tools"] = {t.name: t for t in listed.tools}
        call = session.call_tool
        out["freeze"] = _answer(await call("target_freeze", target_freeze()))
        for tool, body in (
            ("evidence_add", evidence()), ("readiness_record", readiness()),
            ("metric_audit_record", metric_audit()), ("baseline_record", baseline()),
            ("resolution_record", resolution()),
        ):  # fmt: skip
            result = await call(tool, body)
            assert not result.is_error, result.content[0].text
            if tool == "baseline_record":  # R4: declared; what `measure baseline` appends
                with Ledger.open(tmp_path / "ledger") as ledger:
                    record_measured_baseline(ledger, baseline())
        out["typed_resolution"] = _answer(result)  # R4: recorded as declared, deciding nothing
        with Ledger.open(tmp_path / "ledger") as ledger:  # what `measure aa --record` appends
            record_measured_aa(ledger)
        exp = experiment()
        del exp["claim"]["stated_bound"]  # computed by the tool (R7)
        out["experiment"] = _answer(await call("experiment_create", exp))
        early = await call("champion_select", {"target_id": T1, "samples_id": "e1-target",
                                               "expected_current": "original"})  # fmt: skip
        out["refused"] = (early.is_error, _answer(early))
        bad = await call("target_freeze", {"target_id": "t2"})
        out["bad"] = (bad.is_error, _answer(bad))
        for stage in ("screen", "target"):
            body = samples(f"e1-{stage}", stage, experiment_id="e1", candidate=CAND1, gain=0.2)
            # R5: the Target's primary is observed: its samples are measured (what `measure
            # workload --protocol worker` appends); a typed `samples_record` is refused
            with Ledger.open(tmp_path / "ledger") as ledger:
                Session(ledger).record_measured(body)
            out[stage] = _answer(await call("verdict_record", {"samples_id": f"e1-{stage}"}))
        chosen = await call("champion_select", {"target_id": T1, "samples_id": "e1-target",
                                                "expected_current": "original"})  # fmt: skip
        out["champion"] = _answer(chosen)
        out["status"] = _answer(await call("status", {}))
        out["handoff"] = _answer(await call("handoff", {"markdown": True}))
        out["audit"] = _answer(await call("cli", {"args": ["audit"]}))
        out["unknown"] = (await call("cli", {"args": ["no-such-command"]})).is_error
        out["help"] = _answer(await call("cli", {"args": ["measure", "--help"]}))
        return out

    out = anyio.run(_session, tmp_path / "ledger", steps)
    tools = out["tools"]
    assert {"target_freeze", "experiment_create", "final_audit_record", "status", "state",
            "claims", "champion", "handoff", "cli"} <= set(tools)  # fmt: skip
    assert "min_effect" in tools["target_freeze"].input_schema["properties"]
    assert tools["target_freeze"].input_schema["additionalProperties"] is False

    assert out["freeze"]["kind"] == "TargetFrozen" and out["freeze"]["op"] == "target.freeze"
    assert out["experiment"]["payload"]["figures"]["bound"] == pytest.approx(1 / 0.7)
    is_error, refused = out["refused"]
    assert is_error and refused["error"]["rule"] == "R13" and refused["error"]["exit_code"] == 3
    assert refused["error"]["hint"] is None or isinstance(refused["error"]["hint"], str)
    is_error, bad = out["bad"]
    assert is_error and bad["error"]["code"] == "bad_request" and bad["error"]["exit_code"] == 2
    assert out["screen"]["payload"]["status"] == "inconclusive"  # a screen never passes (R11)
    assert out["typed_resolution"]["payload"]["source"] == "declared"
    assert out["target"]["payload"]["status"] == "pass"
    assert "explanation" in out["target"]
    assert out["champion"]["kind"] == "ChampionSelected"
    assert "workload" in out["help"]["output"]  # a group's --help lists its commands
    (target,) = out["status"]["targets"]
    assert target["champion"] == "e1" and target["final_audit"]["status"] == "none"
    assert "# Handoff: t1" in out["handoff"]["markdown"]
    assert out["audit"]["ok"] is True
    assert out["unknown"] is True

    ledger = Ledger.open(tmp_path / "ledger")
    try:
        actors = {entry.actor for entry in ledger.log(None)}
    finally:
        ledger.close()
    assert "mcp-agent" in actors  # the server's writes carry the actor it was started with


@pytest.mark.slow
def test_mcp_instructions_name_init_and_measure_aa_and_a_missing_ledger_is_made_by_them(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PERFLEDGER_ACTOR": "mcp-agent"}
    env.pop("PERFLEDGER_DIR", None)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "perfledger", "--ledger", "new-ledger", "mcp"],
        env=env, cwd=str(tmp_path),
    )  # fmt: skip

    async def steps() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            out["instructions"] = (await session.initialize()).instructions
            missing = await session.call_tool("status", {})
            out["missing"] = (missing.is_error, _answer(missing))
            out["init"] = _answer(await session.call_tool("cli", {"args": ["init"]}))
            out["status"] = _answer(await session.call_tool("status", {}))
        return out

    out = anyio.run(steps)
    text = out["instructions"]
    assert '`cli` tool, args ["init"]' in text
    assert '["measure", "aa", "--target", T, "--cmd", CMD, "--record"]' in text
    assert text.index("baseline_record") < text.index('"aa"') < text.index("experiment_create")
    is_error, missing = out["missing"]
    assert is_error and missing["error"]["code"] == "not_a_ledger"
    assert '`cli` tool, args ["init"]' in missing["error"]["hint"]
    assert out["init"]["path"] == str(tmp_path / "new-ledger")
    assert [d["op"] for d in out["status"]["next"]] == ["evidence.add", "target.freeze"]
