"""A whole CPU session from Target to handoff through ``perfledger mcp`` only (the SDK's stdio
client; measurements through the ``cli`` tool, every decision through its own tool), on the
skill's toy workload under the worker protocol (an observed primary, ``cpu_time``): what an
agent given only the MCP server does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is the optional extra perfledger[mcp]")

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

REF = "python3 work/original/bench.py {output}"
CAND = "python3 work/fast/bench.py {output}"
EXPLAIN = "cpu_time is the kernel's accounting of the subject's own CPU time"


#: The toy workload's two code directories and a ledger: a worker (the worker protocol, as the
#: skill teaches) whose CPU time perfledger reads from the kernel, the Target's primary
#: ``cpu_time``; every output (the sum) is compared with the reference's.
WORKSPACE = """
mkdir -p work/original work/fast
cat > work/original/bench.py <<'EOF'
import json, sys
sys.path.insert(0, sys.path[0])
from perfledger.subject import serve
from work import total
SIZES = {"small": 100_000, "large": 400_000}
def call(data, case, seed, output):
    got = total(data[case])
    with open(output, "w") as out:
        json.dump(got, out)
serve(lambda: {case: list(range(n)) for case, n in SIZES.items()}, call)
EOF
cp work/original/bench.py work/fast/bench.py
printf 'def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n' > work/original/work.py
printf 'def total(xs):\n    return sum(xs)\n' > work/fast/work.py
perfledger init ledger
"""


def _workspace(tmp_path: Path) -> None:
    """The toy workload's two code directories (and a ledger)."""
    block = WORKSPACE
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env, check=True,
                   capture_output=True)  # fmt: skip


async def _ok(session: ClientSession, tool: str, arguments: dict[str, Any]) -> Any:
    result = await session.call_tool(tool, arguments)
    text = result.content[0].text
    assert not result.is_error, f"{tool}: {text}"
    return json.loads(text)


async def _explain_by_review(s: ClientSession, tmp_path: Path, answer: dict[str, Any]) -> None:
    """R17: windows with foreign activity are explained by another actor's review (through the
    `cli` tool as actor ``reviewer``), cited by ``activity_explain``; nothing when none."""
    event_id, samples_id = answer["event_id"], answer["samples_id"]
    pairs = (await _ok(s, "cli", {"args": ["show", event_id]}))["event"]["payload"]["pairs"]
    foreign = [i for i, p in enumerate(pairs) if (p.get("monitor") or {}).get("foreign_activity")]
    if not foreign:
        return
    review = tmp_path / f"review-{samples_id}.json"
    review.write_text(json.dumps({
        "review_id": f"rv-{samples_id}", "reviewer": "reviewer", "model_family": "human",
        "subject": "other", "subject_event": event_id, "challenge": "foreign activity",
        "response": EXPLAIN, "dissent_remains": False}))  # fmt: skip
    await _ok(s, "cli", {"args": ["review", "record", "--actor", "reviewer", "--request",
                                  str(review)]})  # fmt: skip
    await _ok(
        s,
        "activity_explain",
        {
            "samples_id": samples_id,
            "pairs": foreign,
            "explanation": EXPLAIN,
            "review_id": f"rv-{samples_id}",
        },
    )


