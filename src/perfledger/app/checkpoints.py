"""Signed checkpoints and witness co-signing, the use cases (SPEC.md section 2, Checkpoints;
docs/checkpoints.md): sign the verified head, co-sign a checkpoint after verifying the ledger,
and verify a ledger's checkpoints against a reader's policy. The CLI and Python users call
these; every refusal is decided here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from perfledger._version import __version__
from perfledger.errors import BadRequest, IntegrityError
from perfledger.ledger.checkpoints import (
    CHECKPOINT_MARK,
    TAG_FORMAT_VERSION,
    WITNESS_MARK,
    CheckpointPolicy,
    CheckpointReport,
    NodeFn,
    SignedTag,
    build_payload,
    check,
    keep_copies,
    parse_tag,
    read_trusted,
    replay,
    tag_object,
)
from perfledger.ledger.dag import CommitNode
from perfledger.ledger.objects import actor_ident
from perfledger.ledger.sshsig import sign
from perfledger.ledger.sync import local_tags, publish_tags
from perfledger.ledger.verify import CommitGraph, VerifyReport

if TYPE_CHECKING:
    from perfledger.api import Ledger


@dataclass
class Verified:
    """A ledger verified end to end: the report, its commits (hex sha -> node, from git, never
    the derived index), and its checkpoint report under the policy it was checked against."""

    report: VerifyReport
    node: NodeFn
    tags: dict[str, SignedTag] = field(default_factory=dict)
    checkpoints: CheckpointReport | None = None


def verify(ledger: Ledger, policy: CheckpointPolicy) -> VerifyReport:
    """Verify ``ledger`` end to end, then its checkpoints and witnesses (with the witness's
    copies of ``policy.trusted_dir``) against ``policy``. Returns: the report; its ``extra``
    holds ``checkpoints`` when they were checked; a failure sets ``ok`` False and ``error``
    (an IntegrityError naming the checkpoint: exit 5).
    Raises: BadRequest for a missing signers file or witness directory."""
    try:
        return _verified(ledger, policy).report
    except _Failed as failed:
        return failed.report


class _Failed(Exception):
    """The ledger or its checkpoints failed: the report says why."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__(report.error)
        self.report = report


def _verified(ledger: Ledger, policy: CheckpointPolicy) -> Verified:
    """Verify the ledger, then its checkpoints (raise _Failed with the report on a failure)."""
    holder: dict[str, CommitGraph] = {}
    report = ledger.verify(on_graph=lambda graph: holder.__setitem__("graph", graph))
    if not report.ok:
        raise _Failed(report)
    node = _hex_nodes(holder["graph"])
    tags = {**local_tags(ledger.store)}
    if policy.trusted_dir:
        tags.update(read_trusted(policy.trusted_dir))
    verified = Verified(report, node, tags)
    if tags or policy.demands:
        try:
            verified.checkpoints = check(tags, node, report.head.encode(), policy)
        except IntegrityError as exc:
            report.ok, report.error = False, exc
            raise _Failed(report) from None
        report.extra["checkpoints"] = verified.checkpoints.to_json()
    return verified


def _hex_nodes(graph: CommitGraph) -> NodeFn:
    """The verified graph's commits keyed by hex sha (as the store and sync name them)."""
    cache: dict[bytes, CommitNode] = {}

    def node(sha: bytes) -> CommitNode:
        hit = cache.get(sha)
        if hit is None:
            raw = graph.node(bytes.fromhex(sha.decode()))
            hit = cache[sha] = CommitNode(
                raw.event_id, raw.lamport, tuple(p.hex().encode() for p in raw.parents)
            )
        return hit

    return node


def verified_ledger(ledger: Ledger, policy: CheckpointPolicy) -> Verified:
    """``ledger`` verified end to end with its checkpoints under ``policy``: the report, its
    commits from git and its checkpoint tags. Raises: IntegrityError (exit 5) on a failure."""
    try:
        return _verified(ledger, policy)
    except _Failed as failed:
        assert failed.report.error is not None
        raise failed.report.error from None


def _write(ledger: Ledger, payload: bytes, key_path: str) -> SignedTag:
    """Sign ``payload``, store the tag object and create its ref (never moved)."""
    raw = payload + sign(payload, key_path)
    tag = parse_tag(tag_object(raw).id.decode(), raw)
    publish_tags(ledger.store.repo, [tag])
    return tag


