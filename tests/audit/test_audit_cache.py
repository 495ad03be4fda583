"""The local audit cache (SPEC.md section 2, "Audit cache"; docs/storage.md): a clean audit
lets the next audit re-check only the events after the head it audited, with the same result
as a replay from zero; a history rewritten below that head, another perfledger's code, a
damaged cache, or a finding after it each make the audit re-check every event, and the tamper
is found."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import forge
import pytest
from wf_scenario import CAND1, CAND2, Session

from perfledger.commands.audit.replay import audit
from perfledger.ledger import audit_cache
from perfledger.ledger.base import EventDraft


def _notes(session: Session, n: int) -> None:
    session.ledger.append_batch(
        [EventDraft("NoteRecorded", {"text": f"n{i}", "tags": []}, "agent") for i in range(n)]
    )


def _append_forged_champion(store: Any) -> Any:
    """Append, below perfledger's deciders, a champion selection no rule allowed (e9, never
    measured), as a tampered tool would write it. Returns the stored event."""
    return store.append(
        EventDraft(
            "ChampionSelected",
            {"kind": "ChampionSelected", "target_id": "t1", "decision": "select",
             "experiment_id": "e9", "samples_id": "e9-target", "candidate_hash": CAND2,
             "previous": "e1", "reason": ""},
            "tampered-tool",
        )
    )  # fmt: skip


def _cache_file(session: Session) -> Path:
    return Path(audit_cache.cache_path(session.ledger.store.controldir))


def test_the_next_audit_rechecks_only_the_events_after_the_cached_head(ready: Session) -> None:
    ready.passed("e1", CAND1)
    first = audit(ready.ledger)
    assert first.ok and first.cached_head is None and first.rechecked == first.events
    assert _cache_file(ready).exists()
    _notes(ready, 3)
    ready.passed("e2", CAND2)  # decisions after the cached head are re-decided
    second = audit(ready.ledger)
    assert second.ok, [f.to_json() for f in second.findings]
    assert second.cached_head == first.head
    assert 3 < second.rechecked == second.events - first.events
    full = audit(ready.ledger, use_cache=False)
    assert full.cached_head is None and full.rechecked == full.events
    assert second.state_hash == full.state_hash == ready.ledger.verify().extra["state_hash"]
    assert (second.events, second.decisions, second.notes) == (
        full.events, full.decisions, full.notes
    )  # fmt: skip
    assert second.derived_here < full.derived_here  # the cached verdicts were not derived again
    unchanged = audit(ready.ledger)
    assert unchanged.ok and unchanged.rechecked == 0 and unchanged.cached_head == full.head
    assert unchanged.state_hash == full.state_hash


def test_a_history_rewritten_below_the_cached_head_is_audited_from_zero(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1, gain=0.0)  # the target verdict fails
    clean = audit(ready.ledger)
    assert clean.ok
    path = Path(ready.ledger.path)
    events = forge.read_history(path)
    i = forge.find(events, "VerdictRecorded", samples_id="e1-target")
    assert events[i].payload["status"] == "fail"
    events[i].payload["status"] = events[i].payload["primary"]["status"] = "pass"
    forge.resubject(events[i])
    ids = forge.write_history(path, events)  # every id from the verdict on recomputed
    report = audit(ready.ledger)
    assert report.cached_head is None and report.rechecked == report.events
    assert any("does not descend from" in note for note in report.notes), report.notes
    assert not report.ok
    assert [(f.event_id, f.rule) for f in report.findings] == [(ids[i], "R12")]


def test_another_perfledger_code_audits_from_zero_and_finds_a_damaged_object(
    ready: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cache is keyed by perfledger's own code: another version (here: another
    fingerprint) re-checks everything, and so finds an object edited under the cached head,
    which a cache written by this code would have vouched for (docs/storage.md says so)."""
    ledger = ready.ledger
    assert audit(ledger).ok
    head = ledger.store.read_head()
    blob_sha = ledger.store.repo[ledger.store.repo[head].tree][b"event.json"][1]
    loose = (
        Path(ledger.store.repo.object_store.path) / blob_sha[:2].decode() / blob_sha[2:].decode()
    )
    import zlib

    raw = zlib.decompress(loose.read_bytes())
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(raw.replace(b"resolution.json", b"resolution.jsoN")))
    monkeypatch.setattr(audit_cache, "rules_fingerprint", lambda: "another perfledger")
    report = audit(ledger)
    assert report.cached_head is None
    assert any("other perfledger code" in note for note in report.notes), report.notes
    assert not report.ok and report.findings[0].rule == "integrity"
    assert not audit(ledger, use_cache=False).ok  # --full finds it whatever the cache says


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_damaged_cache_is_ignored_said_so_and_the_tamper_found(
    ready: Session, damage: str
) -> None:
    ready.passed("e1", CAND1)
    assert audit(ready.ledger).ok
    cache = _cache_file(ready)
    data = cache.read_bytes()
    if damage == "flip":  # one byte of the body: the digest no longer matches
        data = data[:-10] + bytes([data[-10] ^ 1]) + data[-9:]
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = b"0" * 64 + b"\nnot msgpack"
    cache.write_bytes(data)
    # and a forged event appended on top, as a tampered tool would write it
    store = ready.ledger.store
    forged = _append_forged_champion(store)
    report = audit(ready.ledger)
    assert report.cached_head is None and report.rechecked == report.events
    assert any("audit cache" in note and "ignored" in note for note in report.notes)
    assert not report.ok
    assert [f.event_id for f in report.findings] == [forged.id]


