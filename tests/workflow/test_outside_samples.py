"""R5: samples recorded from outside perfledger are recorded and shown, labelled as outside, but
never make a champion (``ChampionSelected`` schema 5) nor pass a final audit
(``FinalAuditRecorded`` schema 8); decisions recorded before keep their rule at audit.

Every request goes through the real path (validate, decide on the folded state, append to a git
ledger) in-process. The ``test_cheat_*`` tests play the agent that wants a champion; each has an
honest control beside it.

Outside samples are possible only where the primary is not observed (R5: an observed primary
takes measured samples only), and such a Target is made ready only by an older perfledger
(``ReadinessRecorded`` 6 refuses it): these tests run on ``wf_legacy``'s Target made ready so.
Its measured samples are the self-timed driver's, figures the subject reports: since
``ChampionSelected`` 7 and ``FinalAuditRecorded`` 11 they make no champion and pass no final
audit either; the controls show the rule before (an old ledger's selection) where a measured
result made one.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from wf_legacy import (
    BEFORE_REPORTED,
    RAW_TABLE,
    T1,
    Session,
    baseline,
    before_reported,
    evidence,
    measured,
    metric_audit,
    readiness,
    rules_at,
    samples,
    self_timed_ready,
    target_freeze,
)

from perfledger.api import Ledger
from perfledger.app.next_steps import allowed_decisions
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.registry.operations import execute, validate
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.requests import dump
from perfledger.errors import RuleRefused
from perfledger.events.workflow import (
    R5_MEASURED_CHAMPION,
    R5_MEASURED_FINAL_AUDIT,
    R5_REPORTED_CHAMPION,
    R5_REPORTED_FINAL_AUDIT,
)
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.projections.champions import current_champions

SELECT_E1 = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}


@pytest.fixture
def bare(tmp_path: Path) -> Any:
    """A :mod:`wf_legacy` session on a fresh ledger (its Target's primary is reported)."""
    with Ledger.init(tmp_path / "ledger", name="wf", actor="agent") as ledger:
        yield Session(ledger)


@pytest.fixture
def ready(bare: Session) -> Session:
    """:func:`wf_legacy.self_timed_ready`: made ready as an older perfledger did."""
    return self_timed_ready(bare.ledger)


def _reported_champion_refused(session: Session, samples_id: str) -> None:
    """The honest control of these tests: a target stage measured by perfledger's self-timed
    driver is recorded and passes, but its figures are the subject's own: no champion now
    (R5), one before ``ChampionSelected`` 7 (an old ledger's selection, decided here)."""
    session.record_measured(samples(samples_id, "target"))
    verdict = session.run("verdict.record", {"samples_id": samples_id})
    assert verdict["status"] == "pass" and verdict["samples_provenance"] == "reported"
    select = {**SELECT_E1, "samples_id": samples_id}
    assert (
        "figures the subject reported" in session.refused("champion.select", select, "R5").message
    )
    [old] = _decide(session, "champion.select", select, schema=R5_REPORTED_CHAMPION - 1)
    assert old.payload.experiment_id == "e1"


def _decide(session: Session, op: str, body: dict[str, Any], schema: int | None = None,
            payload_of: Any = "ledger") -> list[Any]:  # fmt: skip
    """Call ``op``'s decider directly, as a Python caller (or the auditor re-deciding an event
    recorded under ``schema``) would; returns its drafts or raises its refusal."""
    ctx = DecisionContext(
        op=op, actor="agent", ts=datetime(2026, 1, 2, tzinfo=UTC),
        request={"op": op, "body": body}, schema=schema,
        payload_of=session.ledger.payload if payload_of == "ledger" else payload_of,
    )  # fmt: skip
    return operations.decider(op)(session.state(), operations.validate(op, body), ctx)


def _outside_pass(ready: Session) -> None:
    """e1: screened, and target samples recorded from outside whose verdict passes."""
    ready.screened()
    ready.run("samples.record", samples("e1-target", "target"))
    assert ready.run("verdict.record", {"samples_id": "e1-target"})["status"] == "pass"


# ---------------------------------------------------------------------------- champion select


def test_r5_outside_target_samples_are_shown_but_never_make_a_champion(ready: Session) -> None:
    _outside_pass(ready)
    verdict = ready.state().verdicts["e1-target"]
    assert verdict.samples_provenance == "outside"  # recorded and shown, labelled
    error = ready.refused("champion.select", SELECT_E1, "R5")
    assert "recorded from outside perfledger" in error.message
    assert "perfledger measure workload --experiment e1 --stage target" in error.hint
    assert "--samples e1-target-measured" in error.hint
    assert current_champions(ready.state())[0].champion == "original"
    # control: the same experiment's target stage measured by the self-timed driver
    _reported_champion_refused(ready, "e1-target-measured")
    assert audit(ready.ledger).ok


def test_r5_status_offers_the_measured_target_stage_not_the_outside_champion(
    ready: Session,
) -> None:
    """Next steps are decisions too: the refused selection is not offered. This Target's
    primary is a figure the subject reports, so measuring its target stage again could record
    only reported figures, which decide nothing either (issue 34): the step offered is to
    supersede the Target with an observed primary, not a measurement."""
    _outside_pass(ready)
    offered = allowed_decisions(ready.state(), T1, ready.ledger.payload)
    assert not [d for d in offered if d.op in ("champion.select", "samples.record")]
    (supersede,) = [d for d in offered if d.op == "target.supersede"]
    assert supersede.rule == "R5" and "figure the subject reports" in supersede.why


def test_cheat_calling_the_champion_decider_directly_is_refused(ready: Session) -> None:
    """A Python caller skips the CLI and the ledger: the decider itself refuses, with the
    samples' event (``payload_of``) and without it (the verdict's mark decides)."""
    _outside_pass(ready)
    for payload_of in ("ledger", None):
        with pytest.raises(RuleRefused) as info:
            _decide(ready, "champion.select", SELECT_E1, payload_of=payload_of)
        assert info.value.rule == "R5"
    # the rule before this one selected it: an old ledger audits as it did
    drafts = _decide(ready, "champion.select", SELECT_E1, schema=R5_MEASURED_CHAMPION - 1)
    assert drafts[0].payload.experiment_id == "e1"


def test_cheat_a_forged_champion_on_outside_samples_is_found_by_the_audit(ready: Session) -> None:
    """A forger with write access appends the selection the decider refused (its current
    schema); the auditor re-decides it and finds R5."""
    _outside_pass(ready)
    [draft] = _decide(ready, "champion.select", SELECT_E1, schema=R5_MEASURED_CHAMPION - 1)
    request = {"op": "champion.select", "body": dump(validate("champion.select", SELECT_E1))}
    forged = ready.ledger.store.append(
        EventDraft("ChampionSelected", draft.payload, "tampered-tool", request=request)
    ).id
    report = audit(ready.ledger)
    found = [f for f in report.findings if f.event_id == forged]
    assert [f.rule for f in found] == ["R5"], [f.to_json() for f in report.findings]
    assert not report.ok


def test_cheat_relabelling_outside_samples_as_measured_is_refused(ready: Session) -> None:
    """Outside samples cannot be recorded again as measured (their id is taken), nor claimed
    measured without the raw table a measurement attaches, nor with a table that does not hold
    their pairs."""
    _outside_pass(ready)
    body, table = measured(samples("e1-target", "target"))
    ready.refused("samples.record", body, None, artifacts=table)  # already recorded
    fresh, table = measured(samples("e1-target-2", "target"))
    ready.run("formal-run.start", {"experiment_id": "e1", "stage": "target",
                                   "samples_id": "e1-target-2", "protocol": "workload_abba"})  # fmt: skip
    assert "raw table" in ready.refused("samples.record", fresh, None).message  # none attached
    forged = json.loads(table[RAW_TABLE].data)
    for row in forged["table"]:  # the candidate's calls made faster in the table only
        if row["subject"] == "cand":
            row["metrics"]["latency_ms"] = [v * 0.5 for v in row["metrics"]["latency_ms"]]  # fmt: skip
    forged_table = {RAW_TABLE: Artifact(json.dumps(forged).encode(), "application/json")}
    with pytest.raises(RuleRefused) as info:
        execute(ready.ledger, "samples.record", fresh, actor="agent", artifacts=forged_table)
    assert info.value.rule == "R5" and "differ from the table's call" in info.value.message
    # honest control: the table the measurement wrote
    assert ready.run("samples.record", fresh, artifacts=table)["provenance"]["source"] == (
        "perfledger"
    )


def test_cheat_outside_formal_samples_without_the_readiness_allowing_them_are_refused(
    bare: Session,
) -> None:
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    body = readiness()
    body["statistics"] = {**body["statistics"], "allow_outside_samples": False}
    body["original"] = {**body["original"], "unsnapshotted": "pairs written by the test"}
    with before_reported("ReadinessRecorded"):  # as an older perfledger made it ready
        bare.run("readiness.record", body)
    bare.run("metric-audit.record", metric_audit())
    bare.run("baseline.record", baseline())
    bare.measure_aa()
    bare.screened()  # a screen takes outside samples, marked
    error = bare.refused("samples.record", samples("e1-target", "target"), "R5")
    assert "does not allow outside samples" in error.message
    # control: measured, they are accepted (and, reported, make no champion now)
    _reported_champion_refused(bare, "e1-target")


def test_cheat_selecting_on_a_clone_is_refused_there_too(ready: Session, tmp_path: Path) -> None:
    """A clone (``git clone --mirror`` of the ledger) runs the same deciders: the outside result
    is refused there too, as is a self-timed one (selected there by the rule before)."""
    _outside_pass(ready)
    clone_path = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--mirror", str(tmp_path / "ledger"),
                    str(clone_path)], check=True)  # fmt: skip
    with Ledger.open(clone_path) as clone:
        other = Session(clone)
        other.refused("champion.select", SELECT_E1, "R5")
        _reported_champion_refused(other, "e1-target-measured")


