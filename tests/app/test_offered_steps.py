"""Every next step perfledger offers is one the deciders accept (issue 38 item 2): on every state
the test sessions reach, each decision ``status``, ``resume`` and the MCP server offer
(:func:`perfledger.app.next_steps.allowed_decisions`) and each obligation ``status`` lists is
decided again, independently, against that state:

- a decision with a complete request (a verdict, a champion selection, a final audit) by its
  real decider;
- a measurement (``samples.record``) by the decider of the samples the measuring command would
  record (:func:`perfledger.app.context.stand_in_samples`, with the start of a formal run);
- and none names a rejected experiment, a champion a later one replaced, or the other kind's
  measuring command (``measure workload`` on a kernel Target).

The sessions: a CPU workload session driven in-process through the real decide + append path
(a champion chain e1 -> e2, a failed screen rejected, a final audit), and the recorded GPU
session of examples/recorded (a kernel Target, 26 events), walked prefix by prefix."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import (
    CAND1,
    CAND2,
    CAND3,
    ORIGINAL_HASH,
    T1,
    Session,
    experiment,
    readiness,
    samples,
    target_freeze,
)

from perfledger.api import Ledger
from perfledger.app.command_lines import recommended_command
from perfledger.app.context import context_of, stand_in_samples
from perfledger.app.next_steps import allowed_decisions, dry_decide, former_champions, obligations
from perfledger.events.workflow import FORMAL_STAGES, OBSERVED_METRICS
from perfledger.projections.handoff import NextDecision
from perfledger.projections.target_kind import next_stage, target_kind

RECORDED = Path(__file__).resolve().parents[2] / "examples" / "recorded" / "session.bundle"


def _replaced(target: Any) -> set[str]:
    """The champions of ``target``'s lineage that a later selection replaced (read here from
    the lineage, not from the code under test)."""
    return {entry.champion for entry in target.lineage} - {target.champion, "original"}


def check_offered(state: Any, payload_of: Any) -> list[str]:
    """The problems of the steps offered on ``state`` (empty: every one is accepted); the
    number of steps checked is appended to ``CHECKED``."""
    problems: list[str] = []
    for tid, target in state.targets.items():
        if target.status != "current":
            continue
        demoted = _replaced(target)
        decisions = allowed_decisions(state, tid, payload_of)
        CHECKED.append(len(decisions))
        for d in decisions:
            where = f"{tid}: offered {d.op} [{d.about}]"
            if d.about in demoted:
                problems.append(f"{where}: a replaced champion")
            if d.request is not None:
                refusal = dry_decide(state, d.op, d.request, payload_of)
                if refusal is not None:
                    problems.append(f"{where}: refused: {refusal.message}")
            if d.op == "samples.record" and d.about in state.experiments:
                problems += _check_measurement(state, tid, target, d.about, payload_of, where)
        for o in obligations(state, tid):
            if o["kind"] == "stale":
                experiment_id = state.samples[o["about"]].experiment_id
                problems += _check_measurement(state, tid, target, experiment_id, payload_of,
                                               f"{tid}: stale obligation {o['about']}")  # fmt: skip
    return problems


def _check_measurement(
    state: Any, tid: str, target: Any, experiment_id: str, payload_of: Any, where: str
) -> list[str]:
    e = state.experiments[experiment_id]
    if e.rejection is not None:
        return [f"{where}: a rejected experiment"]
    if experiment_id in _replaced(target):
        return [f"{where}: a replaced champion"]
    stage = next_stage(state, tid, experiment_id)
    info = context_of(state, experiment_id, stage)
    sid = f"{experiment_id}-{stage}-offered"
    # an observed primary is measured by the worker protocol only (R5)
    protocol = "worker/v1" if info["primary"].name in OBSERVED_METRICS else "stand_in"
    body = stand_in_samples(
        info, experiment_id=experiment_id, stage=stage, samples_id=sid, cases=info["cases"],
        environment_id=info["readiness_environment_id"], protocol=protocol, monitored=True,
    )  # fmt: skip
    formal = stage in FORMAL_STAGES
    if formal:
        start = {"experiment_id": experiment_id, "stage": stage, "samples_id": sid,
                 "protocol": protocol}  # fmt: skip
        refusal = dry_decide(state, "formal-run.start", start, payload_of)
        if refusal is not None:
            return [f"{where}: its run's start is refused: {refusal.message}"]
    refusal = dry_decide(state, "samples.record", body, payload_of, sid if formal else None)
    return [] if refusal is None else [f"{where}: its samples are refused: {refusal.message}"]


CHECKED: list[int] = []


class WalkedSession(Session):
    """A scenario session that checks the offered steps after every event it appends."""

    def __init__(self, ledger: Ledger) -> None:
        super().__init__(ledger)
        self.problems: list[str] = []
        self.states = 0

    def run(
        self, op: str, body: dict[str, Any], key: str | None = None,
        artifacts: dict[str, Any] | None = None,
    ) -> Any:  # fmt: skip
        payload = super().run(op, body, key, artifacts)
        self.states += 1
        self.problems += [f"after {op}: {p}" for p in check_offered(self.state(),
                                                                     self.ledger.payload)]  # fmt: skip
        return payload


def _against(experiment_id: str, candidate: str) -> dict[str, Any]:
    return {"kind": "champion", "experiment_id": experiment_id, "content_hash": candidate}


def test_every_step_offered_in_a_cpu_session_is_accepted(tmp_path: Path) -> None:
    """A champion chain (e1, then e2 measured against e1), a failed screen rejected (e3), and
    the final audit of e2: after each of its events, every offered step is accepted. Before,
    ``status`` offered e1 (replaced by e2) for re-measurement, and a failed screen's hint
    offered its target stage."""
    s = WalkedSession(Ledger.init(tmp_path / "ledger", name="walk", actor="agent"))
    try:
        s.ready()
        s.passed("e1", CAND1)
        s.champion("e1")
        s.run("experiment.create", experiment("e2", candidate=CAND2))
        for stage in ("screen", "target"):
            s.record_measured(samples(f"e2-{stage}", stage, experiment_id="e2",
                                      candidate=CAND2, reference=_against("e1", CAND1)))  # fmt: skip
            s.run("verdict.record", {"samples_id": f"e2-{stage}"})
        s.champion("e2", expected="e1")
        assert s.state().targets[T1].champion == "e2"
        s.run("experiment.create", experiment("e3", candidate=CAND3))
        s.run("samples.record", samples("e3-screen", "screen", experiment_id="e3",
                                        candidate=CAND3, gain=-0.3,
                                        reference=_against("e2", CAND2)))  # fmt: skip
        s.run("verdict.record", {"samples_id": "e3-screen"})
        s.run("reject", {"experiment_id": "e3", "closes": "implementation",
                         "reason": "the screen regressed"})  # fmt: skip
        s.record_measured(samples("e2-audit", "final_audit", experiment_id="e2",
                                        candidate=CAND2,
                                        reference={"kind": "original",
                                                   "content_hash": ORIGINAL_HASH}))  # fmt: skip
        s.run("final-audit.record", {"target_id": T1, "samples_id": "e2-audit"})
        assert s.problems == []
        assert s.states >= 20
        assert former_champions(s.state().targets[T1]) == {"e1"}
    finally:
        s.ledger.close()


@pytest.mark.slow
def test_every_step_offered_in_the_recorded_gpu_session_is_accepted(tmp_path: Path) -> None:
    """The recorded H200 session (a kernel Target, a champion chain e1 -> e2, e3 rejected),
    folded up to each of its commits: every offered step is accepted, and every measuring
    command named is the kernel harness's."""
    clone = tmp_path / "ledger.git"
    subprocess.run(["git", "clone", "--quiet", "--mirror", str(RECORDED), str(clone)],
                   check=True)  # fmt: skip
    problems: list[str] = []
    with Ledger.open(clone) as ledger:
        heads = [entry.commit for entry in ledger.log()]
        for head in heads:
            state = ledger.state_at(head)
            problems += [f"at {head[:12]}: {p}" for p in check_offered(state, ledger.payload)]
            for tid, target in state.targets.items():
                if target.status != "current" or target_kind(target) is None:
                    continue
                assert target_kind(target) == "kernel"
                for d in allowed_decisions(state, tid, ledger.payload):
                    command = recommended_command(state, tid, d)
                    assert "measure workload" not in command and "--cmd" not in command, command
    assert len(heads) >= 26
    assert problems == []


