"""Research and review records: a reviewer's challenge to a claim, a rejection or a stop is
recorded with the response and whether dissent remains; the handoff lists unresolved dissent
until a later review resolves it. The tool records, never judges."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import T1, experiment

from perfledger.errors import BadRequest
from perfledger.projections.handoff import ResumeContext, derive_handoff
from subprocess_env import isolated_env, perfledger_command


def review(review_id: str, subject_event: str, **over: Any) -> dict[str, Any]:
    body = {
        "review_id": review_id, "reviewer": "gemini-2.5-pro", "model_family": "gemini",
        "subject": "claim", "subject_event": subject_event,
        "challenge": "coverage f=0.6 counts time that overlaps the copy stream",
        "response": "the graph-off trace shows no overlap on the critical path",
        "dissent_remains": True,
    }  # fmt: skip
    body.update(over)
    return body


@pytest.fixture
def claimed(ready: Any) -> tuple[Any, str]:
    """A session with experiment e1 created; returns (session, e1's event id)."""
    ready.run("experiment.create", experiment("e1"))
    return ready, ready.state().experiments["e1"].event_id


def _dissent(session: Any) -> list[str]:
    state = session.state()
    handoff = derive_handoff(state, T1, ResumeContext(head=session.ledger.head()))
    return [q for q in handoff.unresolved_questions if q.startswith("unresolved dissent")]


def test_review_of_a_claim_derives_its_kind_and_target(claimed: tuple[Any, str]) -> None:
    session, e1 = claimed
    payload = session.run("review.record", review("r1", e1))
    assert payload["subject_kind"] == "ExperimentCreated" and payload["target_id"] == T1
    assert payload["dissent_remains"] is True and payload["resolves"] == []


def test_handoff_lists_unresolved_dissent_until_a_later_review_resolves_it(
    claimed: tuple[Any, str],
) -> None:
    session, e1 = claimed
    session.run("review.record", review("r1", e1))
    session.run("review.record", review("r2", e1, reviewer="o3", model_family="gpt",
                                        dissent_remains=False))  # fmt: skip
    (line,) = _dissent(session)
    assert "review r1 by gemini-2.5-pro (gemini) on the claim" in line
    assert "coverage f=0.6" in line and "graph-off trace" in line
    session.run("review.record", review("r3", e1, challenge="re-checked with nsys",
                                        response="no overlap", dissent_remains=False,
                                        resolves=["r1"]))  # fmt: skip
    assert _dissent(session) == []
    assert session.state().reviews.reviews["r1"].resolved_by == "r3"


def test_review_records_judge_nothing_a_dissenting_claim_still_proceeds(
    claimed: tuple[Any, str],
) -> None:
    session, e1 = claimed
    session.run("review.record", review("r1", e1))
    session.screened("e2", candidate="sha256:" + "2" * 16)  # the next decision is not blocked
    assert "e2" in session.state().experiments


def test_reviews_of_a_rejection_and_of_a_stop(claimed: tuple[Any, str]) -> None:
    from wf_scenario import handoff

    session, _ = claimed
    session.run("reject", {"experiment_id": "e1", "closes": "implementation",
                           "reason": "the kernel lost on the target stage"})  # fmt: skip
    session.run("handoff.record", handoff(
        primary_achieved=False, champion="original", key_evidence=["ev-ncu"], gains=[],
        rejected=[{"experiment_id": "e1", "closes": "implementation"}],
        stop_reason="budget spent"))  # fmt: skip
    events = {e.kind: e.id for e in session.ledger.events()}
    out = session.run("review.record", review("r-rej", events["CandidateRejected"],
                                               subject="rejection"))  # fmt: skip
    assert out["subject_kind"] == "CandidateRejected"
    out = session.run("review.record", review("r-stop", events["HandoffRecorded"],
                                               subject="stop"))  # fmt: skip
    assert out["subject_kind"] == "HandoffRecorded" and out["target_id"] == T1
    assert len(_dissent(session)) == 2


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"subject": "rejection"}, "reviews a CandidateRejected, but event"),
        ({"subject_event": "f" * 64}, "f" * 12),
        ({"resolves": ["nope"]}, "no review 'nope'"),
        ({"resolves": ["r-agree"]}, "recorded no remaining dissent"),
        ({"review_id": "r-agree"}, "already recorded"),
        ({"subject_event": "E1"}, "subject_event"),
        ({"dissent_remains": "yes"}, "dissent_remains"),
        ({"verdict": "reviewer is right"}, "verdict"),
    ],
)
def test_an_ill_formed_review_is_refused_and_changes_nothing(
    claimed: tuple[Any, str], over: dict[str, Any], needle: str
) -> None:
    session, e1 = claimed
    session.run("review.record", review("r-agree", e1, dissent_remains=False))
    error = session.refused("review.record", {**review("r-new", e1), **over}, None)
    assert isinstance(error, BadRequest) and error.exit_code == 2
    assert needle in error.message
    assert error.hint  # every refusal says what to do


