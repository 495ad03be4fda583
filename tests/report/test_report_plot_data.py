"""The report's pictures show what was measured: every number it plots is recomputed here from
the ledger's events (``VerdictRecorded``/``FinalAuditRecorded`` and the samples' per-call values),
per case and never multiplied across experiments."""

from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import CAND1, CAND2, PRIMARY, T1, Session, experiment, samples

from perfledger.api import Ledger
from perfledger.app.report import build_report, champion_chain

E1_REF = {"kind": "champion", "content_hash": CAND1, "experiment_id": "e1"}


def _speedup(improvement: float) -> float:
    """R12's improvement of a lower-is-better metric (time saved) as a speedup ref/cand."""
    return 1.0 / (1.0 - improvement)


@pytest.fixture(scope="module")
def chain_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """e1 (vs the original, 20 % saved) is champion and audited; e2 (20 % saved vs e1) becomes
    champion, then its final audit measures 30 % saved against the original: the product of
    the steps (1.25 x 1.25 = 1.5625x) is not what was measured end to end (1.4286x)."""
    path = tmp_path_factory.mktemp("chain") / "ledger"
    ledger = Ledger.init(path, name="chain", actor="agent")
    try:
        session = Session(ledger)
        session.ready()
        session.passed("e1", CAND1, gain=0.2)
        session.champion("e1")
        session.record_measured(samples("e1-final", "final_audit", gain=0.2))
        session.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
        session.run("experiment.create", experiment("e2", candidate=CAND2))
        for stage in ("screen", "target"):
            session.record_measured(samples(
                f"e2-{stage}", stage, experiment_id="e2", candidate=CAND2, gain=0.2,
                reference=E1_REF))  # fmt: skip
            session.run("verdict.record", {"samples_id": f"e2-{stage}"})
        session.champion("e2", expected="e1")
        session.record_measured(samples(
            "e2-final", "final_audit", experiment_id="e2", candidate=CAND2, gain=0.3))  # fmt: skip
        session.run("final-audit.record", {"target_id": T1, "samples_id": "e2-final"})
    finally:
        ledger.close()
    return path


@pytest.fixture(scope="module")
def report_data(chain_ledger: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The plotted data of the chain ledger's report, by plot name, and the events."""
    out = tmp_path_factory.mktemp("out") / "report.html"
    ledger = Ledger.open(chain_ledger)
    try:
        summary = build_report(ledger, str(out))
        events = {}
        for event in ledger.events():
            payload = event.payload
            if event.envelope.kind in ("VerdictRecorded", "FinalAuditRecorded", "SamplesRecorded"):
                events[(event.envelope.kind, payload.samples_id)] = payload
    finally:
        ledger.close()
    assert summary["plots"] == 3
    page = out.read_text()
    found = re.findall(r'<pre class=plot-data data-plot="(\w+)">(.*?)</pre>', page, re.S)
    data = {name: json.loads(html.unescape(text)) for name, text in found}
    assert set(data) == {"cases", "champions", "predicted"}
    return {"data": data, "events": events}


@pytest.mark.slow
def test_report_case_plot_is_per_case_absolute_times_from_the_verdicts(
    report_data: dict[str, Any],
) -> None:
    points, events = report_data["data"]["cases"], report_data["events"]
    judged = {sid for kind, sid in events if kind != "SamplesRecorded"}
    assert {p["samples_id"] for p in points} == judged
    for p in points:
        kind = "FinalAuditRecorded" if p["stage"] == "final_audit" else "VerdictRecorded"
        (case,) = [c for c in events[(kind, p["samples_id"])].primary.cases if c.case == p["case"]]
        for key in ("ref", "ref_low", "ref_high", "cand", "cand_low", "cand_high"):
            assert p[key] == getattr(case, key), (p["samples_id"], p["case"], key)
        # the absolute figure is the Target's statistic (the scenario's: mean) of the case's
        # per-call values
        pairs = [q for q in events[("SamplesRecorded", p["samples_id"])].pairs
                 if q.case == p["case"]]  # fmt: skip
        ref_calls = [v for q in pairs for v in q.ref.values[PRIMARY]]
        cand_calls = [v for q in pairs for v in q.cand.values[PRIMARY]]
        assert p["ref"] == pytest.approx(statistics.fmean(ref_calls), rel=1e-9)
        assert p["cand"] == pytest.approx(statistics.fmean(cand_calls), rel=1e-9)
        assert p["ref_low"] <= p["ref"] <= p["ref_high"]
    # per case, never pooled: both cases of every judged result have their own point
    assert len(points) == 2 * len(judged)
    assert {p["reference"] for p in points if p["samples_id"] == "e2-target"} == {"e1"}


@pytest.mark.slow
def test_report_champion_chain_is_measured_against_the_original_never_multiplied(
    report_data: dict[str, Any],
) -> None:
    chain, events = report_data["data"]["champions"], report_data["events"]
    assert [p["champion"] for p in chain] == ["e1", "e2"]
    for p, audit_id in zip(chain, ("e1-final", "e2-final"), strict=True):
        primary = events[("FinalAuditRecorded", audit_id)].primary
        assert p["source"] == audit_id
        assert p["speedup"] == pytest.approx(_speedup(primary.estimate), rel=1e-12)
        assert p["speedup_low"] == pytest.approx(_speedup(primary.ci_low), rel=1e-12)
        assert p["speedup_high"] == pytest.approx(_speedup(primary.ci_high), rel=1e-12)
    step = events[("VerdictRecorded", "e2-target")].primary.estimate
    assert chain[1]["reference"] == "e1"
    assert chain[1]["step"] == pytest.approx(_speedup(step), rel=1e-12)
    product = chain[0]["speedup"] * chain[1]["step"]
    assert product == pytest.approx(1.25 * 1.25, rel=0.02)
    assert chain[1]["speedup"] == pytest.approx(1 / 0.7, rel=0.02)  # what was measured


def test_report_predicted_points_are_the_claims_bounds_and_measured_speedups(
    report_data: dict[str, Any],
) -> None:
    points, events = report_data["data"]["predicted"], report_data["events"]
    assert points
    for p in points:
        primary = events[("VerdictRecorded", p["samples_id"])].primary
        assert p["speedup"] == pytest.approx(_speedup(primary.estimate), rel=1e-12)
        assert p["bound"] == pytest.approx(1.0 / (0.4 + 0.6 / 2.0), rel=1e-9)


def test_report_champion_without_a_measurement_against_the_original_gets_no_product(
    chain_ledger: Path, tmp_path: Path
) -> None:
    ledger = Ledger.open(chain_ledger)
    try:
        state = ledger.state()
    finally:
        ledger.close()
    state.final_audits.pop("e2-final")  # as if e2's final audit had not been recorded yet
    chain = champion_chain(state, T1)
    assert chain[1]["speedup"] is None and chain[1]["reference"] == "e1"
    assert chain[1]["step"] is not None
