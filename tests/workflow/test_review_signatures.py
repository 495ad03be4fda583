"""Reviews authenticated by their reviewer's SSH key (R12, R17; ``ReviewRecorded`` schema 3,
``perfledger audit --allowed-signers FILE``).

The "other actor" whose review clears a plausibility flag or explains foreign activity is an
appender's typed name. A review may carry its reviewer's signature (namespace
``perfledger-review``) over its canonical content; the auditor's allowed-signers file says whose
key that is. Real ``ssh-keygen`` keys, real ledgers, real deciders; the ``test_cheat_*`` tests
play an agent that writes the review itself under the reviewer's name.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_plausibility import SELECT, _big_claim, _target
from wf_scenario import Session

from perfledger.app.decisions import record_decision
from perfledger.app.decisions import signed_review_request as signed_request
from perfledger.commands.audit.replay import audit
from perfledger.commands.registry.operations import execute
from perfledger.errors import BadRequest
from perfledger.ledger.sshsig import sign
from subprocess_env import isolated_env, perfledger_command


def _key(tmp_path: Path, name: str) -> tuple[str, str]:
    """A fresh ed25519 key pair made by ssh-keygen: (private key path, public key line)."""
    path = tmp_path / f"{name}.key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
                   check=True, capture_output=True)  # fmt: skip
    return str(path), Path(f"{path}.pub").read_text().split(" ", 2)[1]


def _signers(tmp_path: Path, **keys: str) -> str:
    """The auditor's allowed-signers file: principal -> public key (base64 of an ed25519 key)."""
    path = tmp_path / "allowed_signers"
    path.write_text("".join(f"{who} ssh-ed25519 {key}\n" for who, key in keys.items()))
    return str(path)


def _body(session: Session, actor: str) -> dict[str, Any]:
    """``actor``'s review of e1-target's samples, naming both flagged cases."""
    return {"review_id": f"rv-{actor}", "reviewer": actor, "model_family": "human",
            "subject": "other", "subject_event": session.state().samples["e1-target"].event_id,
            "challenge": "20x on a decode step: is work skipped?",
            "response": "the kernel was replaced by a table lookup that is exact for this model",
            "dissent_remains": False,
            "explains": [{"samples_id": "e1-target", "flag": "implausible", "case": case}
                         for case in ("small", "large")]}  # fmt: skip


def _flagged_champion(session: Session, body: dict[str, Any], actor: str) -> None:
    """The review ``body`` appended as ``actor`` on flagged samples, then the champion."""
    execute(session.ledger, "review.record", body, actor=actor)
    assert session.champion("e1")["experiment_id"] == "e1"


@pytest.fixture
def flagged(ready: Session) -> Session:
    """e1's target stage passed with a 20x ratio beyond the plausible bound (flagged)."""
    _big_claim(ready)
    _target(ready)
    return ready


def test_a_review_signed_by_the_reviewers_key_audits_clean_against_the_allowed_signers(
    flagged: Session, tmp_path: Path
) -> None:
    key, public = _key(tmp_path, "reviewer-b")
    _flagged_champion(flagged, signed_request(_body(flagged, "reviewer-b"), key), "reviewer-b")
    review = flagged.state().reviews.reviews["rv-reviewer-b"].review
    assert review.signer_key == f"ssh-ed25519 {public}"
    listed = subprocess.run(["ssh-keygen", "-l", "-f", f"{key}.pub"], check=True,
                            capture_output=True, text=True).stdout.split()[1]  # fmt: skip
    assert review.signer_fingerprint == listed
    report = audit(flagged.ledger, _signers(tmp_path, **{"reviewer-b": public}))
    assert report.ok, [f.to_json() for f in report.findings]
    # without the file: clean, and the review that allowed the champion is listed as unchecked
    report = audit(flagged.ledger)
    assert report.ok and any("rv-reviewer-b" in n and "unchecked" in n for n in report.notes)


