"""Handoff wording a new user stumbled on, R18:

- the resolution is shown beside the minimum effect, and said to be the pass threshold when it
  is the larger;
- a rejection whose target verdict was inconclusive only because of the resolution says so,
  with its figures (a lead, not a dead end);
- ``handoff record`` records ``not stated`` for a stop reason or feedback the agent did not give,
  and warns on stderr when a budget is overspent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from wf_scenario import (
    T1,
    Session,
    baseline,
    evidence,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.projections.handoff import ResumeContext, derive_handoff, render_markdown


def _wide_resolution_session(session: Session) -> Session:
    session.run("target.freeze", target_freeze(T1))
    session.run("evidence.add", evidence())
    session.run("readiness.record", readiness(T1))
    session.run("metric-audit.record", metric_audit(T1))
    session.run("baseline.record", baseline(T1))
    session.run("resolution.record", resolution(T1, resolution=0.25))
    return session


def test_r18_rejection_inconclusive_only_by_resolution_says_so(bare: Session) -> None:
    session = _wide_resolution_session(bare).screened()
    session.run("samples.record", samples("e1-target", "target", gain=0.2))
    assert session.run("verdict.record", {"samples_id": "e1-target"})["status"] == "inconclusive"
    session.run("reject", {"experiment_id": "e1", "closes": "implementation",
                           "reason": "inconclusive against the original",
                           "samples_ids": ["e1-target"]})  # fmt: skip
    handoff = derive_handoff(session.state(), T1, ResumeContext(head="0" * 40, path="/x/ledger"))
    [rejected] = handoff.rejected
    assert rejected.note is not None
    assert "inconclusive only because of the resolution" in rejected.note
    assert "minimum effect 5.00 %" in rejected.note and "resolution 25.00 %" in rejected.note
    text = render_markdown(handoff)
    assert "(note: its target verdict (e1-target) was inconclusive only because" in text
    assert "minimum effect 5.00 %, A/A resolution 25.00 % (above the minimum effect" in text
    assert "copy the ledger repository at /x/ledger" in text
    assert "not stated (no handoff recorded yet)" in text


def test_r18_rejection_for_other_reasons_has_no_note(ready: Session) -> None:
    ready.passed("e1", gain=0.0)
    ready.run("reject", {"experiment_id": "e1", "closes": "implementation", "reason": "no gain",
                         "samples_ids": ["e1-target"]})  # fmt: skip
    handoff = derive_handoff(ready.state(), T1, ResumeContext(head="0" * 40))
    assert handoff.rejected[0].note is None


def test_r18_handoff_record_does_not_invent_stop_reason_or_feedback(ready: Session) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLEDGER_")}
    argv = [sys.executable, "-m", "perfledger", "--ledger", str(ready.ledger.path), "handoff",
            "record", "--gpu-used", "5000", "--wall-used", "100", "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)["payload"]
    assert payload["feedback"] == "not stated"
    assert payload["stop_reason"].startswith("not stated (the ledger shows: ")
    assert payload["budget_left"]["gpu_s"] == 0.0
    assert "warning: GPU budget overspent: 5,000 s used of the Target's 3,600 s" in done.stderr
    assert "wall budget" not in done.stderr  # 100 s of 7,200 s: not overspent
    argv[-1:] = ["--stop-reason", "budget spent", "--feedback", "none", "--json"]
    payload = json.loads(
        subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120).stdout
    )["payload"]
    assert payload["feedback"] == "none" and payload["stop_reason"] == "budget spent"


def _lineage_questions(session: Session, gpu_s: float, environment: dict) -> list[str]:
    session.run("target.freeze", target_freeze(T1, budget={"wall_s": 3600.0, "gpu_s": gpu_s}))
    session.run("readiness.record", readiness(T1, environment=environment))
    handoff = derive_handoff(session.state(), T1, ResumeContext(head="0" * 40))
    return [q for q in handoff.unresolved_questions if q.startswith("environment lineage")]


#: What `perfledger env --json` records on a host without a GPU (the trial's).
CPU_HOST = {"gpu": None, "driver": None, "cuda": None, "toolkit": "13.0",
            "container_base": None, "container_runtime": "docker"}  # fmt: skip


def test_r18_cpu_target_handoff_names_no_missing_gpu_fields(bare: Session) -> None:
    """A Target that budgets no GPU time, on a host without a GPU: the handoff's open
    questions name the container fields it did not record, not the GPU ones it cannot have."""
    [line] = _lineage_questions(bare, 0.0, CPU_HOST)
    assert "container_base" in line
    assert not [f for f in ("gpu,", "driver", "cuda", "GPU") if f in line], line


def test_r18_gpu_target_handoff_still_names_its_missing_gpu_fields(bare: Session) -> None:
    """Control: a Target with a GPU budget whose readiness left the GPU out is still told."""
    [line] = _lineage_questions(bare, 600.0, CPU_HOST)
    assert "gpu, driver, cuda" in line
