"""The scripted session of the workflow tests (``tests/workflow/test_cli_session.py``), driven
in-process through the real decide + append path (:class:`wf_scenario.Session`, deterministic
clock), plus a rejection, so that every read model has something to show.

Steps: freeze -> evidence -> readiness -> metric audit -> baseline -> resolution; e1: claim,
screen, target pass, champion, final audit pass, handoff; e2: contradicts its claim (R14),
reconciled, rejected (closes its implementation); e3: secondary-only gain recorded as a local
result.
"""

from __future__ import annotations

from pathlib import Path

from wf_scenario import CAND1, CAND2, CAND3, T1, Session, experiment, handoff, samples

from perfledger.api import Ledger

CHAMPION_REF = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}


def scripted(session: Session) -> Session:
    """Run the scripted session on ``session`` (a fresh ledger); returns it."""
    session.ready()
    session.passed("e1", CAND1, gain=0.2)
    session.champion("e1")
    session.record_measured(samples("e1-final", "final_audit", gain=0.2))  # R5: measured
    session.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    session.run("handoff.record", handoff())
    session.run("experiment.create", experiment("e2", candidate=CAND2))
    for stage, gain in (("screen", 0.1), ("target", -0.1)):
        session.run("samples.record", samples(
            f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2, gain=gain,
            reference=CHAMPION_REF))  # fmt: skip
        session.run("verdict.record", {"samples_id": f"e2-{stage}"})
    session.run(
        "reconcile",
        {"experiment_id": "e2", "premise": "cost", "explanation": "an extra copy",
         "corrected_model": {"description": "added cost 0.15", "added_cost": 0.15,
                             "coverage": 0.6, "local_speedup": 2.0}},
    )  # fmt: skip
    session.run("reject", {"experiment_id": "e2", "closes": "implementation",
                           "reason": "slower than the champion: an extra copy per call",
                           "samples_ids": ["e2-target"]})  # fmt: skip
    session.run("experiment.create", experiment("e3", candidate=CAND3))
    for stage, gain in (("screen", 0.05), ("target", 0.0)):
        session.run("samples.record", samples(
            f"e3-{stage}", stage, experiment_id="e3", candidate=CAND3, gain=gain,
            secondary_gain=0.2, reference=CHAMPION_REF))  # fmt: skip
        session.run("verdict.record", {"samples_id": f"e3-{stage}"})
    session.run("local-result.record", {"result_id": "lr-p99", "samples_id": "e3-target",
                                        "metric": "cpu_time", "scenario": "long prompts"})  # fmt: skip
    return session


def scripted_ledger(path: Path) -> Path:
    """Create the scripted session's ledger at ``path`` (closed again); returns ``path``."""
    ledger = Ledger.init(path, name="session", actor="agent")
    try:
        scripted(Session(ledger))
    finally:
        ledger.close()
    return path
