"""Golden tests of ``claims``, ``handoff --md`` and ``handoff --json`` on the scripted session of
the workflow tests (``rm_session.scripted``), plus the other read models' answers through the real
CLI (subprocesses, real git ledger).

The ledger head depends on the root event's wall-clock time, so it is replaced by ``<HEAD>``
before comparing; everything else is deterministic (the session's clock, seeded bootstraps).
Regenerate the golden files with ``PERFLEDGER_UPDATE_GOLDEN=1`` after an intended change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rm_session import scripted_ledger

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit

#: Every test reads one scripted ledger built through the CLI (seconds): left to `make test`.
pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("PERFLEDGER_UPDATE_GOLDEN") == "1"


def run(ledger: Path, *args: str, expect: int = 0) -> str:
    """Run ``perfledger --ledger LEDGER ARGS``; returns stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLEDGER_")}
    env["PERFLEDGER_ACTOR"] = "cli-agent"
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", str(ledger), *args],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
    return done.stdout


@pytest.fixture(scope="module")
def session_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scripted_ledger(tmp_path_factory.mktemp("rm") / "ledger")


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}: run with PERFLEDGER_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


def _normalised(ledger: Path, text: str) -> str:
    with Ledger.open(ledger) as opened:
        head = opened.head()
    text = text.replace(head, "<HEAD>").replace(head[:12], "<HEAD12>")
    return text.replace(os.path.abspath(ledger), "<LEDGER>")


