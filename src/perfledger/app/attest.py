"""Attestations of champions (issue 37; docs/attestations.md): an in-toto Statement v1 in a DSSE
envelope, signed with an ed25519 key read from its OpenSSH file, that any in-toto / DSSE tool
verifies with the public key, and that :func:`verify_attestation` re-derives from a ledger.

The statement's subjects are the champion's code: every file of its snapshot (R11) by path and
sha256, plus the snapshot itself (``perfledger-snapshot:<digest>``, its blake3 tree digest). Its
predicate (:data:`PREDICATE_TYPE`) is what the ledger says of that code at one head: the Target,
the verdicts with their per-case CIs, the samples (event ids, raw tables, provenance), the rule
versions of the events cited, the final audit, the replay audit, open limits, and the ledger's
head, event count and digest with the latest checkpoint below it. Nothing in it depends on
perfledger's version, so a clone re-derives it byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from typing import TYPE_CHECKING, Any

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from perfledger.app.checkpoints import verified_ledger
from perfledger.commands.audit.replay import audit
from perfledger.commands.workflow.identity import subject_snapshot
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.identity import Snapshot, file_artifact_name
from perfledger.ledger.checkpoints import CheckpointPolicy, ancestry, replay
from perfledger.projections.champions import final_audit_standing
from perfledger.projections.workflow import open_conflicts

if TYPE_CHECKING:
    from perfledger.api import Ledger

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: perfledger's predicate (docs/attestations.md describes every field).
PREDICATE_TYPE = "https://perfledger.dev/attestation/champion/v1"
#: The subject naming the snapshot itself; its digest is the snapshot's blake3 tree digest.
SNAPSHOT_SUBJECT = "perfledger-snapshot:"
#: The largest attestation file read (bytes): a champion of thousands of files stays far below.
MAX_ATTESTATION_BYTES = 16 * 1024 * 1024


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding (what the signature covers): ``DSSEv1 LEN(type) type
    LEN(body) body``, lengths in ASCII decimal bytes (DSSE protocol v1)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def _fingerprint(public: Ed25519PublicKey) -> str:
    """The key's OpenSSH fingerprint (``SHA256:`` base64 unpadded), the envelope's keyid."""
    blob = public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    raw = base64.b64decode(blob.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def _private_key(key_path: str) -> Ed25519PrivateKey:
    """The ed25519 private key of an OpenSSH key file. Raises: BadRequest for a missing,
    encrypted or non-ed25519 key."""
    try:
        with open(key_path, "rb") as handle:
            key = serialization.load_ssh_private_key(handle.read(), password=None)
    except OSError as exc:
        raise BadRequest(f"cannot read the SSH key {key_path}: {exc.strerror}",
                         hint="pass --key PATH to an OpenSSH private key file") from None  # fmt: skip
    except (ValueError, TypeError) as exc:
        raise BadRequest(f"{key_path} is not an unencrypted OpenSSH private key: {exc}",
                         hint="make one with ssh-keygen -t ed25519 -N ''") from None  # fmt: skip
    if not isinstance(key, Ed25519PrivateKey):
        raise BadRequest(f"{key_path} is not an ed25519 key",
                         hint="attestations are signed with ed25519 (ssh-keygen -t ed25519)")  # fmt: skip
    return key


def _public_keys(signers_file: str) -> list[tuple[str, Ed25519PublicKey]]:
    """The ed25519 keys of an allowed-signers file (``principal [options] ssh-ed25519 KEY``) or
    an OpenSSH public key file (``ssh-ed25519 KEY comment``), as (name, key). Raises:
    BadRequest when the file is missing or holds no ed25519 key."""
    try:
        with open(signers_file, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRequest(f"cannot read {signers_file}: {exc}",
                         hint="pass --signers an allowed-signers or .pub file") from None  # fmt: skip
    keys = []
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("#") or "ssh-ed25519" not in words[:-1]:
            continue
        at = words.index("ssh-ed25519")
        try:
            key = serialization.load_ssh_public_key(f"ssh-ed25519 {words[at + 1]}".encode())
        except ValueError:
            continue
        if isinstance(key, Ed25519PublicKey):
            # allowed signers: the principal comes first; a .pub file: its comment last
            name = words[0] if at > 0 else (words[at + 2] if len(words) > at + 2 else "key")
            keys.append((name, key))
    if not keys:
        raise BadRequest(f"no ed25519 public key in {signers_file}",
                         hint="an allowed-signers file (git's format) or a .pub file")  # fmt: skip
    return keys


def _dumps(value: Any) -> bytes:
    """The payload's JSON: sorted keys, no spaces (one byte string per statement)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