def test_a_finding_after_the_cached_head_is_judged_by_a_replay_from_zero(
    ready: Session,
) -> None:
    ready.passed("e1", CAND1)
    assert audit(ready.ledger).ok
    forged = _append_forged_champion(ready.ledger.store)
    report = audit(ready.ledger)
    assert report.cached_head is None and report.rechecked == report.events
    assert [f.event_id for f in report.findings] == [forged.id]
    again = audit(ready.ledger)  # an audit with findings leaves the cache where it was
    assert again.cached_head is None and [f.event_id for f in again.findings] == [forged.id]


def test_a_concurrent_branch_merged_after_the_cached_head_is_rechecked_alone(
    ready: Session,
) -> None:
    """A pull's merge: the other machine's events descend from an event under the cached
    head; each is re-decided against the state its author saw, as from zero."""
    from perfledger.commands.registry.operations import validate
    from perfledger.commands.workflow.requests import dump

    ready.passed("e1", CAND1)
    ready.passed("e2", CAND2)
    store = ready.ledger.store
    base = store.read_head()
    cached = audit(ready.ledger)
    assert cached.ok
    body = {"target_id": "t1", "samples_id": "e2-target", "expected_current": "original"}
    other = [EventDraft(
        "ChampionSelected",
        {"target_id": "t1", "decision": "select", "experiment_id": "e2", "samples_id": "e2-target",
         "candidate_hash": CAND2, "previous": "original", "reason": ""},
        "other-agent",
        request={"op": "champion.select", "body": dump(validate("champion.select", body))},
    )]  # fmt: skip
    _, other_head = store.build_on(base, other)
    ready.champion("e1")
    merge = store.write_merge([store.read_head(), other_head])
    assert store.set_head(store.read_head(), merge)
    report = audit(ready.ledger)
    assert report.ok, [f.to_json() for f in report.findings]
    assert report.cached_head == cached.head and report.rechecked == 2
    full = audit(ready.ledger, use_cache=False)
    assert full.ok and report.state_hash == full.state_hash
    assert report.decisions == full.decisions and report.events == full.events


def test_a_cache_shipped_with_a_ledger_by_someone_else_is_not_used(
    ready: Session, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger handed over as a directory may carry its sender's cache, digest and all (a
    plain blake3 of a body the sender chose is easy to forge): its digest is keyed by a secret
    kept outside every repository, so this auditor's audit re-checks every event and finds the
    event forged under the shipped cache's head."""
    ready.passed("e1", CAND1)
    store = ready.ledger.store
    forged = _append_forged_champion(store)
    assert not audit(ready.ledger).ok  # no cache is written on a finding
    # the sender writes a cache of the forged head as a clean audit would, under their own key
    monkeypatch.setenv("PERFLEDGER_AUDIT_KEY", str(tmp_path / "sender.key"))
    report = audit(ready.ledger, use_cache=False)
    cache = audit_cache.AuditCache(
        format=audit_cache.AUDIT_CACHE_FORMAT, rules=audit_cache.rules_fingerprint(),
        head=report.head, state_hash=report.state_hash or "", commits=[], replay=b"",
    )  # fmt: skip
    assert audit_cache.save_audit_cache(store.controldir, cache)
    loaded, why = audit_cache.load_audit_cache(store.controldir)
    assert loaded is not None and why is None  # the sender's own key reads it back
    # an unkeyed blake3 digest (what anyone can compute) is not accepted either
    body = _cache_file(ready).read_bytes().partition(b"\n")[2]
    import blake3

    _cache_file(ready).write_bytes(blake3.blake3(body).hexdigest().encode() + b"\n" + body)
    assert audit_cache.load_audit_cache(store.controldir)[0] is None
    audit_cache.save_audit_cache(store.controldir, cache)
    # the auditor, with another key: the cache is not used, and the forged event is found
    monkeypatch.setenv("PERFLEDGER_AUDIT_KEY", str(tmp_path / "auditor.key"))
    loaded, why = audit_cache.load_audit_cache(store.controldir)
    assert loaded is None and why is not None and "auditor" in why
    audited = audit(ready.ledger)
    assert audited.cached_head is None and not audited.ok
    assert forged.id in [f.event_id for f in audited.findings]
