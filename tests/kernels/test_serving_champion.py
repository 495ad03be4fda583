"""Serving samples that ``perfledger measure serving`` measured carry provenance ``perfledger``
(protocol ``serving/v1``), bound to the ``serving`` artifact of every request, from which the
pairs are re-derived (R5): a serving Target reaches a champion and a final audit through its
formal stages, and a hand-written pairs table that claims the provenance is refused (issue 34).
Real CLI, real git ledger, the real stand-in server (``serving_standin.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from serving_standin import BASE, standin
from test_serving_cli import _cli, _setup, _testset
from wf_scenario import explain_stage_by_review

from perfledger.api import Ledger
from perfledger.commands.registry.operations import execute
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.errors import RuleRefused
from perfledger.ledger.base import Artifact

#: What each measuring run sends: 7 window pairs of 20 steady requests at 8 workers.
_LOAD = ("--concurrency", "8", "--pairs", "7", "--steady", "20", "--drift-threshold", "0.2",
         "--quiet", "--json")  # fmt: skip
#: The candidate's server: its first token about a fifth sooner than the reference's.
_FAST = {**BASE, "ttft_s": 0.04}


def _measure(ledger: Path, tmp: Path, url: str, testset: Path, stage: str, *extra: str) -> Any:
    """``measure serving`` of experiment e1 at ``stage`` (the host monitor watching)."""
    proc = _cli(ledger, tmp, "measure", "serving", "--ref-url", f"{url}/a/v1", "--cand-url",
                f"{url}/b/v1", "--requests", str(testset), *_LOAD, "--experiment", "e1",
                "--stage", stage, "--monitor", "host", *extra)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    if stage != "screen":  # R17: another actor's review explains a shared host's activity
        explain_stage_by_review(ledger, "e1", stage, explanation="other tenants of a shared host")
    return json.loads(proc.stdout)


def _ok(ledger: Path, tmp: Path, *args: str) -> Any:
    proc = _cli(ledger, tmp, *args, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_r5_a_serving_target_measured_through_its_target_stage_selects_a_champion(
    tmp_path: Path,
) -> None:
    """Screen, target stage, verdict pass, champion, final audit pass: all on serving samples
    perfledger measured, on a readiness that allows no outside samples."""
    testset, digest = _testset(tmp_path)
    ledger = tmp_path / "ledger"
    _setup(ledger, digest)  # a loaded host: another actor's review lifts R17 (_measure)
    with standin({"seed": 21, "profiles": {"a": BASE, "b": _FAST}}) as url:
        screen = _measure(ledger, tmp_path, url, testset, "screen")
        assert _ok(ledger, tmp_path, "verdict", "record", "--samples", screen["samples_id"])
        target = _measure(ledger, tmp_path, url, testset, "target")
        verdict = _ok(ledger, tmp_path, "verdict", "record", "--samples", target["samples_id"])
        assert verdict["payload"]["status"] == "pass", json.dumps(verdict["payload"])[:3000]
        assert verdict["payload"]["samples_provenance"] == "perfledger"
        champion = _ok(ledger, tmp_path, "champion", "select", "--target", "t1", "--samples",
                       target["samples_id"], "--expected-current", "original")  # fmt: skip
        assert champion["payload"]["experiment_id"] == "e1"
        audit = _measure(ledger, tmp_path, url, testset, "final_audit")
    with Ledger.open(ledger) as opened:
        provenance = opened.payload(target["event_id"]).provenance
    assert provenance.source == "perfledger" and provenance.protocol == "serving/v1"
    assert provenance.raw_table == "samples.json"
    final = _ok(ledger, tmp_path, "final-audit", "record", "--target", "t1", "--samples",
                audit["samples_id"])  # fmt: skip
    assert final["payload"]["status"] == "pass", final["payload"]
    # the audit re-derives every serving pair from its artifact again (R5)
    audit = json.loads(_cli(ledger, tmp_path, "audit", "--json").stdout)
    assert audit["ok"] is True and audit["findings"] == [], audit["findings"]


def _screen_dry_run(tmp_path: Path) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    """A ledger, and the screen body and ``serving`` artifact (``--raw``) that a dry run of
    ``measure serving`` measured, bound as ``measure serving`` binds it."""
    testset, digest = _testset(tmp_path)
    ledger = tmp_path / "ledger"
    _setup(ledger, digest)
    raw = tmp_path / "raw.json"
    with standin({"seed": 21, "profiles": {"a": BASE, "b": _FAST}}) as url:
        # what a body derives from is under test, not what it says: 5 window pairs of 10 steady
        # requests (the later flags override _LOAD's)
        data = _measure(ledger, tmp_path, url, testset, "screen", "--dry-run", "--raw", str(raw),
                        "--pairs", "5", "--steady", "10")  # fmt: skip
    body = data["request"]
    artifact = {**json.loads(raw.read_text()), "binding": binding_of(body)}
    return ledger, body, artifact


def _record(ledger: Path, body: dict[str, Any], artifact: dict[str, Any]) -> Any:
    data = json.dumps(artifact, sort_keys=True).encode()
    with Ledger.open(ledger) as opened:
        return execute(opened, "samples.record", body, actor="agent",
                       artifacts={"samples.json": Artifact(data, "application/json")})  # fmt: skip


@pytest.mark.slow
def test_cheat_serving_pairs_that_do_not_derive_from_their_artifact_are_refused(
    tmp_path: Path,
) -> None:
    """A serving samples body written by hand with provenance ``perfledger``: the measured
    artifact attached, the candidate's first tokens typed a tenth sooner. The pairs are
    re-derived from the artifact's requests (R5): refused, nothing recorded. The honest
    control: the same body unchanged is recorded."""
    ledger, body, artifact = _screen_dry_run(tmp_path)
    assert body["provenance"]["source"] == "perfledger"
    typed = json.loads(json.dumps(body))
    values = typed["pairs"][0]["cand"]["values"]
    values["ttft_ms"] = [0.9 * v for v in values["ttft_ms"]]
    with pytest.raises(RuleRefused) as refused:
        _record(ledger, typed, artifact)
    assert refused.value.rule == "R5" and "serving artifact" in refused.value.message
    # a pair dropped (a slow window left out) is refused too
    dropped = {**body, "pairs": body["pairs"][1:]}
    with pytest.raises(RuleRefused, match="derives"):
        _record(ledger, dropped, artifact)
    # the settings changed to re-derive other pairs: the artifact's settings disagree
    other = json.loads(json.dumps(body))
    other["provenance"]["settings"]["tail"] = "p99"
    with pytest.raises(RuleRefused, match="settings"):
        _record(ledger, other, artifact)
    with Ledger.open(ledger) as opened:
        assert body["samples_id"] not in opened.state().samples
    envelopes = _record(ledger, body, artifact)  # the honest control
    assert envelopes[0].kind == "SamplesRecorded"
