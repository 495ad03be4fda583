"""The auditor's replay finds every planted defect, naming its event and rule.

Defects are planted the way a tampered tool, an old version or a hand edit would write them:
through the raw store (``ledger.store.append``), which bypasses the deciders (``Ledger.append``
refuses decision kinds). Each is written once with a plausible recorded request and once without
any request, so both audit paths (re-decide the stored request; rebuild it from the payload) are
exercised.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rm_session import CHAMPION_REF, scripted_ledger
from wf_scenario import (
    CAND1,
    CAND2,
    CAND3,
    PRIMARY,
    T1,
    Session,
    experiment,
    make_pairs,
    samples,
)

from perfledger.api import Ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import validate
from perfledger.commands.workflow.requests import dump
from perfledger.ledger.base import EventDraft
from perfledger.projections.verdicts import Pair, derive_verdict

Planted = tuple[str, dict[str, Any] | None]


def _plant(session: Session, kind: str, payload: Any, op: str | None, body: Any,
           artifacts: Any = None) -> str:  # fmt: skip
    """Append ``kind`` through the raw store with ``{"op", "body"}`` as its request (or none when
    ``op`` is None) and ``artifacts`` attached; returns the event id."""
    request = None
    if op is not None:
        request = {"op": op, "body": dump(validate(op, body))}
    envelope = session.ledger.store.append(
        EventDraft(
            kind,
            msgspec.to_builtins(payload),
            "tampered-tool",
            request=request,
            artifacts=artifacts or {},
        )
    )
    return envelope.id


def _rules_of(report: Any, event_id: str) -> list[str]:
    return [f.rule for f in report.findings if f.event_id == event_id]


@pytest.fixture(params=["with-request", "without-request"])
def with_request(request: pytest.FixtureRequest) -> bool:
    return request.param == "with-request"


@pytest.mark.slow
def test_clean_scripted_session_audits_ok_with_verifys_state_hash(tmp_path: Path) -> None:
    path = scripted_ledger(tmp_path / "ledger")
    with Ledger.open(path) as ledger:
        report = audit(ledger)
        verified = ledger.verify()
    assert report.ok, [f.to_json() for f in report.findings]
    # the only notes: the draws each champion came out of (R14, a count, no finding)
    assert report.findings == [] and all("formal target stage(s)" in n for n in report.notes)
    assert report.events == verified.events and report.decisions == report.events - 1
    assert report.state_hash == verified.extra["state_hash"]


def test_r13_audit_finds_a_hand_appended_champion_without_a_passing_verdict(
    ready: Session, with_request: bool
) -> None:
    ready.passed("e1", CAND1, gain=0.0)  # the target verdict fails
    assert ready.state().verdicts["e1-target"].status == "fail"
    payload = {"kind": "ChampionSelected", "target_id": T1, "decision": "select",
               "experiment_id": "e1", "samples_id": "e1-target", "candidate_hash": CAND1,
               "previous": "original", "reason": ""}  # fmt: skip
    body = {"target_id": T1, "samples_id": "e1-target", "expected_current": "original"}
    event_id = _plant(ready, "ChampionSelected", payload,
                      "champion.select" if with_request else None, body)  # fmt: skip
    # the fold (ChampionSelected 6) does not apply a champion whose code had a failed target
    # stage: it holds it as a conflict (R14); the audit names the decision's own rule
    state = ready.state()
    assert state.targets[T1].champion is None
    assert [c.kind for c in state.conflicts.values()] == ["unaccounted_champion"]
    report = audit(ready.ledger)
    assert not report.ok
    assert _rules_of(report, event_id) == ["R13"], report.findings
    assert "not pass" in report.findings[0].message


def test_r12_audit_finds_a_verdict_its_samples_contradict(
    ready: Session, with_request: bool
) -> None:
    ready.screened("e1", CAND1)
    ready.run("samples.record", samples("e1-target", "target", gain=0.0))
    from perfledger.commands.workflow.deciders import DecisionContext, decide_verdict_record
    from perfledger.commands.workflow.requests import VerdictRecord

    honest = decide_verdict_record(
        ready.state(),
        VerdictRecord(samples_id="e1-target"),
        DecisionContext("x", "a", ready.clock, payload_of=ready.ledger.payload),
    )[0].payload
    assert honest.status == "fail"
    forged = msgspec.to_builtins(honest)
    forged["status"] = "pass"
    forged["primary"]["status"] = "pass"
    event_id = _plant(ready, "VerdictRecorded", forged,
                      "verdict.record" if with_request else None, {"samples_id": "e1-target"})  # fmt: skip
    report = audit(ready.ledger)
    assert _rules_of(report, event_id) == ["R12"], report.findings
    assert "recorded status 'pass', derived from its samples 'fail'" in report.findings[0].message


def test_r14_audit_finds_an_experiment_appended_while_a_reconciliation_was_pending(
    ready: Session, with_request: bool
) -> None:
    ready.passed("e1", CAND1, gain=0.2)
    ready.champion("e1")
    ready.run("experiment.create", experiment("e2", candidate=CAND2))
    for stage, gain in (("screen", 0.1), ("target", -0.1)):
        ready.run("samples.record", samples(f"e2-{stage}", stage, experiment_id="e2",
                                            candidate=CAND2, gain=gain, reference=CHAMPION_REF))  # fmt: skip
        ready.run("verdict.record", {"samples_id": f"e2-{stage}"})
    assert ready.state().targets[T1].pending  # e2 contradicted its claim
    created = msgspec.to_builtins(ready.state().experiments["e2"].created)
    created["experiment_id"] = "e3"
    created["candidate"]["content_hash"] = CAND3
    event_id = _plant(ready, "ExperimentCreated", created,
                      "experiment.create" if with_request else None,
                      experiment("e3", candidate=CAND3))  # fmt: skip
    report = audit(ready.ledger)
    assert _rules_of(report, event_id) == ["R14"], report.findings
    assert "unreconciled" in report.findings[0].message


@pytest.mark.parametrize("prereg", ["implementation", "mechanism-without-evidence"])
def test_r15_audit_finds_a_mechanism_rejection_without_discriminating_evidence(
    ready: Session, with_request: bool, prereg: str
) -> None:
    if prereg == "implementation":
        ready.passed("e1", CAND1, gain=0.0)
    else:
        ready.run("experiment.create", experiment(preregistration={
            "rejects": "mechanism", "discriminating_evidence": "dram bytes unchanged"}))  # fmt: skip
    payload = {"kind": "CandidateRejected", "experiment_id": "e1", "target_id": T1,
               "closes": "mechanism", "reason": "no gain", "samples_ids": [],
               "evidence_ids": [], "local_proxy": False, "discriminating_evidence_ids": []}  # fmt: skip
    body = {"experiment_id": "e1", "closes": "mechanism", "reason": "no gain"}
    event_id = _plant(ready, "CandidateRejected", payload,
                      "reject" if with_request else None, body)  # fmt: skip
    report = audit(ready.ledger)
    assert _rules_of(report, event_id) == ["R15"], report.findings


def test_r5_audit_finds_a_failed_accuracy_sample_used_in_a_verdict(
    ready: Session, with_request: bool
) -> None:
    ready.screened("e1", CAND1)
    pairs = make_pairs(0.2, per_case=7, tag="t")
    for pair in (pairs[0], pairs[7]):  # one per case: wrong answers, and "fast"
        pair["cand"]["correct"] = False
        pair["cand"]["values"][PRIMARY] = [v * 0.1 for v in pair["cand"]["values"][PRIMARY]]
    ready.run("samples.record", samples("e1-target", "target", pairs=pairs))
    assert ready.state().samples["e1-target"].cand_failures == 2
    recorded = ready.ledger.payload(ready.state().samples["e1-target"].event_id)
    target = ready.state().targets[T1]
    # the forged verdict counts every pair as valid
    primary = derive_verdict(
        [Pair(p.case, tuple(p.ref.values[PRIMARY]), tuple(p.cand.values[PRIMARY]))
         for p in recorded.pairs],
        direction="lower_is_better", min_effect=0.05, resolution=target.resolution.resolution,
    )  # fmt: skip
    from perfledger.commands.workflow.deciders import DecisionContext, decide_verdict_record
    from perfledger.commands.workflow.requests import VerdictRecord

    honest = decide_verdict_record(
        ready.state(),
        VerdictRecord(samples_id="e1-target"),
        DecisionContext("x", "a", ready.clock, payload_of=ready.ledger.payload),
    )[0].payload
    assert honest.primary.n_excluded == 2 and primary.n_excluded == 0
    forged = msgspec.to_builtins(honest)
    forged["primary"] = msgspec.to_builtins(primary)
    event_id = _plant(ready, "VerdictRecorded", forged,
                      "verdict.record" if with_request else None, {"samples_id": "e1-target"})  # fmt: skip
    report = audit(ready.ledger)
    assert _rules_of(report, event_id) == ["R5"], report.findings
    assert "failed their accuracy check" in report.findings[0].message


def test_audit_names_a_forged_failure_count_in_samples(ready: Session) -> None:
    ready.run("experiment.create", experiment())
    body, table = ready.as_measured(samples("e1-screen", "screen", cand_correct=False))
    payload = {"kind": "SamplesRecorded", **copy.deepcopy(body), "ref_failures": 0,
               "cand_failures": 0, "unexplained_activity": 0}  # fmt: skip
    event_id = _plant(ready, "SamplesRecorded", payload, "samples.record", body, table)
    report = audit(ready.ledger)
    assert _rules_of(report, event_id) == ["R5"]
    assert "cand_failures" in report.findings[0].message


def test_audit_is_independent_of_a_poisoned_cache(ready: Session) -> None:
    """A state cache that lies (here: the state of another ledger, keyed to this head) changes
    neither audit's findings nor its state_hash."""
    ready.passed("e1", CAND1, gain=0.0)
    honest = audit(ready.ledger)
    assert honest.ok
    from perfledger.ledger.cache import encode_fields, load_snapshot, save_snapshot

    ledger = ready.ledger
    ready.state()  # the state at the head ...
    ledger.close()  # ... is written to the cache
    reopened = Ledger.open(ledger.path)
    code = reopened._code_version()
    snapshot = load_snapshot(reopened.store.derived_dir, "workflow", code)
    assert snapshot is not None and snapshot.head == reopened.head()
    lie = encode_fields(reopened.projection.initial())
    save_snapshot(reopened.store.derived_dir, "workflow", snapshot.__class__(
        snapshot.head, code, snapshot.count, snapshot.last_lamport, snapshot.last_id, lie))  # fmt: skip
    reopened._memo = None
    assert reopened.state().targets == {}  # the cache is believed by `state` ...
    again = audit(reopened)  # ... never by audit
    assert again.ok and again.state_hash == honest.state_hash
    reopened.close()


