"""R4: a resolution decides verdicts only when perfledger measured it
(:mod:`perfledger.commands.workflow.aa_table`; ``ResolutionEstimated`` schema 3,
``VerdictRecorded`` 6, ``FinalAuditRecorded`` 7). Each cheat an agent could try is written out
beside its honest control, on a real ledger through the deciders; resolutions recorded before
the rule keep their typed meaning."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest
from wf_scenario import (
    AA_TABLE,
    T1,
    Session,
    aa_rows,
    baseline,
    experiment,
    measured_resolution,
    metric_audit,
    readiness,
    resolution,
    samples,
    target_freeze,
)

from perfledger.commands.audit.replay import audit
from perfledger.commands.workflow import deciders
from perfledger.commands.workflow.aa_table import AaTableMismatch, aa_binding, rederive_aa
from perfledger.commands.workflow.requests import ResolutionRecord, VerdictRecord
from perfledger.commands.workflow.verdict_guards import DECLARED_RESOLUTION
from perfledger.events.workflow import (
    R4_MEASURED_RESOLUTION,
    R4_MEASURED_RESOLUTION_FINAL_AUDIT,
    R4_MEASURED_RESOLUTION_VERDICT,
    SCHEMA_VERSIONS,
    Statistics,
)
from perfledger.ledger.base import Artifact

SELECT = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}


def _notes_say_declared(verdict: dict[str, Any]) -> bool:
    return any(n.startswith(DECLARED_RESOLUTION) and "measure aa" in n for n in verdict["notes"])


def test_r4_the_rule_versions_are_the_ones_assigned() -> None:
    assert SCHEMA_VERSIONS["ResolutionEstimated"] >= R4_MEASURED_RESOLUTION == 3
    assert R4_MEASURED_RESOLUTION_VERDICT == 6  # VerdictRecorded 7 is R14's true note, later
    assert SCHEMA_VERSIONS["VerdictRecorded"] >= R4_MEASURED_RESOLUTION_VERDICT
    assert SCHEMA_VERSIONS["FinalAuditRecorded"] >= R4_MEASURED_RESOLUTION_FINAL_AUDIT == 7


# ----------------------------------------------------------------- a typed resolution


def test_cheat_a_typed_small_resolution_decides_nothing(bare: Session) -> None:
    bare.up_to_baseline()
    recorded = bare.run("resolution.record", resolution(resolution=0.0001, repeats=10_000_000))
    assert recorded["source"] == "declared" and "raw_table" not in recorded
    verdict = bare.passed(gain=0.2)
    # the derivation alone would pass; the declared resolution keeps it from passing
    assert verdict["primary"]["status"] == "pass" and verdict["status"] == "inconclusive"
    assert _notes_say_declared(verdict)
    bare.refused("champion.select", SELECT, "R13")
    assert audit(bare.ledger).ok


def test_r4_honest_a_measured_resolution_decides(bare: Session) -> None:
    bare.up_to_baseline()
    recorded = bare.measure_aa()
    assert recorded["source"] == "perfledger" and recorded["raw_table"] == AA_TABLE
    assert 0 < recorded["resolution"] < 0.05 and recorded["repeats"] == 20
    verdict = bare.passed(gain=0.2)
    assert verdict["status"] == "pass" and not _notes_say_declared(verdict)
    bare.champion()
    report = audit(bare.ledger)  # the auditor re-derives the resolution from its table
    assert report.ok, report.findings


def test_cheat_a_typed_resolution_after_a_measured_one_changes_nothing(ready: Session) -> None:
    measured = ready.state().targets[T1].resolution
    typed = ready.run("resolution.record", resolution(resolution=0.0, repeats=10_000_000))
    assert typed["source"] == "declared"
    target = ready.state().targets[T1]
    assert target.measured_resolution == measured and target.resolution_in_force == measured
    verdict = ready.passed(gain=0.2)
    assert verdict["status"] == "pass"
    assert verdict["primary"]["resolution"] == pytest.approx(measured.resolution)


def test_cheat_a_typed_resolution_cannot_unlock_a_lower_one_with_fewer_repeats(
    ready: Session,
) -> None:
    """R4's not-lowered rule compares a new measured A/A with the measured one in force; a
    declared one in between (with a huge typed repeat count, or a tiny figure) moves nothing."""
    ready.passed(gain=0.2)  # samples exist: a lower resolution now needs a longer A/A
    wide = aa_rows(spread=0.1, pairs=10)
    ready.measure_aa(rows=wide)  # raising it is allowed
    ready.run("resolution.record", resolution(resolution=0.5, repeats=10_000_000))
    body, table = measured_resolution(ready.ledger, T1, rows=aa_rows(spread=0.002, pairs=10))
    refusal = ready.refused("resolution.record", body, "R4", table)
    assert "20 repeats" in refusal.message
    ready.measure_aa(rows=aa_rows(spread=0.002, pairs=11))  # a longer A/A may lower it


def test_cheat_superseding_the_target_leaves_the_measured_resolution_behind(
    ready: Session,
) -> None:
    ready.run(
        "target.supersede",
        {"target_id": T1, "reason": "start over", "new_target": target_freeze("t2")},
    )
    ready.run("readiness.record", readiness("t2"))
    ready.run("metric-audit.record", metric_audit("t2"))
    ready.run("baseline.record", baseline("t2"))
    assert ready.state().targets["t2"].resolution is None
    ready.run("resolution.record", resolution("t2", resolution=0.0001))
    ready.run("experiment.create", experiment("e2", target_id="t2"))
    for stage in ("screen", "target"):
        ready.run("samples.record", samples(f"e2-{stage}", stage, target_id="t2",
                                            experiment_id="e2", gain=0.2))  # fmt: skip
        verdict = ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    assert verdict["status"] == "inconclusive" and _notes_say_declared(verdict)


# ------------------------------------------------------------ a table that does not hold


def test_cheat_a_smaller_figure_typed_over_a_real_table_is_refused(bare: Session) -> None:
    bare.up_to_baseline()
    body, table = measured_resolution(bare.ledger)
    for name, value in (("resolution", body["resolution"] / 10), ("repeats", 40)):
        refusal = bare.refused("resolution.record", {**body, name: value}, "R4", table)
        assert "is not what its A/A raw table derives" in refusal.message
    small_case = {**body, "per_case": {c: 1e-6 for c in body["per_case"]}}
    bare.refused("resolution.record", small_case, "R4", table)
    bare.run("resolution.record", body, artifacts=table)  # the control: unchanged, accepted


def test_cheat_naming_a_table_that_is_not_attached_is_refused(bare: Session) -> None:
    bare.up_to_baseline()
    body, _table = measured_resolution(bare.ledger)
    refusal = bare.refused("resolution.record", body, "R4")
    assert "not attached" in refusal.message and "measure aa" in refusal.hint


def test_cheat_the_aa_table_of_another_target_is_refused(bare: Session) -> None:
    bare.up_to_baseline()
    bare.up_to_baseline("t2")
    body, table = measured_resolution(bare.ledger, "t2")
    refusal = bare.refused("resolution.record", {**body, "target_id": T1}, "R4", table)
    assert "bound to" in refusal.message
    forged, table = measured_resolution(
        bare.ledger, T1, binding=aa_binding(T1, "sha256:" + "9" * 16)
    )
    bare.refused("resolution.record", forged, "R4", table)  # another original's A/A


def test_cheat_an_aa_table_with_identical_sides_is_refused(bare: Session) -> None:
    """Fake A/A samples: every pair's two calls timed alike (a zero resolution)."""
    bare.up_to_baseline()
    rows = aa_rows(spread=0.0)
    with pytest.raises(AaTableMismatch, match="measured no noise"):
        measured_resolution(bare.ledger, rows=rows)
    body = {"target_id": T1, "resolution": 0.0, "repeats": 20, "raw_table": AA_TABLE,
            "per_case": {"small": 0.0, "large": 0.0}}  # fmt: skip
    raw = json.dumps({"binding": aa_binding(T1, readiness()["original"]["content_hash"]),
                      "table": rows}).encode()  # fmt: skip
    refusal = bare.refused("resolution.record", body, "R4", {AA_TABLE: Artifact(raw)})
    assert "measured no noise" in refusal.message


