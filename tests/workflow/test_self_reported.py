"""R5, issue 34: perfledger observes; a figure a subject reports is secondary only. It can never be
a Target's primary nor decide a verdict or a champion:

- ``ReadinessRecorded`` 6: a workload readiness (not the kernel harness, not serving) for a Target
  whose primary is not observed (``wall_time``, ``cpu_time``) is refused, in the decider;
- ``VerdictRecorded`` 9 / ``FinalAuditRecorded`` 11 mark the self-timed driver's samples
  ``reported``; ``ChampionSelected`` 7 refuses a champion on them and ``FinalAuditRecorded`` 11
  does not let a final audit on them pass;
- a ledger an older perfledger wrote (its events at the versions before) audits clean.

Real ledgers, real deciders. The ``test_cheat_*`` tests play a subject (or its agent) that wants
its own figure to decide; each has an honest control beside it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import wf_legacy as legacy
from wf_legacy import BEFORE_MEASURED_BASELINE, BEFORE_REPORTED, rules_at
from wf_scenario import T1, Session, evidence, readiness, target_freeze

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry import operations
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.workflow import (
    OBSERVED_METRICS,
    R1_OBSERVED_DIRECTION,
    R5_OBSERVED_PRIMARY_READINESS,
    R5_REPORTED_CHAMPION,
    R5_REPORTED_FINAL_AUDIT,
    R5_REPORTED_VERDICT,
    SCHEMA_VERSIONS,
)
from perfledger.projections.champions import current_champions

SELECT_E1 = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}


def _decide(state: Any, op: str, body: dict[str, Any], schema: int | None = None,
            payload_of: Any = None) -> list[Any]:  # fmt: skip
    """``op``'s decider called directly (a Python caller, or the auditor re-deciding an event
    recorded under ``schema``); returns its drafts or raises its refusal."""
    ctx = DecisionContext(op=op, actor="agent", ts=datetime(2026, 1, 2, tzinfo=UTC),
                          request={"op": op, "body": body}, schema=schema,
                          payload_of=payload_of)  # fmt: skip
    return operations.decider(op)(state, operations.validate(op, body), ctx)


def _frozen(bare: Session, primary: dict[str, Any]) -> Session:
    """``bare`` with the scenario's Target frozen on ``primary`` (the rest as the scenario's)."""
    bare.run("target.freeze", target_freeze(primary=primary))
    bare.run("evidence.add", evidence())
    return bare


def _primary(name: str, unit: str = "ms") -> dict[str, Any]:
    return {"name": name, "unit": unit, "direction": "lower_is_better", "statistic": "mean"}


def test_r5_the_rule_versions_are_the_ones_assigned() -> None:
    assert SCHEMA_VERSIONS["ReadinessRecorded"] == R5_OBSERVED_PRIMARY_READINESS == 6
    # VerdictRecorded rose since (10: R4's resolution in force when the formal run started)
    assert SCHEMA_VERSIONS["VerdictRecorded"] >= R5_REPORTED_VERDICT == 9
    # ChampionSelected rose since (8: R12's flags cleared only by a review naming them)
    assert SCHEMA_VERSIONS["ChampionSelected"] >= R5_REPORTED_CHAMPION == 7
    # FinalAuditRecorded rose since (12: a final audit on flagged samples needs a naming review)
    assert SCHEMA_VERSIONS["FinalAuditRecorded"] >= R5_REPORTED_FINAL_AUDIT == 11
    # (BEFORE_REPORTED also holds SamplesRecorded at the version those perfledgers wrote)
    assert {k: v + 1 for k, v in BEFORE_REPORTED.items() if k != "SamplesRecorded"} == {
        "ReadinessRecorded": R5_OBSERVED_PRIMARY_READINESS,
        "VerdictRecorded": R5_REPORTED_VERDICT,
        "ChampionSelected": R5_REPORTED_CHAMPION,
        "FinalAuditRecorded": R5_REPORTED_FINAL_AUDIT,
    }


# ---------------------------------------------------------------------------------- readiness


def test_r5_self_reported_primary_refused_at_readiness(bare: Session) -> None:
    """A workload Target whose primary the subject reports (``latency_ms``) is not made ready:
    the refusal names the observed metrics and what to do; nothing is appended. The decider
    refuses it, whoever calls it."""
    _frozen(bare, _primary("latency_ms"))
    error = bare.refused("readiness.record", readiness(), "R5")
    assert "'latency_ms' is a figure the workload reports itself" in error.message
    assert all(name in error.message for name in OBSERVED_METRICS)
    assert "`wall_time` or `cpu_time`" in error.hint and "secondary metrics" in error.hint
    assert bare.state().targets[T1].readiness is None
    with pytest.raises(RuleRefused) as direct:  # a Python caller skipping the CLI
        _decide(bare.state(), "readiness.record", readiness())
    assert direct.value.rule == "R5"
    # the rule before it made it ready: an old ledger audits as it did
    [old] = _decide(bare.state(), "readiness.record", readiness(),
                    schema=R5_OBSERVED_PRIMARY_READINESS - 1)  # fmt: skip
    assert old.payload.target_id == T1


@pytest.mark.parametrize("primary", ["wall_time", "cpu_time"])
def test_r5_an_observed_primary_is_made_ready(bare: Session, primary: str) -> None:
    """The honest control: the same readiness for an observed primary is accepted."""
    bare.run("target.freeze", target_freeze(primary=_primary(primary), secondaries=[]))
    assert bare.run("readiness.record", readiness())["target_id"] == T1


def test_r5_the_kernel_harness_a_serving_target_and_a_diagnostic_one_are_not_refused(
    bare: Session,
) -> None:
    """The kernel harness times every batch itself, a serving Target's client every request;
    a diagnostic Target decides nothing: none of their readiness is refused."""
    _frozen(bare, _primary("kernel_time", "us"))
    harness = {"argv": ["perfledger", "measure", "kernel", "--spec", "spec.py"]}
    assert bare.run("readiness.record", readiness(driver=harness, accuracy=None))
    bare.run("target.freeze", target_freeze("t-serve", primary=_primary("ttft_ms")))
    serve = {"argv": ["vllm", "serve"]}
    assert bare.run("readiness.record", readiness("t-serve", driver=serve, accuracy=None))
    bare.run("target.freeze", target_freeze("t-diag", primary=_primary("latency_ms"),
                                            diagnostic=True))  # fmt: skip
    assert bare.run("readiness.record", readiness("t-diag", test_set=None, driver=None,
                                                  reports=["ev-ncu"]))  # fmt: skip


@pytest.mark.parametrize(
    ("name", "unit"),
    [("wall_time_reported", "ms"), ("wall_time_ms", "ms"), ("Wall_Time", "ms"),
     ("latency_ms", "ms"), ("latency", "s"), ("tokens_per_call", "tokens/s")],
)  # fmt: skip
def test_cheat_a_reported_figure_named_like_an_observed_one_is_refused(
    bare: Session, name: str, unit: str
) -> None:
    """The subject's own timer under a name that reads as perfledger's clock (or a unit that
    reads as a time) is still the subject's figure: refused at readiness."""
    _frozen(bare, _primary(name, unit))
    error = bare.refused("readiness.record", readiness(), "R5")
    assert repr(name) in error.message


