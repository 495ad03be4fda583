"""``measure baseline`` of an observed primary runs the original as a formal stage runs its
subjects (issue 34, R4, R11): two workers of the original under the worker protocol, each from
a read-only copy of the snapshot readiness recorded (never the directory in place), every
worker's call environment recorded in the raw table (names and values' hashes), and the
values re-derived from that table when recorded and at audit. Real processes, one small case."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from test_original_copies import StandInMonitor

from machine_environment import machine_environment
from perfledger.api import Ledger
from perfledger.app import measure_workload
from perfledger.app.baseline import MeasureBaseline, measure_baseline
from perfledger.app.identity import readiness_edge
from perfledger.app.measure_baseline import BASELINE_ARTIFACT
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute
from perfledger.errors import RuleRefused

#: The original: inputs from the seed, its output written where perfledger says; it writes the
#: directory it runs from beside its output's place, so a test sees where it ran.
BENCH = textwrap.dedent("""
    import json, os, random, sys
    from perfledger.subject import serve
    HERE = os.path.dirname(os.path.abspath(__file__))
    def call(state, case, seed, output):
        rng = random.Random(f"{case}:{seed}")
        xs = [rng.random() for _ in range(2000)]
        json.dump(round(sum(x * x for x in xs), 9), open(output, "w"))
        open(os.environ["BENCH_WHERE"], "a").write(HERE + "\\n")
    serve(lambda: None, call)
""")


def _ready(tmp_path: Path, primary: str = "wall_time") -> tuple[Path, Path]:
    """A ledger whose Target's readiness snapshotted ``original/`` (its driver runs
    ``{subject}/bench.py``). Returns (ledger path, original directory)."""
    original = tmp_path / "original"
    original.mkdir()
    (original / "bench.py").write_text(BENCH)
    env = machine_environment(tools=True)
    path = tmp_path / "ledger"
    with Ledger.init(path, name="b", actor="agent") as ledger:
        execute(ledger, "target.freeze", {
            "target_id": "t1", "title": "sum of squares", "min_effect": 0.05,
            "primary": {"name": primary, "unit": "ms", "direction": "lower_is_better",
                        "statistic": "median"},
            "scope": ["bench.py"], "risk_boundary": "none",
            "budget": {"wall_s": 600.0, "gpu_s": 0.0},
        }, actor="agent")  # fmt: skip
        body, files = readiness_edge(ledger, {
            "target_id": "t1",
            "original": {"content_hash": "sha256:" + "0" * 16, "subject": str(original)},
            "test_set": {"hash": "sha256:" + "a" * 16, "case_count": 1, "cases": ["small"]},
            "accuracy_rule": "exact", "accuracy": {"compare": "exact"},
            "driver": {"argv": [sys.executable, "{subject}/bench.py", "--out", "{output}"],
                       "env": {"BENCH_WHERE": str(tmp_path / "where.txt")}},
            "environment": env["readiness_environment"],
        })  # fmt: skip
        execute(ledger, "readiness.record", body, actor="agent", artifacts=files)
    return path, original


def _measure(path: Path, original: Path, **over: Any) -> Any:
    cmd = f"{sys.executable} {original}/bench.py --out {{output}}"
    with Ledger.open(path) as ledger:
        return measure_baseline(ledger, MeasureBaseline(
            target_id="t1", cmd=cmd, cases=("small",), calls=2, actor="agent", **over))  # fmt: skip


@pytest.mark.slow
def test_r11_baseline_calls_run_from_read_only_copies_with_their_environment_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, original = _ready(tmp_path)
    where = tmp_path / "where.txt"  # the readiness driver's declared BENCH_WHERE
    monkeypatch.setenv("CALLER_ONLY_VARIABLE", "set by whoever called measure baseline")
    # a quiet monitor: the shared host's load would refuse it (R17), not what this test is about
    quiet = StandInMonitor(foreign=False)
    monkeypatch.setattr(measure_workload, "start_monitor", lambda *_a, **_k: (quiet, None))
    done = _measure(path, original)
    assert done.event_id is not None and done.values == 2  # one pair: a call of each worker
    ran_from = set(where.read_text().split())
    assert ran_from and str(original) not in ran_from  # never the directory in place
    with Ledger.open(path) as ledger:
        payload = ledger.payload(done.event_id)
        assert payload.source == "perfledger" and payload.raw_table == BASELINE_ARTIFACT
        assert ledger.state().targets["t1"].baseline is not None
        table = json.loads(ledger.artifact(done.event_id, BASELINE_ARTIFACT))
        report = audit(ledger)  # the auditor re-derives the values from the table
    settings = table["settings"]
    assert settings["protocol"] == "worker/v1"
    digest = ledger_snapshot_digest(path)
    assert set(settings["subject_copies"].values()) == {digest}
    environments = settings["call_environment"]
    for label in ("ref", "cand"):  # names and values' hashes
        assert environments[label]["BENCH_WHERE"].startswith("blake3:")
        # R11 (red36 E1): the caller's own variables do not reach the subjects
        assert "CALLER_ONLY_VARIABLE" not in environments[label]
    assert "CALLER_ONLY_VARIABLE" in settings["environment_dropped"]
    assert settings["subject_environment"]["BENCH_WHERE"] == str(where)  # in full
    assert "windows" in table["monitor"]
    assert table["binding"]["target_id"] == "t1"
    assert report.ok, report.findings


def ledger_snapshot_digest(path: Path) -> str:
    """The digest of the original's snapshot readiness recorded."""
    with Ledger.open(path) as ledger:
        readiness = ledger.state().targets["t1"].readiness
        assert readiness is not None
        return str(readiness.original.snapshot.digest)


@pytest.mark.slow
def test_r11_a_baseline_of_other_code_than_the_snapshot_is_refused_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _original = _ready(tmp_path)
    where = tmp_path / "where.txt"
    monkeypatch.setenv("BENCH_WHERE", str(where))
    other = tmp_path / "other"
    other.mkdir()
    (other / "bench.py").write_text(BENCH + "# faster, somehow\n")
    with Ledger.open(path) as ledger:
        head = ledger.head()
    with pytest.raises(RuleRefused) as refused:
        _measure(path, other)
    assert refused.value.rule == "R11" and not where.exists()
    with Ledger.open(path) as ledger:
        assert ledger.head() == head
