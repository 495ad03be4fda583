"""Attestations of champions (issue 37 part 3) end to end through the real CLI: the champion of
the code-identity session (real measurements of real code directories, a final audit) is
attested with a real ed25519 key made by ``ssh-keygen``; the DSSE envelope verifies with
securesystemslib (the library in-toto verifies with) and with ``perfledger verify-attestation``
against a clone; a forged payload, a changed subject digest re-signed, and a key that is not
trusted are each refused with exit 5 naming what differs; an experiment that is not a champion
is refused with nothing written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey
from test_code_identity import Session, session  # noqa: F401 (the module fixture: a champion e1)

from perfledger.app.attest import PAYLOAD_TYPE, PREDICATE_TYPE, attest, pae
from perfledger.errors import RuleRefused
from subprocess_env import isolated_env, perfledger_command

# serial: it reads test_code_identity's session (tests/workflow/conftest.py), built once in the
# serial part, where that module runs
pytestmark = [pytest.mark.slow, pytest.mark.serial]
ROOT = Path(__file__).resolve().parents[2]


def _keygen(directory: Path, name: str) -> Path:
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
                   check=True, capture_output=True)  # fmt: skip
    return key


class Attested:
    """The session, its keys, the attestation file and a clone of the ledger."""

    def __init__(self, s: Session) -> None:
        self.s = s
        keys = s.tmp / "keys"
        keys.mkdir()
        self.key = _keygen(keys, "alice")
        self.other = _keygen(keys, "mallory")
        self.signers = keys / "allowed_signers"
        pub = self.key.with_suffix(".pub").read_text().split()
        self.signers.write_text(f"alice {pub[0]} {pub[1]}\n")
        self.out = s.tmp / "e1.intoto.json"
        self.clone = s.tmp / "clone.git"

    def verify(self, path: Path, signers: Path | None = None) -> subprocess.CompletedProcess[str]:
        """``perfledger verify-attestation`` run on the clone."""
        argv = [*perfledger_command(), "--ledger", str(self.clone), "verify-attestation",
                str(path), "--signers", str(signers or self.signers), "--json"]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, env=self.s.env, timeout=600)


@pytest.fixture(scope="module")
def attested(session: Session) -> Attested:  # noqa: F811 (the imported fixture)
    a = Attested(session)
    done = session.ok("attest", "e1", "--key", str(a.key), "--out", str(a.out))
    assert done["experiment"] == "e1" and done["keyid"].startswith("SHA256:")
    cloned = session.cli("clone", str(session.ledger), str(a.clone), "--json")
    assert cloned.returncode == 0, cloned.stdout + cloned.stderr
    return a


def _statement(path: Path) -> dict[str, Any]:
    return json.loads(base64.b64decode(json.loads(path.read_text())["payload"]))


def _exit5(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 5, done.stdout + done.stderr
    return str(json.loads(done.stdout)["error"]["message"])


def test_attestation_is_an_in_toto_statement_over_the_champions_files(attested: Attested) -> None:
    envelope = json.loads(attested.out.read_text())
    assert envelope["payloadType"] == PAYLOAD_TYPE == "application/vnd.in-toto+json"
    statement = _statement(attested.out)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    digest = attested.s.ok("champion", "show", "t1")["snapshot"]["digest"]
    subjects = {s["name"]: s["digest"] for s in statement["subject"]}
    # every file of the champion's directory by sha256 of its bytes, then the snapshot itself
    fast: Path = attested.s.fast  # type: ignore[attr-defined]
    for rel in ("NOTES.md", "bench.py", "src/kern.py", "src/util.py"):
        assert subjects[rel] == {"sha256": hashlib.sha256((fast / rel).read_bytes()).hexdigest()}
    assert subjects[f"perfledger-snapshot:{digest}"] == {"blake3": digest}
    assert len(subjects) == 5
    predicate = statement["predicate"]
    assert predicate["champion"]["experiment_id"] == "e1"
    assert predicate["target"]["target_id"] == "t1"
    target_verdict = predicate["verdicts"][0]
    assert target_verdict["samples_id"] == "e1-target" and target_verdict["status"] == "pass"
    assert {c["case"] for c in target_verdict["cases"]} == {"small", "large"}
    assert all(c["ci_low"] <= c["estimate"] <= c["ci_high"] for c in target_verdict["cases"])
    assert predicate["final_audit"]["samples_id"] == "e1-final_audit"
    assert [s["provenance"]["source"] for s in predicate["samples"]] == ["perfledger"] * 2
    assert all(s["raw_table"] for s in predicate["samples"])
    assert predicate["replay_audit"] == {"result": "clean", "findings": 0}
    kinds = {r["kind"] for r in predicate["rule_versions"]}
    assert {"TargetFrozen", "SamplesRecorded", "VerdictRecorded", "ChampionSelected"} <= kinds
    assert predicate["ledger"]["event_digest"].startswith("sha256:")


def test_dsse_envelope_verifies_with_securesystemslib_and_the_public_key(
    attested: Attested,
) -> None:
    public = serialization.load_ssh_public_key(attested.key.with_suffix(".pub").read_bytes())
    envelope = Envelope.from_dict(json.loads(attested.out.read_text()))
    keyid = envelope.signatures and next(iter(envelope.signatures))
    key = SSlibKey.from_crypto(public, keyid=keyid)
    assert set(envelope.verify([key], 1)) == {keyid}
    assert envelope.payload_type == PAYLOAD_TYPE
    # the signature is over DSSE's PAE of the payload (spelled out, as the protocol does)
    assert pae(PAYLOAD_TYPE, b"{}") == b"DSSEv1 28 application/vnd.in-toto+json 2 {}"
    wrong = SSlibKey.from_crypto(
        serialization.load_ssh_public_key(attested.other.with_suffix(".pub").read_bytes()),
        keyid=keyid,
    )
    with pytest.raises(VerificationError):
        envelope.verify([wrong], 1)


def test_verify_attestation_against_a_clone_accepts_the_honest_one(attested: Attested) -> None:
    verified = attested.verify(attested.out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    done = json.loads(verified.stdout)
    assert done["ok"] and done["signers"] == ["alice"] and done["experiment"] == "e1"
    # a bare public key file is a signers list too
    pub = attested.key.with_suffix(".pub")
    assert attested.verify(attested.out, pub).returncode == 0


def _rewrite(attested: Attested, name: str, change: Any, *, resign: bool) -> Path:
    envelope = json.loads(attested.out.read_text())
    statement = _statement(attested.out)
    change(statement)
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    envelope["payload"] = base64.b64encode(payload).decode()
    if resign:  # signed again with the trusted key: only the re-derivation can tell
        key = serialization.load_ssh_private_key(attested.key.read_bytes(), password=None)
        sig = key.sign(pae(PAYLOAD_TYPE, payload))  # type: ignore[call-arg, union-attr]
        envelope["signatures"][0]["sig"] = base64.b64encode(sig).decode()
    path = attested.s.tmp / name
    path.write_text(json.dumps(envelope))
    return path


def test_cheat_forged_payload_is_refused_by_the_signature(attested: Attested) -> None:
    def faster(statement: dict[str, Any]) -> None:
        statement["predicate"]["verdicts"][0]["estimate"] = 9.0

    message = _exit5(attested.verify(_rewrite(attested, "forged.json", faster, resign=False)))
    assert "signature does not verify" in message


def test_cheat_changed_subject_digest_resigned_is_refused_naming_the_subject(
    attested: Attested,
) -> None:
    def other_code(statement: dict[str, Any]) -> None:
        for subject in statement["subject"]:
            if subject["name"] == "src/kern.py":
                subject["digest"]["sha256"] = hashlib.sha256(b"other code").hexdigest()

    path = _rewrite(attested, "subject.json", other_code, resign=True)
    message = _exit5(attested.verify(path))
    assert "subject 'src/kern.py'" in message and "digest" in message


def test_cheat_changed_predicate_resigned_is_refused_naming_the_field(attested: Attested) -> None:
    def better(statement: dict[str, Any]) -> None:
        statement["predicate"]["verdicts"][0]["ci_low"] = 0.99

    message = _exit5(attested.verify(_rewrite(attested, "pred.json", better, resign=True)))
    assert "predicate field 'verdicts'" in message


def test_cheat_key_not_trusted_is_refused(attested: Attested) -> None:
    other = attested.other.with_suffix(".pub")
    message = _exit5(attested.verify(attested.out, other))
    assert "signature does not verify" in message and str(other) in message


def test_r13_experiment_that_is_not_a_champion_is_refused_and_nothing_written(
    attested: Attested,
) -> None:
    out = attested.s.tmp / "e2.intoto.json"
    done = attested.s.cli("attest", "e2", "--key", str(attested.key), "--out", str(out), "--json")
    assert done.returncode == 3, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["rule"] == "R13" and "not the champion" in error["message"]
    assert not out.exists()
    unknown = attested.s.cli("attest", "nope", "--key", str(attested.key), "--json")
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr


def test_docs_attestations_page_block_runs_on_the_champion(
    session: Session,  # noqa: F811 (the imported fixture)
    tmp_path: Path,
) -> None:
    page = (ROOT / "docs" / "attestations.md").read_text()
    blocks = re.findall(r"<!-- run by tests/workflow/test_attest.py -->\n```sh\n(.*?)^```",
                        page, flags=re.S | re.M)  # fmt: skip
    assert len(blocks) == 1
    env = {**session.env, "LEDGER": str(session.ledger),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{session.env['PATH']}"}  # fmt: skip
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", blocks[0].replace("/tmp/", f"{tmp_path}/")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{PREDICATE_TYPE} 5 subjects" in done.stdout
    assert "attestation of champion e1 verified: signed by alice" in done.stdout


def test_r11_champion_without_a_code_snapshot_is_refused_and_nothing_written(
    ready: Any, tmp_path: Path
) -> None:
    # a Target whose driver declares no {subject}: its samples carry no snapshot (R11)
    ready.passed("e1", gain=0.2)
    try:
        ready.champion("e1")
    except RuleRefused as exc:  # the rules may already keep such samples from a champion
        pytest.skip(f"no champion without a snapshot can be made: {exc.message}")
    key = _keygen(tmp_path, "alice")
    out = tmp_path / "e1.json"
    head = ready.ledger.head()
    with pytest.raises(RuleRefused) as refused:
        attest(ready.ledger, "e1", str(key))
    assert refused.value.rule == "R11" and "no code snapshot" in refused.value.message
    done = subprocess.run(
        [*perfledger_command(), "--ledger", str(ready.ledger.path), "attest", "e1", "--key",
         str(key), "--out", str(out), "--json"],
        capture_output=True, text=True, env=isolated_env(tmp_path), timeout=600,
    )  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert json.loads(done.stdout)["error"]["rule"] == "R11"
    assert not out.exists() and ready.ledger.head() == head


def test_attestation_still_verifies_after_a_later_checkpoint_and_later_events(
    attested: Attested,
) -> None:
    # the ledger grew after the attestation: a checkpoint signed at the attested head, then an
    # event; the statement is re-derived at the attested head, so it still verifies
    grown = attested.s.tmp / "grown.git"
    s = attested.s
    assert s.cli("clone", str(s.ledger), str(grown), "--json").returncode == 0
    for args in (("checkpoint", "sign", "--key", str(attested.key), "--actor", "alice"),
                 ("note", "after the attestation")):  # fmt: skip
        done = subprocess.run([*perfledger_command(), "--ledger", str(grown), *args],
                              capture_output=True, text=True, env=s.env, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
    argv = [*perfledger_command(), "--ledger", str(grown), "verify-attestation",
            str(attested.out), "--signers", str(attested.signers), "--json"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, env=s.env, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # a fresh attestation now names the checkpoint
    out = s.tmp / "grown.intoto.json"
    again = subprocess.run([*perfledger_command(), "--ledger", str(grown), "attest", "e1", "--key",
                            str(attested.key), "--out", str(out)],
                           capture_output=True, text=True, env=s.env, timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    checkpoint = _statement(out)["predicate"]["ledger"]["checkpoint"]
    assert checkpoint is not None and checkpoint["head"] == _statement(attested.out)[
        "predicate"]["ledger"]["head"]  # fmt: skip
