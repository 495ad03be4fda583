"""Refusals of the write use case (perfledger.app.decisions.record_decision) that the CLI's
generic write commands and the MCP server's write tools share (issue 33): the same request is
refused the same way through both, nothing appended."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.app.decisions import record_decision
from perfledger.commands.mcp.server import Tools
from perfledger.errors import BadRequest


def test_r5_samples_claiming_perfledger_provenance_are_refused_by_the_use_case(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger"
    with Ledger.init(path, name="d", actor="a") as ledger:
        head = ledger.head()
        claimed = {"samples_id": "s1", "provenance": {"source": "perfledger", "raw_table": "t"}}
        with pytest.raises(BadRequest, match="cannot say `perfledger`"):
            record_decision(ledger, "samples.record", claimed, actor="a")
    with pytest.raises(BadRequest, match="cannot say `perfledger`"):  # the MCP write tool
        Tools(str(path), "a").call("samples_record", claimed)
    with Ledger.open(path) as ledger:
        assert ledger.head() == head