# ----------------------------------------------------------------------------- deriving


def _champion(state: Any, experiment_id: str) -> tuple[Any, Any]:
    """The experiment and its Target when it is its Target's current champion. Raises:
    BadRequest (no such experiment), RuleRefused R13 (not the current champion)."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        raise BadRequest(f"no experiment {experiment_id!r}", hint="perfledger experiment list")
    target_id = experiment.created.target_id
    target = state.targets[target_id]
    if target.champion != experiment_id:
        raise refuse(
            "R13",
            f"experiment {experiment_id!r} is not the champion of Target {target_id!r} "
            f"(its champion is {target.champion or 'the original'}); nothing was written",
            "attest the current champion (perfledger champion show TARGET)",
        )
    return experiment, target


def _verdict_json(verdict: Any) -> dict[str, Any]:
    """A verdict's decision figures: status, the primary's estimate and CI, and per case."""
    p = verdict.primary
    return {
        "samples_id": verdict.samples_id,
        "stage": getattr(verdict, "stage", "final_audit"),
        "status": verdict.status,
        "unit": verdict.unit,
        "method": p.method,
        "statistic": p.statistic,
        "min_effect": p.min_effect,
        "resolution": p.resolution,
        "confidence": p.confidence,
        "estimate": p.estimate,
        "ci_low": p.ci_low,
        "ci_high": p.ci_high,
        "n_pairs": p.n_pairs,
        "cases": [
            {
                "case": c.case,
                "status": c.status,
                "estimate": c.estimate,
                "ci_low": c.ci_low,
                "ci_high": c.ci_high,
                "n_pairs": c.n_pairs,
            }
            for c in p.cases
        ],
        "guardrails": [
            {
                "metric": g.metric,
                "status": g.status,
                "regression": g.regression,
                "ci_low": g.ci_low,
                "ci_high": g.ci_high,
            }
            for g in verdict.guardrails
        ],
    }


def _subjects(ledger: Ledger, event_id: str, snap: Snapshot) -> list[dict[str, Any]]:
    """The statement's subjects: each file of ``snap`` (its bytes read from the event's
    artifacts, checked against their blake3 and size) by path and sha256, then the snapshot."""
    subjects = []
    for path, entry in sorted(snap.files.items()):
        data = ledger.artifact(event_id, file_artifact_name(entry.blake3))
        if len(data) != entry.size:
            raise IntegrityError(f"file {path!r} of snapshot {snap.digest} has the wrong size")
        subjects.append({"name": path, "digest": {"sha256": hashlib.sha256(data).hexdigest()}})
    subjects.append({"name": SNAPSHOT_SUBJECT + snap.digest, "digest": {"blake3": snap.digest}})
    return subjects


def _checkpoint(verified: Any, head: str) -> dict[str, Any] | None:
    """The latest checkpoint (most events) whose commit is ``head`` or below it, or None."""
    below = ancestry(verified.node, head.encode())
    found = [t for t in verified.tags.values()
             if not t.is_witness and t.head.encode() in below]  # fmt: skip
    if not found:
        return None
    tag = max(found, key=lambda t: (t.count, t.sha))
    return {"tag": tag.sha, "head": tag.head, "events": tag.count, "digest": tag.digest}


def _measured_samples(
    ledger: Ledger, state: Any, experiment_id: str, samples_ids: list[str]
) -> list[dict[str, Any]]:
    """The predicate's ``samples``: each one's id, stage, event id, pairs, raw table,
    provenance and both snapshot digests. Raises: RuleRefused R5 when one was not measured by
    perfledger (outside samples, or samples recorded before provenance was kept)."""
    rows = []
    for sid in samples_ids:
        view = state.samples[sid]
        payload = ledger.payload(view.event_id)
        provenance = payload.provenance
        source = provenance.source if provenance is not None else None
        if provenance is None or source != "perfledger":
            raise refuse(
                "R5",
                f"champion {experiment_id!r} rests on samples {sid!r} measured "
                f"{'outside perfledger' if source else 'before provenance was kept'}: only "
                "samples perfledger measured are attested; nothing was written",
                "measure the stage with perfledger measure and select the champion again",
            )
        identity = payload.identity
        snapshots = {} if identity is msgspec.UNSET else {
            "reference_snapshot": identity.reference.digest,
            "candidate_snapshot": identity.candidate.digest,
        }  # fmt: skip
        rows.append({
            "samples_id": sid, "stage": view.stage, "event_id": view.event_id,
            "n_pairs": view.n_pairs, "raw_table": provenance.raw_table,
            "provenance": {"source": source, "protocol": provenance.protocol}, **snapshots,
        })  # fmt: skip
    return rows


def derive(ledger: Ledger, experiment_id: str, head: str | None = None) -> dict[str, Any]:
    """The in-toto statement of champion ``experiment_id`` at commit ``head`` (default: the
    ledger's head), after verifying the ledger end to end and replaying it (audit).
    Returns: the statement (``_type``, ``subject``, ``predicateType``, ``predicate``).
    Raises: BadRequest (unknown experiment or head); RuleRefused R13 (not the champion),
        R11 (no code snapshot), R5 (samples measured outside perfledger); IntegrityError when
        the ledger fails verification or its replay audit has findings."""
    verified = verified_ledger(ledger, CheckpointPolicy())
    head = head or verified.report.head
    if head.encode() not in ancestry(verified.node, verified.report.head.encode()):
        raise IntegrityError(f"commit {head} is not in this ledger's history",
                             hint="verify the attestation against a clone of its ledger")  # fmt: skip
    state = ledger.state_at(head)
    experiment, target = _champion(state, experiment_id)
    target_id = target.definition.target_id
    snap = subject_snapshot(state, target, experiment_id, ledger.payload)
    step = next(s for s in reversed(target.lineage) if s.champion == experiment_id)
    if snap is None or step.samples_id is None:
        raise refuse(
            "R11",
            f"champion {experiment_id!r} has no code snapshot (its samples were recorded without "
            "a {subject} driver): there is no code to attest; nothing was written",
            "measure the candidate with a readiness driver that declares {subject}",
        )
    samples_ids = [step.samples_id]
    standing = final_audit_standing(state, target)
    if standing.samples_id and standing.champion == experiment_id:
        samples_ids.append(standing.samples_id)
    samples = _measured_samples(ledger, state, experiment_id, samples_ids)
    cited = {target.frozen_event, experiment.event_id, step.event_id}
    cited |= {row["event_id"] for row in samples}
    rules = {}
    for event in ledger.events_at(head):
        p = event.payload
        is_verdict = event.kind in ("VerdictRecorded", "FinalAuditRecorded")
        if event.id in cited or (is_verdict and getattr(p, "samples_id", None) in samples_ids):
            rules[event.id] = {"kind": event.kind, "schema": event.envelope.schema}
    verdicts = [_verdict_json(state.verdicts[s]) for s in samples_ids[:1] if s in state.verdicts]
    final = None
    if len(samples_ids) > 1 and samples_ids[1] in state.final_audits:
        final = _verdict_json(state.final_audits[samples_ids[1]])
    replayed = audit(ledger)
    if not replayed.ok:
        first = replayed.findings[0].message if replayed.findings else "verify failed"
        raise IntegrityError(f"the ledger's replay audit fails ({first}): nothing is attested",
                             hint="perfledger audit lists the findings")  # fmt: skip
    limits = [f"open conflict {c.conflict_id} ({c.kind})"
              for c in open_conflicts(state, target_id, ("champion", "owed_champion"))]  # fmt: skip
    limits += [f"reconciliation owed by {e} ({p.samples_id})" for e, p in target.pending.items()]
    if final is None or final["status"] != "pass":
        limits.append(f"final audit: {standing.status}")
    count, digest = replay(verified.node, head.encode())
    predicate = {
        "target": {"target_id": target_id, **msgspec.to_builtins(target.definition)},
        "champion": {
            "experiment_id": experiment_id,
            "title": experiment.created.title,
            "selected_by": step.event_id,
            "snapshot": snap.digest,
            "argv": list(snap.argv),
        },
        "verdicts": verdicts,
        "samples": samples,
        "rule_versions": [{"event_id": k, **v} for k, v in sorted(rules.items())],
        "final_audit": final,
        "replay_audit": {"result": "clean", "findings": 0},
        "open_limits": limits,
        "ledger": {
            "head": head,
            "events": count,
            "event_digest": digest,
            "checkpoint": _checkpoint(verified, head),
        },
    }
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": _subjects(ledger, samples[0]["event_id"], snap),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }
    # as JSON gives it back (tuples become lists), so a re-derivation compares equal
    result: dict[str, Any] = json.loads(_dumps(statement))
    return result


# ----------------------------------------------------------------------------- signing


def attest(ledger: Ledger, experiment_id: str, key_path: str) -> dict[str, Any]:
    """The DSSE envelope of champion ``experiment_id``'s statement (:func:`derive`), signed
    over DSSE's PAE with the ed25519 key of the OpenSSH file ``key_path``.
    Returns: ``{"payloadType", "payload" (base64), "signatures": [{"keyid", "sig"}]}``; keyid
    is the key's OpenSSH fingerprint. Raises: as :func:`derive`; BadRequest for the key."""
    key = _private_key(key_path)
    payload = _dumps(derive(ledger, experiment_id))
    sig = key.sign(pae(PAYLOAD_TYPE, payload))
    return {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode(),
        "signatures": [
            {"keyid": _fingerprint(key.public_key()), "sig": base64.b64encode(sig).decode()}
        ],
    }


def _read_envelope(path: str) -> tuple[dict[str, Any], bytes]:
    """The envelope at ``path`` and its decoded payload. Raises: BadRequest (unreadable),
    IntegrityError (not a DSSE envelope of an in-toto statement)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_ATTESTATION_BYTES + 1)
    except OSError as exc:
        raise BadRequest(
            f"cannot read {path}: {exc.strerror}", hint="pass the attestation file"
        ) from None
    try:
        if len(raw) > MAX_ATTESTATION_BYTES:
            raise ValueError("larger than any attestation perfledger writes")
        envelope = json.loads(raw)
        payload = base64.b64decode(envelope["payload"], validate=True)
        sigs = envelope["signatures"]
        if not isinstance(sigs, list) or not sigs:
            raise ValueError("no signatures")
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{path} is not a DSSE envelope: {exc}",
                             hint="perfledger attest writes one") from None  # fmt: skip
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise IntegrityError(f"{path}: payloadType is {envelope.get('payloadType')!r}, "
                             f"not {PAYLOAD_TYPE!r}", hint="perfledger attest writes one")  # fmt: skip
    return envelope, payload


def _signed_by(envelope: dict[str, Any], payload: bytes, signers_file: str) -> list[str]:
    """The names of the keys in ``signers_file`` whose signature over the PAE verifies.
    Raises: IntegrityError when none does."""
    message = pae(PAYLOAD_TYPE, payload)
    names = []
    for name, key in _public_keys(signers_file):
        for sig in envelope["signatures"]:
            try:
                key.verify(base64.b64decode(str(sig.get("sig", "")), validate=True), message)
            except (InvalidSignature, ValueError, AttributeError):
                continue
            names.append(name)
            break
    if not names:
        raise IntegrityError(
            f"the attestation's signature does not verify with any key in {signers_file} "
            "(a forged signature, a changed payload, or a key you do not trust)",
            hint="the attestation cannot be trusted: find out who wrote it",
        )
    return names


def _difference(claimed: dict[str, Any], derived: dict[str, Any]) -> str | None:
    """The first thing that differs between the attested and the re-derived statement, said
    for people (a subject's digest, a missing or extra subject, a predicate field), or None."""
    if claimed.get("_type") != derived["_type"]:
        return f"_type is {claimed.get('_type')!r}, not {derived['_type']!r}"
    if claimed.get("predicateType") != derived["predicateType"]:
        return f"predicateType is {claimed.get('predicateType')!r}"
    mine = {s["name"]: s["digest"] for s in derived["subject"]}
    theirs = {s.get("name"): s.get("digest") for s in claimed.get("subject") or []
              if isinstance(s, dict)}  # fmt: skip
    for name in sorted(set(mine) | set(theirs), key=str):
        if mine.get(name) != theirs.get(name):
            if name not in mine:
                return f"subject {name!r} is not a file of the champion's snapshot"
            if name not in theirs:
                return f"subject {name!r} of the champion's snapshot is missing"
            return f"subject {name!r}: digest {theirs[name]} attested, {mine[name]} in the ledger"
    predicate = claimed.get("predicate") or {}
    for field in sorted(set(predicate) | set(derived["predicate"])):
        if predicate.get(field) != derived["predicate"].get(field):
            return f"predicate field {field!r} differs from what the ledger gives"
    return None


def _attested_checkpoint(
    ledger: Ledger, head: str, attested: Any, latest: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The checkpoint the re-derived statement names: ``attested`` when it is still one of the
    ledger's checkpoints (same tag, head, count, digest) at or below ``head``, or when it is
    None (a checkpoint signed after the attestation is no difference); else ``latest``."""
    if attested is None or attested == latest:
        return attested
    if not isinstance(attested, dict):
        return latest
    verified = verified_ledger(ledger, CheckpointPolicy())
    tag = verified.tags.get(str(attested.get("tag")))
    if tag is None or tag.is_witness:
        return latest
    same = {"tag": tag.sha, "head": tag.head, "events": tag.count, "digest": tag.digest}
    below = ancestry(verified.node, head.encode())
    return attested if same == attested and tag.head.encode() in below else latest


def verify_attestation(ledger: Ledger, path: str, signers_file: str) -> dict[str, Any]:
    """Verify the attestation at ``path``: its DSSE signature with a key of ``signers_file``,
    then that ``ledger`` (a clone of the attested one) re-derives the same statement at the
    attested head (a checkpoint signed at or below that head after the attestation is fine).
    Returns: ``{"signers", "experiment", "head", "subjects"}``.
    Raises: IntegrityError naming what differs (signature, subject, predicate field);
        BadRequest for unreadable files; as :func:`derive` when the ledger no longer has it."""
    envelope, payload = _read_envelope(path)
    names = _signed_by(envelope, payload, signers_file)
    try:
        claimed = json.loads(payload)
        predicate = claimed["predicate"]
        experiment_id = str(predicate["champion"]["experiment_id"])
        head = str(predicate["ledger"]["head"])
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"the attested statement is not perfledger's: {exc}",
                             hint="perfledger attest writes one") from None  # fmt: skip
    derived = derive(ledger, experiment_id, head)
    derived["predicate"]["ledger"]["checkpoint"] = _attested_checkpoint(
        ledger, head, (predicate.get("ledger") or {}).get("checkpoint"),
        derived["predicate"]["ledger"]["checkpoint"],
    )  # fmt: skip
    difference = _difference(claimed, derived)
    if difference is not None:
        raise IntegrityError(
            f"the attestation of {experiment_id!r} is not what the ledger gives: {difference}",
            hint="the attestation was altered, or the ledger is not the one it was made from",
        )
    return {"signers": names, "experiment": experiment_id, "head": head,
            "subjects": len(derived["subject"])}  # fmt: skip


def write_attestation(envelope: dict[str, Any], out: str, experiment_id: str) -> dict[str, Any]:
    """Write ``envelope`` (what :func:`attest` returns) as JSON to ``out``; returns the answer of
    ``attest --out``: ``{"attestation": its absolute path, "experiment", "keyid"}``.
    Raises: OSError when ``out`` cannot be written."""
    with open(out, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(envelope, indent=2) + "\n")
    return {"attestation": os.path.abspath(out), "experiment": experiment_id,
            "keyid": envelope["signatures"][0]["keyid"]}  # fmt: skip


__all__ = [
    "PAYLOAD_TYPE", "PREDICATE_TYPE", "attest", "derive", "pae", "verify_attestation",
    "write_attestation",
]  # fmt: skip