def test_claims_json_golden(session_ledger: Path) -> None:
    out = run(session_ledger, "claims", "--json")
    data = json.loads(out)
    _golden("claims.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
    rows = {row["experiment_id"]: row for row in data["claims"]}
    assert list(rows) == ["e1", "e2", "e3"]
    e1, e2 = rows["e1"], rows["e2"]
    bound = 1.0 / (0.4 + 0.6 / 2.0)
    assert e1["stated_bound"] == pytest.approx(bound) and e1["bound_consistent"] is True
    assert e1["recomputed_bound"] == pytest.approx(bound)
    # lower-is-better: an improvement g is a speedup 1/(1-g); the error is in the bound's units
    speedup = 1.0 / (1.0 - e1["measured"]["estimate"])
    assert e1["measured"]["speedup"] == pytest.approx(speedup)
    assert e1["prediction_error"] == pytest.approx(speedup - bound)
    assert e1["reconciliation_owed"] is False and e1["interval_error"] == 0.0
    assert e2["reconciliation_owed"] is True and e2["reconciled"] is True
    assert e2["reconciliations"] == ["cost"] and e2["interval_error"] < 0
    assert e2["measured"]["ci_high"] < e2["predicted_low"]
    text = run(session_ledger, "claims")
    assert "owed, recorded" in text and text.splitlines()[0].startswith("experiment")


def test_handoff_md_golden(session_ledger: Path) -> None:
    text = run(session_ledger, "handoff", "--md")
    _golden("handoff.md", _normalised(session_ledger, text))
    assert run(session_ledger, "handoff") == text  # Markdown is the default
    for needed in ("Primary achieved: yes", "Champion: e1", "e2: closes implementation",
                   "corrected premise: cost", "lr-p99", "does the gain hold at S=8192?",
                   "| GPU | 3,600 s | 600 s | 3,000 s |"):  # fmt: skip
        assert needed in text, needed


def test_handoff_json_golden(session_ledger: Path) -> None:
    data = json.loads(run(session_ledger, "handoff", "--json"))
    _golden(
        "handoff.json",
        _normalised(session_ledger, json.dumps(data, indent=2, sort_keys=True) + "\n"),
    )
    h = data["handoff"]
    assert h["primary_achieved"] is True and h["champion"] == "e1"
    assert h["rejected"] == [{"closes": "implementation", "experiment_id": "e2", "note": None,
                              "reason": "slower than the champion: an extra copy per call"}]  # fmt: skip
    assert [c["experiment_id"] for c in h["prediction_corrections"]] == ["e2"]
    assert [r["result_id"] for r in h["local_results"]] == ["lr-p99"]
    assert "e3 failed its target stage and is not rejected yet" in h["unresolved_questions"]
    assert h["budget"]["gpu_left_s"] == 3000.0 and h["recorded_handoffs"] == 1


def test_champion_show_lineage_and_rejected(session_ledger: Path) -> None:
    shown = json.loads(run(session_ledger, "champion", "show", "--json"))["champions"]
    assert [(c["target_id"], c["champion"], c["final_audit_status"]) for c in shown] == [
        ("t1", "e1", "pass")
    ]
    one = json.loads(run(session_ledger, "champion", "show", "t1", "--json"))
    assert one["champion"] == "e1" and one["lineage"][0]["samples_id"] == "e1-target"
    (step,) = json.loads(run(session_ledger, "champion", "lineage", "t1", "--json"))["lineage"]
    assert step["decision"] == "select" and step["verdict_status"] == "pass"
    assert step["reference"] == "original" and step["claim_evidence"] == ["ev-ncu"]
    assert [a["samples_id"] for a in step["final_audits"]] == ["e1-final"]
    assert step["guardrails"] == {"cpu_time": "pass"}
    assert "-> e1 [select]" in run(session_ledger, "champion", "lineage", "t1")
    (row,) = json.loads(run(session_ledger, "rejected", "--json"))["rejected"]
    assert (row["experiment_id"], row["closes"], row["preregistered"]) == (
        "e2", "implementation", "implementation")  # fmt: skip
    assert row["still_open"] == ["integration", "mechanism"]
    error = json.loads(run(session_ledger, "champion", "lineage", "nope", "--json", expect=2))
    assert error["error"]["code"] == "bad_request"


def test_resume_lists_the_next_decisions_the_rules_allow(session_ledger: Path) -> None:
    data = json.loads(run(session_ledger, "resume", "--json"))
    ops = [(d["op"], d["rule"]) for d in data["next"]]
    assert ops[0] == ("reject", "R15")  # e3 failed its target stage
    assert ("experiment.create", "R7 R9") in ops and ("handoff.record", "R18") in ops
    text = run(session_ledger, "resume")
    assert "## Next decisions the rules allow" in text and "`reject` (R15)" in text


def test_handoff_record_stores_the_derived_handoff(tmp_path: Path) -> None:
    ledger = scripted_ledger(tmp_path / "ledger")
    error = json.loads(run(ledger, "handoff", "record", "--json", expect=2))
    assert "--gpu-used" in error["error"]["hint"]  # GPU time is stated, never guessed
    bad = _request(tmp_path, {"budget_used": "x"})
    error = json.loads(run(ledger, "handoff", "record", "--json", "--request", bad, expect=2))
    assert error["error"]["code"] == "bad_request"
    answer = json.loads(run(ledger, "handoff", "record", "--json", "--wall-used", "2400",
                            "--gpu-used", "900", "--stop-reason", "e3 only moved p99",
                            "--feedback", "none", "--question", "retry e3 at S=8192?"))  # fmt: skip
    payload = answer["payload"]
    assert answer["kind"] == "HandoffRecorded"
    assert payload["budget_used"] == {"gpu_s": 900.0, "wall_s": 2400.0}
    assert payload["budget_left"] == {"gpu_s": 2700.0, "wall_s": 4800.0}
    assert payload["rejected"] == [{"closes": "implementation", "experiment_id": "e2"}]
    assert payload["local_results"] == ["lr-p99"] and payload["prediction_corrections"] == ["e2"]
    assert "retry e3 at S=8192?" in payload["unresolved_questions"]
    h = json.loads(run(ledger, "handoff", "--json"))["handoff"]
    assert h["recorded_handoffs"] == 2 and h["stop_reason"] == "e3 only moved p99"
    with Ledger.open(ledger) as opened:
        assert audit(opened).ok
    empty = tmp_path / "empty"
    Ledger.init(empty, actor="a").close()
    error = json.loads(run(empty, "handoff", "--json", expect=2))
    assert "no Target" in error["error"]["message"]


def _request(tmp: Path, body: dict[str, object]) -> str:
    path = tmp / "handoff-request.json"
    path.write_text(json.dumps(body))
    return str(path)
