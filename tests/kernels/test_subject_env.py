"""Subjects are not told their role, and the environment that can change how they run is recorded
and, in a formal stage, warned about when it loads code from outside both subjects (R11)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from perfledger.kernels.workload.driver import Subject, run_pairs
from perfledger.kernels.workload.subject_env import (
    environment_warnings,
    foreign_paths,
    influencing_environment,
    subject_roots,
)

#: A subject that reports 1 ms, or 4 ms when it can tell that it is the reference.
ROLE_AWARE = (
    "import json, os; role = os.environ.get('PERFLEDGER_SUBJECT', '');"
    "print(json.dumps({'correct': True, 'metrics': {'t': 4.0 if role == 'ref' else 1.0}}))"
)


def test_r11_subjects_cannot_tell_reference_from_candidate() -> None:
    argv = [sys.executable, "-c", ROLE_AWARE]
    run = run_pairs(Subject("ref", argv), Subject("cand", argv), cases=["a"], pairs_per_case=2,
                    warmup_calls=0)  # fmt: skip
    assert [(p.ref.metrics, p.cand.metrics) for p in run.pairs] == [
        ({"t": [1.0]}, {"t": [1.0]})
    ] * 2


def test_r11_the_driver_records_the_environment_that_changes_how_subjects_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("PERFLEDGER_UNRELATED", "x")
    argv = [sys.executable, "-c", 'print(\'{"correct": true, "metrics": {"t": 1}}\')']
    run = run_pairs(Subject("ref", argv), Subject("cand", argv), cases=["a"], pairs_per_case=1,
                    warmup_calls=0)  # fmt: skip
    recorded = run.settings["environment"]
    assert recorded["PYTHONPATH"] == str(tmp_path) and recorded["OMP_NUM_THREADS"] == "3"
    assert "PERFLEDGER_UNRELATED" not in recorded
    assert json.loads(json.dumps(run.settings))["environment"] == recorded  # as recorded
    assert influencing_environment({"LD_PRELOAD": "/x.so", "HOME": "/h"}) == {"LD_PRELOAD": "/x.so"}
    # a secret is never written into the ledger, whatever its prefix
    assert influencing_environment({"NVIDIA_API_KEY": "s", "TF_TOKEN": "s", "OMP_X": "1"}) == {
        "OMP_X": "1"
    }


def test_r11_a_formal_stage_warns_about_code_loaded_from_outside_both_subjects(
    tmp_path: Path,
) -> None:
    ref, cand, evil = tmp_path / "ref", tmp_path / "cand", tmp_path / "evil"
    for d in (ref, cand, evil):
        d.mkdir()
        (d / "bench.py").write_text("")
    argvs = [[sys.executable, str(ref / "bench.py")], [sys.executable, str(cand / "bench.py")]]
    inside = {"PYTHONPATH": f"{ref}:{cand / 'lib'}", "LD_LIBRARY_PATH": f"{sys.prefix}/lib"}
    assert foreign_paths(inside, subject_roots(argvs)) == {}
    outside = {**inside, "PYTHONPATH": f"{ref}:{evil}", "LD_PRELOAD": f"{evil}/hook.so"}
    assert foreign_paths(outside, subject_roots(argvs)) == {
        "PYTHONPATH": [str(evil)], "LD_PRELOAD": [f"{evil}/hook.so"]}  # fmt: skip
    [line] = environment_warnings(outside, argvs, "target")
    assert f"PYTHONPATH={evil}" in line and "Unset them and measure again" in line
    assert environment_warnings(outside, argvs, "screen") == []  # screens: recorded, no warning
    assert environment_warnings(inside, argvs, "final_audit") == []