@pytest.mark.parametrize("gpu_s", [0.0, 600.0], ids=["cpu-target", "gpu-budget"])
def test_handoff_offer_names_only_what_the_target_budgets(tmp_path: Path, gpu_s: float) -> None:
    """The handoff step ``status`` offers asks for GPU seconds only where the Target budgets
    GPU time (a CPU Target's handoff states none; before, ``--gpu-used`` was offered always)."""
    s = Session(Ledger.init(tmp_path / "ledger", name="walk", actor="agent"))
    try:
        s.run("target.freeze", target_freeze(budget={"wall_s": 3600.0, "gpu_s": gpu_s}))
        handoff = NextDecision(op="handoff.record", why="record the handoff", rule="R18")
        command = recommended_command(s.state(), T1, handoff)
        assert command.startswith(f"perfledger handoff record --target {T1}")
        assert ("--gpu-used" in command) is (gpu_s > 0)
    finally:
        s.ledger.close()


def test_a_target_whose_primary_the_subject_reports_is_offered_only_what_decides(
    self_timed: Any,
) -> None:
    """An older ledger's Target whose primary (``latency_ms``) the subject reports, measured by
    the self-timed driver (issue 34): every state offers only steps the deciders accept, and
    none of them measures it again (its samples could only be reported, deciding nothing, R5)
    nor selects its passed result; the step offered instead is to supersede it with an observed
    primary, which ``target.supersede``'s decider accepts and whose readiness is then made.
    Before, a passed result on it was offered for re-measurement "by perfledger", which could
    only record more reported figures."""
    s = self_timed
    states: list[Any] = []

    def walk() -> None:
        state = s.state()
        states.append(state)
        assert check_offered(state, s.ledger.payload) == []
        offered = allowed_decisions(state, T1, s.ledger.payload)
        ops = [d.op for d in offered]
        assert not {"samples.record", "experiment.create", "champion.select"} & set(ops), ops
        [supersede] = [d for d in offered if d.op == "target.supersede"]
        assert supersede.rule == "R5" and "'latency_ms' is a figure the subject reports" in (
            supersede.why
        )
        command = recommended_command(state, T1, supersede)
        assert command.startswith(f"perfledger target supersede --target {T1}"), command

    walk()
    s.passed()  # the target stage's verdict passes, marked reported: no champion comes of it
    assert s.state().verdicts["e1-target"].samples_provenance == "reported"
    walk()
    s.refused("champion.select", {"target_id": T1, "samples_id": "e1-target",
                                  "expected_current": "original"}, "R5")  # fmt: skip
    # what the step leads to works: the observed primary's Target is made ready
    new = target_freeze("t1-observed", primary={"name": "wall_time", "unit": "ms",
                        "direction": "lower_is_better", "statistic": "mean"})  # fmt: skip
    s.run("target.supersede", {"target_id": T1, "reason": "an observed primary",
                               "new_target": new})  # fmt: skip
    s.run("readiness.record", readiness("t1-observed"))
    assert s.state().targets["t1-observed"].readiness is not None
    assert len(states) == 2
