"""A ledger recorded before the request ranges (SPEC.md section 6, "Ranges") keeps auditing as
it did: a ``TargetFrozen`` of schema 2 whose budget is 1e30 wall seconds (accepted then) is
re-decided by its own rule, and ``perfledger audit`` and ``verify`` pass; the same event under
schema 3 (the range's version) is a finding; a new freeze of it is refused with exit 2 and
nothing written. The events are written by the real ``git`` CLI (:mod:`hostile_forge`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hostile_forge import forge_event, git, run_cli
from wf_scenario import target_freeze

from perfledger.api import Ledger
from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.events.canonical import canonical_bytes
from perfledger.events.kinds import get_kind
from perfledger.events.workflow import RANGES_TARGET_FROZEN

#: The out-of-range request: a budget of 1e30 wall seconds.
BODY = target_freeze(budget={"wall_s": 1e30, "gpu_s": 0.0})


def _ledger_with_old_freeze(path: Path, schema: int) -> str:
    """A ledger whose one decision is ``BODY``'s Target, recorded under ``schema`` with the
    payload that schema's rule decides (the forger's writer is the real ``git``)."""
    ledger = Ledger.init(path, name="old", actor="agent")
    try:
        ctx = DecisionContext(op="target.freeze", actor="agent", ts=datetime(2026, 1, 1, tzinfo=UTC),
                              request={"op": "target.freeze", "body": BODY},
                              payload_of=ledger.payload, schema=RANGES_TARGET_FROZEN - 1)  # fmt: skip
        request = operations.validate("target.freeze", BODY)
        drafts = operations.decider("target.freeze")(ledger.state(), request, ctx)
    finally:
        ledger.close()
    payload = msgspec.to_builtins(drafts[0].payload)
    stored = operations.stored_request("target.freeze", request)
    event_id, _ = forge_event(
        path, kind="TargetFrozen", schema=schema, payload=payload, actor="agent",
        request_json=canonical_bytes(stored), summary=get_kind("TargetFrozen").summary(drafts[0].payload),
    )  # fmt: skip
    return event_id


def test_old_event_out_of_range_audits_clean_and_verifies(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    _ledger_with_old_freeze(path, RANGES_TARGET_FROZEN - 1)
    assert run_cli(tmp_path, "--ledger", path, "verify").returncode == 0
    audit = run_cli(tmp_path, "--ledger", path, "audit", "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert json.loads(audit.stdout)["ok"] is True


def test_control_the_same_event_under_the_range_version_is_a_finding(tmp_path: Path) -> None:
    path = tmp_path / "ledger"
    event_id = _ledger_with_old_freeze(path, RANGES_TARGET_FROZEN)
    audit = run_cli(tmp_path, "--ledger", path, "audit", "--json")
    assert audit.returncode == 5, audit.stdout + audit.stderr
    findings = json.loads(audit.stdout)["findings"]
    assert [f["event_id"] for f in findings] == [event_id], findings
    assert "outside its range" in findings[0]["message"], findings


@pytest.mark.parametrize(
    ("args", "value"),
    [(["target", "freeze"], {"budget": {"wall_s": 1e30, "gpu_s": 0.0}}),
     (["target", "freeze"], {"budget": {"wall_s": 3600.0, "gpu_s": 1e300}})],
)  # fmt: skip
def test_cli_refuses_an_out_of_range_budget_with_exit_2(
    tmp_path: Path, args: list[str], value: dict[str, object]
) -> None:
    path = tmp_path / "ledger"
    Ledger.init(path, name="new", actor="agent").close()
    head = git(path, "rev-parse", "refs/heads/ledger")
    request = tmp_path / "req.json"
    request.write_text(json.dumps(target_freeze(**value)))
    done = run_cli(tmp_path, "--ledger", path, *args, "--request", request, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    error = json.loads(done.stdout or done.stderr)["error"]
    assert "budget." in error["message"] and "outside its range" in error["message"], error
    assert git(path, "rev-parse", "refs/heads/ledger") == head
    # control: the boundary is accepted
    request.write_text(json.dumps(target_freeze(budget={"wall_s": 31_622_400.0, "gpu_s": 1e10})))
    done = run_cli(tmp_path, "--ledger", path, *args, "--request", request, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
