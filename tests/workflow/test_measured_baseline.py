"""R4: a baseline decides only when perfledger measured it (issue 34: baselines, like
resolutions, come only from measured runs; ``BaselineRecorded`` schema 2,
:mod:`perfledger.commands.workflow.baseline_table`). Each cheat is written beside its honest
control, on a real ledger through the deciders; baselines recorded before the rule keep their
typed meaning and audit as before."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import msgspec
import pytest
from wf_legacy import rules_at
from wf_scenario import (
    ACTOR,
    BASELINE_TABLE,
    CASES,
    PRIMARY,
    T1,
    Session,
    aa_rows,
    baseline,
    evidence,
    experiment,
    make_pairs,
    measured_baseline,
    metric_audit,
    readiness,
    samples,
    target_freeze,
)

from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import preview
from perfledger.commands.workflow.aa_table import aa_binding
from perfledger.commands.workflow.baseline_table import BaselineTableMismatch, rederive_baseline
from perfledger.events.kinds import get_kind
from perfledger.events.workflow import (
    R1_OBSERVED_DIRECTION,
    R4_MEASURED_BASELINE,
    R17_BASELINE_WINDOWS,
    SCHEMA_VERSIONS,
)
from perfledger.ledger.base import Artifact

#: Four calls per case at the level ``make_pairs`` gives the reference (10 ms x (1 + 0.3 i)).
LEVELS = {case: 10.0 * (1.0 + 0.3 * i) for i, case in enumerate(CASES)}


def _per_case(factor: float = 1.0) -> dict[str, Any]:
    values, cases = [], []
    for case, level in LEVELS.items():
        for jitter in (0.998, 1.0, 1.002, 1.004):
            values.append(factor * level * jitter)
            cases.append(case)
    return baseline(values=values, cases=cases)


def _ready_to_baseline(session: Session) -> None:
    session.run("target.freeze", target_freeze())
    session.run("evidence.add", evidence())
    session.run("readiness.record", readiness())
    session.run("metric-audit.record", metric_audit())


def _typed(session: Session, body: dict[str, Any]) -> Any:
    """``baseline record`` of typed values (no table attached): what an agent types."""
    return session.run("baseline.record", body, artifacts={})


def _slowed_in(pairs: list[dict[str, Any]], case: str, factor: float) -> list[dict[str, Any]]:
    """Both subjects ``factor`` slower in ``case``: the reference slowed, the candidate at the
    baseline's own speed there (no gain of its own)."""
    out = copy.deepcopy(pairs)
    for pair in out:
        if pair["case"] == case:
            for side in ("ref", "cand"):
                pair[side]["values"][PRIMARY] = [v * factor for v in pair[side]["values"][PRIMARY]]
    return out


def test_r4_the_baseline_rule_version_is_the_one_assigned() -> None:
    assert SCHEMA_VERSIONS["BaselineRecorded"] >= R4_MEASURED_BASELINE == 2


def test_r4_honest_a_measured_baseline_decides_and_audits_clean(bare: Session) -> None:
    _ready_to_baseline(bare)
    recorded = bare.run("baseline.record", _per_case())
    assert recorded["source"] == "perfledger" and recorded["raw_table"] == BASELINE_TABLE
    assert recorded["per_case_median"][CASES[0]] == pytest.approx(10.01)
    assert bare.state().targets[T1].baseline is not None
    bare.measure_aa()
    assert bare.passed(gain=0.2)["status"] == "pass"
    report = audit(bare.ledger)  # the auditor re-derives the values from the table
    assert report.ok, report.findings


def test_cheat_a_typed_baseline_alone_decides_nothing(bare: Session) -> None:
    _ready_to_baseline(bare)
    typed = _typed(bare, _per_case())
    assert typed["source"] == "declared" and "raw_table" not in typed
    target = bare.state().targets[T1]
    assert target.baseline is None and target.declared_baseline is not msgspec.UNSET
    # as if no baseline were recorded: the A/A and experiments wait for a measured one
    refusal = bare.refused("resolution.record", {"target_id": T1, "resolution": 0.01,
                                                 "repeats": 20}, "R4")  # fmt: skip
    assert "declared" in refusal.message and "measure baseline" in refusal.message
    refusal = bare.refused("experiment.create", experiment(), "R4")
    assert "measured baseline" in refusal.message and "measure baseline" in refusal.hint
    # `perfledger log` and the report's timeline show it labelled (the event's commit subject)
    [line] = [get_kind(e.kind).summary(e.payload) for e in bare.ledger.events()
              if e.kind == "BaselineRecorded"]  # fmt: skip
    assert "(declared: typed, decides nothing)" in line, line
    assert audit(bare.ledger).ok