def sign_checkpoint(
    ledger: Ledger, key_path: str, *, actor: str, signers_file: str | None = None
) -> SignedTag:
    """Sign a checkpoint of ``ledger``'s head with the SSH key at ``key_path``: after a full
    verification, and only when every checkpoint it already has lies in this history (so the
    new one extends them). Its trailers: the head, the event count, the event digest (sha256
    over the ordered ids; no perfledger version changes it) and, beside the version that
    computed it, the state_hash. ``signers_file``: the existing ones' signatures are checked.
    Returns: the checkpoint tag (published under ``refs/perfledger/checkpoints/<sha>``).
    Raises: IntegrityError when the ledger or an existing checkpoint fails; BadRequest for a
        missing or unusable key."""
    if not os.path.isfile(key_path):
        raise BadRequest(f"no SSH key at {key_path}", hint="pass --key PATH to a private key")
    verified = verified_ledger(ledger, CheckpointPolicy(signers_file=signers_file))
    head = verified.report.head
    count, digest = replay(verified.node, head.encode())
    fields = {
        CHECKPOINT_MARK: TAG_FORMAT_VERSION,
        "Ledger-Head": head,
        "Event-Count": str(count),
        "Event-Digest": digest,
        "State-Hash": f"{verified.report.extra['state_hash']} (perfledger {__version__})",
    }
    subject = f"perfledger checkpoint: {count} events at {head[:12]}"
    payload = build_payload(
        head, "commit", f"perfledger-checkpoint-{count}", actor_ident(actor), int(time.time()),
        subject, fields,
    )  # fmt: skip
    return _write(ledger, payload, key_path)


def witness_checkpoint(
    ledger: Ledger,
    key_path: str,
    *,
    signers_file: str,
    copy_dir: str,
    actor: str,
    checkpoint: str | None = None,
) -> tuple[SignedTag, SignedTag, list[str]]:
    """Co-sign a checkpoint of ``ledger`` with the witness's SSH key, after verifying the
    ledger end to end, every checkpoint's signature (``signers_file``) and that the ledger
    extends every checkpoint the witness signed before (its copies in ``copy_dir``). The
    witness tag points at the checkpoint's tag and repeats its head, count and digest; both
    tags are kept in ``copy_dir`` (``<sha>.tag``). ``checkpoint``: a tag sha or prefix
    (default: the last checkpoint).
    Returns: (the checkpoint, the witness tag, the paths written).
    Raises: IntegrityError when anything fails verification; BadRequest when there is no such
        checkpoint or the key is unusable."""
    if not os.path.isfile(key_path):
        raise BadRequest(f"no SSH key at {key_path}", hint="pass --key PATH to a private key")
    trusted = copy_dir if os.path.isdir(copy_dir) else None
    policy = CheckpointPolicy(signers_file=signers_file, trusted_dir=trusted)
    verified = verified_ledger(ledger, policy)
    candidates = [t for t in verified.tags.values() if not t.is_witness]
    if checkpoint:
        candidates = [t for t in candidates if t.sha.startswith(checkpoint.lower())]
    if not candidates:
        raise BadRequest(
            f"no checkpoint {checkpoint} in this ledger"
            if checkpoint
            else "no checkpoint to witness",
            hint="sign one first: perfledger checkpoint sign --key KEY",
        )
    if len({t.sha for t in candidates}) > 1 and checkpoint:
        raise BadRequest(f"checkpoint prefix {checkpoint} is ambiguous", hint="give more digits")
    target = max(candidates, key=lambda t: (t.count, t.sha))
    fields = {
        WITNESS_MARK: TAG_FORMAT_VERSION,
        "Checkpoint": target.sha,
        "Ledger-Head": target.head,
        "Event-Count": str(target.count),
        "Event-Digest": target.digest,
    }
    subject = f"perfledger witness: checkpoint {target.sha[:12]} verified"
    payload = build_payload(
        target.sha, "tag", f"perfledger-witness-{target.count}", actor_ident(actor),
        int(time.time()), subject, fields,
    )  # fmt: skip
    witness = _write(ledger, payload, key_path)
    return target, witness, keep_copies(copy_dir, [target, witness])


def signed_json(tag: Any) -> dict[str, Any]:
    """The answer of ``checkpoint sign`` for ``tag`` (what :func:`sign_checkpoint` returns):
    ``{"tag", "ref", "head", "events", "digest"}``."""
    return {"tag": tag.sha, "ref": f"refs/perfledger/checkpoints/{tag.sha}", "head": tag.head,
            "events": tag.count, "digest": tag.digest}  # fmt: skip


def witnessed_json(target: Any, tag: Any, paths: list[str]) -> dict[str, Any]:
    """The answer of ``checkpoint witness`` (what :func:`witness_checkpoint` returns):
    ``{"witness", "checkpoint", "head", "events", "copies"}`` (the copies' absolute paths)."""
    return {"witness": tag.sha, "checkpoint": target.sha, "head": target.head,
            "events": target.count, "copies": [os.path.abspath(p) for p in paths]}  # fmt: skip


def listed_json(report: VerifyReport) -> dict[str, Any]:
    """The answer of ``checkpoint list``: the checkpoints ``report`` (of :func:`verify`) found,
    in the order they extend each other. Raises: the verification's error (exit 5, or 7 for a
    ledger a newer perfledger wrote) when it failed."""
    if not report.ok and report.error is not None:
        raise report.error
    return report.extra.get("checkpoints", {"checkpoints": [], "unsigned_events": None})


__all__ = [
    "listed_json", "sign_checkpoint", "signed_json", "verified_ledger", "verify",
    "witness_checkpoint", "witnessed_json",
]  # fmt: skip
