"""``measure baseline`` (R4): the original's command called on every case, its primary-metric
values recorded as ``baseline.record`` with their case and call id and the raw table attached;
a command that is not the original's code (R11), or an original that fails its own accuracy
check (R5), records nothing. Through the real CLI on a real ledger with real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from wf_legacy import freeze_as_before, readiness_as_before

from perfledger.api import Ledger
from subprocess_env import isolated_env, quiet_monitor_command

#: The original: two values of time_ms per call; the case "bad" fails its accuracy check.
BENCH = """\
import json, os
case = os.environ.get("PERFLEDGER_CASE", "small")
print(json.dumps({"correct": case != "bad",
                  "metrics": {"time_ms": [2.0, 3.0] if case == "small" else [5.0, 7.0]}}))
"""


def _setup(
    tmp_path: Path,
    bench: str = BENCH,
    cases: tuple[str, ...] = ("small", "large", "bad"),
    **readiness: Any,
) -> tuple[Path, dict[str, str], Any]:
    """A ledger with Target t1 ready (its original ``original/bench.py``); ``readiness`` fields
    replace the defaults (driver, accuracy). Returns (ledger, env, cli)."""
    env = isolated_env(tmp_path)
    for name in ("original", "other"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "bench.py").write_text(bench + ("# other\n" if name == "other" else ""))
    ledger = tmp_path / "ledger"

    def cli(*args: str, request: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # the baseline's monitor a quiet stand-in: R4, R5, R11 here
            [*quiet_monitor_command(), "--ledger", str(ledger), *args],
            input=json.dumps(request) if request is not None else None,
            capture_output=True, text=True, env=env, cwd=tmp_path,
        )  # fmt: skip

    assert cli("init", str(ledger)).returncode == 0
    # frozen as the older perfledger that made its readiness (below) froze it
    freeze_as_before(ledger, {
        "target_id": "t1", "title": "t", "min_effect": 0.1, "scope": ["bench.py"],
        "primary": {"name": "time_ms", "unit": "ms", "direction": "lower_is_better",
                    "statistic": "mean"},
        "risk_boundary": "none", "budget": {"wall_s": 600.0, "gpu_s": 0.0}})  # fmt: skip
    readiness_env = json.loads(cli("env", "--json").stdout)["readiness_environment"]
    # the self-timed driver's baseline of a primary the subject reports (time_ms): its
    # readiness recorded as an older perfledger did (ReadinessRecorded 5; R5 refuses it now)
    readiness_as_before(ledger, {
        "target_id": "t1", "original": {"content_hash": "sha256:original", "subject": "original"},
        "test_set": {"hash": "sha256:cases-123", "case_count": len(cases), "cases": list(cases)},
        "accuracy_rule": "the bench's own", "environment": readiness_env,
        "driver": {"argv": [sys.executable, "{subject}/bench.py"]}, **readiness}, tmp_path)  # fmt: skip
    return ledger, env, cli


@pytest.mark.slow
def test_measure_baseline_records_every_value_with_its_case_and_the_raw_table(
    tmp_path: Path,
) -> None:
    ledger, _, cli = _setup(tmp_path)
    cmd = f"{sys.executable} original/bench.py"
    args = ("measure", "baseline", "--target", "t1", "--cmd", cmd, "--quiet")
    done = cli(*args, "--case", "small", "--case", "large", "--calls", "2", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["per_case_median"] == {"small": 2.5, "large": 6.0} and answer["unit"] == "ms"
    with Ledger.open(ledger) as opened:
        target = opened.state().targets["t1"]
        assert target.baseline is not None
        assert list(target.baseline.values) == [2.0, 3.0, 2.0, 3.0, 5.0, 7.0, 5.0, 7.0]
        assert list(target.baseline.cases) == ["small"] * 4 + ["large"] * 4
        assert list(target.baseline.call_ids[:2]) == ["baseline-small-0-0", "baseline-small-0-1"]
        assert target.baseline.original_hash == "sha256:original"
        attached = json.loads(opened.artifact(answer["event_id"], "baseline.json"))
        table = attached["table"]
        # R11: the calls' environment, names and values' hashes (issue 34)
        assert attached["settings"]["call_environment"]["original"]["PATH"].startswith("blake3:")
        assert target.baseline.source == "perfledger"  # R4: re-derived from the table
        assert [row["call_id"] for row in table] == [
            "baseline-small-0", "baseline-small-1", "baseline-large-0", "baseline-large-1"]  # fmt: skip
    text = cli(*args, "--case", "small", "--dry-run").stdout
    assert "median per case: small 2.5 ms" in text and "dry run: nothing appended" in text
    assert cli("audit").returncode == 0  # the auditor re-decides it from the recorded request


@pytest.mark.slow
def test_r11_r5_measure_baseline_of_other_code_or_a_failing_original_records_nothing(
    tmp_path: Path,
) -> None:
    ledger, _, cli = _setup(tmp_path)
    with Ledger.open(ledger) as opened:
        head = opened.head()
    other = cli("measure", "baseline", "--target", "t1", "--cmd",
                f"{sys.executable} other/bench.py", "--quiet", "--json")  # fmt: skip
    assert other.returncode == 3 and json.loads(other.stdout)["error"]["rule"] == "R11"
    failing = cli("measure", "baseline", "--target", "t1", "--cmd",
                  f"{sys.executable} original/bench.py", "--quiet")  # fmt: skip
    assert failing.returncode != 0 and "accuracy check on case 'bad'" in failing.stderr
    assert "Traceback" not in failing.stderr
    with Ledger.open(ledger) as opened:
        assert opened.head() == head


#: An original that writes its output where ``{output}`` says (or nothing, for case "mute").
BENCH_WITH_OUTPUT = """\
import json, os, sys
case, out = os.environ["PERFLEDGER_CASE"], sys.argv[1]
if case != "mute":
    open(out, "w").write(json.dumps({"sum": 42, "seed": os.environ["PERFLEDGER_SEED"]}))