@pytest.mark.parametrize("unit", ["tokens/s", "calls", "ratio"])
def test_cheat_an_observed_name_in_a_unit_that_is_not_a_time_is_refused(
    bare: Session, unit: str
) -> None:
    """``wall_time`` in ``tokens/s``: perfledger's name on a figure its clock cannot give (a
    rate the subject computes, a count): refused at readiness; in ms it is made ready."""
    with pytest.raises(BadRequest, match="its unit is one of"):  # R1 refuses it at freeze now
        bare.run("target.freeze", target_freeze(primary=_primary("wall_time", unit)))
    with rules_at({"TargetFrozen": R1_OBSERVED_DIRECTION - 1}):  # a Target frozen before
        _frozen(bare, _primary("wall_time", unit))
    error = bare.refused("readiness.record", readiness(), "R5")
    assert "is observed time" in error.message and repr(unit) in error.message


# ---------------------------------------------------------------- verdicts, champions, audits


def test_r5_self_timed_samples_cannot_make_champion(self_timed: legacy.Session) -> None:
    """An older ledger's Target whose primary the subject reports, measured by the self-timed
    driver (provenance ``perfledger``, protocol ``workload_abba``): the target stage is recorded
    and its verdict passes, marked ``reported``; no champion comes of it, the decider refuses it
    directly too, and the rule before (``ChampionSelected`` 6) selected it."""
    s = self_timed
    s.passed()
    verdict = s.state().verdicts["e1-target"]
    assert verdict.status == "pass" and verdict.samples_provenance == "reported"
    error = s.refused("champion.select", SELECT_E1, "R5")
    assert "figures the subject reported" in error.message and "--protocol self" in error.message
    assert "perfledger measure workload --experiment e1 --stage target" in error.hint
    for payload_of in (s.ledger.payload, None):  # with the samples' event and without it
        with pytest.raises(RuleRefused) as direct:
            _decide(s.state(), "champion.select", SELECT_E1, payload_of=payload_of)
        assert direct.value.rule == "R5"
    [old] = _decide(s.state(), "champion.select", SELECT_E1, R5_REPORTED_CHAMPION - 1,
                    s.ledger.payload)  # fmt: skip
    assert old.payload.experiment_id == "e1"
    assert current_champions(s.state())[0].champion == "original"
    assert audit(s.ledger).ok