# -------------------------------------------------------------------------------- final audit


def test_r5_a_final_audit_on_outside_samples_cannot_pass(ready: Session) -> None:
    with rules_at(BEFORE_REPORTED):  # an old ledger's champion, on self-timed samples
        ready.passed()
        ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=0.2))
    error = ready.refused("final-audit.record", {"target_id": T1, "samples_id": "e1-final",
                                                 "claimed_status": "pass"}, "R12")  # fmt: skip
    assert "recorded from outside perfledger" in error.message
    # the rule before this one passed it: an old ledger audits as it did
    [old] = _decide(ready, "final-audit.record", {"target_id": T1, "samples_id": "e1-final"},
                    schema=R5_MEASURED_FINAL_AUDIT - 1)  # fmt: skip
    assert old.payload.status == "pass"
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["status"] == "inconclusive" and final["samples_provenance"] == "outside"
    [note] = [n for n in final["notes"] if n.startswith("R5:")]
    assert "perfledger measure workload --experiment e1 --stage final_audit" in note
    assert "--samples e1-audit-measured" in note
    # control: the champion's final audit measured by the self-timed driver: reported figures
    # (it passed before FinalAuditRecorded 11)
    ready.record_measured(samples("e1-audit-measured", "final_audit", gain=0.2))
    request = {"target_id": T1, "samples_id": "e1-audit-measured"}
    [old] = _decide(ready, "final-audit.record", request, schema=R5_REPORTED_FINAL_AUDIT - 1)
    assert old.payload.status == "pass" and old.payload.samples_provenance == "perfledger"
    final = ready.run("final-audit.record", request)
    assert final["status"] == "inconclusive" and final["samples_provenance"] == "reported"
    assert audit(ready.ledger).ok


def test_r5_a_failing_final_audit_on_outside_samples_still_fails(ready: Session) -> None:
    """The rule takes a pass away; it never turns a failure into anything else."""
    with rules_at(BEFORE_REPORTED):  # an old ledger's champion, on self-timed samples
        ready.passed()
        ready.champion("e1")
    ready.run("samples.record", samples("e1-final", "final_audit", gain=-0.05))
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["status"] == "fail"
    assert any(n.startswith("R5:") for n in final["notes"])
