"""``perfledger measure serving`` through the real CLI, on a real git ledger, against the real
stand-in server (``serving_standin.py``): window pairs recorded as samples with per-request
values (R12), the raw table attached, the verdict derived by the ordinary operation; the checks
that refuse before any request is sent (R2, R12, R17)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import blake3
import pytest
from serving_standin import BASE, standin
from wf_scenario import record_measured_aa, record_measured_baseline

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.serving_record import metric_kind
from perfledger.errors import BadRequest
from subprocess_env import isolated_env, perfledger_command

ROOT = Path(__file__).resolve().parents[2]
ORIGINAL = "sha256:" + "0" * 16
CAND = "sha256:" + "1" * 16
#: Nothing listens here: a command that sent a request would fail, not be refused.
DEAD_URL = "http://127.0.0.1:9/v1"


def _testset(tmp: Path) -> tuple[Path, str]:
    path = tmp / "testset.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 6}) + "\n"
            for i in range(252)  # what --pairs 7 at 8 workers sends a subject (7 x 36)
        )
    )
    return path, "blake3:" + blake3.blake3(path.read_bytes()).hexdigest()


def _setup(
    path: Path,
    test_set_hash: str,
    statistic: str = "median",
    cases: tuple[str, ...] = ("chat",),
    readiness_statistics: dict[str, Any] | None = None,
) -> None:
    """A ledger ready for samples: Target (TTFT in ms, lower is better), readiness with this
    machine's environment and the request set's hash, metric audit, baseline, resolution and an
    experiment (exposure reasoning for a tail primary, R7)."""
    env = machine_environment(tools=False)
    ledger = Ledger.init(path, name="m", actor="agent")
    try:
        run = lambda op, body: execute(ledger, op, body, actor="agent")  # noqa: E731
        run("target.freeze", {
            "target_id": "t1", "title": "chat TTFT",
            "primary": {"name": "ttft_ms", "unit": "ms", "direction": "lower_is_better",
                        "statistic": statistic},
            "guardrails": [{"metric": "e2e_ms", "unit": "ms", "direction": "lower_is_better",
                            "allowed_regression": 0.05}],
            "min_effect": 0.05, "scope": ["src/*"], "risk_boundary": "none",
            "budget": {"wall_s": 3600.0, "gpu_s": 600.0},
        })  # fmt: skip
        run("readiness.record", {
            "target_id": "t1",
            # R11: the servers run outside perfledger, which measures their URLs
            "original": {"content_hash": ORIGINAL, "unsnapshotted": "servers started elsewhere"},
            "test_set": {"hash": test_set_hash, "case_count": len(cases), "cases": list(cases)},
            "accuracy_rule": "server answers every request", "driver": {"argv": ["vllm", "serve"]},
            "environment": env["readiness_environment"],
            **({"statistics": readiness_statistics} if readiness_statistics else {}),
        })  # fmt: skip
        run("metric-audit.record", {
            "target_id": "t1", "metric": "ttft_ms", "numerator": "first token time",
            "denominator": "request", "unit": "ms", "source": "streaming client",
            "reconstructed": False, "matches_target": True,
        })  # fmt: skip
        record_measured_baseline(ledger, {
            "target_id": "t1", "original_hash": ORIGINAL, "metric": "ttft_ms", "unit": "ms",
            "values": [50.0, 51.0, 49.0], "environment_id": env["environment_id"],
        })  # fmt: skip
        record_measured_aa(ledger, "t1")  # R4: as `measure aa --record`
        run("evidence.add", {
            "evidence_id": "ev1", "layer": "service", "tool": {"name": "manual", "version": "1"},
            "facts": [{"name": "prefill share", "value": 0.9, "unit": "ratio"}],
        })  # fmt: skip
        claim: dict[str, Any] = {
            "evidence": [
                {"evidence_id": "ev1", "applicability": "same_boundary", "used_for": "coverage"},
                {"evidence_id": "ev1", "applicability": "conservative_upper_bound",
                 "used_for": "local_speedup"},
            ],
            "scope": {"replaced_region": "prefill", "execution_form": "cuda graph"},
            "replacement_boundary": "the prefill kernel", "coverage": 0.9, "local_speedup": 2.0,
        }  # fmt: skip
        if statistic in ("p95", "p99"):
            claim["exposure"] = {"affected_share": 0.1, "critical_path": "prefill of long prompts"}
            claim["expected_improvement"] = {"low": 0.05, "high": 0.2}
        else:
            claim["stated_bound"] = 1.0 / (0.1 + 0.45)
            # R14: every claim states its expected end-to-end improvement, in the verdict's
            # units (for latency, the fraction of time saved: at most 1 - 1/bound)
            claim["expected_improvement"] = {"low": 0.0, "high": 1.0 - (0.1 + 0.45)}
        run("experiment.create", {
            "experiment_id": "e1", "target_id": "t1", "title": "faster prefill",
            "candidate": {"content_hash": CAND, "changed_paths": ["src/prefill.py"]},
            "claim": claim, "preregistration": {"rejects": "implementation"},
        })  # fmt: skip
    finally:
        ledger.close()


def _cli(path: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(path), *args],
        capture_output=True, text=True, env=isolated_env(tmp), cwd=ROOT, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_measure_serving_records_window_pairs_with_per_request_values(tmp_path: Path) -> None:
    testset, digest = _testset(tmp_path)
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, digest)
    fast = {**BASE, "ttft_s": 0.04}
    with standin({"seed": 21, "profiles": {"a": BASE, "b": fast}}) as url:
        proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", f"{url}/a/v1",
                    "--cand-url", f"{url}/b/v1", "--requests", str(testset), "--concurrency", "8",
                    "--pairs", "7", "--steady", "20", "--drift-threshold", "0.2", "--experiment", "e1",
                    "--stage", "screen",
                    "--monitor", "host",
                    "--quiet", "--json", "--raw", str(tmp_path / "raw.json"))  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "SamplesRecorded" and data["failed_requests"] == 0
    assert data["pairs_recorded"] == 7 - len(data["pairs_left_out"]) >= 5
    assert data["summary"]["ttft_s"]["p50"]["ratio"] < 0.9
    with Ledger.open(ledger_path) as ledger:
        pairs = ledger.payload(data["event_id"]).pairs
        # R5: measured by perfledger's own client, bound to the artifact of every request
        provenance = ledger.payload(data["event_id"]).provenance
        assert provenance.source == "perfledger" and provenance.protocol == "serving/v1"
        artifact = json.loads(ledger.artifact(data["event_id"], "samples.json"))
    assert len(pairs) == data["pairs_recorded"]
    for pair in pairs:
        assert pair.case == "chat" and not pair.same_process
        assert pair.ref.call_id.endswith("-ref") and pair.cand.call_id.endswith("-cand")
        # per-request values, in the Target's unit (ms): 20 steady requests per window
        assert len(pair.ref.values["ttft_ms"]) == 20 and len(pair.cand.values["e2e_ms"]) == 20
        assert all(30 < v < 500 for v in pair.ref.values["ttft_ms"])
        # the host monitor watched both windows (R17); nothing is explained by a typed text
        assert pair.monitor is not None and pair.monitor.observed
        assert "host_monitor" in pair.monitor.flags
        assert pair.monitor.explained is None
    # 14 windows of 8 warm-up (one per worker), 20 steady and 8 cool-down requests
    assert artifact["kind"] == "serving" and len(artifact["requests"]) == 14 * 36
    assert artifact["monitor"]["source"] == "host" and artifact["monitor"]["settings"]["hz"] > 0
    assert json.loads((tmp_path / "raw.json").read_text())["report"]["drift"]["metric"] == "ttft_s"
    verdict = _cli(ledger_path, tmp_path, "verdict", "record", "--samples", data["samples_id"],
                   "--json")  # fmt: skip
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    primary = json.loads(verdict.stdout)["payload"]["primary"]
    # derived from the per-request values (R12): the candidate's TTFT is ~20 % shorter
    assert primary["n_pairs"] == data["pairs_recorded"] and 0.08 < primary["estimate"] < 0.3


@pytest.mark.slow
def test_measure_serving_without_a_ledger_target_reports_only(tmp_path: Path) -> None:
    testset, _digest = _testset(tmp_path)
    with standin({"seed": 22, "profiles": {"a": BASE}}) as url:
        proc = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url", f"{url}/a/v1",
                    "--requests", str(testset), "--rate", "100", "--pairs", "2", "--steady", "10",
                    "--no-monitor", "--quiet")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ttft p50" in proc.stdout and "drift (ttft_s):" in proc.stdout


def test_r12_a_tail_primary_needs_enough_steady_requests_per_window(tmp_path: Path) -> None:
    testset, digest = _testset(tmp_path)
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, digest, statistic="p95")
    proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", DEAD_URL, "--cand-url",
                DEAD_URL, "--requests", str(testset), "--concurrency", "4", "--steady", "20",
                "--experiment", "e1", "--stage", "screen", "--no-monitor", "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["rule"] == "R12" and "at least 40 steady requests" in error["message"]


def test_r2_a_formal_stage_refuses_a_request_set_other_than_readiness_recorded(
    tmp_path: Path,
) -> None:
    testset, _digest = _testset(tmp_path)
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, "blake3:" + "f" * 64)
    proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", DEAD_URL, "--cand-url",
                DEAD_URL, "--requests", str(testset), "--concurrency", "4", "--experiment", "e1",
                "--stage", "target", "--monitor", "host", "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["error"]["rule"] == "R2"


def test_r17_a_formal_stage_refuses_to_run_without_the_monitor(tmp_path: Path) -> None:
    testset, digest = _testset(tmp_path)
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, digest)
    proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", DEAD_URL, "--cand-url",
                DEAD_URL, "--requests", str(testset), "--concurrency", "4", "--experiment", "e1",
                "--stage", "target", "--no-monitor", "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["error"]["rule"] == "R17"


@pytest.mark.slow
def test_measure_serving_refuses_bad_flags_with_exit_2(tmp_path: Path) -> None:
    testset, _digest = _testset(tmp_path)
    both = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url", DEAD_URL,
                "--requests", str(testset), "--rate", "5", "--concurrency", "2", "--json")  # fmt: skip
    assert both.returncode == 2 and "exactly one of --rate" in both.stdout
    stage_only = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url", DEAD_URL,
                      "--requests", str(testset), "--rate", "5", "--stage", "screen")  # fmt: skip
    assert stage_only.returncode == 2 and "Traceback" not in stage_only.stderr
    missing = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url", DEAD_URL,
                   "--requests", str(tmp_path / "nope.jsonl"), "--rate", "5")  # fmt: skip
    assert (
        missing.returncode == 2 and "cannot read the request set" in missing.stderr + missing.stdout
    )


@pytest.mark.slow
def test_measure_serving_reports_a_server_that_is_down(tmp_path: Path) -> None:
    testset, _digest = _testset(tmp_path)
    proc = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url", DEAD_URL,
                "--requests", str(testset), "--concurrency", "2", "--steady", "2", "--pairs", "1",
                "--no-monitor", "--json")  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "no request of the first window succeeded" in json.loads(proc.stdout)["error"]["message"]


@pytest.mark.parametrize(
    ("name", "explicit", "kind"),
    [("ttft_ms", {}, "ttft"), ("e2e_latency_s", {}, "e2e"), ("tpot_us", {}, "tpot"),
     ("output_tokens_per_s", {}, "output_tokens_per_s"), ("p99_first", {"p99_first": "ttft"}, "ttft"),
     ("wall_ms", {}, None)],
)  # fmt: skip
def test_target_metrics_map_to_serving_metrics(
    name: str, explicit: dict[str, str], kind: str | None
) -> None:
    assert metric_kind(name, explicit) == kind


def test_an_unknown_serving_metric_kind_is_refused() -> None:
    with pytest.raises(BadRequest, match="unknown serving metric"):
        metric_kind("x", {"x": "joules"})


@pytest.mark.slow
def test_measure_serving_records_the_report_as_service_evidence(tmp_path: Path) -> None:
    testset, digest = _testset(tmp_path)
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, digest)
    with standin({"seed": 23, "profiles": {"a": BASE, "b": {**BASE, "ttft_s": 0.04}}}) as url:
        args = ["measure", "serving", "--ref-url", f"{url}/a/v1", "--cand-url", f"{url}/b/v1",
                "--requests", str(testset), "--concurrency", "8", "--pairs", "3", "--steady", "20",
                "--drift-threshold", "0.2",
                "--no-monitor", "--quiet", "--json", "--evidence", "serving-ab", "--target", "t1"]  # fmt: skip
        proc = _cli(ledger_path, tmp_path, *args)
        again = _cli(ledger_path, tmp_path, *args)  # refused before any request is sent
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["kind"] == "EvidenceRecorded"
    assert again.returncode == 2 and "already recorded" in again.stdout
    with Ledger.open(ledger_path) as ledger:
        payload = ledger.payload(data["event_id"])
        assert json.loads(ledger.artifact(data["event_id"], "serving.json"))["kind"] == "serving"
    facts = {f.name: f for f in payload.facts}
    assert payload.layer == "service" and payload.applicability == "diagnostic"
    assert facts["ref.ttft.p50"].unit == "ms" and 40 < facts["ref.ttft.p50"].value < 200
    assert facts["cand_over_ref.ttft.p50"].unit == "ratio"
    assert facts["cand_over_ref.ttft.p50.ci_low"].value <= facts["cand_over_ref.ttft.p50"].value
    assert facts["cand.output_tokens_per_s"].unit == "tokens/s"
    assert any("monitor" in x for x in payload.limitations)


@pytest.mark.slow
def test_measure_serving_switches_one_server_between_two_configurations(tmp_path: Path) -> None:
    testset, _digest = _testset(tmp_path)
    with standin({"seed": 24, "profiles": {"a": BASE, "b": {**BASE, "ttft_s": 0.04}}}) as url:

        def switch(profile: str) -> str:
            code = (
                "import sys, urllib.request; urllib.request.urlopen(urllib.request.Request("
                f"sys.argv[1] + '/admin/live?profile={profile}', method='POST'))"
            )
            return f'{sys.executable} -c "{code}" {url}'

        proc = _cli(tmp_path / "none", tmp_path, "measure", "serving", "--ref-url",
                    f"{url}/live/v1", "--before-ref", switch("a"), "--before-cand", switch("b"),
                    "--requests", str(testset), "--concurrency", "8", "--pairs", "4", "--steady",
                    "20", "--drift-threshold", "0.2", "--quiet", "--json", "--min-effect",
                    "0.05")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["summary"]["ttft_s"]["p50"]["finding"] == "lower"
    assert [w["subject"] for w in data["windows"]] == ["ref", "cand", "cand", "ref"] * 2
    # the default monitor (auto) is NVML where it opens, else the host's counters, and says so
    assert all(w["monitor"]["observed"] for w in data["windows"])
    if _nvml_opens():
        assert data["monitor"] == "gpu"
    else:
        assert "host monitor" in data["monitor"]
        assert any("host monitor" in w for w in data["warnings"])


def _nvml_opens() -> bool:
    from perfledger.kernels.monitor.monitor import NvmlSource

    try:
        NvmlSource().close()
    except RuntimeError:
        return False
    return True


@pytest.mark.slow
def test_measure_serving_records_one_pair_per_window_pair_and_case(tmp_path: Path) -> None:
    testset = tmp_path / "cases.jsonl"
    testset.write_text(
        "".join(
            json.dumps({"case": case, "prompt": f"{case} {i}", "max_tokens": tokens}) + "\n"
            for i in range(54)  # 108 lines: what --pairs 3 at 8 workers sends a subject
            for case, tokens in (("short", 3), ("long", 9))
        )
    )
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, "blake3:" + blake3.blake3(testset.read_bytes()).hexdigest(),
           cases=("short", "long"))  # fmt: skip
    with standin({"seed": 25, "profiles": {"a": BASE, "b": {**BASE, "ttft_s": 0.04}}}) as url:
        proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", f"{url}/a/v1",
                    "--cand-url", f"{url}/b/v1", "--requests", str(testset), "--concurrency", "8",
                    "--pairs", "3", "--steady", "20", "--drift-threshold", "0.2",
                    "--experiment", "e1", "--stage", "screen", "--no-monitor", "--quiet",
                    "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    with Ledger.open(ledger_path) as ledger:
        pairs = ledger.payload(data["event_id"]).pairs
        # R5: measured by perfledger's own client, bound to the artifact of every request
        provenance = ledger.payload(data["event_id"]).provenance
        assert provenance.source == "perfledger" and provenance.protocol == "serving/v1"
    assert {p.case for p in pairs} == {"short", "long"}
    assert len(pairs) == data["pairs_recorded"] == 6 - len(data["pairs_left_out"])
    e2e_ms: dict[str, list[float]] = {"short": [], "long": []}
    for pair in pairs:  # each pair holds only its case's requests: ~half of 20 a window
        assert 0 < len(pair.ref.values["ttft_ms"]) < 20
        e2e_ms[pair.case].extend(pair.cand.values["e2e_ms"])
    # 3 tokens vs 9 tokens at 4 ms a token: the long case ends ~24 ms later (compared with the
    # short case measured in the same run, not with a fixed figure: the host's load delays both)
    assert statistics.median(e2e_ms["long"]) > statistics.median(e2e_ms["short"]) + 12, e2e_ms


def test_r11_a_request_set_naming_cases_not_in_the_test_set_is_refused(tmp_path: Path) -> None:
    testset = tmp_path / "cases.jsonl"
    testset.write_text(json.dumps({"case": "other", "prompt": "x", "max_tokens": 2}) + "\n")
    ledger_path = tmp_path / "ledger"
    _setup(ledger_path, "blake3:" + blake3.blake3(testset.read_bytes()).hexdigest())
    proc = _cli(ledger_path, tmp_path, "measure", "serving", "--ref-url", DEAD_URL, "--cand-url",
                DEAD_URL, "--requests", str(testset), "--concurrency", "2", "--experiment", "e1",
                "--stage", "screen", "--no-monitor", "--json")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["rule"] == "R11" and "other" in error["message"]
