"""The read models' use cases (perfledger.app.readmodels) and the handoff's (perfledger.app.handoff)
called from Python as the CLI and the MCP server call them (issue 33), on the scripted session
of the read-model tests: each refuses an unknown Target or id itself, the MCP server's answers
are the use cases' own, and a handoff is drafted from the caller's statements."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from rm_session import scripted_ledger

from perfledger.api import Ledger
from perfledger.app.handoff import HandoffStatement, draft_handoff_record, resume
from perfledger.app.readmodels import (
    TargetQuery,
    champion_of,
    claims_of,
    evidence_list,
    evidence_show,
    experiment_of,
    experiments_of,
    lineage_of,
    rejected_of,
    targets_of,
    verdict_explained,
)
from perfledger.commands.mcp.server import Tools
from perfledger.errors import BadRequest

#: The scripted session is built through the deciders (seconds): left to `make test`.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_ledger(tmp_path_factory.mktemp("reads") / "ledger")


def test_read_use_cases_refuse_an_unknown_target_or_id(ledger_path: Path) -> None:
    with Ledger.open(ledger_path) as ledger:
        for use_case in (claims_of, champion_of, lineage_of, targets_of):
            with pytest.raises(BadRequest, match="no Target 'nope'"):
                use_case(ledger, TargetQuery(target_id="nope"))
        with pytest.raises(BadRequest):
            lineage_of(ledger, TargetQuery())
        for by_id, what in ((evidence_show, "evidence"), (experiment_of, "experiment"),
                            (verdict_explained, "verdict or final audit")):  # fmt: skip
            with pytest.raises(BadRequest, match=f"no {what}"):
                by_id(ledger, "nope")
        rows = experiments_of(ledger, TargetQuery(target_id="t1")).experiments
        assert [r.experiment_id for r in rows] == ["e1", "e2", "e3"]
        assert experiment_of(ledger, "e2").verdicts.keys() == {"e2-screen", "e2-target"}
        assert verdict_explained(ledger, "e1-target").to_json()["explanation"]["status"] == "pass"
        shown = targets_of(ledger, TargetQuery(target_id="t1")).to_json()
        assert shown["target"]["definition"]["target_id"] == "t1"
        assert [r.evidence_id for r in evidence_list(ledger).evidence] == ["ev-ncu"]
        assert (
            evidence_show(ledger, "ev-ncu").event_id == evidence_list(ledger).evidence[0].event_id
        )
        assert [r.experiment_id for r in rejected_of(ledger, TargetQuery()).rejected] == ["e2"]


def test_mcp_reads_answer_what_the_use_cases_return(ledger_path: Path) -> None:
    tools = Tools(str(ledger_path), "agent")
    with Ledger.open(ledger_path) as ledger:
        claims = msgspec.to_builtins(claims_of(ledger, TargetQuery(target_id="t1")))
        shown = champion_of(ledger, TargetQuery(target_id="t1"), snapshot=False)
        with_code = champion_of(ledger, TargetQuery(target_id="t1"))
    assert tools.call("claims", {"target_id": "t1"}) == claims and claims["claims"]
    assert tools.call("champion", {"target_id": "t1"}) == shown.to_json()
    assert "snapshot" not in shown.to_json() and "snapshot" in with_code.to_json()
    assert shown.to_json()["champion"] == "e1"


def test_handoff_draft_takes_the_requests_budget_and_refuses_unknown_gpu_seconds(
    ledger_path: Path,
) -> None:
    with Ledger.open(ledger_path) as ledger:
        stated = HandoffStatement(override={"budget_used": {"wall_s": 10.0, "gpu_s": 99999.0}},
                                  feedback="none", questions=["why?"])  # fmt: skip
        draft = draft_handoff_record(ledger, stated, no_target_hint="freeze one")
        assert draft.request["budget_used"] == {"wall_s": 10.0, "gpu_s": 99999.0}
        assert (
            draft.request["feedback"] == "none" and "why?" in draft.request["unresolved_questions"]
        )
        assert any("GPU budget overspent" in w for w in draft.warnings)
        with pytest.raises(BadRequest, match="GPU seconds"):
            draft_handoff_record(ledger, HandoffStatement(), no_target_hint="freeze one")
        done = resume(ledger, None, no_target_hint="freeze one")
    assert done.handoff.target_id == "t1" and done.next[0].op == "reject"
