"""Outputs judged by perfledger through the real CLI on a real git ledger (R2, R5; SPEC.md
section 5, "Workload driver"): a readiness whose driver declares ``{output}`` with an accuracy
rule; ``measure workload`` compares each candidate output with the reference's of its pair,
records every call's check (digest, result, reason) and says who judged; one mismatch in a
formal stage keeps the candidate from champion; a malformed accuracy rule is a bad request
that changes nothing; a readiness judged by the subject alone is warned about."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from test_measure_cli import ORIGINAL, SELF, _cli, _experiment, _record_resolution
from test_measure_wall_clock import _reconcile
from wf_legacy import before_reported, rules_at
from wf_scenario import explain_stage_by_review, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.raw_table import raw_table_mismatch
from perfledger.events.workflow import OBSERVED_METRICS, R4_MEASURED_BASELINE

WORKLOAD = Path(__file__).resolve().parent / "output_workload.py"
DRIVER = [sys.executable, str(WORKLOAD), "--out", "{output}", "--seed", "{seed}",
          "--case", "{case}"]  # fmt: skip
EXACT = {"compare": "exact"}
#: What ``measure`` prints of a formal stage where one candidate output differed (R5).
MISMATCH = "FLAG accuracy: the candidate's output differed from the reference's on 1 call(s)"


def _target(path: Path, primary: str = "time_ms") -> dict[str, Any]:
    """A ledger with the Target frozen on ``primary`` (``time_ms``: the self-timed driver's
    figure; ``wall_time`` where only readiness is under test, R5 refusing the other)."""
    env = machine_environment(tools=True)
    with Ledger.init(path, name="m", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "cumulative sum",
            "primary": {"name": primary, "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "min_effect": 0.05, "scope": ["src/*"], "risk_boundary": "none",
            "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
        }, actor="agent")  # fmt: skip
    return env


def _readiness(env: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "target_id": "t1",
        # R11: one workload script for both subjects, told apart by options, not directories
        "original": {"content_hash": ORIGINAL, "unsnapshotted": "one script, options differ"},
        "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["small"]},
        "accuracy_rule": "the cumulative sum, exactly", "driver": {"argv": DRIVER},
        "environment": env["readiness_environment"],
        **extra,
    }  # fmt: skip


def _ready(path: Path, tmp: Path, primary: str = "wall_time") -> None:
    """A ledger whose Target (on ``primary``) is ready for experiment e1. ``wall_time`` (the
    worker protocol: perfledger's clock, every output judged) is made ready through the CLI as
    a user does; ``time_ms`` (the self-timed driver's figure, for what only that driver has) as
    an older perfledger did: R5 refuses such a readiness since ReadinessRecorded 6."""
    env = _target(path, primary)
    request = tmp / "readiness.json"
    request.write_text(json.dumps(_readiness(env, accuracy=EXACT)))
    if primary in OBSERVED_METRICS:
        _cli(path, tmp, "readiness", "record", "--request", str(request))
    else:
        with Ledger.open(path) as ledger, before_reported("ReadinessRecorded"):
            execute(ledger, "readiness.record", json.loads(request.read_text()), actor="agent")
    with Ledger.open(path) as ledger:
        run = lambda op, body: execute(ledger, op, body, actor="agent")  # noqa: E731
        run("metric-audit.record", {
            "target_id": "t1", "metric": primary, "numerator": "wall time",
            "denominator": "call", "unit": "ms", "source": "perfledger's clock",
            "reconstructed": False, "matches_target": True,
        })  # fmt: skip
        baseline = {
            "target_id": "t1", "original_hash": ORIGINAL, "metric": primary, "unit": "ms",
            "values": [200.0, 201.0, 199.0], "environment_id": env["environment_id"],
        }  # fmt: skip
        if primary in OBSERVED_METRICS:  # R4: as `measure baseline` records it
            record_measured_baseline(ledger, baseline, actor="agent")
        else:  # typed, as that older perfledger took it (BaselineRecorded 1)
            with rules_at({"BaselineRecorded": R4_MEASURED_BASELINE - 1}):
                run("baseline.record", baseline)
    _record_resolution(path)
    _experiment(path)


def _cmd(*extra: str) -> str:
    return shlex.join([*DRIVER, *extra])


def _measure(path: Path, tmp: Path, stage: str, ref: str, cand: str) -> str:
    """``measure workload`` of e1 at ``stage`` (5 pairs of the one case); its printed answer."""
    monitor = ["--no-monitor"] if stage == "screen" else ["--monitor", "host"]
    out = _cli(path, tmp, "measure", "workload", "--experiment", "e1", "--stage", stage,
               "--ref", ref, "--cand", cand, "--pairs", "5", "--warmup", "0", "--quiet",
               *monitor).stdout  # fmt: skip
    if stage != "screen":  # R17: another actor's review explains a shared host's activity
        explain_stage_by_review(path, "e1", stage, explanation="other tenants of a shared CI host")
    return out


def _select(tmp: Path) -> str:
    path = tmp / "select.json"
    path.write_text(json.dumps({"target_id": "t1", "samples_id": "e1-target-1",
                                "expected_current": "original"}))  # fmt: skip
    return str(path)


@pytest.mark.slow
def test_measure_workload_judges_outputs_records_them_and_a_wrong_final_audit_fails(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    _ready(ledger, tmp_path)
    ref, cand = _cmd("--work-s", "0.2"), _cmd("--work-s", "0.05")  # faster, same output
    _measure(ledger, tmp_path, "screen", ref, cand)
    printed = _measure(ledger, tmp_path, "target", ref, cand)
    assert "FLAG" not in printed, printed
    with Ledger.open(ledger) as opened:
        event_id = opened.state().samples["e1-target-1"].event_id
        samples = opened.payload(event_id)
        assert samples.provenance.protocol == "worker/v1"  # perfledger's clock, not the subject's
        first = samples.pairs[0].cand.output
        assert first.ok and first.compare == "exact"
        assert first.blake3 == samples.pairs[0].ref.output.blake3  # same inputs, same output
        # each pair drew its own inputs: five different outputs, each kept for the auditor
        digests = {p.ref.output.blake3 for p in samples.pairs}
        assert len(digests) == 5
        kept = opened.artifact(event_id, f"output-{first.blake3}")
        assert len(kept) == first.size
    verdict = json.loads(_cli(ledger, tmp_path, "verdict", "record", "--samples", "e1-target-1",
                              "--json").stdout)["payload"]  # fmt: skip
    assert verdict["status"] == "pass" and verdict["samples_provenance"] == "perfledger", verdict
    _reconcile(ledger, "e1")  # whether the result left the claim's interval is not under test
    _cli(ledger, tmp_path, "champion", "select", "--request", _select(tmp_path))
    # the final audit: the champion's output is wrong on its second call (R5: it fails)
    wrong_once = _cmd("--work-s", "0.05", "--mode", "wrong_once", "--wrong-call", "2",
                      "--cache", str(tmp_path / "count"))  # fmt: skip
    printed = _measure(ledger, tmp_path, "final_audit", ref, wrong_once)
    assert MISMATCH in printed
    final = json.loads(_cli(ledger, tmp_path, "final-audit", "record", "--target", "t1",
                            "--samples", "e1-final_audit-1", "--json").stdout)["payload"]  # fmt: skip
    assert final["status"] == "fail"
    assert any(
        n.startswith("R5: the champion failed its accuracy check on 1") for n in final["notes"]
    )
    audit = json.loads(_cli(ledger, tmp_path, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["findings"] == []


@pytest.mark.slow
def test_formal_stage_with_one_output_mismatch_cannot_support_a_champion(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    _ready(ledger, tmp_path)
    ref = _cmd("--work-s", "0.2")
    # faster, and right on every call but its 8th: the third target-stage call (5 screen calls)
    cand = _cmd("--work-s", "0.05", "--mode", "wrong_once", "--wrong-call", "8",
                "--cache", str(tmp_path / "count"))  # fmt: skip
    _measure(ledger, tmp_path, "screen", ref, cand)
    printed = _measure(ledger, tmp_path, "target", ref, cand)
    assert MISMATCH in printed
    with Ledger.open(ledger) as opened:
        samples = opened.payload(opened.state().samples["e1-target-1"].event_id)
    assert samples.cand_failures == 1
    bad = [p.cand for p in samples.pairs if not p.cand.correct]
    assert len(bad) == 1 and not bad[0].output.ok
    assert "elements differ from the reference's exactly" in bad[0].output.reason
    _cli(ledger, tmp_path, "verdict", "record", "--samples", "e1-target-1")
    _reconcile(ledger, "e1")  # R14 is not under test: only R5 may refuse
    refused = _cli(ledger, tmp_path, "champion", "select", "--request", _select(tmp_path),
                   "--json", check=False)  # fmt: skip
    assert refused.returncode == 3, refused.stdout + refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["rule"] == "R5" and f"e1-target-1/{bad[0].call_id}" in error["message"]
    audit = json.loads(_cli(ledger, tmp_path, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["findings"] == []


@pytest.mark.slow
def test_malformed_accuracy_rule_in_readiness_is_a_bad_request_and_changes_nothing(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    env = _target(ledger, "wall_time")  # readiness under test
    with Ledger.open(ledger) as opened:
        head = opened.head()
    no_output = {"argv": [sys.executable, str(WORKLOAD), "--out", "x", "--seed", "1"]}
    bad = {
        "unknown comparison": _readiness(env, accuracy={"compare": "approximately"}),
        "negative tolerance": _readiness(env, accuracy={"compare": "allclose", "rtol": -0.1}),
        "rtol above 1": _readiness(env, accuracy={"compare": "allclose", "rtol": 2.0}),
        "exact with a tolerance": _readiness(env, accuracy={"compare": "exact", "atol": 0.1}),
        "unknown field": _readiness(env, accuracy={"compare": "exact", "tolerance": 0.1}),
        "compare without {output}": _readiness(env, accuracy=EXACT, driver=no_output),
        "{output} without a rule": _readiness(env),
        "self_reported with {output}": _readiness(env, accuracy={"compare": "self_reported"}),
    }
    for what, body in bad.items():
        request = tmp_path / "readiness.json"
        request.write_text(json.dumps(body))
        out = _cli(ledger, tmp_path, "readiness", "record", "--request", str(request), "--json",
                   check=False)  # fmt: skip
        assert out.returncode == 2, (what, out.stdout, out.stderr)
        error = json.loads(out.stdout)["error"]
        assert error["code"] and "Traceback" not in out.stderr, what
        assert "accuracy" in error["message"] or "{output}" in error["message"], (what, error)
    with Ledger.open(ledger) as opened:
        assert opened.head() == head  # nothing appended
        assert opened.state().targets["t1"].readiness is None


@pytest.mark.slow
def test_readiness_judged_by_the_subject_alone_is_warned_about_not_refused(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    env = _target(ledger, "wall_time")  # readiness under test
    plain = {"argv": [sys.executable, str(WORKLOAD), "--seed", "1"]}
    request = tmp_path / "readiness.json"
    request.write_text(json.dumps(_readiness(env, driver=plain)))
    out = _cli(ledger, tmp_path, "readiness", "record", "--request", str(request))
    assert "warning: the driver declares no {output} place" in out.stderr
    request.write_text(json.dumps(_readiness(env, driver=plain,
                                             accuracy={"compare": "self_reported"})))  # fmt: skip
    out = _cli(ledger, tmp_path, "readiness", "record", "--request", str(request))
    assert "no {output} place" not in out.stderr  # stated: outputs cannot be compared
    request.write_text(json.dumps(_readiness(env, accuracy=EXACT)))
    out = _cli(ledger, tmp_path, "readiness", "record", "--request", str(request))
    assert "no {output} place" not in out.stderr  # the taught default
    assert "no {seed} place" not in out.stderr
    unseeded = {"argv": [sys.executable, str(WORKLOAD), "--out", "{output}", "--seed", "1"]}
    request.write_text(json.dumps(_readiness(env, accuracy=EXACT, driver=unseeded)))
    out = _cli(ledger, tmp_path, "readiness", "record", "--request", str(request))
    # the observed primary's worker hands every call a fresh seed itself: no {seed} warning; a
    # primary the subject reports, which drew it, is refused at readiness (ReadinessRecorded 6)
    assert "no {seed} place" not in out.stderr
    from perfledger.app.output_check import readiness_warning

    warned = readiness_warning(json.loads(request.read_text()), observed_primary=False)
    assert warned is not None and "declares {output} but no {seed} place" in warned


def test_measure_refuses_a_command_without_the_output_place_the_readiness_declares(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger"
    # the self-timed driver's own check: a worker gets its output place with every call
    _ready(ledger, tmp_path, "time_ms")
    plain = shlex.join([sys.executable, str(WORKLOAD), "--out", "/tmp/x", "--seed", "1"])
    out = _cli(ledger, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
               "--ref", _cmd(), "--cand", plain, "--no-monitor", "--json", check=False)  # fmt: skip
    assert out.returncode == 2
    assert "--cand" in json.loads(out.stdout)["error"]["message"]


# ---------------------------------------------------------------- the auditor's re-comparison


def _table(ok: bool, ref: bytes, cand: bytes) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
    """Samples of one judged pair, their raw table and the kept outputs."""
    import blake3

    def side(label: str, data: bytes, ok: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        digest = blake3.blake3(data).hexdigest()
        output = {"method": "outputs_v1", "compare": "exact", "blake3": digest,
                  "size": len(data), "ok": ok, "reason": "" if ok else "differ"}  # fmt: skip
        recorded = {"call_id": f"{label}-a-0", "correct": ok, "values": {"time_ms": [1.0]},
                    "output": {**output, "self_correct": True}}  # fmt: skip
        row = {"subject": label, "case": "a", "call_id": f"{label}-a-0", "ok": True,
               "correct": ok, "self_correct": True, "metrics": {"time_ms": [1.0]},
               "warmup": False, "pair": 0,
               "output": {**output, "error": "", "stored": f"output-{digest}"}}  # fmt: skip
        return recorded, row

    ref_side, ref_row = side("ref", ref, True)
    cand_side, cand_row = side("cand", cand, ok)
    samples = {"pairs": [{"case": "a", "ref": ref_side, "cand": cand_side}],
               "units": {"time_ms": "ms"}}  # fmt: skip
    table = {"kind": "workload", "table": [ref_row, cand_row],
             "settings": {"outputs": {"accuracy": {"compare": "exact", "rtol": 0.0,
                                                   "atol": 0.0}}}}  # fmt: skip
    kept = {ref_row["output"]["stored"]: ref, cand_row["output"]["stored"]: cand}
    return samples, msgspec.json.encode(table), kept


def test_audit_compares_kept_outputs_again_and_finds_a_forged_match() -> None:
    honest = _table(True, b'{"y": [1, 2]}', b'{"y": [1, 2]}')
    assert (
        raw_table_mismatch(honest[0], honest[1], bound=False, read_artifact=honest[2].get) is None
    )
    forged = _table(True, b'{"y": [1, 2]}', b'{"y": [1, 3]}')  # recorded ok, outputs differ
    found = raw_table_mismatch(forged[0], forged[1], bound=False, read_artifact=forged[2].get)
    assert found is not None and "does not match" in found
    swapped = dict(honest[2])
    swapped[next(iter(swapped))] = b'{"y": [9]}'  # a kept output that is not the one recorded
    found = raw_table_mismatch(honest[0], honest[1], bound=False, read_artifact=swapped.get)
    assert found is not None and "not the output recorded" in found


def test_raw_table_whose_call_claims_correct_despite_its_output_check_is_a_mismatch() -> None:
    samples, raw, _kept = _table(False, b"[1]", b"[2]")
    table = msgspec.json.decode(raw)
    table["table"][1]["correct"] = True  # the candidate's claim, kept over the check...
    samples["pairs"][0]["cand"]["correct"] = True  # ...in the table and in the samples
    found = raw_table_mismatch(samples, msgspec.json.encode(table), bound=False)
    assert found is not None and "only when its own check and its output check hold" in found


@pytest.mark.slow
def test_measure_dry_run_shows_the_deciders_checks_and_appends_nothing(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    _ready(ledger, tmp_path, "time_ms")  # the wall-clock check of reported times: self-timed
    with Ledger.open(ledger) as opened:
        head = opened.head()
    out = _cli(ledger, tmp_path, "measure", "workload", *SELF, "--experiment", "e1", "--stage", "screen",
               "--ref", _cmd(), "--cand", _cmd("--mode", "wrong"), "--pairs", "5", "--warmup",
               "0", "--no-monitor", "--dry-run", "--json", "--quiet")  # fmt: skip
    result = json.loads(out.stdout)
    assert result["accuracy_judged"]["by_perfledger"] == 10
    assert len(result["accuracy_judged"]["output_mismatches"]) == 5
    # the wall-clock check is the one samples.record derives (decided on the head, not appended)
    assert result["wall_check"]["method"] == "wall_v2"
    assert all(not p["cand"]["correct"] for p in result["request"]["pairs"])
    with Ledger.open(ledger) as opened:
        assert opened.head() == head


@pytest.mark.slow
def test_measure_aa_says_when_the_originals_outputs_differ_from_its_own(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    _ready(ledger, tmp_path)
    out = _cli(ledger, tmp_path, "measure", "aa", "--target", "t1", "--cmd",
               _cmd("--mode", "jitter"), "--runs", "3", "--json", "--quiet",
               check=False)  # fmt: skip
    assert out.returncode != 0
    error = json.loads(out.stdout)["error"]
    assert "outputs of the same case and seed differ" in error["hint"]
    honest = _cli(ledger, tmp_path, "measure", "aa", "--target", "t1", "--cmd", _cmd(),
                  "--runs", "3", "--json", "--quiet")  # fmt: skip
    assert json.loads(honest.stdout)["repeats"] == 3


def test_no_seed_warning_for_a_target_whose_primary_perfledger_observes() -> None:
    # the worker protocol hands every call a fresh seed itself: the skill's own driver form
    # (`{subject}/bench.py {case} {output}`) drew a warning that did not apply to it
    from perfledger.app.output_check import readiness_warning

    body = {"driver": {"argv": ["python3", "{subject}/bench.py", "{case}", "{output}"]}}
    assert readiness_warning(body, observed_primary=True) is None
    assert "no {seed} place" in (readiness_warning(body, observed_primary=False) or "")