def test_cheat_a_typed_slower_baseline_after_a_measured_one_does_not_switch_the_watch_off(
    bare: Session,
) -> None:
    """The original is measured; the agent then types a baseline twice as slow, and its
    candidate slows the reference 40 % in a case the A/A did not measure (where the watch
    compares with the baseline, R11). Had the typed baseline counted, the slowed reference
    would sit below it and the watch would stay silent; it counts for nothing, so the
    measured baseline shows the comparison is invalid."""
    _ready_to_baseline(bare)
    bare.run("baseline.record", _per_case())
    measured = bare.state().targets[T1].baseline
    assert _typed(bare, _per_case(2.0))["source"] == "declared"
    assert bare.state().targets[T1].baseline == measured
    slowed = CASES[-1]
    bare.measure_aa(rows=aa_rows(cases=(CASES[0],)))  # the A/A leaves the slowed case out
    bare.screened()
    pairs = _slowed_in(make_pairs(0.2, tag="typed"), slowed, 1.4)
    recorded = bare.run("samples.record", samples("e1-target", "target", pairs=pairs))
    flagged = recorded["reference_slowed"]
    assert set(flagged) == {slowed}
    assert flagged[slowed]["baseline"] == pytest.approx(measured.per_case_median[slowed])
    assert flagged[slowed]["slower_by"] == pytest.approx(0.4, abs=0.01)
    verdict = bare.run("verdict.record", {"samples_id": "e1-target"})
    assert verdict["status"] != "pass"
    assert audit(bare.ledger).ok


def test_cheat_values_typed_over_a_real_table_are_refused(bare: Session) -> None:
    _ready_to_baseline(bare)
    body, table = measured_baseline(bare.ledger, _per_case())
    doubled = {**body, "values": [2 * v for v in body["values"]]}
    refusal = bare.refused("baseline.record", doubled, "R4", table)
    assert "not what its raw table derives" in refusal.message
    shuffled = {**body, "cases": list(reversed(body["cases"]))}
    bare.refused("baseline.record", shuffled, "R4", table)
    fewer = {**body, **{k: body[k][:-1] for k in ("values", "cases", "call_ids")}}
    bare.refused("baseline.record", fewer, "R4", table)
    assert bare.run("baseline.record", body, artifacts=table)["source"] == "perfledger"


def test_cheat_naming_a_table_that_is_not_attached_is_refused(bare: Session) -> None:
    _ready_to_baseline(bare)
    body, _table = measured_baseline(bare.ledger, _per_case())
    refusal = bare.refused("baseline.record", body, "R4", {})
    assert "not attached" in refusal.message and "measure baseline" in refusal.hint


def test_cheat_the_baseline_table_of_another_original_is_refused(bare: Session) -> None:
    _ready_to_baseline(bare)
    other = aa_binding(T1, "sha256:" + "9" * 16)
    body, table = measured_baseline(bare.ledger, _per_case(), binding=other)
    assert "bound to" in bare.refused("baseline.record", body, "R4", table).message


