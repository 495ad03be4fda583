"""R11 at readiness, from ``ReadinessRecorded`` schema 3: a Target whose formal stages take only
samples perfledger measured owes the driver's ``{subject}`` place (results bound to code), or a
stated reason why its code cannot be snapshotted, recorded and shown as narrowing the claims.
Readiness recorded before keeps the old rule. In-process on real ledgers (``bare``)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from wf_scenario import (
    Session,
    baseline,
    evidence,
    experiment,
    metric_audit,
    readiness,
    resolution,
    target_freeze,
)

from perfledger.commands.workflow import identity
from perfledger.commands.workflow import requests as rq
from perfledger.errors import RuleRefused
from perfledger.events.workflow import R11_SUBJECT_OWED, R11_WHOLE_SUBJECT, SCHEMA_VERSIONS
from perfledger.projections.handoff import unresolved

REASON = "the code is a vendor binary installed system-wide"


def _formal(**original: Any) -> dict[str, Any]:
    """A readiness body whose formal stages take only samples perfledger measured."""
    body = readiness()
    body["statistics"] = {**body["statistics"], "allow_outside_samples": False}
    body["original"] = {**body["original"], **original}
    return body


def test_r11_new_readiness_without_a_subject_place_is_refused_with_a_hint(bare: Session) -> None:
    assert SCHEMA_VERSIONS["ReadinessRecorded"] >= R11_SUBJECT_OWED
    bare.run("target.freeze", target_freeze())
    error = bare.refused("readiness.record", _formal(), "R11")
    assert "declares no {subject} place" in error.message
    # the hint rewrites the driver and names both ways out
    assert '["python", "{subject}/bench.py", "--out", "{output}"]' in error.hint
    assert "original.subject" in error.hint and "original.unsnapshotted" in error.hint
    assert bare.state().targets["t1"].readiness is None


def test_r11_readiness_stating_why_code_cannot_be_snapshotted_is_recorded_and_shown(
    bare: Session,
) -> None:
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    payload = bare.run("readiness.record", _formal(unsnapshotted=REASON))
    assert payload["original"]["unsnapshotted"] == REASON
    state = bare.state()
    lines = unresolved(state, state.targets["t1"])
    assert any("code not snapshotted (R11)" in line and REASON in line for line in lines), lines
    for op, body in (("metric-audit.record", metric_audit()), ("baseline.record", baseline()),
                     ("resolution.record", resolution())):  # fmt: skip
        bare.run(op, body)
    # the old rule then holds: changed paths are typed (and checked against the scope)
    untyped = experiment("e1")
    untyped["candidate"] = {"content_hash": untyped["candidate"]["content_hash"]}
    with pytest.raises(RuleRefused, match="changed_paths is needed"):
        bare.run("experiment.create", untyped)


def test_r11_unsnapshotted_with_a_subject_place_is_refused(bare: Session) -> None:
    bare.run("target.freeze", target_freeze())
    body = _formal(unsnapshotted=REASON)
    body["driver"] = {"argv": ["python", "{subject}/bench.py"]}
    error = bare.refused("readiness.record", body, "R11")
    assert "original.unsnapshotted" in error.message


def test_r11_readiness_allowing_outside_samples_or_diagnostic_owes_no_subject_place(
    bare: Session,
) -> None:
    bare.run("target.freeze", target_freeze())
    bare.run("readiness.record", readiness())  # outside samples allowed: nothing to bind
    bare.run("target.freeze", target_freeze("t2", diagnostic=True))
    bare.run("evidence.add", evidence())
    bare.run("readiness.record", {**_formal(), "target_id": "t2", "reports": ["ev-ncu"]})


def test_r11_readiness_recorded_before_schema_3_keeps_the_old_rule(bare: Session) -> None:
    """A readiness without a {subject} place recorded under schema 2 re-decides clean by its
    own rule (what an auditor's replay runs)."""
    bare.run("target.freeze", target_freeze())
    target = bare.state().targets["t1"]
    request = msgspec.convert(_formal(), rq.ReadinessRecord)
    identity.r11_readiness_snapshot(target, request, R11_WHOLE_SUBJECT)
    with pytest.raises(RuleRefused):
        identity.r11_readiness_snapshot(target, request, R11_SUBJECT_OWED)
