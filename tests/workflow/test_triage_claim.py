"""A triage of a real H200 trace (a small model's eager forward pass) feeds an experiment's claim:
recorded as the Target's same-boundary evidence, its top hotspot's ``f`` is the claim's coverage,
the bound follows from it (R6, R7), and the audit re-derives the triage."""

from __future__ import annotations

from pathlib import Path

from wf_scenario import ACTOR, T1, Session, experiment

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute
from perfledger.kernels.triage.record import (
    ANSWER,
    REPORT,
    encode_answer,
    evidence_body,
    run_triage,
)
from perfledger.ledger.base import Artifact

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "triage" / "forward_graph_off.json"


def _record_triage(ledger: Ledger, evidence_id: str, *, of_target: bool) -> dict:
    answer, inputs = run_triage(TRACE, top=3)
    body = evidence_body(answer, inputs[REPORT][0], evidence_id=evidence_id,
                         of_target=of_target, target_id=T1)  # fmt: skip
    artifacts = {name: Artifact(data, media) for name, (data, media) in inputs.items()}
    artifacts[ANSWER] = Artifact(encode_answer(answer), "application/json")
    execute(ledger, "evidence.add", body, actor=ACTOR, artifacts=artifacts)
    return answer


def test_the_top_hotspot_share_is_the_claims_coverage_and_bound(git_ledger: Ledger) -> None:
    session = Session(git_ledger).ready()
    answer = _record_triage(git_ledger, "triage-forward", of_target=True)
    top = answer["actions"][0]
    assert top["name"].startswith("void sgemm_largek_lds64") and top["action"] == "new opportunity"
    f, s = top["f"], 2.0
    bound = 1.0 / ((1.0 - f) + f / s)
    body = experiment()
    body["claim"].update(
        evidence=[
            {"evidence_id": "triage-forward", "applicability": "same_boundary",
             "used_for": "coverage"},
            {"evidence_id": "ev-ncu", "applicability": "conservative_upper_bound",
             "used_for": "local_speedup"},
        ],
        scope={"replaced_region": "the first Linear's GEMM (aten::addmm, 64x1024 @ 1024x4096)",
               "shapes": ["M=64,N=4096,K=1024 fp32"], "execution_form": "eager, one stream"},
        replacement_boundary="aten::addmm of the first Linear",
        coverage=f, local_speedup=s, stated_bound=bound,
        expected_improvement={"low": 0.0, "high": 1.0 - 1.0 / bound},
    )  # fmt: skip
    created = session.run("experiment.create", body)
    assert created["claim"]["coverage"] == f
    assert created["claim"]["evidence"][0]["evidence_id"] == "triage-forward"
    report = audit(git_ledger)
    assert report.ok, report.findings
    assert report.evidence_rederived >= 1


def test_a_diagnostic_triage_cannot_support_a_bound(git_ledger: Ledger) -> None:
    session = Session(git_ledger).ready()
    answer = _record_triage(git_ledger, "triage-diag", of_target=False)
    f = answer["actions"][0]["f"]
    body = experiment()
    body["claim"]["evidence"][0] = {"evidence_id": "triage-diag", "applicability": "diagnostic",
                                    "used_for": "coverage"}  # fmt: skip
    body["claim"].update(coverage=f, stated_bound=1.0 / ((1.0 - f) + f / 2.0))
    session.refused("experiment.create", body, "R6")


def test_evidence_that_claims_to_be_a_triage_without_its_inputs_is_an_audit_finding(
    git_ledger: Ledger,
) -> None:
    answer, inputs = run_triage(TRACE, top=2)
    body = evidence_body(answer, inputs[REPORT][0], evidence_id="forged", of_target=False,
                         target_id=None)  # fmt: skip
    execute(git_ledger, "evidence.add", body, actor=ACTOR)  # the same request, nothing attached
    other = evidence_body(answer, inputs[REPORT][0], evidence_id="future", of_target=False,
                          target_id=None)  # fmt: skip
    other["tool"]["version"] = "2 (torch.profiler)"
    execute(git_ledger, "evidence.add", other, actor=ACTOR)
    report = audit(git_ledger)
    assert not report.ok
    messages = " | ".join(f.message for f in report.findings)
    assert "it attaches no triage.json or no report" in messages
    assert "perfledger-triage version 2 (torch.profiler), unknown to this perfledger" in messages
