"""The CPU session and the reference watch (``examples/cpu_session/session.py``; R11, R14):
where the watch alone kept a target stage from passing (the reference ran slower than its A/A,
as on a loaded host), the session rejects that experiment naming the watch as its reason and goes
on with the next candidate; it does not measure the same code again, because R14 refuses the
same code in a new experiment after a result that did not pass. Decided on constructed verdicts
and a recorded ledger, since no honest run can be made to fire the watch on demand
(tests/examples/test_cpu_session.py checks what a real run's ledger shows in either path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from wf_scenario import CAND1, Session, experiment, samples

from perfledger.commands.audit.replay import audit
from perfledger.commands.workflow.reference_watch import invalid_note

SESSION = Path(__file__).resolve().parents[2] / "examples" / "cpu_session" / "session.py"


def _session_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cpu_session", SESSION)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _verdict(status: str, primary: str, watched: bool) -> dict[str, Any]:
    """A verdict payload as ``verdict record --json`` answers it; ``watched``: with the note
    the decider adds on samples the reference watch flagged (its own text)."""
    figures = {"reference": 14.2, "aa_median": 10.1, "aa_slower_by": 0.41, "aa_bound": 0.1}
    notes = ["R17: 3 pair(s) overlap foreign activity explained by review rv-1"]
    if watched:
        notes.append(invalid_note({"wide": figures}, "ms"))
    return {"status": status, "primary": {"status": primary}, "notes": notes}


def test_only_a_verdict_the_reference_watch_alone_kept_from_passing_is_measured_again() -> None:
    invalid = _session_module().invalid_by_reference_watch
    assert invalid(_verdict("inconclusive", "pass", watched=True))
    assert not invalid(_verdict("pass", "pass", watched=False))
    # its own figures did not pass: the watch is not why, and nothing is measured again
    assert not invalid(_verdict("inconclusive", "inconclusive", watched=True))
    assert not invalid(_verdict("fail", "fail", watched=True))
    assert not invalid(_verdict("inconclusive", "pass", watched=False))  # another rule's


def test_the_same_code_in_a_new_experiment_after_a_target_stage_not_passed_is_refused(
    ready: Session,
) -> None:
    """Why the session does not retry: e1's target stage did not pass and e1 is rejected with
    the reference watch as its reason; a new experiment for the same candidate code is refused
    (R14: running the same code again until a run passes is optional stopping), nothing is
    appended, and the rejection with its reason is what the ledger shows."""
    ready.screened("e1", CAND1)
    ready.record_measured(samples("e1-target", "target", gain=0.0))
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] != "pass"
    reason = "the reference watch (R11) made the target-stage comparison invalid"
    ready.run("reject", {"experiment_id": "e1", "closes": "implementation", "reason": reason,
                         "samples_ids": ["e1-screen", "e1-target"]})  # fmt: skip
    ready.refused("experiment.create", experiment("e1b", candidate=CAND1), "R14")
    rejection = ready.state().experiments["e1"].rejection
    assert rejection is not None and rejection.reason == reason
    report = audit(ready.ledger)
    assert report.ok, [f.to_json() for f in report.findings]
