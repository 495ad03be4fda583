"""Outputs judged by perfledger in the deciders (R2, R5; ``output_rules``): a readiness's accuracy
rule must agree with its driver's ``{output}`` place; a judged call is correct only when its own
check and the output comparison both hold; workload samples measured by perfledger for a
readiness that compares outputs carry every call's check. Real ledger, real deciders."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from wf_scenario import Session, make_pairs, readiness, samples

from perfledger.commands.workflow import output_rules
from perfledger.commands.workflow import requests as rq
from perfledger.errors import BadRequest, RuleRefused

OUTPUT_DRIVER = {"argv": ["python", "bench.py", "--out", "{output}", "--seed", "{seed}"]}


def _judged(ok: bool, self_correct: bool = True) -> dict[str, Any]:
    return {"method": "outputs_v1", "compare": "exact", "self_correct": self_correct,
            "blake3": "ab" * 32, "size": 10, "ok": ok, "reason": "" if ok else "differ"}  # fmt: skip


def _comparing(bare: Session) -> Session:
    """A ready Target whose readiness compares outputs exactly."""
    from wf_scenario import baseline, evidence, metric_audit, target_freeze

    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    bare.run("readiness.record", readiness(driver=OUTPUT_DRIVER, accuracy={"compare": "exact"}))
    bare.run("metric-audit.record", metric_audit())
    bare.run("baseline.record", baseline())
    bare.measure_aa()
    return bare


def _pairs(tag: str) -> list[dict[str, Any]]:
    pairs = make_pairs(0.2, tag=tag)
    for pair in pairs:
        pair["ref"]["output"] = _judged(True)
        pair["cand"]["output"] = _judged(True)
    return pairs


def test_r5_judged_samples_record_their_output_checks(bare: Session) -> None:
    session = _comparing(bare)
    from wf_scenario import experiment

    session.run("experiment.create", experiment("e1"))
    pairs = _pairs("s")
    pairs[0]["cand"]["output"] = _judged(False)
    pairs[0]["cand"]["correct"] = False  # both checks, as measure workload records them
    recorded = session.run("samples.record", samples("e1-screen", "screen", pairs=pairs))
    assert recorded["pairs"][0]["cand"]["output"]["reason"] == "differ"
    assert recorded["cand_failures"] == 1


def test_r5_judged_call_claiming_correct_despite_a_failed_output_check_is_refused(
    bare: Session,
) -> None:
    session = _comparing(bare)
    from wf_scenario import experiment

    session.run("experiment.create", experiment("e1"))
    pairs = _pairs("s")
    pairs[2]["cand"]["output"] = _judged(False)  # the comparison failed; correct left true
    body = samples("e1-screen", "screen", pairs=pairs)
    body["provenance"] = None  # typed as is: the decider's own check, before any other
    error = session.refused("samples.record", body, "R5")
    assert "correct only when both hold" in error.message


def test_r5_output_check_where_the_readiness_compares_none_is_a_bad_request(
    bare: Session,
) -> None:
    from wf_scenario import baseline, evidence, experiment, metric_audit, target_freeze

    ready = bare
    ready.run("target.freeze", target_freeze())
    ready.run("evidence.add", evidence())
    ready.run("readiness.record", readiness(driver={"argv": ["python", "bench.py"]}, accuracy=None))
    ready.run("metric-audit.record", metric_audit())
    ready.run("baseline.record", baseline())
    ready.measure_aa()
    ready.run("experiment.create", experiment("e1"))
    body = samples("e1-screen", "screen", pairs=_pairs("s"))
    body["provenance"] = None  # typed as is: the decider's own check, before any other
    error = ready.refused("samples.record", body, None)
    assert isinstance(error, BadRequest) and "compares no outputs" in error.message


def test_r5_measured_workload_samples_judged_by_the_subject_only_are_refused(
    bare: Session,
) -> None:
    session = _comparing(bare)
    target = session.state().targets["t1"]
    body = samples("e1-target", "target", pairs=make_pairs(0.2, tag="t"))
    body["provenance"] = {"source": "perfledger", "protocol": "workload_abba",
                          "raw_table": "samples.json", "settings": {}}  # fmt: skip
    request = msgspec.convert(body, rq.SamplesRecord)
    with pytest.raises(RuleRefused) as info:
        output_rules.check_samples(target.readiness, request)
    assert info.value.rule == "R5" and "judged by the subject only" in info.value.message
    body["pairs"] = _pairs("t")
    body["provenance"]["settings"] = {
        "outputs": {"accuracy": {"compare": "allclose", "rtol": 0.1, "atol": 0.0}}
    }
    with pytest.raises(RuleRefused, match="compared by"):  # not the readiness's rule
        output_rules.check_samples(target.readiness, msgspec.convert(body, rq.SamplesRecord))
    body["provenance"]["settings"] = {
        "outputs": {"accuracy": {"compare": "exact", "rtol": 0.0, "atol": 0.0}}
    }
    output_rules.check_samples(target.readiness, msgspec.convert(body, rq.SamplesRecord))


def test_r2_readiness_records_its_accuracy_rule(bare: Session) -> None:
    session = _comparing(bare)
    accuracy = session.state().targets["t1"].readiness.accuracy
    assert accuracy.compare == "exact" and accuracy.rtol == 0.0
