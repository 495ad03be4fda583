"""The MCP server's audit with the auditor's allowed-signers file (R12, R17): ``cli ["audit",
"--allowed-signers", FILE]`` runs :func:`perfledger.app.audit.audit_ledger` as ``perfledger audit
--allowed-signers FILE`` does, through the real server (the SDK's client connected to
:func:`perfledger.commands.mcp.server.build_server` in this process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is the optional extra perfledger[mcp]")

import anyio
from mcp import Client
from test_plausibility import _big_claim, _target
from test_review_signatures import _body, _flagged_champion, _key, _signers
from wf_scenario import Session

from perfledger.app.decisions import signed_review_request as signed_request
from perfledger.commands.cli.app import cli
from perfledger.commands.mcp.server import build_server


def _audits(ledger: Path, *args: list[str]) -> list[tuple[bool, Any]]:
    """``(is_error, answer)`` of ``cli`` with each of ``args`` on the in-process server."""

    async def steps() -> list[tuple[bool, Any]]:
        out = []
        async with Client(build_server(str(ledger), "auditor", cli)) as client:
            for arg in args:
                result = await client.call_tool("cli", {"args": arg})
                out.append((result.is_error, json.loads(result.content[0].text)))
        return out

    return anyio.run(steps)


@pytest.fixture
def flagged(ready: Session) -> Session:
    """e1's target stage passed with a 20x ratio beyond the plausible bound (flagged)."""
    _big_claim(ready)
    _target(ready)
    return ready


def test_mcp_audit_checks_review_signatures_against_the_allowed_signers_file(
    flagged: Session, tmp_path: Path
) -> None:
    """A champion allowed by an unsigned review appended as ``reviewer-b``: the MCP audit
    without the file is clean and lists the review in its notes; with the file it is a tool
    error with exit code 5 naming the review (R12), as the CLI's; a review signed by the
    listed key passes; a missing file is a bad request."""
    _key_path, public = _key(tmp_path, "reviewer-b")
    _flagged_champion(flagged, _body(flagged, "reviewer-b"), "reviewer-b")
    allowed = _signers(tmp_path, **{"reviewer-b": public})
    flagged.ledger.close()
    ledger = tmp_path / "ledger"
    plain, checked, missing = _audits(
        ledger, ["audit"], ["audit", "--allowed-signers", allowed],
        ["audit", "--allowed-signers", str(tmp_path / "nowhere")],
    )  # fmt: skip
    assert plain[0] is False and plain[1]["ok"] is True
    assert any("unauthenticated review" in n and "rv-reviewer-b" in n for n in plain[1]["notes"])
    is_error, answer = checked
    assert is_error and answer["error"]["exit_code"] == 5, answer
    assert "R12" in answer["error"]["message"] and "'rv-reviewer-b'" in answer["error"]["message"]
    assert "unsigned" in answer["error"]["message"]
    assert missing[0] and missing[1]["error"]["code"] == "bad_request", missing


def test_mcp_audit_passes_a_review_signed_by_the_listed_key(
    flagged: Session, tmp_path: Path
) -> None:
    key, public = _key(tmp_path, "reviewer-b")
    _flagged_champion(flagged, signed_request(_body(flagged, "reviewer-b"), key), "reviewer-b")
    allowed = _signers(tmp_path, **{"reviewer-b": public})
    flagged.ledger.close()
    ((is_error, answer),) = _audits(tmp_path / "ledger", ["audit", "--allowed-signers", allowed])
    assert is_error is False and answer["ok"] is True, answer
    assert not any("rv-reviewer-b" in n for n in answer["notes"])
