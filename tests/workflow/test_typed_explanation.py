"""R17: foreign activity is explained only by another actor's review; a typed explanation
decides nothing (``SamplesRecorded`` schema 12, ``VerdictRecorded`` 6, ``FinalAuditRecorded`` 7,
``ActivityExplained`` 3), and ``--explain-foreign`` is gone from every command. Each cheat is
written out beside its honest control; events recorded before keep their typed meaning."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from wf_scenario import T1, Session, explain_by_review, make_pairs, samples

from perfledger.commands.workflow import deciders
from perfledger.commands.workflow.requests import VerdictRecord
from perfledger.events.workflow import (
    R4_MEASURED_RESOLUTION_VERDICT,
    R17_NO_TYPED_EXPLANATION,
    R17_SAMPLES_TYPED_EXPLANATION_IGNORED,
    SCHEMA_VERSIONS,
)
from subprocess_env import isolated_env, perfledger_command

TYPED = {"observed": True, "foreign_activity": True, "explained": "it cannot matter, trust me",
         "flags": ["foreign_cpu:1.50"]}  # fmt: skip


def _busy_target(session: Session, monitor: dict[str, Any]) -> dict[str, Any]:
    """Screen, then target samples 20 % better whose first pair's window saw foreign activity
    with ``monitor``; returns the samples' payload."""
    session.screened()
    pairs = make_pairs(0.2, tag="busy")
    pairs[0]["monitor"] = monitor
    return session.record_measured(samples("e1-target", "target", pairs=pairs))


def test_r17_the_rule_versions_are_the_ones_assigned() -> None:
    assert SCHEMA_VERSIONS["SamplesRecorded"] >= R17_SAMPLES_TYPED_EXPLANATION_IGNORED == 12
    assert SCHEMA_VERSIONS["ActivityExplained"] == R17_NO_TYPED_EXPLANATION == 3


def test_cheat_a_typed_explanation_in_the_samples_explains_nothing(ready: Session) -> None:
    recorded = _busy_target(ready, TYPED)
    assert recorded["unexplained_activity"] == 1  # the typed text is not counted
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert any(n.startswith("R17: 1 pair(s) overlap unexplained") for n in verdict["notes"])
    ready.refused(
        "champion.select",
        {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"},
        "R13",
    )


def test_r17_honest_another_actors_review_explains_even_a_pair_with_a_typed_text(
    ready: Session,
) -> None:
    """The control: a review by another actor, cited by ``activity explain`` (which, from
    ``ActivityExplained`` schema 3, no longer takes the typed text as "already explained")."""
    _busy_target(ready, TYPED)
    assert explain_by_review(ready.ledger, "e1-target") == [0]
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] == "pass", verdict["notes"]
    ready.champion()


def test_r17_a_verdict_recorded_before_the_rule_takes_the_typed_text(ready: Session) -> None:
    """Re-deciding a verdict of ``VerdictRecorded`` schema 5 (the auditor's replay): the typed
    explanation of samples recorded before explains the pair, as it did."""
    _busy_target(ready, TYPED)
    state = ready.state()
    for schema, status in ((R4_MEASURED_RESOLUTION_VERDICT - 1, "pass"), (None, "inconclusive")):
        ctx = deciders.DecisionContext(op="verdict.record", actor="agent", ts=ready.clock,
                                       payload_of=ready.ledger.payload, schema=schema)  # fmt: skip
        [draft] = deciders.decide_verdict_record(state, VerdictRecord(samples_id="e1-target"), ctx)
        assert draft.payload.status == status


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(tmp_path / "none"), *args, "--json"],
        capture_output=True, text=True, env=isolated_env(tmp_path), check=False,
    )  # fmt: skip


def test_cheat_explain_foreign_is_refused_with_what_to_do_instead(tmp_path: Path) -> None:
    for command in (
        ["measure", "workload", "--experiment", "e1", "--stage", "target", "--ref", "a",
         "--cand", "b", "--monitor", "host"],
        ["measure", "serving", "--ref-url", "http://127.0.0.1:9/v1", "--concurrency", "1",
         "--requests", "r.jsonl"],
    ):  # fmt: skip
        done = _cli(tmp_path, *command, "--explain-foreign", "other tenants")
        assert done.returncode == 2, done.stdout + done.stderr
        message = json.loads(done.stdout)["error"]["message"]
        assert "--explain-foreign was removed" in message and "activity explain" in message
        assert "Traceback" not in done.stderr
    assert "--explain-foreign" not in _cli(tmp_path, "measure", "workload", "--help").stdout
