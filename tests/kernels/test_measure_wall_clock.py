"""``measure workload --protocol self`` end to end on real commands, a real git ledger and the
real CLI: the wall-clock check of times a subject reports, which only the self-timed driver has
(under the worker protocol perfledger's clock is the figure). An honest faster candidate's
target stage passes on its reported times, marked ``reported``, and makes no champion (R5,
issue 34); a candidate that does the same work but reports 1/100 of its time is flagged by the
wall-clock check, the flag is printed when ``measure`` returns, recorded in the samples, and
blocks the pass (R12) and the champion; the ledger still audits clean (every derivation
re-made)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from test_measure_cli import SELF, SUMSQ, _cli, _experiment, _record_resolution, _setup
from wf_scenario import explain_stage_by_review

from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.errors import BadRequest

WORKLOAD = Path(__file__).resolve().parent / "adversarial_workload.py"
CAND2 = "sha256:" + "2" * 16


def _cmd(*args: str) -> str:
    return shlex.join([sys.executable, "-S", str(WORKLOAD), *args])


def _second_experiment(path: Path) -> None:
    ledger = Ledger.open(path)
    try:
        execute(ledger, "experiment.create", {
            "experiment_id": "e2", "target_id": "t1", "title": "report less",
            "candidate": {"content_hash": CAND2, "changed_paths": ["src/loop.py"]},
            "claim": {
                "evidence": [
                    {"evidence_id": "ev1", "applicability": "same_boundary", "used_for": "coverage"},
                    {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
                     "used_for": "local_speedup"},
                ],
                "scope": {"replaced_region": "loop", "execution_form": "python"},
                "replacement_boundary": "the loop", "coverage": 0.9, "local_speedup": 2.0,
                "stated_bound": 1.0 / (0.1 + 0.45),
                "expected_improvement": {"low": 0.0, "high": 1.0 - (0.1 + 0.45)},
            },
            "preregistration": {"rejects": "implementation"},
        }, actor="agent")  # fmt: skip
    finally:
        ledger.close()


def _reconcile(path: Path, experiment: str) -> None:
    """The result lies beyond the claim's predicted interval (e1 halved the time; e2 reports
    1/100 of it): a reconciliation is owed, which blocks champion selection until recorded (R14);
    recorded here so that the selection meets the rule under test."""
    with Ledger.open(path) as ledger:
        execute(ledger, "reconcile", {
            "experiment_id": experiment, "premise": "coverage",
            "corrected_model": {"description": "the loop is the whole call"},
            "explanation": "the test's workload is all loop",
        }, actor="agent")  # fmt: skip


def _select(tmp: Path, experiment: str, current: str) -> str:
    """A ``champion.select`` request file for ``experiment``'s first target samples."""
    path = tmp / f"select-{experiment}.json"
    path.write_text(json.dumps({"target_id": "t1", "samples_id": f"{experiment}-target-1",
                                "expected_current": current}))  # fmt: skip
    return str(path)


def _refused_champion(path: Path, tmp: Path, experiment: str, rule: str, why: str) -> None:
    """``champion select`` of ``experiment``'s target samples through the CLI is refused by
    ``rule`` naming ``why``; nothing is appended."""
    refused = _cli(path, tmp, "champion", "select", "--request",
                   _select(tmp, experiment, "original"), "--json", check=False)  # fmt: skip
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["rule"] == rule and why in error["message"], error


def _measure(path: Path, tmp: Path, experiment: str, stage: str, ref: str, cand: str) -> str:
    monitor = ["--no-monitor"] if stage == "screen" else ["--monitor", "host"]
    out = _cli(path, tmp, "measure", "workload", *SELF, "--experiment", experiment, "--stage", stage,
               "--ref", ref, "--cand", cand, "--case", "small", "--pairs", "5", "--warmup", "0",
               "--quiet", *monitor)  # fmt: skip
    if stage != "screen":  # R17: another actor's review explains a shared host's activity
        explain_stage_by_review(path, experiment, stage,
                                explanation="other tenants of a shared CI host")  # fmt: skip
    return out.stdout


