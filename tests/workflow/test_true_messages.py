"""Every R14 note is true of the figures it prints (issue 38 item 7): a screen that fails
because one case regressed, while its pooled CI lies inside the predicted interval, used to be
noted as "the result contradicts the claim (predicted improvement [0.2, 0.3333], measured CI
[0.255, 0.2569])". From ``VerdictRecorded`` schema 7 (:data:`R14_TRUE_NOTE`) the note says what
happened; verdicts recorded before keep their text when re-derived (the audit's replay)."""

from __future__ import annotations

import re
from typing import Any

from wf_scenario import CAND1, CAND2, Session, experiment, make_pairs, samples

from perfledger.commands.audit.replay import audit
from perfledger.events.workflow import R14_TRUE_NOTE, SCHEMA_VERSIONS

NUMBER = r"(-?[0-9.e+-]+)"
INTERVAL = re.compile(rf"\[{NUMBER}, {NUMBER}\]")


def _claimed(experiment_id: str, candidate: str, low: float, high: float) -> dict[str, Any]:
    body = experiment(experiment_id, candidate=candidate)
    body["claim"]["expected_improvement"] = {"low": low, "high": high}
    return body


def check_r14_note(verdict: dict[str, Any]) -> None:
    """The R14 note of ``verdict`` (if any) is true of its figures: "wholly below/above" only
    when the measured CI lies wholly there; "the screen failed" only for a failed screen."""
    for note in verdict["notes"]:
        if not note.startswith("R14"):
            continue
        intervals = [(float(a), float(b)) for a, b in INTERVAL.findall(note)]
        primary = verdict["primary"]
        if "the screen failed" in note:
            assert verdict["stage"] == "screen" and verdict["status"] == "fail", note
            continue
        (measured, predicted) = intervals
        assert measured[0] <= primary["ci_low"] + 1e-3 and measured[1] >= primary["ci_high"] - 1e-3
        if "wholly below" in note:
            assert measured[1] < predicted[0], note
        elif "wholly above" in note:
            assert measured[0] > predicted[1], note
        else:
            raise AssertionError(f"an R14 note that says neither: {note}")


def _mixed_screen(ready: Session) -> dict[str, Any]:
    """e2 claims [0.10, 0.30]; its screen gains about a third on one case and loses 2 % on the
    other: the pooled CI lies inside the claim's interval, one case regressed."""
    ready.run("experiment.create", _claimed("e2", CAND2, 0.10, 0.30))
    pairs = [p for p in make_pairs(0.3, tag="a") if p["case"] == "large"]
    pairs += [p for p in make_pairs(-0.02, tag="b") if p["case"] == "small"]
    ready.run("samples.record", samples("e2-screen", "screen", experiment_id="e2",
                                        candidate=CAND2, pairs=pairs))  # fmt: skip
    return ready.run("verdict.record", {"samples_id": "e2-screen"})


def test_r14_note_of_a_screen_failed_by_one_case_says_so(ready: Session) -> None:
    assert SCHEMA_VERSIONS["VerdictRecorded"] >= R14_TRUE_NOTE
    ready.passed("e1", CAND1, gain=0.2)
    verdict = _mixed_screen(ready)
    assert verdict["status"] == "fail" and verdict["contradicts_claim"] is True, verdict
    low, high = verdict["primary"]["ci_low"], verdict["primary"]["ci_high"]
    assert 0.10 <= low <= high <= 0.30  # the pooled CI inside the claim's interval
    (note,) = [n for n in verdict["notes"] if n.startswith("R14")]
    assert "contradicts the claim" not in note
    assert "the screen failed" in note and "minimum effect" in note, note
    check_r14_note(verdict)
    assert audit(ready.ledger).ok  # re-derived with the same text


def test_r14_note_of_a_target_below_its_claim_says_wholly_below(ready: Session) -> None:
    verdict = ready.passed("e1", CAND1, gain=-0.1)  # its claim predicts [0, 0.43]
    assert verdict["contradicts_claim"] is True
    (note,) = [n for n in verdict["notes"] if n.startswith("R14")]
    assert "wholly below" in note, note
    check_r14_note(verdict)


def test_r14_note_of_a_target_above_its_claim_says_wholly_above(ready: Session) -> None:
    ready.run("experiment.create", _claimed("e1", CAND1, 0.0, 0.02))
    ready.run("samples.record", samples("e1-screen", "screen", gain=0.3))
    ready.run("verdict.record", {"samples_id": "e1-screen"})
    ready.run("samples.record", samples("e1-target", "target", gain=0.3))
    verdict = ready.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["contradicts_claim"] is True
    (note,) = [n for n in verdict["notes"] if n.startswith("R14")]
    assert "wholly above" in note, note
    check_r14_note(verdict)
