"""Per-case verdicts and sample provenance end to end, through the real CLI on a real git ledger
with real workload commands (R5, R12): ``measure workload`` runs ``examples/workloads/sumsq.py``,
``verdict record`` and ``verdict explain`` derive and show the result per test case."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_measure_cli import ROOT, SELF, SUMSQ, _cli, _experiment, _record_resolution, _setup

from perfledger.api import Ledger

#: A candidate that does a tenth of the reference's work on case ``small`` and twice its work on
#: ``large`` (the reference does ``--extra-work 9``, 10x the base work, on both): +90 % on one
#: case, -100 % on the other. The geometric mean of the per-case ratios (sqrt(0.1 * 2) = 0.45)
#: clears the 5 % minimum effect by far; the effects are large so that a loaded machine's noise
#: cannot hide the regression.
MIXED_CANDIDATE = """
import os, subprocess, sys
extra = {"small": "0.0", "large": "19.0"}[os.environ["PERFLEDGER_CASE"]]
sys.exit(subprocess.call([sys.executable, SUMSQ, "--repeats", "3", "--extra-work", extra]))
"""


def _reference() -> str:
    return f"{sys.executable} {SUMSQ} --repeats 3 --extra-work 9.0"


@pytest.mark.slow
def test_r12_a_case_regressed_beyond_its_resolution_blocks_pass_and_is_named(
    tmp_path: Path,
) -> None:
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path)  # cases small and large, minimum effect 5 %, statistic median
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    cand = tmp_path / "mixed.py"
    cand.write_text(f"SUMSQ = {str(SUMSQ)!r}\n" + MIXED_CANDIDATE)
    _cli(ledger_path, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
         "--ref", _reference(), "--cand", f"{sys.executable} {cand}", "--pairs", "8",
         "--no-monitor", "--quiet")  # fmt: skip
    text = _cli(ledger_path, tmp_path, "verdict", "record", "--samples", "e1-screen-1",
                "--dry-run")  # fmt: skip
    assert "status fail: R12: case(s) regressed beyond their resolution: large" in text.stdout
    assert "the Target allows no per-case regression" in text.stdout
    # every case's absolute per-call figures, original -> candidate, with CIs
    assert "case small: " in text.stdout and "case large: " in text.stdout
    assert " ms [" in text.stdout and "-> " in text.stdout and "regressed" in text.stdout
    recorded = _cli(ledger_path, tmp_path, "verdict", "record", "--samples", "e1-screen-1",
                    "--json")  # fmt: skip
    explained = json.loads(recorded.stdout)["explanation"]
    assert explained["status"] == "fail" and explained["condition"] == "case_regressed"
    # the self-timed driver's samples: figures the subject reported (R5, VerdictRecorded 9)
    assert explained["samples_provenance"] == "reported"
    cases = {c["case"]: c for c in explained["cases"]}
    small, large = cases["small"], cases["large"]
    assert small["status"] == "pass" and small["ci_low"] > 0.5
    assert large["regressed"] and large["ci_high"] < -0.02
    assert large["cand"] > large["ref"] and small["cand"] < small["ref"]  # absolute, in ms
    assert large["ref_low"] <= large["ref"] <= large["ref_high"]
    # the aggregate (geometric mean of per-case ratios) alone clears the minimum effect: only the
    # regressed case keeps it from passing
    assert explained["aggregation"] == "geomean" and explained["ci_low"] > 0.05
    # `verdict explain` reads the recorded verdict back: the same condition and figures
    again = json.loads(
        _cli(ledger_path, tmp_path, "verdict", "explain", "e1-screen-1", "--json").stdout
    )["explanation"]
    assert again == explained
    shown = _cli(ledger_path, tmp_path, "verdict", "explain", "e1-screen-1").stdout
    assert shown.startswith("status fail: R12: case(s) regressed") and "case large: " in shown
    state = json.loads(_cli(ledger_path, tmp_path, "state", "--json").stdout)["state"]
    assert state["experiments"]["e1"]["status"] != "target_passed"
    # claims and the HTML report show the same per-case figures
    claims = _cli(ledger_path, tmp_path, "claims").stdout
    assert "    case large: " in claims and "below_min_effect, regressed" in claims
    page = tmp_path / "report.html"
    _cli(ledger_path, tmp_path, "report", "--html", str(page))
    assert "case large: " in page.read_text() and "case small: " in page.read_text()


@pytest.mark.slow
def test_r5_samples_recorded_from_outside_are_refused_at_a_formal_stage_and_marked(
    tmp_path: Path,
) -> None:
    """A hand-written pairs table through ``samples record``: refused at the target stage (R5,
    exit 3) since readiness does not allow outside samples; accepted at the screen and marked
    ``outside`` in its verdict; it cannot claim to be measured by perfledger."""
    ledger_path = tmp_path / "ledger"
    env = _setup(ledger_path)
    _record_resolution(ledger_path)
    _experiment(ledger_path)
    env_id = env["environment_id"]
    pairs = [
        {
            "case": case,
            "ref": {"call_id": f"r{case}{k}", "correct": True, "values": {"time_ms": [10.0 + k]},
                    "environment_id": env_id},
            "cand": {"call_id": f"c{case}{k}", "correct": True, "values": {"time_ms": [5.0 + k]},
                     "environment_id": env_id},
            "same_process": False,
            "monitor": {"observed": True},
        }
        for case in ("small", "large")
        for k in range(5)
    ]  # fmt: skip
    body = {
        "samples_id": "e1-screen-x", "target_id": "t1", "experiment_id": "e1", "stage": "screen",
        "reference": {"kind": "original", "content_hash": "sha256:" + "0" * 16},
        "candidate_hash": "sha256:" + "1" * 16, "test_set_hash": "sha256:" + "a" * 16,
        "environment_id": env_id, "units": {"time_ms": "ms"}, "pairs": pairs,
    }  # fmt: skip
    request = tmp_path / "samples.json"
    request.write_text(json.dumps(body))
    _cli(ledger_path, tmp_path, "samples", "record", "--request", str(request))
    claimed = {**body, "samples_id": "e1-screen-y",
               "provenance": {"source": "perfledger", "protocol": "x", "raw_table": "t"}}  # fmt: skip
    request.write_text(json.dumps(claimed))
    lying = _cli(ledger_path, tmp_path, "samples", "record", "--request", str(request), "--json",
                 check=False)  # fmt: skip
    assert lying.returncode == 2 and "cannot say `perfledger`" in lying.stdout
    request.write_text(json.dumps({**body, "samples_id": "e1-target-x", "stage": "target"}))
    refused = _cli(ledger_path, tmp_path, "samples", "record", "--request", str(request),
                   "--json", check=False)  # fmt: skip
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["rule"] == "R5" and "recorded from outside" in error["message"]
    assert "allow_outside_samples" in error["hint"]
    text = _cli(ledger_path, tmp_path, "verdict", "record", "--samples", "e1-screen-x").stdout
    assert "samples recorded from outside perfledger" in text


@pytest.mark.gpu
def test_r4_measure_aa_of_a_kernel_spec_covers_every_case_on_gpu(tmp_path: Path) -> None:
    """A kernel spec with two problems: the A/A measures both, each gets its resolution, the
    Target's is the largest, and the raw artifact keeps each case's comparisons."""
    pytest.importorskip("cupy", reason="the kernel harness needs CuPy")
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, primary="kernel_time_us", primary_unit="us", cases=("a", "b"))
    spec = tmp_path / "two_cases_spec.py"
    spec.write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'examples' / 'kernels')!r})\n"
        "from scale_spec import *  # noqa: F403\n"
        "PROBLEMS = {'a': scale_problem(N), 'b': scale_problem(N)}  # noqa: F405\n"
    )
    aa = _cli(ledger_path, tmp_path, "measure", "aa", "--target", "t1", "--spec", str(spec),
              "--runs", "2", "--record", "--accept-resolution", "--json", "--quiet")  # fmt: skip
    data = json.loads(aa.stdout)
    print("measure aa:", json.dumps({k: data[k] for k in ("resolution", "per_case", "notes")}))
    assert set(data["per_case"]) == {"a", "b"} and data["repeats"] == 4
    assert data["resolution"] == max(data["per_case"].values())
    with Ledger.open(ledger_path) as ledger:
        raw = json.loads(ledger.artifact(data["event_id"], "resolution.json"))
        assert set(raw["cases"]) == {"a", "b"}
        assert all(len(raw["cases"][c]["comparisons"]) == 2 for c in ("a", "b"))
        assert ledger.state().targets["t1"].resolution.per_case == data["per_case"]