def test_cheat_an_agent_writing_a_review_under_another_name_without_the_key_fails_the_audit(
    flagged: Session, tmp_path: Path
) -> None:
    """The agent appends the review as ``reviewer-b`` (a typed name), unsigned: the rules take
    the name, but the audit with the auditor's allowed-signers file fails, naming the review
    and what it allowed; without the file the audit lists it as unauthenticated."""
    _key_path, public = _key(tmp_path, "reviewer-b")
    _flagged_champion(flagged, _body(flagged, "reviewer-b"), "reviewer-b")
    report = audit(flagged.ledger, _signers(tmp_path, **{"reviewer-b": public}))
    assert not report.ok
    (finding,) = report.findings
    assert finding.rule == "R12" and finding.kind == "ReviewRecorded"
    assert "'rv-reviewer-b'" in finding.message and "unsigned" in finding.message
    assert "champion selection" in finding.message
    report = audit(flagged.ledger)
    assert report.ok
    assert any("unauthenticated review" in n and "rv-reviewer-b" in n for n in report.notes)


def test_cheat_an_agent_signing_with_its_own_key_under_the_reviewers_name_fails_the_audit(
    flagged: Session, tmp_path: Path
) -> None:
    """A good signature by the agent's own key, appended as ``reviewer-b``: the file lists that
    key under ``agent``, so the audit fails naming the review; a key the file does not list
    fails too."""
    agent_key, agent_public = _key(tmp_path, "agent")
    _b_key, b_public = _key(tmp_path, "reviewer-b")
    _flagged_champion(flagged, signed_request(_body(flagged, "reviewer-b"), agent_key),
                      "reviewer-b")  # fmt: skip
    both = _signers(tmp_path, agent=agent_public, **{"reviewer-b": b_public})
    (finding,) = audit(flagged.ledger, both).findings
    assert "rv-reviewer-b" in finding.message and "not by its appender" in finding.message
    only_b = _signers(tmp_path, **{"reviewer-b": b_public})
    (finding,) = audit(flagged.ledger, only_b).findings
    assert "rv-reviewer-b" in finding.message and "not in" in finding.message


def test_a_signature_of_other_content_or_another_namespace_is_refused_when_recorded(
    flagged: Session, tmp_path: Path
) -> None:
    key, _public = _key(tmp_path, "reviewer-b")
    body = signed_request(_body(flagged, "reviewer-b"), key)
    altered = {**body, "response": "it is fine"}  # changed after signing
    with pytest.raises(BadRequest, match="not a good signature"):  # checked before deciding
        record_decision(flagged.ledger, "review.record", altered, actor="reviewer-b")
    from perfledger.commands.registry import operations
    from perfledger.commands.workflow.review_signature import signed_content

    content = signed_content(operations.validate("review.record", _body(flagged, "reviewer-b")))
    as_git = {**_body(flagged, "reviewer-b"), "signature": sign(content, key).decode()}
    with pytest.raises(BadRequest, match="namespace 'git'"):
        execute(flagged.ledger, "review.record", as_git, actor="reviewer-b")
    with pytest.raises(BadRequest, match="not an armored SSH signature"):
        execute(flagged.ledger, "review.record", {**body, "signature": "trust me"},
                actor="reviewer-b")  # fmt: skip
    flagged.refused("champion.select", SELECT, "R12")  # nothing was recorded


def test_a_signed_review_by_the_reviewed_samples_appender_is_a_finding(
    flagged: Session, tmp_path: Path
) -> None:
    """The agent signs a review of its own samples with its own key, listed under its name: it
    clears nothing (R12), and the audit with the file names it (the signer appended the
    reviewed event)."""
    key, public = _key(tmp_path, "agent")
    execute(flagged.ledger, "review.record", signed_request(_body(flagged, "agent"), key),
            actor="agent")  # fmt: skip
    flagged.refused("champion.select", SELECT, "R12")
    (finding,) = audit(flagged.ledger, _signers(tmp_path, agent=public)).findings
    assert "rv-agent" in finding.message and "appended the reviewed event" in finding.message


