"""The research and review record: a challenge by a reviewer (often a model of another family)
to a claim, a rejection or a Target's stop, with the response and whether dissent remains.

The tool records; it never judges: a review changes no verdict, and a later review resolves
earlier dissent only by saying so (``resolves``). The handoff and the state list dissent that no
later review resolved. The one decision a review takes part in is R12's (and R17's): a flag on
samples (a ratio beyond the plausible bound) is cleared only by a settled review by another
actor that names it in ``explains`` (schema :data:`~perfledger.events.workflow.R12_REVIEW_NAMES_FLAG`).

Importing this module registers the kind; :mod:`perfledger.events.workflow` imports it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from perfledger.events.kindspec import KindSpec, register_kind
from perfledger.events.workflow import SCHEMA_VERSIONS

#: What a review challenges, and the event kind each names (``other``: any recorded event).
ReviewSubject = Literal["claim", "rejection", "stop", "other"]
SUBJECT_KINDS: dict[str, str | None] = {
    "claim": "ExperimentCreated",
    "rejection": "CandidateRejected",
    "stop": "HandoffRecorded",
    "other": None,
}


#: The kinds of flag a review may name (R12): ``implausible``, a case of ``SamplesRecorded``'s
#: ``implausible`` (a measured ratio beyond the Target's plausible bound).
FlagKind = Literal["implausible"]


class FlagRef(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One flag a review explains, as the samples payload records it.

    Attributes:
        samples_id: the flagged samples (the review's ``subject_event`` is their event).
        flag: the flag's kind (:data:`FlagKind`).
        case: the flagged test case (a key of the samples' ``implausible``).
    """

    samples_id: str
    flag: FlagKind
    case: str


class ReviewRecorded(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, tag_field="kind",
    tag=True,
):  # fmt: skip
    """A review: who challenged what, the challenge, the response, whether dissent remains.

    Attributes:
        review_id: the caller's id for this review.
        reviewer: who reviewed (a person or a model's name and version).
        model_family: the reviewer's model family (``gpt``, ``gemini``, ``claude``, ``human``);
            the playbook asks for a family other than the author's.
        subject: ``claim`` (an ExperimentCreated), ``rejection`` (a CandidateRejected), ``stop``
            (a HandoffRecorded) or ``other``.
        subject_event: the id of the reviewed event.
        subject_kind: that event's kind (*derived*).
        target_id: the reviewed event's Target (*derived*; None when it names none).
        challenge: the reviewer's challenge.
        response: the author's response.
        dissent_remains: whether the reviewer still disagrees after the response.
        resolves: ids of earlier reviews whose remaining dissent this review settles.
        explains: the flags this review explains (schema
            :data:`~perfledger.events.workflow.R12_REVIEW_NAMES_FLAG` on; unset when none): only
            a settled review by another actor naming a flag clears it (R12).
        signature: the reviewer's armored SSH signature (namespace ``perfledger-review``) over
            the review's canonical content (schema
            :data:`~perfledger.events.workflow.R12_SIGNED_REVIEW` on; unset when unsigned);
            a good signature by the key it carries when recorded.
        signer_key: that key (``keytype base64``, *derived* from the signature).
        signer_fingerprint: its fingerprint (``SHA256:...``, *derived*). Whose key it is, an
            auditor's allowed-signers file says (``perfledger audit --allowed-signers``).
    """

    review_id: str
    reviewer: str
    model_family: str
    subject: ReviewSubject
    subject_event: str
    subject_kind: str
    target_id: str | None = None
    challenge: str
    response: str
    dissent_remains: bool
    resolves: tuple[str, ...] = ()
    explains: tuple[FlagRef, ...] | msgspec.UnsetType = msgspec.UNSET
    signature: str | msgspec.UnsetType = msgspec.UNSET
    signer_key: str | msgspec.UnsetType = msgspec.UNSET
    signer_fingerprint: str | msgspec.UnsetType = msgspec.UNSET


def _same_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Upcaster of a version that only added optional fields (an older payload decodes as is)."""
    return payload


#: The current schema version (:data:`perfledger.events.workflow.SCHEMA_VERSIONS`).
VERSION = SCHEMA_VERSIONS["ReviewRecorded"]

register_kind(
    KindSpec(
        "ReviewRecorded",
        VERSION,
        ReviewRecorded,
        {v: _same_payload for v in range(1, VERSION)},
        summary=lambda p: (
            f"{p.review_id}: {p.subject} {p.subject_event[:12]} by {p.reviewer} "
            f"({p.model_family}), dissent={'yes' if p.dissent_remains else 'no'}"
            + (
                ""
                if isinstance(p.signer_fingerprint, msgspec.UnsetType)
                else f", signed {p.signer_fingerprint}"
            )
        ),
    )
)