def test_r5_self_timed_final_audit_cannot_pass(self_timed: legacy.Session) -> None:
    """A champion an older perfledger selected on self-timed samples: its final audit on them is
    ``inconclusive`` with a note naming the measuring command; it passed before."""
    s = self_timed
    with rules_at(BEFORE_REPORTED):  # verdicts and champion as an older perfledger recorded
        s.passed()
        s.champion()
    s.record_measured(legacy.samples("e1-final", "final_audit"))
    request = {"target_id": T1, "samples_id": "e1-final"}
    [old] = _decide(s.state(), "final-audit.record", request, R5_REPORTED_FINAL_AUDIT - 1,
                    s.ledger.payload)  # fmt: skip
    assert old.payload.status == "pass" and old.payload.samples_provenance == "perfledger"
    final = s.run("final-audit.record", request)
    assert final["status"] == "inconclusive" and final["samples_provenance"] == "reported"
    [note] = [n for n in final["notes"] if n.startswith("R5:")]
    assert "figures the subject reported" in note and "final-audit record" in note
    assert audit(s.ledger).ok


def test_r5_a_verdict_before_version_9_marks_self_timed_samples_measured(
    self_timed: legacy.Session,
) -> None:
    s = self_timed
    s.screened()
    s.record_measured(legacy.samples("e1-target", "target"))
    request = {"samples_id": "e1-target"}
    [old] = _decide(s.state(), "verdict.record", request, R5_REPORTED_VERDICT - 1,
                    s.ledger.payload)  # fmt: skip
    [new] = _decide(s.state(), "verdict.record", request, None, s.ledger.payload)
    assert old.payload.samples_provenance == "perfledger"
    assert new.payload.samples_provenance == "reported"


def test_r5_observed_samples_make_a_champion_and_pass_the_final_audit(ready: Session) -> None:
    """The honest control: the scenario's Target (``wall_time``, measured by the worker
    protocol) reaches a champion and a passing final audit; its ledger audits clean."""
    assert ready.passed()["samples_provenance"] == "perfledger"
    assert ready.champion()["experiment_id"] == "e1"
    from wf_scenario import samples

    ready.record_measured(samples("e1-final", "final_audit"))
    final = ready.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["status"] == "pass" and final["samples_provenance"] == "perfledger"
    assert audit(ready.ledger).ok


def test_cheat_a_subject_relabelling_its_self_timed_samples_as_observed_is_refused(
    self_timed: legacy.Session,
) -> None:
    """The self-timed driver's table claimed as the worker protocol's: the table's kind is not
    the protocol's (R5), and a worker table cannot carry the subject's figure at all."""
    s = self_timed
    s.screened()
    body, table = legacy.measured(legacy.samples("e1-target", "target"))
    body["provenance"]["protocol"] = "worker/v1"
    s.run("formal-run.start", {"experiment_id": "e1", "stage": "target",
                               "samples_id": "e1-target", "protocol": "worker/v1"})  # fmt: skip
    error = s.refused("samples.record", body, "R5", artifacts=table)
    assert "worker" in error.message


# ----------------------------------------------------------------------- old ledgers audit clean


def test_r5_a_ledger_written_before_the_rule_audits_clean(tmp_path: Path) -> None:
    """The whole scenario as an older perfledger wrote it (every kind of issue 34's rule at its
    version before): a self-reported primary, self-timed samples, a champion and a passing final
    audit. The auditor re-decides each event by its own version's rule: clean."""
    with Ledger.init(tmp_path / "ledger", name="old", actor="agent") as ledger:
        s = legacy.Session(ledger)
        with rules_at({**BEFORE_REPORTED, "BaselineRecorded": BEFORE_MEASURED_BASELINE,
                       "TargetFrozen": R1_OBSERVED_DIRECTION - 1}):  # fmt: skip
            s.ready()
            s.passed()
            s.champion()
            s.record_measured(legacy.samples("e1-final", "final_audit"))
            final = s.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
            assert final["status"] == "pass"
        versions = {e.kind: e.envelope.schema for e in ledger.events()}
        assert {k: versions[k] for k in BEFORE_REPORTED} == BEFORE_REPORTED
        report = audit(ledger)
        assert report.ok and report.findings == [], [f.to_json() for f in report.findings]
        assert current_champions(ledger.state())[0].champion == "e1"
        # decided now, its readiness is refused (its champion and audit: the tests above)
        with pytest.raises(RuleRefused, match="reports itself"):
            _decide(ledger.state(), "readiness.record", legacy.readiness())