def test_audit_of_concurrent_champions_reports_no_finding(ready: Session) -> None:
    """Two machines choosing champions from the same previous one is a conflict in the state
    (SPEC.md section 2), not a rule violation: each is re-decided against its own ancestors."""
    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2)
    store = ready.ledger.store
    base = store.read_head()
    other = [EventDraft(
        "ChampionSelected",
        {"target_id": T1, "decision": "select", "experiment_id": "e2", "samples_id": "e2-target",
         "candidate_hash": CAND2, "previous": "original", "reason": ""},
        "other-agent",
        request={"op": "champion.select", "body": dump(validate("champion.select", {
            "target_id": T1, "samples_id": "e2-target", "expected_current": "original"
        }))},
    )]  # fmt: skip
    _, other_head = store.build_on(base, other)
    ready.champion("e1")
    merge = store.write_merge([store.read_head(), other_head])
    assert store.set_head(store.read_head(), merge)
    state = ready.state()
    assert len(state.conflicts) == 1
    report = audit(ready.ledger)
    assert report.ok, [f.to_json() for f in report.findings]
    assert report.state_hash == ready.ledger.verify().extra["state_hash"]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfledger", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


@pytest.mark.slow
def test_audit_cli_on_a_fresh_git_clone(tmp_path: Path) -> None:
    """An auditor clones the ledger with the real git CLI and audits it: exit 0 and the same
    state_hash; after a planted defect, exit 5 with the finding in JSON (no traceback)."""
    path = scripted_ledger(tmp_path / "ledger")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(path), str(clone)], check=True)
    assert not (clone / "perfledger").exists()  # no derived data travels with a clone
    done = _cli("--ledger", str(clone), "audit", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    with Ledger.open(path) as ledger:
        assert answer["state_hash"] == ledger.verify().extra["state_hash"]
        assert answer["ok"] and answer["findings"] == []
        event_id = _plant(Session(ledger), "ChampionSelected",
                          {"kind": "ChampionSelected", "target_id": T1, "decision": "select",
                           "experiment_id": "e3", "samples_id": "e3-target",
                           "candidate_hash": CAND3, "previous": "e1", "reason": ""}, None, None)  # fmt: skip
    clone2 = tmp_path / "clone2"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(path), str(clone2)], check=True)
    done = _cli("--ledger", str(clone2), "audit", "--json")
    assert done.returncode == 5, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert [(f["event_id"], f["rule"]) for f in findings] == [(event_id, "R13")]
    text = _cli("--ledger", str(clone2), "audit")
    assert text.returncode == 5 and "R13" in text.stdout and event_id[:16] in text.stdout