@pytest.mark.slow
def test_wall_clock_flag_is_printed_recorded_and_blocks_pass_and_champion(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    # this test is about the wall-clock rule; a loaded test host's foreign activity is
    # explained by another actor's review (_measure), which lifts R17's 20 % limit too
    _setup(ledger, cases=("small",))
    _record_resolution(ledger)
    _experiment(ledger)  # e1: an honest candidate doing half the work
    # 0.3 s saved per call (e1) and 0.3 s invented per call (e2): the lie is two to four times
    # the tolerance the check allows on a loaded host (a quarter of the saving plus 5-70 ms)
    ref, honest = _cmd("--work-s", "0.6"), _cmd("--work-s", "0.3")
    _measure(ledger, tmp_path, "e1", "screen", ref, honest)
    printed = _measure(ledger, tmp_path, "e1", "target", ref, honest)
    # on a loaded host the saving may be below what the wall clock resolves: never flagged
    assert "FLAG" not in printed and "none flagged" in printed
    # the self-timed driver's figures are reported (R5): the verdict passes on them, marked
    # reported, and no champion comes of it
    verdict = json.loads(_cli(ledger, tmp_path, "verdict", "record", "--samples", "e1-target-1",
                              "--json").stdout)["payload"]  # fmt: skip
    assert verdict["status"] == "pass", (verdict["notes"], verdict["status"])
    assert verdict["samples_provenance"] == "reported"
    _reconcile(ledger, "e1")  # R14 is not under test: only R5 may refuse
    _refused_champion(ledger, tmp_path, "e1", "R5", "figures the subject reported")

    # e2 does e1's exact work and reports 1/100 of its time
    _second_experiment(ledger)
    cheat = _cmd("--work-s", "0.3", "--mode", "scaled", "--report-scale", "0.01")
    _measure(ledger, tmp_path, "e2", "screen", honest, cheat)
    printed = _measure(ledger, tmp_path, "e2", "target", honest, cheat)
    assert "FLAG wall clock" in printed and "cannot pass nor support a champion" in printed
    assert "the driver's wall clock saw" in printed
    with Ledger.open(ledger) as opened:
        samples = opened.payload(opened.state().samples["e2-target-1"].event_id)
    assert samples.wall_check is not None and samples.wall_check.flagged
    assert all(p.ref.wall_s and p.cand.wall_s for p in samples.pairs)  # the driver's clock, kept
    answer = json.loads(_cli(ledger, tmp_path, "verdict", "record", "--samples", "e2-target-1",
                             "--json").stdout)  # fmt: skip
    verdict = answer["payload"]
    assert answer["explanation"]["condition"] == "wall_clock"
    assert "without it the derivation was pass" in answer["explanation"]["reason"]
    assert verdict["primary"]["status"] == "pass"  # what the reported times alone would say
    assert verdict["status"] == "inconclusive" and verdict["samples_provenance"] == "reported"
    assert any(n.startswith("R12: wall clock") for n in verdict["notes"])
    _reconcile(ledger, "e2")
    _refused_champion(ledger, tmp_path, "e2", "R13", "wall-clock check")
    claims = json.loads(_cli(ledger, tmp_path, "claims", "--json").stdout)
    flagged = {r["experiment_id"]: r["measurement_flags"] for r in claims["claims"]}
    assert flagged["e1"] == [] and any("wall clock" in f for f in flagged["e2"])
    handoff = _cli(ledger, tmp_path, "handoff", "--md").stdout
    assert "wall clock" in handoff
    _cli(ledger, tmp_path, "report", "--html", str(tmp_path / "report.html"))
    page = (tmp_path / "report.html").read_text()
    assert "<h2>Measurement flags</h2>" in page and "e2: e2-target-1: R12: wall clock" in page
    audit = json.loads(_cli(ledger, tmp_path, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["findings"] == []
    champion = json.loads(_cli(ledger, tmp_path, "champion", "show", "--json").stdout)
    assert champion["champions"][0]["champion"] == "original"  # nothing reported decided


@pytest.mark.slow
def test_processes_left_behind_are_reported_when_measure_returns(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    _setup(ledger, cases=("small",))
    _record_resolution(ledger)
    _experiment(ledger)
    beat = tmp_path / "beat"
    lingering = _cmd("--work-s", "0.05", "--mode", "linger", "--heartbeat", str(beat))
    printed = _measure(ledger, tmp_path, "e1", "screen", _cmd("--work-s", "0.05"), lingering)
    assert "note processes: 5 call(s) left processes behind, ended with the call" in printed
    assert "cand-small-0 (1)" in printed and "ref-small" not in printed.split("note processes")[1]


#: A candidate that does the reference's exact work (``sumsq.py``'s loop, three repeats) and
#: reports it with its total intact, so the wall clock sees no saving to doubt: ``pad`` adds four
#: values that never ran; ``shift`` reports the three repeats as 1 %, 1 % and 298 % of their mean.
REPORT_LIAR = """
import json, os, sys, time
sys.path.insert(0, WORKLOADS)
from sumsq import SIZES, sum_squares
n = SIZES[os.environ.get("PERFLEDGER_CASE", "small")]
times = []
for _ in range(3):
    start = time.perf_counter()
    result = sum_squares(n, 0.0)
    times.append((time.perf_counter() - start) * 1e3)
mean = sum(times) / 3
if sys.argv[1] == "pad":
    times += [1e-4] * 4
else:
    times = [0.01 * mean, 0.01 * mean, 2.98 * mean]
print(json.dumps({"correct": result == n * (n - 1) * (2 * n - 1) // 6,
                  "metrics": {"time_ms": times}}))
"""


@pytest.mark.slow
def test_cheat_candidate_whose_values_keep_their_total_but_not_their_median_is_flagged(
    tmp_path: Path,
) -> None:
    """R12 (``wall_v2``): on the embedded workload, each liar's per-call median shows a gain of
    about 97-100 % with its reported total, and so the wall clock, unchanged; each is flagged
    when ``measure`` returns and its verdict cannot pass."""
    ledger = tmp_path / "ledger"
    _setup(ledger, cases=("small",))  # median statistic; one case shows the rule per case
    _record_resolution(ledger)
    _experiment(ledger)
    liar = tmp_path / "liar.py"
    liar.write_text(f"WORKLOADS = {str(SUMSQ.parent)!r}\n" + REPORT_LIAR)
    for k, mode in enumerate(["pad", "shift"], start=1):
        printed = _cli(ledger, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage",
                       "screen", "--ref", shlex.join([sys.executable, str(SUMSQ), "--repeats", "3"]),
                       "--cand", shlex.join([sys.executable, str(liar), mode]), "--pairs", "5", "--no-monitor",
                       "--quiet").stdout  # fmt: skip
        assert "FLAG wall clock" in printed, printed
        reason = "different numbers of values" if mode == "pad" else "per-call median improves"
        assert reason in printed, printed
        verdict = json.loads(_cli(ledger, tmp_path, "verdict", "record", "--samples",
                                  f"e1-screen-{k}", "--json").stdout)["payload"]  # fmt: skip
        assert verdict["primary"]["estimate"] > 0.9  # what the reported values alone claim
        assert any(n.startswith("R12: wall clock") for n in verdict["notes"])


@pytest.mark.slow
def test_cheat_inflated_rate_is_flagged_through_measure_when_the_target_names_its_work(
    tmp_path: Path,
) -> None:
    """A tokens/s primary whose Target names ``tokens`` as its work: a candidate doing the
    reference's work and reporting 100 times its rate is flagged when ``measure`` returns, the
    verdict cannot pass (R12), and the ledger audits clean (the check re-derived)."""
    ledger = tmp_path / "ledger"
    _setup(ledger, cases=("small",), primary="tokens_per_s", primary_unit="tokens/s",
           direction="higher_is_better", work_metric="tokens")  # fmt: skip
    _record_resolution(ledger)
    _experiment(ledger)
    ref = _cmd("--work-s", "0.3", "--metric", "rate")
    cheat = _cmd(
        "--work-s", "0.3", "--metric", "rate", "--mode", "scaled", "--report-scale", "0.01"
    )
    _measure(ledger, tmp_path, "e1", "screen", ref, cheat)
    printed = _measure(ledger, tmp_path, "e1", "target", ref, cheat)
    assert "FLAG wall clock" in printed and "tokens_per_s" in printed
    with Ledger.open(ledger) as opened:
        samples = opened.payload(opened.state().samples["e1-target-1"].event_id)
    assert samples.units["tokens"] == "tokens"  # the work, recorded for the auditor
    assert samples.wall_check is not None and samples.wall_check.flagged
    answer = json.loads(_cli(ledger, tmp_path, "verdict", "record", "--samples", "e1-target-1",
                             "--json").stdout)  # fmt: skip
    assert answer["payload"]["primary"]["status"] == "pass"  # what the rate alone would say
    assert answer["payload"]["status"] == "inconclusive"
    audit = json.loads(_cli(ledger, tmp_path, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["findings"] == []


@pytest.mark.slow
def test_rate_without_a_work_metric_is_noted_as_unchecked_when_measure_returns(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    _setup(ledger, cases=("small",), primary="tokens_per_s", primary_unit="tokens/s",
           direction="higher_is_better")  # fmt: skip
    _record_resolution(ledger)
    _experiment(ledger)
    ref = _cmd("--work-s", "0.02", "--metric", "rate")  # the note is about the units, not the time
    printed = _measure(ledger, tmp_path, "e1", "screen", ref, ref)
    assert "note wall clock: tokens_per_s is a rate" in printed and "no work_metric" in printed


def test_work_metric_on_a_time_metric_is_refused_at_freeze(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="only a rate over time"):
        _setup(tmp_path / "ledger", work_metric="tokens")


def test_work_metric_on_a_time_per_work_metric_is_accepted_at_freeze(tmp_path: Path) -> None:
    """``ms/tokens`` (a time per unit of work) takes a work metric, as a rate does."""
    _setup(tmp_path / "ledger", primary="ms_per_token", primary_unit="ms/tokens",
           work_metric="tokens")  # fmt: skip
    with Ledger.open(tmp_path / "ledger") as opened:
        (target,) = opened.state().targets.values()
        assert target.definition.primary.work_metric == "tokens"