def test_cheat_an_aa_table_lengthened_with_copied_calls_is_refused(ready: Session) -> None:
    """A longer A/A may lower the resolution after samples (R4); copying the calls of the one
    measured (the same call ids, or the same clock readings under new ids) is not a longer A/A."""
    ready.passed(gain=0.2)
    rows = aa_rows(spread=0.1)
    copied = rows + [{**r, "pair": r["pair"] + 100} for r in rows]
    with pytest.raises(AaTableMismatch, match="repeats call"):
        measured_resolution(ready.ledger, rows=copied)
    observed = [{**r, "start_s": 10.0 + i, "end_s": 10.0 + i + r["wall_s"]}
                for i, r in enumerate(rows)]  # fmt: skip
    renamed = observed + [
        {**r, "pair": r["pair"] + 100, "call_id": r["call_id"] + "-again"} for r in observed
    ]
    with pytest.raises(AaTableMismatch, match="overlap in time"):
        measured_resolution(ready.ledger, rows=renamed)
    assert ready.measure_aa(rows=observed)["repeats"] == 20  # the control: each call once


def test_cheat_an_aa_table_that_drops_its_slow_pairs_is_caught_by_its_own_figures(
    bare: Session,
) -> None:
    """Failed or incorrect A/A calls are left out of the figures by the table's own flags."""
    bare.up_to_baseline()
    rows = aa_rows()
    rows[0]["ok"] = False
    rows[2]["correct"] = False
    body, table = measured_resolution(bare.ledger, rows=rows)
    assert body["repeats"] == 18  # two pairs left out, not typed away
    bare.run("resolution.record", body, artifacts=table)


