"""``target show``, ``experiment show`` and ``champion show TARGET`` print for people by default
(the Target's figures with units, each verdict's per-case figures with units, the champion's
final audit and lineage) and keep their JSON under ``--json``; through the real CLI on the
scripted session's git ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rm_session import scripted_ledger
from test_readmodels_golden import run

#: Every test reads one scripted ledger built through the CLI (seconds): left to `make test`.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_ledger(tmp_path_factory.mktemp("show") / "ledger")


def _not_json(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_target_show_prints_the_target_readiness_and_baseline_with_units(ledger: Path) -> None:
    text = run(ledger, "target", "show", "t1")
    _not_json(text)
    for needed in (
        "Target t1 (current): decode wall time of the demo workload",
        "primary wall_time (mean, ms, lower is better); minimum effect 5.00 %",
        "guardrail cpu_time (ms, lower is better): may regress at most 2.00 %",
        "budget: wall 7,200 s, GPU 3,600 s",
        "test set: 2 case(s) (small, large)",
        "baseline wall_time: median 10 ms over 5 value(s)",
        "resolution 0.13 %",  # the scripted A/A's, measured (R4)
        "champion e1; final audit pass (e1-final)",
    ):
        assert needed in text, needed
    rows = {line.split()[0]: line.split() for line in text.splitlines()[-3:]}
    assert rows["e2"][1:3] == ["target", "rejected"] and rows["e3"][1:3] == ["target", "failed"]
    assert run(ledger, "target", "show") == text  # the one current Target


def test_target_and_experiment_show_keep_their_json(ledger: Path) -> None:
    one = json.loads(run(ledger, "target", "show", "t1", "--json"))
    assert list(one) == ["target"] and one["target"]["champion"] == "e1"
    every = json.loads(run(ledger, "target", "show", "--json"))
    assert list(every["targets"]) == ["t1"]
    shown = json.loads(run(ledger, "experiment", "show", "e2", "--json"))
    assert sorted(shown) == ["experiment", "verdicts"]
    assert sorted(shown["verdicts"]) == ["e2-screen", "e2-target"]


def test_experiment_show_prints_each_verdicts_cases_with_units(ledger: Path) -> None:
    text = run(ledger, "experiment", "show", "e2")
    _not_json(text)
    assert "Experiment e2 of Target t1" in text
    # the claim's interval as the verdict measures it (R12: the fraction of time saved)
    assert "Amdahl bound 1.429x; predicted end-to-end improvement [0.00 %, 30.00 %]" in text
    assert "e2-target target stage: fail: CI upper end" in text
    assert "CONTRADICTS the claim (R14)" in text
    assert "reference (ms)" in text and "candidate (ms)" in text
    large = [line.split() for line in text.splitlines() if line.split()[:1] == ["large"]]
    assert len(large) == 2  # one row per verdict
    assert large[1][-2:] == ["below_min_effect,", "regressed"]
    assert "guardrail cpu_time: pass" in text
    assert "rejected: closes implementation (R15)" in text


def test_champion_show_prints_the_final_audit_and_lineage(ledger: Path) -> None:
    text = run(ledger, "champion", "show", "t1")
    _not_json(text)
    assert "Target t1 (current): champion e1 since event" in text
    assert "final audit pass (e1-final)" in text
    (row,) = [line.split() for line in text.splitlines() if line.split()[:1] == ["e1"]]
    assert row[:4] == ["e1", "select", "e1-target", "pass"]
    assert "e1-final pass" in text