def test_audit_reports_a_storage_failure_as_an_integrity_finding(ready: Session) -> None:
    """What verify finds, audit finds: an edited event.json blob is an integrity finding."""
    from perfledger.ledger.gitobj import BLOB

    ledger = ready.ledger
    head = ledger.store.read_head()
    commit = ledger.store.repo[head]
    tree = ledger.store.repo[commit.tree]
    blob_sha = tree[b"event.json"][1]
    objects_dir = Path(ledger.store.repo.object_store.path)
    loose = objects_dir / blob_sha[:2].decode() / blob_sha[2:].decode()
    assert BLOB and loose.exists()
    import zlib

    raw = zlib.decompress(loose.read_bytes())
    loose.chmod(0o644)
    assert b"resolution.json" in raw  # the head: the measured resolution (R4)
    loose.write_bytes(zlib.compress(raw.replace(b"resolution.json", b"resolution.jsoN")))
    report = audit(ledger)
    assert not report.ok and report.findings[0].rule == "integrity"
    assert report.state_hash is None


def test_audit_finds_an_idempotency_key_reused_on_a_linear_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second event carrying a key already in the ledger (a tool that skipped the store's
    idempotency check): audit names it with rule "idempotency" (SPEC.md section 2); the first
    event with the key is not reported."""
    path = tmp_path / "l"
    with Ledger.init(path, name="keys", actor="t") as ledger:
        note = {"text": "a", "tags": []}
        first = ledger.append("NoteRecorded", note, actor="t", idempotency_key="k1")
        ledger.append("NoteRecorded", {"text": "b", "tags": []}, actor="t")
        again = ledger.append("NoteRecorded", note, actor="t", idempotency_key="k1")
        assert again.id == first.id  # the store's check: no second event
        monkeypatch.setattr(ledger.store, "_recorded", lambda key: None)
        reused = ledger.store.append(
            EventDraft("NoteRecorded", {"text": "c", "tags": []}, "tampered-tool",
                       idempotency_key="k1")
        )  # fmt: skip
        assert reused.id != first.id
    with Ledger.open(path) as ledger:
        assert ledger.verify().ok  # storage is intact: it is a rule, found by the replay
        report = audit(ledger)
    assert not report.ok
    assert [(f.event_id, f.rule) for f in report.findings] == [(reused.id, "idempotency")]
    assert first.id in report.findings[0].message
