"""R18 from ``HandoffRecorded`` schema 3: perfledger fills what the ledger knows (champion,
achieved, the gain figures with CIs, local results, rejections, reconciliations, owed
obligations, open experiments) and refuses a handoff whose lists contradict the ledger; the
agent's words stay free text, without figures. In-process on real ledgers, plus the MCP tool
and the CLI's ``--example``."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime

import msgspec
import pytest
from wf_scenario import T1, Session, experiment, handoff, samples

from perfledger.commands.mcp import Tools
from perfledger.commands.registry.request_examples import example
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.deciders import DecisionContext, decide_handoff_record
from perfledger.events.workflow import R18_LEDGER_FILLED, SCHEMA_VERSIONS
from subprocess_env import perfledger_command

#: The minimal request: what only the agent knows.
MINIMAL = {
    "target_id": T1,
    "budget_used": {"wall_s": 1200.0, "gpu_s": 600.0},
    "stop_reason": "primary achieved",
    "feedback": "none",
}


@pytest.fixture
def audited(ready: Session) -> Session:
    """e1 champion with a passing final audit; e2 rejected (implementation); e3 open."""
    ready.passed()
    ready.champion()
    ready.record_measured(samples("e1-final", "final_audit"))
    ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    ready.run("experiment.create", experiment("e2", candidate="sha256:" + "2" * 16))
    ready.run("reject", {"experiment_id": "e2", "closes": "implementation",
                         "reason": "the fused kernel spills registers"})  # fmt: skip
    ready.run("experiment.create", experiment("e3", candidate="sha256:" + "3" * 16))
    return ready


def test_r18_minimal_handoff_is_filled_from_the_ledger(audited: Session) -> None:
    assert SCHEMA_VERSIONS["HandoffRecorded"] >= R18_LEDGER_FILLED
    payload = audited.run("handoff.record", MINIMAL)
    assert payload["champion"] == "e1" and payload["primary_achieved"] is True
    assert payload["rejected"] == [{"experiment_id": "e2", "closes": "implementation"}]
    assert payload["open_experiments"] == ["e3"]
    verdict = audited.state().verdicts["e1-target"].primary
    (target_gain, audit_gain) = payload["figures"]
    assert target_gain["samples_id"] == "e1-target" and audit_gain["stage"] == "final_audit"
    assert (target_gain["estimate"], target_gain["ci_low"], target_gain["ci_high"]) == (
        verdict.estimate, verdict.ci_low, verdict.ci_high,
    )  # fmt: skip
    assert any("e3 is open" in line for line in payload["owed"])
    assert payload["budget_left"] == {"wall_s": 6000.0, "gpu_s": 3000.0}
    assert payload["key_evidence"] == ["ev-ncu", "e1-target", "e1-final"]
    assert payload["resume_needs"]  # the ledger's part, filled


def test_r18_handoff_omitting_a_rejection_is_refused(audited: Session) -> None:
    error = audited.refused("handoff.record", {**MINIMAL, "rejected": []}, "R18")
    assert "omits rejections" in error.message and "e2" in error.message
    assert "leave rejected out" in error.hint


def test_r18_handoff_listing_an_experiment_as_rejected_that_was_not_is_refused(
    audited: Session,
) -> None:
    stated = [{"experiment_id": "e2", "closes": "implementation"},
              {"experiment_id": "e3", "closes": "implementation"}]  # fmt: skip
    error = audited.refused("handoff.record", {**MINIMAL, "rejected": stated}, "R18")
    assert "does not hold as rejections" in error.message and "e3" in error.message


def test_r18_handoff_inflating_a_champion_figure_is_refused(audited: Session) -> None:
    verdict = audited.state().verdicts["e1-target"].primary
    inflated = {"samples_id": "e1-target", "estimate": verdict.estimate * 3,
                "ci_low": verdict.ci_low, "ci_high": verdict.ci_high}  # fmt: skip
    error = audited.refused("handoff.record", {**MINIMAL, "figures": [inflated]}, "R18")
    assert "is not the recorded verdict's" in error.message
    # a screen's figure is no gain of the champion (screens never pass)
    screen = {"samples_id": "e1-screen", "estimate": 0.2}
    error = audited.refused("handoff.record", {**MINIMAL, "figures": [screen]}, "R18")
    assert "not a gain of the champion" in error.message
    # honest control: the recorded figures, as any rendering rounds them, are accepted
    stated = {"samples_id": "e1-target", "estimate": round(verdict.estimate, 3)}
    assert audited.run("handoff.record", {**MINIMAL, "figures": [stated]})["figures"]


def test_r18_handoff_stating_a_figure_in_words_is_refused(audited: Session) -> None:
    for words in ("decode 3x faster", "latency -35 % on every case", "1.5 times the speed"):
        error = audited.refused("handoff.record", {**MINIMAL, "gains": [words]}, "R18")
        assert "states a figure" in error.message, words
    # honest control: what only the agent knows, in words
    kept = audited.run("handoff.record", {**MINIMAL, "gains": ["the fused kernel removed a copy"]})
    assert kept["gains"] == ["the fused kernel removed a copy"]


def test_r18_handoff_with_another_champion_or_achievement_is_refused(audited: Session) -> None:
    audited.refused("handoff.record", {**MINIMAL, "champion": "original"}, "R18")
    error = audited.refused("handoff.record", {**MINIMAL, "primary_achieved": False}, "R18")
    assert "leave primary_achieved out" in error.hint
    audited.refused("handoff.record", {**MINIMAL, "local_results": ["lr-none"]}, "R18")
    audited.refused("handoff.record", {**MINIMAL, "prediction_corrections": ["e3"]}, "R18")
    audited.refused("handoff.record", {**MINIMAL, "key_evidence": ["nowhere"]}, "R18")
    # a complete, true handoff is accepted as stated
    stated = {**MINIMAL, "champion": "e1", "primary_achieved": True, "local_results": [],
              "rejected": [{"experiment_id": "e2", "closes": "implementation"}],
              "prediction_corrections": []}  # fmt: skip
    assert audited.run("handoff.record", stated)["champion"] == "e1"


def test_r18_stop_reason_contradicting_primary_achieved_is_refused(ready: Session) -> None:
    """HandoffRecorded 4: a stop reason saying the primary was achieved, on a ledger whose
    champion has no passing final audit, is refused with a hint; words that agree, or say
    neither, are accepted (the honest controls)."""
    ready.passed()
    ready.champion()  # a champion, no final audit: not achieved
    for words in ("primary achieved", "stopped: the target was met", "reached the minimum effect"):
        error = ready.refused("handoff.record", {**MINIMAL, "stop_reason": words}, "R18")
        assert "primary_achieved=False" in error.message and "final audit" in error.hint, words
    for words in ("primary not achieved yet", "the budget is spent",
                  "not stated (the ledger shows: primary achieved: e0 passed)"):  # fmt: skip
        assert ready.run("handoff.record", {**MINIMAL, "stop_reason": words})["stop_reason"]


def test_r18_stop_reason_saying_not_achieved_on_an_achieved_ledger_is_refused(
    audited: Session,
) -> None:
    error = audited.refused("handoff.record", {**MINIMAL, "stop_reason": "goal not reached"},
                            "R18")  # fmt: skip
    assert "primary_achieved=True" in error.message


def test_r18_stop_reason_of_handoffs_recorded_before_schema_4_is_not_checked(
    ready: Session,
) -> None:
    """An auditor's replay of a schema-3 handoff whose stop reason contradicts the ledger:
    accepted as it was."""
    ready.passed()
    ready.champion()
    body = {**MINIMAL, "stop_reason": "primary achieved"}
    ctx = DecisionContext(
        op="handoff.record", actor="agent", ts=datetime(2026, 1, 3, tzinfo=UTC),
        idempotency_key=None, request={"op": "handoff.record", "body": body}, schema=3,
    )  # fmt: skip
    request = msgspec.convert(body, rq.HandoffRecord)
    (draft,) = decide_handoff_record(ready.state(), request, ctx)
    assert draft.payload.primary_achieved is False


def test_r18_handoffs_recorded_before_schema_3_re_decide_by_their_rule(audited: Session) -> None:
    """An auditor's replay of a schema-1 handoff: the typed lists, gains with figures, accepted
    as they were (the old rule checked the champion and the lists' superset only)."""
    body = handoff(gains=["decode latency -20 % (CI within [0.19, 0.21])"],
                   rejected=[{"experiment_id": "e2", "closes": "implementation"}])  # fmt: skip
    request = msgspec.convert(body, rq.HandoffRecord)
    ctx = DecisionContext(
        op="handoff.record", actor="agent", ts=datetime(2026, 1, 3, tzinfo=UTC),
        idempotency_key=None, request={"op": "handoff.record", "body": body}, schema=1,
    )  # fmt: skip
    (draft,) = decide_handoff_record(audited.state(), request, ctx)
    assert draft.payload.gains == ("decode latency -20 % (CI within [0.19, 0.21])",)
    assert draft.payload.figures is msgspec.UNSET


def test_r18_mcp_handoff_record_fills_the_minimal_request(audited: Session) -> None:
    tools = Tools(str(audited.ledger.path), "agent")
    answer = tools.call("handoff_record", dict(MINIMAL))
    assert answer["payload"]["champion"] == "e1" and answer["payload"]["figures"]
    with pytest.raises(Exception) as caught:
        tools.call("handoff_record", {**MINIMAL, "rejected": []})
    assert caught.value.hint  # a refusal says what to do


def test_r18_handoff_example_is_the_minimal_request() -> None:
    shown = example("handoff.record")
    assert set(shown) == set(MINIMAL)
    done = subprocess.run(
        [*perfledger_command(), "handoff", "record", "--example"], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    assert set(json.loads(done.stdout)) == set(MINIMAL)