print(json.dumps({"correct": True, "metrics": {"time_ms": [2.0]}}))
"""


@pytest.mark.slow
def test_measure_baseline_gives_an_output_place_and_a_seed_and_refuses_a_silent_original(
    tmp_path: Path,
) -> None:
    ledger, _, cli = _setup(
        tmp_path, BENCH_WITH_OUTPUT, ("small", "mute"), accuracy={"compare": "exact"},
        driver={"argv": [sys.executable, "{subject}/bench.py", "{output}"]},
    )  # fmt: skip
    cmd = f"{sys.executable} original/bench.py {{output}}"
    args = ("measure", "baseline", "--target", "t1", "--cmd", cmd, "--quiet", "--calls", "2")
    head = subprocess.run(["git", "--git-dir", str(ledger), "rev-parse", "refs/heads/ledger"],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert len(head.strip()) == 40
    silent = cli(*args, "--case", "mute")
    assert silent.returncode != 0 and "no readable output" in silent.stderr
    assert subprocess.run(["git", "--git-dir", str(ledger), "rev-parse", "refs/heads/ledger"],
                          capture_output=True, text=True).stdout == head  # fmt: skip
    done = cli(*args, "--case", "small")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "{output}").exists()


@pytest.mark.slow
def test_a_command_that_still_holds_the_subject_placeholder_is_told_what_to_put_there(
    tmp_path: Path,
) -> None:
    _ledger, _, cli = _setup(tmp_path)
    cmd = f"{sys.executable} {{subject}}/bench.py"
    done = cli("measure", "baseline", "--target", "t1", "--cmd", cmd, "--quiet", "--json")
    error = json.loads(done.stdout)["error"]
    assert done.returncode == 2 and "{subject} placeholder" in error["message"]
    assert "original" in error["hint"]