def test_review_record_sign_with_and_audit_allowed_signers_through_the_cli(
    flagged: Session, tmp_path: Path
) -> None:
    """The reviewer signs with `review record --sign-with KEY` (or signs `review content` with
    ssh-keygen itself); `audit --allowed-signers FILE` exits 0, and 5 for the file of another
    key."""
    key, public = _key(tmp_path, "reviewer-b")
    _other, other_public = _key(tmp_path, "someone")
    body = _body(flagged, "reviewer-b")
    flagged.ledger.close()  # the CLI opens the ledger itself
    env = isolated_env(tmp_path / "home")
    path = str(tmp_path / "ledger")

    def cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run([*perfledger_command(), "--ledger", path, *args],
                              input=stdin, capture_output=True, text=True, env=env, check=False)  # fmt: skip

    content = cli("review", "content", "--request", "-", stdin=json.dumps(body))
    by_hand = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-n", "perfledger-review", "-f", key],
        input=content.stdout.encode(), capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    done = cli("review", "record", "--actor", "reviewer-b", "--dry-run", "--request", "-",
               stdin=json.dumps({**body, "signature": by_hand}))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("review", "record", "--actor", "reviewer-b", "--sign-with", key, "--request", "-",
               stdin=json.dumps(body))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    done = cli("champion", "select", "--target", "t1", "--samples", "e1-target",
               "--expected-current", "original", "--actor", "agent", "--request", "-", stdin="{}")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    good = _signers(tmp_path, **{"reviewer-b": public})
    done = cli("audit", "--allowed-signers", good)
    assert done.returncode == 0, done.stdout + done.stderr
    wrong = _signers(tmp_path, **{"reviewer-b": other_public})
    done = cli("audit", "--allowed-signers", wrong)
    assert done.returncode == 5 and "rv-reviewer-b" in done.stdout, done.stdout + done.stderr


def test_cheat_an_unsigned_review_cited_to_explain_foreign_activity_fails_the_audit(
    ready: Session, tmp_path: Path
) -> None:
    """R17: the review an explanation cites is checked as R12's: appended as ``reviewer-b``
    without the key, the audit with the file fails naming it and what it explained; a review
    signed by reviewer-b's key beside it is no finding."""
    from test_obligations import _busy_target_samples

    _busy_target_samples(ready, (1, 4))
    key, public = _key(tmp_path, "reviewer-b")
    event_id = ready.state().samples["e1-target"].event_id
    body = {"review_id": "rv-b", "reviewer": "reviewer-b", "model_family": "human",
            "subject": "other", "subject_event": event_id, "challenge": "what ran?",
            "response": "a backup job on another GPU", "dissent_remains": False}  # fmt: skip
    execute(ready.ledger, "review.record", body, actor="reviewer-b")
    execute(ready.ledger, "activity.explain", {"samples_id": "e1-target", "pairs": [1, 4],
            "explanation": "a backup job on another GPU", "review_id": "rv-b"}, actor="agent")  # fmt: skip
    allowed = _signers(tmp_path, **{"reviewer-b": public})
    (finding,) = audit(ready.ledger, allowed).findings
    assert finding.rule == "R17" and "'rv-b'" in finding.message
    assert "foreign activity of samples 'e1-target'" in finding.message
    signed = signed_request({**body, "review_id": "rv-b2"}, key)
    execute(ready.ledger, "review.record", signed, actor="reviewer-b")
    report = audit(ready.ledger, allowed)
    assert [f.message for f in report.findings] == [finding.message]  # rv-b2 decided nothing


def test_a_review_of_schema_2_carries_no_signature(flagged: Session, tmp_path: Path) -> None:
    """``ReviewRecorded`` 2 (before signed reviews): a signature is a bad request there, so an
    older event cannot smuggle one in; the current version takes it."""
    from wf_legacy import rules_at

    from perfledger.events.workflow import R12_SIGNED_REVIEW

    key, _public = _key(tmp_path, "reviewer-b")
    body = signed_request(_body(flagged, "reviewer-b"), key)
    with rules_at({"ReviewRecorded": R12_SIGNED_REVIEW - 1}), pytest.raises(
        BadRequest, match="carries no signature"
    ):  # fmt: skip
        execute(flagged.ledger, "review.record", body, actor="reviewer-b")
    execute(flagged.ledger, "review.record", body, actor="reviewer-b")
