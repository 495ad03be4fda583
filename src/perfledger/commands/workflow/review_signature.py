"""What a reviewer signs (SPEC.md R12, R17; ``ReviewRecorded`` schema
:data:`~perfledger.events.workflow.R12_SIGNED_REVIEW`): a review's canonical content, and the
check a signed review passes when recorded.

A review is the evidence that clears a flag (R12) or explains foreign activity (R17), and the
appender's name is typed: anyone can append as ``reviewer-b``. A signature by the reviewer's
SSH key, over the review's canonical content in the ``perfledger-review`` namespace, is what an
auditor can check against its own allowed-signers file (``perfledger audit --allowed-signers``).
When recorded, the signature must be a good one of that content by the key it carries (the
application layer checks it with ``ssh-keygen`` before deciding: :func:`perfledger.app.decisions.
record_decision`; the decider reads the key out of it); whose key that is, only the auditor's
file says.
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.requests import ReviewRecord, dump
from perfledger.errors import BadRequest
from perfledger.events.canonical import canonical_bytes
from perfledger.events.sshsig_blob import REVIEW_NAMESPACE, signature_key

#: The first line of the signed content: what the bytes are (a signature of them is a review's).
CONTENT_HEADER = b"perfledger review v1\n"


def signed_content(req: ReviewRecord) -> bytes:
    """The bytes a reviewer signs: :data:`CONTENT_HEADER`, then the canonical JSON of the
    validated request without ``signature`` (defaults filled in, so a request and its stored
    copy give the same bytes)."""
    body = dump(req)
    body.pop("signature", None)
    return CONTENT_HEADER + canonical_bytes(body)


def signature_hint() -> str:
    """How to sign a review (the hint of every refused signature)."""
    return (
        "sign the review as recorded: `perfledger review record --sign-with KEY`, or "
        f"`perfledger review content --request FILE | ssh-keygen -Y sign -n {REVIEW_NAMESPACE} "
        "-f KEY` and put the armored output in signature"
    )


def checked_signature(req: ReviewRecord) -> dict[str, Any]:
    """The payload fields of a signed review: ``signature``, ``signer_key`` and
    ``signer_fingerprint`` (read out of the signature); {} when unsigned. Pure: whether the
    signature is a good one of :func:`signed_content` is checked before deciding
    (:func:`perfledger.app.decisions.record_decision`) and by ``audit --allowed-signers``.
    Raises: BadRequest when the signature is not an SSH signature or is in another namespace."""
    if req.signature is None:
        return {}
    key, fingerprint, namespace = signature_key(req.signature.encode())
    if namespace != REVIEW_NAMESPACE:
        raise BadRequest(
            f"signature: made in namespace {namespace!r}, not {REVIEW_NAMESPACE!r}",
            hint=signature_hint(),
        )
    return {"signature": req.signature, "signer_key": key, "signer_fingerprint": fingerprint}
