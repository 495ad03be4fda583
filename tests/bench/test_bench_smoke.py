"""Smoke test of the storage benchmark: ``bench/ledger_bench.py --quick`` runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("eventsourcing")
pytest.importorskip("rich")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ledger_bench.py"


@pytest.mark.slow
def test_bench_quick_runs_and_prints_the_tables(tmp_path: Path) -> None:
    out_json = tmp_path / "figures.json"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out_json)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-3000:]
    assert elapsed < 60, f"--quick took {elapsed:.1f} s"
    for text in (
        "perfledger against the issue's goals",
        "single durable appends",
        "batched appends",
        "cold replay+verify",
        "warm state load",
        "log -n 20",
        "side by side",
        "JSONL+fsync",
    ):
        assert text in done.stdout, f"{text!r} missing from:\n{done.stdout}"
    assert "PASS" in done.stdout or "MISS" in done.stdout
    figures = json.loads(out_json.read_text())
    assert figures["pl_cold_verify"]["ok"] is True
    # the ledger holds the root event plus the --quick events, and verify saw all of them
    assert figures["pl_cold_verify"]["events"] == figures["config"]["events"] + 1
    assert figures["pl_cold_state"]["state_hash"] == figures["pl_cold_verify"]["state_hash"]
    assert set(figures["verdicts"]) >= {
        "single_append_eps",
        "batch_append_eps",
        "cold_verify_eps",
        "warm_state_s",
        "cli_log_s",
    }


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["single", "batched"])
def test_append_ab_alternates_two_trees_and_prints_the_ratio(tmp_path: Path, workload: str) -> None:
    root = Path(__file__).resolve().parents[2]
    events = "30" if workload == "single" else "2000"
    done = subprocess.run(
        [
            sys.executable,
            str(root / "bench" / "append_ab.py"),
            "--a",
            str(root),
            "--b",
            str(root),
            "--workdir",
            str(tmp_path),
            "--runs",
            "1",
            "--events",
            events,
            "--pause",
            "0",
            "--workload",
            workload,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("run 1 A:") for line in lines)
    assert any(line.startswith("run 1 B:") for line in lines)
    assert lines[-1].startswith("B / A: ")