def test_cheat_observed_aa_values_unlike_their_clocks_are_refused() -> None:
    """An A/A of an observed primary (``wall_time``): every value is its row's own clock."""
    primary = SimpleNamespace(
        name="wall_time", unit="ms", direction="lower_is_better", statistic="median"
    )
    rows = []
    for n in range(6):
        for label, wall in (("ref", 0.010 + 0.0001 * n), ("cand", 0.0101 + 0.0001 * n)):
            start = 1.0 + n + (0.5 if label == "cand" else 0.0)  # one call after the other
            rows.append({"pair": n, "subject": label, "case": "c", "call_id": f"{n}{label}",
                         "ok": True, "correct": True, "warmup": False, "output": {"ok": True},
                         "wall_s": wall, "start_s": start, "end_s": start + wall,
                         "metrics": {"wall_time": [wall * 1000.0]}})  # fmt: skip
    table = {"binding": aa_binding(T1, "h"), "table": rows}
    stats = Statistics(min_pairs_per_case=5)

    def derive(t: dict[str, Any]) -> Any:
        raw = json.dumps(t).encode()
        return rederive_aa(raw, target=T1, primary=primary, statistics=stats, original_hash="h")

    assert derive(table)[2] == 6  # the honest table
    rows[3]["metrics"] = {"wall_time": [1.0]}  # 1 ms typed over a 10 ms clock reading
    with pytest.raises(AaTableMismatch, match="is not its wall_s"):
        derive(table)
    rows[3]["metrics"] = {"wall_time": [rows[3]["wall_s"] * 1000.0]}
    rows[3]["end_s"] = rows[3]["start_s"] + 0.001  # a clock reading that is not its call's
    with pytest.raises(AaTableMismatch, match="end_s - start_s"):
        derive(table)


# ------------------------------------------------------------------- earlier rule versions


