"""``bench/audit_bench.py`` runs end to end on a small ledger: the ledger it builds from real
decisions audits clean, and it reports rates, peak RSS and the per-kind cost (figures come from
the bench itself, not from this test)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "audit_bench.py"


@pytest.mark.slow
def test_audit_bench_smoke(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--events", "400", "--cycle", "100", "--dir", str(tmp_path),
         "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert figures["events"] == 400 and figures["audit_ok"] is True
    assert figures["verdicts"] == 2 * figures["experiments"] > 0
    assert figures["audit_events_per_s"] > 0 and figures["audit_peak_rss_mib"] > 0
    assert {"VerdictRecorded", "EvidenceRecorded", "NoteRecorded"} <= set(figures["per_kind_ms"])