async def _session(tmp_path: Path) -> dict[str, Any]:
    # `python3` in the workload's commands is this interpreter (its worker imports perfledger)
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PERFLEDGER_ACTOR": "mcp-agent", "PATH": path}
    env.pop("PERFLEDGER_DIR", None)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "perfledger", "--ledger", "ledger", "mcp"], env=env,
        cwd=str(tmp_path),
    )  # fmt: skip
    out: dict[str, Any] = {}
    async with stdio_client(server) as (read_s, write_s), ClientSession(read_s, write_s) as s:
        await s.initialize()
        await _ok(s, "target_freeze", {
            "target_id": "t1", "title": "sum of a list", "min_effect": 0.25, "scope": ["work.py"],
            "primary": {"name": "cpu_time", "unit": "ms", "direction": "lower_is_better",
                        "statistic": "mean"},
            "risk_boundary": "exact result", "budget": {"wall_s": 3600, "gpu_s": 0}})  # fmt: skip
        env_answer = await _ok(s, "cli", {"args": ["env"]})
        await _ok(s, "readiness_record", {
            "target_id": "t1",
            "original": {"content_hash": "sha256:original-code", "subject": "work/original"},
            "test_set": {"hash": "sha256:cases-small-large", "case_count": 2,
                         "cases": ["small", "large"]},
            "accuracy_rule": "the exact integer sum",
            "driver": {"argv": ["python3", "{subject}/bench.py", "{output}"]},
            "accuracy": {"compare": "exact"},
            "environment": env_answer["readiness_environment"],
            "statistics": {"min_pairs_per_case": 5}})  # fmt: skip
        await _ok(s, "metric_audit_record", {
            "target_id": "t1", "metric": "cpu_time", "unit": "ms", "numerator": "one call (ms)",
            "denominator": "one call", "source": "perfledger's worker protocol",
            "reconstructed": False, "matches_target": True})  # fmt: skip
        await _ok(s, "cli", {"args": ["measure", "baseline", "--target", "t1", "--cmd", REF,
                                      "--quiet"]})  # fmt: skip
        # --accept-resolution: a loaded test host's A/A can reach the minimum effect (R4 refuses
        # it otherwise); the session's candidate is far faster than any such resolution
        await _ok(s, "cli", {"args": ["measure", "aa", "--target", "t1", "--cmd", REF,
                                      "--runs", "5", "--record", "--accept-resolution",
                                      "--quiet"]})  # fmt: skip
        await _ok(s, "evidence_add", {
            "evidence_id": "ev", "layer": "workload", "tool": {"name": "cProfile", "version": "3"},
            "facts": [{"name": "share", "value": 1.0, "unit": "ratio"}]})  # fmt: skip
        created = await _ok(s, "experiment_create", {
            "experiment_id": "e1", "target_id": "t1", "title": "builtin sum()",
            "candidate": {"subject": "work/fast"},
            "claim": {"evidence": [
                {"evidence_id": "ev", "applicability": "same_boundary", "used_for": "coverage"},
                {"evidence_id": "ev", "applicability": "conservative_upper_bound",
                 "used_for": "local_speedup"}],
                "scope": {"replaced_region": "total()", "shapes": ["100k", "400k"],
                          "execution_form": "one builtin call"},
                "replacement_boundary": "the timed call", "coverage": 1.0,
                "local_speedup": 50.0, "expected_improvement": {"low": 0.6, "high": 0.9}},
            "preregistration": {"rejects": "implementation"}})  # fmt: skip
        out["bound"] = created["payload"]["figures"]["bound"]
        for stage, monitor in (
            ("screen", ["--no-monitor"]),
            ("target", ["--monitor", "host"]),
        ):
            measured = await _ok(s, "cli", {"args": [
                "measure", "workload", "--experiment", "e1", "--stage", stage, "--samples",
                f"e1-{stage}", "--pairs", "5", "--ref", REF, "--cand", CAND, "--quiet",
                *monitor]})  # fmt: skip
            if stage == "target":
                await _explain_by_review(s, tmp_path, measured)
            verdict = await _ok(s, "verdict_record", {"samples_id": f"e1-{stage}"})
            out[stage] = verdict["payload"]["status"]
            out[f"{stage}_provenance"] = verdict["payload"]["samples_provenance"]
        await _ok(s, "champion_select", {"target_id": "t1", "samples_id": "e1-target",
                                         "expected_current": "original"})  # fmt: skip
        measured = await _ok(s, "cli", {"args": [
            "measure", "workload", "--experiment", "e1", "--stage", "final_audit", "--samples",
            "e1-final", "--pairs", "5", "--ref", REF, "--cand", CAND, "--quiet", "--monitor",
            "host"]})  # fmt: skip
        await _explain_by_review(s, tmp_path, measured)
        audit = (await _ok(s, "final_audit_record", {"target_id": "t1",
                                                     "samples_id": "e1-final"}))["payload"]  # fmt: skip
        out["final_audit"] = audit["status"]
        await _ok(s, "cli", {"args": ["handoff", "record", "--target", "t1", "--stop-reason",
                                      "primary reached", "--gpu-used", "0", "--feedback",
                                      "none"]})  # fmt: skip
        out["handoff"] = (await _ok(s, "handoff", {"markdown": True}))["markdown"]
        out["status"] = await _ok(s, "status", {})
        out["claims"] = await _ok(s, "claims", {"target_id": "t1"})
        out["champion"] = await _ok(s, "champion", {"target_id": "t1"})
        out["champions"] = await _ok(s, "champion", {})
        out["audit"] = await _ok(s, "cli", {"args": ["audit"]})
    return out


@pytest.mark.slow
@pytest.mark.serial  # measures a real baseline under the real monitor: other load refuses it (R17)
def test_a_cpu_session_from_target_to_handoff_through_the_mcp_server_only(tmp_path: Path) -> None:
    _workspace(tmp_path)
    out = anyio.run(_session, tmp_path)
    assert out["bound"] == pytest.approx(50.0)
    assert out["screen"] == "inconclusive" and out["target"] == "pass"
    assert out["target_provenance"] == "perfledger"  # observed by perfledger: it decides (R5)
    assert out["final_audit"] == "pass"
    assert "Primary achieved: yes" in out["handoff"]
    (target,) = out["status"]["targets"]
    assert target["champion"] == "e1" and target["primary_achieved"] is True
    assert out["audit"]["ok"] is True
    # the read-model tools answer (they once failed on a missing helper, a JSON-RPC error)
    assert [c["experiment_id"] for c in out["claims"]["claims"]] == ["e1"]
    assert out["champion"]["champion"] == "e1" and out["champion"]["lineage"]
    assert [c["champion"] for c in out["champions"]["champions"]] == ["e1"]