def test_r4_a_resolution_recorded_before_the_rule_keeps_its_typed_meaning(bare: Session) -> None:
    """Re-deciding a ``resolution.record`` of schema 2 (the auditor's replay): no source, no
    table, and it decides; a verdict of schema 4 judged against it passes as it did."""
    bare.up_to_baseline()
    state = bare.state()
    request = msgspec.convert(resolution(), ResolutionRecord)
    ctx = deciders.DecisionContext(op="resolution.record", actor="agent", ts=bare.clock,
                                   schema=2)  # fmt: skip
    [draft] = deciders.decide_resolution_record(state, request, ctx)
    assert draft.payload.source is msgspec.UNSET and draft.payload.resolution == 0.01
    assert draft.payload.raw_table is msgspec.UNSET  # encoded as before the rule
    with pytest.raises(Exception, match="raw_table"):
        deciders.decide_resolution_record(
            state, msgspec.structs.replace(request, raw_table=AA_TABLE), ctx
        )
    # a declared resolution is in force now; the verdict's rule version decides what it means
    bare.run("resolution.record", resolution(resolution=0.01))
    bare.passed(gain=0.2)
    state = bare.state()
    for schema, status in ((R4_MEASURED_RESOLUTION_VERDICT - 2, "pass"), (None, "inconclusive")):
        ctx = deciders.DecisionContext(op="verdict.record", actor="agent", ts=bare.clock,
                                       payload_of=bare.ledger.payload, schema=schema)  # fmt: skip
        state.verdicts.pop("e1-target", None)
        [draft] = deciders.decide_verdict_record(state, VerdictRecord(samples_id="e1-target"), ctx)
        assert draft.payload.status == status
        state = bare.state()


def test_r4_target_show_says_a_typed_resolution_is_declared(bare: Session, tmp_path: Any) -> None:
    import subprocess

    from subprocess_env import isolated_env, perfledger_command

    bare.up_to_baseline()
    bare.run("resolution.record", resolution())
    shown = subprocess.run(
        [*perfledger_command(), "--ledger", str(bare.ledger.path), "target", "show", T1],
        capture_output=True, text=True, env=isolated_env(tmp_path), check=True,
    )  # fmt: skip
    assert "declared: typed, it decides nothing" in shown.stdout
    assert "measure aa --record" in shown.stdout


def test_r4_a_kernel_aa_table_re_derives_per_case_and_leaves_out_invalid_comparisons() -> None:
    """A kernel A/A (``measure aa --spec``): per case, the valid comparisons' CIs and median
    ratios give the case's resolution as the harness derives it; a comparison flagged invalid
    (or not marked valid) is left out, whatever its figures."""
    from perfledger.derive.stats import aa_comparisons_resolution

    def comp(lo: float, hi: float, ratio: float, **over: Any) -> dict[str, Any]:
        return {"valid": True, "flags": [], "rows": [],
                "stats": {"ci_low": lo, "ci_high": hi, "median_ratio": ratio}, **over}  # fmt: skip

    honest = [comp(0.99, 1.01, 1.0), comp(0.985, 1.012, 0.998), comp(0.992, 1.02, 1.004)]
    tiny = comp(0.99999, 1.00001, 1.0)
    table = {"binding": aa_binding(T1, "h"), "cases": {"n": {"comparisons": [
        *honest, {**tiny, "flags": ["side_work"]}, {**tiny, "valid": False}]}}}  # fmt: skip

    def derive(t: dict[str, Any]) -> Any:
        return rederive_aa(json.dumps(t).encode(), target=T1, primary=None, statistics=None,
                           original_hash="h")  # fmt: skip

    resolution, per_case, repeats = derive(table)
    want = aa_comparisons_resolution(
        [c["stats"]["ci_low"] for c in honest], [c["stats"]["ci_high"] for c in honest],
        [c["stats"]["median_ratio"] for c in honest],
    )[0]  # fmt: skip
    assert repeats == 3 and per_case == {"n": want} and resolution == want
    flat = {"binding": aa_binding(T1, "h"), "cases": {"n": {"comparisons": [
        comp(1.0, 1.0, 1.0), comp(1.0, 1.0, 1.0)]}}}  # fmt: skip
    with pytest.raises(AaTableMismatch, match="measured no noise"):
        derive(flat)
