"""Verdict explanations: the one condition that decided a recorded verdict
(R11, R12, R17), derived from its recorded payload, and `verdict record`'s text answer.

Each case records real samples through the decider on a real git ledger; the explanation never
changes the recorded payload (the audit still re-derives it byte for byte).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from wf_scenario import Session, experiment, resolution, samples

from perfledger.commands.audit.replay import audit
from perfledger.projections.verdict_explain import explain_verdict, pct, verdict_lines


def _target(session: Session, sid: str, gain: float, **pair_options: object) -> dict:
    session.run("samples.record", samples(sid, "target", gain=gain, **pair_options))
    return session.run("verdict.record", {"samples_id": sid})


def test_pct_formats_two_decimals() -> None:
    assert pct(0.130612) == "13.06 %"
    assert pct(None) == "n/a"


def test_r11_screen_that_would_pass_is_explained_as_a_screen(ready: Session) -> None:
    ready.screened()
    verdict = ready.state().verdicts["e1-screen"]
    import msgspec

    e = explain_verdict(msgspec.to_builtins(verdict))
    assert e["status"] == "inconclusive" and e["condition"] == "screen"
    assert "screen stages never pass (R11)" in e["reason"]
    assert e["threshold"] == 0.05  # max(min effect 5 %, resolution 1 %)


def test_r12_pass_names_the_threshold(ready: Session) -> None:
    verdict = ready.passed(gain=0.2)
    e = explain_verdict(verdict)
    assert e["condition"] == "pass"
    assert "threshold 5.00 %" in e["reason"] and "resolution 0.13 %" in e["reason"]


def test_r12_fail_names_the_minimum_effect(ready: Session) -> None:
    ready.screened()
    failed = explain_verdict(_target(ready, "e1-t-loss", -0.1))
    assert failed["condition"] == "fail" and "clear loss" in failed["reason"]
    assert "< minimum effect 5.00 %" in failed["reason"]


def test_r12_straddle_names_the_minimum_effect(ready: Session) -> None:
    ready.screened()
    verdict = _target(ready, "e1-t", 0.05)
    e = explain_verdict(verdict)
    assert verdict["status"] == "inconclusive"
    assert e["condition"] == "below_min_effect", e
    assert e["reason"].startswith("CI lower end") and "< minimum effect 5.00 %" in e["reason"]
    assert "resolution" not in e["reason"]  # the one condition, not "straddles ... or ..."


def test_r12_lower_end_below_resolution_is_named(bare: Session) -> None:
    from wf_scenario import T1, baseline, evidence, metric_audit, readiness, target_freeze

    bare.run("target.freeze", target_freeze(T1))
    bare.run("evidence.add", evidence())
    bare.run("readiness.record", readiness(T1))
    bare.run("metric-audit.record", metric_audit(T1))
    bare.run("baseline.record", baseline(T1))
    bare.run("resolution.record", resolution(T1, resolution=0.25))
    bare.screened()
    verdict = _target(bare, "e1-t", 0.2)
    e = explain_verdict(verdict)
    assert verdict["status"] == "inconclusive"
    assert e["condition"] == "below_resolution", e
    assert "resolution 25.00 %" in e["reason"] and e["threshold"] == 0.25
    assert bare.ledger and audit(bare.ledger).ok  # the recorded payload still re-derives


def test_r17_foreign_activity_is_named_with_the_fix(ready: Session) -> None:
    ready.screened()
    busy = {"observed": True, "foreign_activity": True, "flags": ["foreign_pid:4242"]}
    e = explain_verdict(_target(ready, "e1-t", 0.2, monitor=busy))
    assert e["condition"] == "foreign_activity"
    assert "R17" in e["reason"] and "activity explain" in e["reason"]
    assert "--explain-foreign" not in e["reason"]
    assert "derivation was pass" in e["reason"]


def test_r12_too_few_pairs_is_named(ready: Session) -> None:
    ready.screened()
    e = explain_verdict(_target(ready, "e1-t", 0.2, per_case=2))
    assert e["condition"] == "too_few_pairs" and "too few valid pairs" in e["reason"]


def test_verdict_lines_show_estimate_ci_threshold_and_notes(ready: Session) -> None:
    ready.screened()
    lines = verdict_lines(_screen_payload(ready))
    assert lines[0].startswith("status inconclusive: screen stages never pass (R11)")
    assert "threshold 5.00 % = max(minimum effect 5.00 %, resolution 0.13 %)" in lines[1]
    assert any(line.startswith("  note: R11") for line in lines)


def _screen_payload(session: Session) -> dict:
    import msgspec

    return msgspec.to_builtins(session.state().verdicts["e1-screen"])


@pytest.mark.slow
def test_cli_verdict_record_prints_the_deciding_condition(ready: Session, tmp_path: Path) -> None:
    """Text mode prints status, estimate and CI in percent, the threshold and the reason;
    --json adds an ``explanation`` beside (not inside) the recorded payload."""
    ready.run("experiment.create", experiment())
    ready.run("samples.record", samples("e1-screen", "screen"))
    ready.run("samples.record", samples("e1-screen-2", "screen"))
    ledger = str(ready.ledger.path)
    env = {**os.environ, "PERFLEDGER_ACTOR": "t"}
    base = [sys.executable, "-m", "perfledger", "--ledger", ledger, "verdict", "record"]
    done = subprocess.run([*base, "--samples", "e1-screen"], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].startswith("VerdictRecorded ") and out[0].endswith("status=inconclusive")
    assert out[1].startswith("status inconclusive: screen stages never pass (R11)")
    assert "estimate 20." in out[2] and "threshold 5.00 %" in out[2]
    done = subprocess.run([*base, "--samples", "e1-screen-2", "--json"], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["explanation"]["condition"] == "screen"
    assert "explanation" not in answer["payload"]
