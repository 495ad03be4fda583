"""The recorded GPU session (``examples/recorded/session.bundle``, made on an H200): cloned with
the real git CLI and audited here, without a GPU. The audit re-hashes every event, re-derives
every verdict from its recorded samples and re-decides every request (R1-R18); the champion, the
verdicts, the rejection and the state hash must be those the session reported on the device
(``examples/recorded/session.json``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from subprocess_env import isolated_env, perfledger_command

RECORDED = Path(__file__).resolve().parents[2] / "examples" / "recorded"
#: The state hash of the recorded ledger as this code folds it. It is a hash of the folded state's
#: encoding, so it moves when the projections change (the session ran on the device before the
#: kernel-iteration loop's state joined the fold: session.json holds the hash it printed then,
#: 8face53d...). Update it only together with a change of the projections, never to make a
#: replay pass. (Moved when evidence's ``capture`` gained ``parser``, the parsers' version that
#: audit re-derives facts with: the state holds each evidence payload whole; and when the
#: projections gained the final-audit standing, explained activity and review records, and
#: when readiness statistics, baselines, samples and verdicts gained the per-case, aggregation
#: and provenance fields, which old events read with their defaults; and when readiness
#: statistics gained ``allow_explained_foreign_activity``, read as False.)
STATE_HASH = "49cc69e889c39a409085fba61a7286892dae8e9ea8113fb552a0e803ec8368f8"


def _pl(ledger: Path, env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args, "--json"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_recorded_gpu_session_audits_on_a_clone_without_gpu(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)
    env["CUDA_VISIBLE_DEVICES"] = ""  # nothing here may need the GPU
    recorded = json.loads((RECORDED / "session.json").read_text())
    clone = tmp_path / "ledger.git"
    subprocess.run(
        ["git", "clone", "--quiet", "--mirror", str(RECORDED / "session.bundle"), str(clone)],
        env=env, check=True,
    )  # fmt: skip
    fsck = subprocess.run(["git", "--git-dir", str(clone), "fsck", "--strict", "--full"],
                          capture_output=True, text=True, env=env, check=False)  # fmt: skip
    assert fsck.returncode == 0, fsck.stderr

    audit = _pl(clone, env, "audit")
    assert audit["ok"] is True and audit["findings"] == []
    assert audit["events"] == recorded["events"] == 26
    assert audit["head"] == "b4274f6e89fd843a2d9b046f0541a285fceb1ecc"  # the device's head
    assert audit["state_hash"] == STATE_HASH
    assert audit["state_hash"] == _pl(clone, env, "verify")["state_hash"]

    champions = _pl(clone, env, "champion", "show")["champions"]
    assert [(c["target_id"], c["champion"], c["final_audit_status"]) for c in champions] == [
        ("t1", "e2", "pass")
    ]
    state = _pl(clone, env, "state")["state"]
    statuses = {sid: v["status"] for sid, v in state["verdicts"].items()}
    assert statuses == recorded["verdicts"] == {
        "e1-screen": "inconclusive", "e1-target": "pass",
        "e2-screen": "inconclusive", "e2-target": "pass",
    }  # fmt: skip
    e2 = state["verdicts"]["e2-target"]["primary"]
    assert 0.1 <= e2["ci_low"] <= e2["estimate"] <= e2["ci_high"]  # a pass: CI above 10 %
    assert state["samples"]["e2-target"]["reference"]["experiment_id"] == "e1"  # vs the champion
    handoff = _pl(clone, env, "handoff")["handoff"]
    assert handoff["champion"] == "e2" and handoff["primary_achieved"] is True
    assert [(r["experiment_id"], r["closes"]) for r in handoff["rejected"]] == [
        ("e3", "implementation")
    ]
    evidence = {e["evidence_id"] for e in _pl(clone, env, "evidence", "list")["evidence"]}
    assert {"ev-ncu-naive", "ev-roofline-naive"} <= evidence