def test_a_review_of_an_event_not_in_the_ledger_is_refused_with_a_hint(
    claimed: tuple[Any, str],
) -> None:
    """The shipped example's ``subject_event`` names another ledger's event: refused (exit 2)
    with a hint naming where the ids are (before: no hint)."""
    session, _ = claimed
    error = session.refused("review.record", review("r-away", "5d81" + "0" * 60), None)
    assert "subject_event" in error.message and "perfledger log" in error.hint


def test_a_resolved_review_cannot_be_resolved_again(claimed: tuple[Any, str]) -> None:
    session, e1 = claimed
    session.run("review.record", review("r1", e1))
    session.run("review.record", review("r2", e1, dissent_remains=False, resolves=["r1"]))
    error = session.refused("review.record", review("r3", e1, resolves=["r1"]), None)
    assert "was resolved by 'r2'" in error.message


@pytest.mark.slow
def test_review_cli_end_to_end_with_handoff_list_and_audit(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    ledger = tmp_path / "ledger.git"

    def pl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*perfledger_command(), "--ledger", str(ledger), *args],
                              input=stdin, capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip

    from wf_scenario import Session

    from perfledger.api import Ledger

    opened = Ledger.init(ledger, name="wf", actor="agent")
    try:
        Session(opened).ready().run("experiment.create", experiment("e1"))
        e1 = opened.state().experiments["e1"].event_id
    finally:
        opened.close()
    done = pl("review", "record", "--request", "-", "--json", stdin=json.dumps(review("r1", e1)))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["kind"] == "ReviewRecorded"
    listed = json.loads(pl("review", "list", "--unresolved", "--json").stdout)["reviews"]
    assert [(r["review_id"], r["unresolved_dissent"]) for r in listed] == [("r1", True)]
    handoff = json.loads(pl("handoff", "--json").stdout)["handoff"]
    assert any("review r1 by gemini-2.5-pro" in q for q in handoff["unresolved_questions"])
    state = json.loads(pl("state", "--json").stdout)["state"]
    assert state["reviews"]["reviews"]["r1"]["resolved_by"] is None
    schema = json.loads(pl("schema", "review.record", "--json").stdout)
    assert "dissent_remains" in json.dumps(schema)
    bad = pl("review", "record", "--request", "-", stdin=json.dumps(review("r2", "0" * 64)))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    audit = pl("audit", "--json")
    assert audit.returncode == 0 and json.loads(audit.stdout)["ok"] is True, audit.stdout


def test_dissent_carried_by_a_recorded_handoff_leaves_it_once_resolved(
    claimed: tuple[Any, str],
) -> None:
    from perfledger.app.handoff_request import handoff_request

    session, e1 = claimed
    session.run("review.record", review("r1", e1))
    derived = derive_handoff(session.state(), T1, ResumeContext(head=session.ledger.head()))
    session.run("reject", {"experiment_id": "e1", "closes": "implementation", "reason": "lost"})
    body = handoff_request(derived, gpu_used_s=1.0, wall_used_s=2.0)
    body["rejected"] = [{"experiment_id": "e1", "closes": "implementation"}]
    recorded = session.run("handoff.record", body)
    assert any(
        q.startswith("unresolved dissent: review r1") for q in recorded["unresolved_questions"]
    )
    assert len(_dissent(session)) == 1  # still open: derived, and carried by the record
    session.run("review.record", review("r2", e1, dissent_remains=False, resolves=["r1"]))
    assert _dissent(session) == []
