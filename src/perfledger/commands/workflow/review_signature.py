"""What a reviewer signs (SPEC.md R12, R17; ``ReviewRecorded`` schema
:data:`~perfledger.events.workflow.R12_SIGNED_REVIEW`): a review's canonical content, and the
check a signed review passes when recorded.

A review is the evidence that clears a flag (R12) or explains foreign activity (R17), and the
appender's name is typed: anyone can append as ``reviewer-b``. A signature by the reviewer's
SSH key, over the review's canonical content in the ``perfledger-review`` namespace, is what an
auditor can check against its own allowed-signers file (``perfledger audit --allowed-signers``).
When recorded, the signature must be a good one of that content by the key it carries; whose key
that is, only the auditor's file says.
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.requests import ReviewRecord, dump
from perfledger.errors import BadRequest
from perfledger.events.canonical import canonical_bytes
from perfledger.ledger.sshsig import REVIEW_NAMESPACE, check_novalidate, signature_key

#: The first line of the signed content: what the bytes are (a signature of them is a review's).
CONTENT_HEADER = b"perfledger review v1\n"


def signed_content(req: ReviewRecord) -> bytes:
    """The bytes a reviewer signs: :data:`CONTENT_HEADER`, then the canonical JSON of the
    validated request without ``signature`` (defaults filled in, so a request and its stored
    copy give the same bytes)."""
    body = dump(req)
    body.pop("signature", None)
    return CONTENT_HEADER + canonical_bytes(body)


def checked_signature(req: ReviewRecord) -> dict[str, Any]:
    """The payload fields of a signed review: ``signature``, ``signer_key`` and
    ``signer_fingerprint`` (derived from the signature); {} when unsigned.
    Raises: BadRequest when the signature is not an SSH signature, is in another namespace, or
        is not a good signature of :func:`signed_content` by the key it carries."""
    if req.signature is None:
        return {}
    armored = req.signature.encode()
    key, fingerprint, namespace = signature_key(armored)
    hint = (
        "sign the review as recorded: `perfledger review record --sign-with KEY`, or "
        f"`perfledger review content --request FILE | ssh-keygen -Y sign -n {REVIEW_NAMESPACE} "
        "-f KEY` and put the armored output in signature"
    )
    if namespace != REVIEW_NAMESPACE:
        raise BadRequest(
            f"signature: made in namespace {namespace!r}, not {REVIEW_NAMESPACE!r}", hint=hint
        )
    if not check_novalidate(signed_content(req), armored, namespace=REVIEW_NAMESPACE):
        raise BadRequest(
            f"signature: not a good signature of this review's content by its key {fingerprint} "
            "(signed before a field changed, or signed other content)",
            hint=hint,
        )
    return {"signature": req.signature, "signer_key": key, "signer_fingerprint": fingerprint}
