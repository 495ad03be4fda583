"""A review a final audit relied on to pass is authenticated like one a champion selection relied
on (R12: ``FinalAuditRecorded`` 12, ``perfledger audit --allowed-signers FILE``).

The champion's target stage is plausible; only its final audit measured a ratio beyond the
plausible bound, so only the final audit rests on the review naming those flags: the audit lists
it without the file and, with the file, fails on it unless the reviewer's listed key signed it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_plausibility import TWENTY_X
from test_review_signatures import _key, _signers
from wf_scenario import T1, Session, samples

from perfledger.app.decisions import signed_review_request as signed_request
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute


def _review(session: Session) -> dict[str, Any]:
    """reviewer-b's review of e1-final's samples, naming both flagged cases."""
    return {"review_id": "rv-final", "reviewer": "reviewer-b", "model_family": "human",
            "subject": "other", "subject_event": session.state().samples["e1-final"].event_id,
            "challenge": "20x at the final audit: is work skipped?",
            "response": "the table lookup is exact for this model",
            "dissent_remains": False,
            "explains": [{"samples_id": "e1-final", "flag": "implausible", "case": case}
                         for case in ("small", "large")]}  # fmt: skip


@pytest.fixture
def audited(ready: Session) -> Session:
    """e1 champion on plausible samples; its final audit's samples flagged (20x)."""
    ready.passed("e1", gain=0.2)
    ready.champion("e1")
    assert not ready.state().samples["e1-target"].implausible
    ready.record_measured(samples("e1-final", "final_audit", gain=TWENTY_X))
    assert set(ready.state().samples["e1-final"].implausible) == {"small", "large"}
    return ready


def _final_audit(session: Session, body: dict[str, Any]) -> None:
    execute(session.ledger, "review.record", body, actor="reviewer-b")
    final = session.run("final-audit.record", {"target_id": T1, "samples_id": "e1-final"})
    assert final["status"] == "pass", final  # the review named every flag


def test_cheat_an_unsigned_review_a_final_audit_passed_on_fails_the_audit_with_the_file(
    audited: Session, tmp_path: Path
) -> None:
    """Appended as ``reviewer-b`` without the key: the audit's notes list it as the final
    audit's (no champion selection relied on it); with the file it is an R12 finding."""
    _key_path, public = _key(tmp_path, "reviewer-b")
    _final_audit(audited, _review(audited))
    report = audit(audited.ledger)
    assert report.ok, [f.to_json() for f in report.findings]
    (note,) = [n for n in report.notes if "rv-final" in n]
    assert "unauthenticated review" in note and "for the final audit" in note
    assert "champion selection" not in note
    (finding,) = audit(audited.ledger, _signers(tmp_path, **{"reviewer-b": public})).findings
    assert finding.rule == "R12" and finding.kind == "ReviewRecorded"
    assert "'rv-final'" in finding.message and "unsigned" in finding.message
    assert "for the final audit" in finding.message


def test_a_final_audits_review_signed_by_a_key_not_listed_fails_and_the_listed_one_passes(
    audited: Session, tmp_path: Path
) -> None:
    key, public = _key(tmp_path, "reviewer-b")
    _other, other_public = _key(tmp_path, "someone")
    _final_audit(audited, signed_request(_review(audited), key))
    report = audit(audited.ledger)
    assert report.ok and any("rv-final" in n and "unchecked" in n for n in report.notes)
    assert audit(audited.ledger, _signers(tmp_path, **{"reviewer-b": public})).ok
    (finding,) = audit(audited.ledger, _signers(tmp_path, **{"reviewer-b": other_public})).findings
    assert "'rv-final'" in finding.message and "for the final audit" in finding.message