def _table_rows(table: dict[str, Artifact]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(table[BASELINE_TABLE].data)["table"]
    return rows


def _with_rows(table: dict[str, Artifact], rows: list[dict[str, Any]]) -> dict[str, Artifact]:
    data = json.loads(table[BASELINE_TABLE].data)
    data["table"] = rows
    return {BASELINE_TABLE: Artifact(json.dumps(data).encode(), "application/json")}


def test_cheat_an_observed_value_that_is_not_its_own_clock_is_refused(bare: Session) -> None:
    """A wall-time baseline is perfledger's clock of each call: a row whose value was edited
    (slower) while its clocks were left alone re-derives nothing."""
    _ready_to_baseline(bare)
    body, table = measured_baseline(bare.ledger, _per_case())
    rows = _table_rows(table)
    rows[0]["metrics"][PRIMARY] = [rows[0]["metrics"][PRIMARY][0] * 2]
    body = {**body, "values": [rows[0]["metrics"][PRIMARY][0], *body["values"][1:]]}
    refusal = bare.refused("baseline.record", body, "R4", _with_rows(table, rows))
    assert "is not its wall_s" in refusal.message


def test_cheat_a_baseline_lengthened_with_copied_calls_is_refused(bare: Session) -> None:
    _ready_to_baseline(bare)
    body, table = measured_baseline(bare.ledger, _per_case())
    rows = _table_rows(table)
    copied = rows + [{**r, "call_id": r["call_id"] + "-again"} for r in rows]
    target = bare.state().targets[T1]
    with pytest.raises(BaselineTableMismatch, match="overlap in time"):
        rederive_baseline(
            json.dumps({"binding": aa_binding(T1, target.readiness.original.content_hash),
                        "table": copied}).encode(),
            target_id=T1, original_hash=target.readiness.original.content_hash,
            primary=target.definition.primary, kernel=False,
        )  # fmt: skip
    longer = {**body, "values": body["values"] * 2, "cases": body["cases"] * 2,
              "call_ids": [r["call_id"] for r in copied]}  # fmt: skip
    bare.refused("baseline.record", longer, "R4", _with_rows(table, copied))


def test_r4_a_ledger_with_typed_baselines_written_before_the_rule_audits_clean(
    bare: Session,
) -> None:
    """``BaselineRecorded`` schema 1: a typed baseline was the Target's baseline; such a ledger
    keeps that meaning (it precedes the A/A and the experiments) and audits clean."""
    with rules_at({"TargetFrozen": R1_OBSERVED_DIRECTION - 1}):  # written by that perfledger
        _ready_to_baseline(bare)
    with rules_at({"BaselineRecorded": R4_MEASURED_BASELINE - 1}):
        typed = _typed(bare, _per_case())
    assert "source" not in typed
    assert bare.state().targets[T1].baseline is not None
    bare.measure_aa()
    assert bare.passed(gain=0.2)["status"] == "pass"
    bare.champion()
    report = audit(bare.ledger)
    assert report.ok, report.findings


# ------------------------------------------------------------ R17: the baseline's monitor windows


def _loaded(table: dict[str, Artifact], foreign: int, total: int) -> dict[str, Artifact]:
    """``table`` with the monitor windows ``perfledger measure baseline`` of an observed primary
    writes (``monitor.windows``), the first ``foreign`` of ``total`` showing foreign activity."""
    data = json.loads(table[BASELINE_TABLE].data)
    data["monitor"] = {"settings": {"kind": "host"}, "note": None, "windows": [
        {"call_ids": [f"w{i}a", f"w{i}b"], "foreign_activity": i < foreign,
         "foreign_cores": 1.5 if i < foreign else 0.0} for i in range(total)]}  # fmt: skip
    return {BASELINE_TABLE: Artifact(json.dumps(data).encode(), "application/json")}


def test_r17_baseline_windows_rule_version_is_the_one_assigned() -> None:
    assert SCHEMA_VERSIONS["BaselineRecorded"] >= R17_BASELINE_WINDOWS == 3


def test_cheat_a_baseline_table_whose_windows_show_a_loaded_host_is_refused_whatever_the_flag(
    bare: Session,
) -> None:
    """A baseline measured on a loaded host, recorded through the library (past `measure
    baseline`'s own refusal) by an agent whose readiness sets the waiver flag: the decider
    judges the table's windows itself and refuses it; 1 of 4 windows (25 %) is refused too,
    1 of 5 (20 %) is not."""
    bare.run("target.freeze", target_freeze())
    bare.run("evidence.add", evidence())
    flagged = readiness()
    flagged["statistics"] = {**flagged["statistics"], "allow_explained_foreign_activity": True}
    bare.run("readiness.record", flagged)
    bare.run("metric-audit.record", metric_audit())
    body, table = measured_baseline(bare.ledger, _per_case())
    head = bare.ledger.head()
    refusal = bare.refused("baseline.record", body, "R17", _loaded(table, 4, 4))
    assert "4 of 4 windows (100 % > 20 %)" in refusal.message
    assert "no readiness setting waives" in refusal.message and "quieter host" in refusal.hint
    bare.refused("baseline.record", body, "R17", _loaded(table, 1, 4))
    data = json.loads(_loaded(table, 4, 4)[BASELINE_TABLE].data)
    data["monitor"]["windows"] = "quiet"  # the windows replaced by a word: not judged quiet
    hidden = {BASELINE_TABLE: Artifact(json.dumps(data).encode(), "application/json")}
    assert "no list of windows" in bare.refused("baseline.record", body, "R17", hidden).message
    assert bare.ledger.head() == head
    recorded = bare.run("baseline.record", body, artifacts=_loaded(table, 1, 5))
    assert recorded["source"] == "perfledger"
    assert audit(bare.ledger).ok


def test_cheat_a_loaded_baseline_appended_past_the_decider_fails_the_audit(
    bare: Session,
) -> None:
    """The same loaded table, appended through the store (a library caller skipping the
    decider) as a current ``BaselineRecorded``: the auditor re-decides it from its attached
    baseline.json and reports it. Recorded at schema 2, the same event replays as before."""
    _ready_to_baseline(bare)
    body, table = measured_baseline(bare.ledger, _per_case())
    loaded = _loaded(table, 4, 4)
    with rules_at({"BaselineRecorded": R17_BASELINE_WINDOWS - 1}):  # that rule did not judge them
        [draft] = preview(bare.ledger, "baseline.record", body, actor=ACTOR, artifacts=loaded)
    bare.ledger.store.append(dataclasses.replace(draft, artifacts=loaded))
    report = audit(bare.ledger)
    assert not report.ok
    assert any("R17" in str(f) and "4 of 4 windows" in str(f) for f in report.findings), (
        report.findings
    )


def test_r17_a_loaded_baseline_recorded_before_the_windows_rule_audits_as_before(
    bare: Session,
) -> None:
    _ready_to_baseline(bare)
    body, table = measured_baseline(bare.ledger, _per_case())
    with rules_at({"BaselineRecorded": R17_BASELINE_WINDOWS - 1}):
        recorded = bare.run("baseline.record", body, artifacts=_loaded(table, 4, 4))
    assert recorded["source"] == "perfledger"
    [event] = [e for e in bare.ledger.events() if e.kind == "BaselineRecorded"]
    assert event.envelope.schema == R17_BASELINE_WINDOWS - 1
    report = audit(bare.ledger)
    assert report.ok, report.findings
