"""Which reviews decided something, and whose key signed them (SPEC.md R12, R17; ``perfledger
audit --allowed-signers FILE``).

A review by "another actor" clears a plausibility flag (R12) or explains foreign activity
(R17), and an appender's name is typed: an agent can append a review as ``reviewer-b``. The
replay notes every review and the decisions that relied on one: the reviews that cleared the
flags of samples a champion was selected on (by the rule of that selection's version) or a
final audit passed on (``FinalAuditRecorded`` 12 on), and the review each ``ActivityExplained``
cites. Then, with the auditor's allowed-signers file (git's
format, as checkpoints use), each signed review's signature is checked: its key must be listed
under the review's appender, who must not be the appender of the reviewed event; and a review
that decided something without such a signature is a finding naming it. Without the file,
those reviews are listed in the report's notes and the audit is otherwise as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from perfledger.commands.registry import operations
from perfledger.commands.workflow import plausibility
from perfledger.commands.workflow.requests import ReviewRecord
from perfledger.commands.workflow.review_evidence import interested_actors
from perfledger.commands.workflow.review_signature import signed_content
from perfledger.errors import IntegrityError, PerfledgerError
from perfledger.events.workflow import (
    R12_IMPLAUSIBLE_BLOCKS_CHAMPION,
    R12_IMPLAUSIBLE_FINAL_AUDIT,
    R12_NAMED_REVIEW_CLEARS,
)
from perfledger.ledger.sshsig import REVIEW_NAMESPACE, signers

#: The rule of a finding about a signed review that decided nothing (a bad signature).
REVIEW_RULE = "review"


@dataclass
class _Review:
    """One recorded review as the replay saw it."""

    event_id: str
    lamport: int
    actor: str
    payload: Any
    subject_actor: str | None


@dataclass
class ReviewWatch:
    """The reviews of a ledger and what each decided, filled by :meth:`observe` in the total
    order; :meth:`check` judges them against an allowed-signers file."""

    reviews: dict[str, _Review] = field(default_factory=dict)
    #: review id -> (rule, what it decided), one entry per decision that relied on it
    relied: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def observe(self, before: Any, event: Any, actor_of: Callable[[str], str]) -> None:
        """Note a decision ``event`` (re-decided against ``before``, the state its author saw):
        a review, an explanation citing one, a champion selection or a passed final audit whose
        flags reviews cleared.
        An event the state cannot place is left alone (the replay reports it)."""
        try:
            self._observe(before, event, actor_of)
        except (PerfledgerError, KeyError, AttributeError):
            return

    def _observe(self, before: Any, event: Any, actor_of: Callable[[str], str]) -> None:

        envelope, p = event.envelope, event.payload
        if envelope.kind == "ReviewRecorded":
            if p.review_id not in self.reviews:
                self.reviews[p.review_id] = _Review(
                    envelope.id, envelope.lamport, envelope.actor, p, actor_of(p.subject_event)
                )
        elif envelope.kind == "ActivityExplained" and isinstance(p.review_id, str):
            self.relied.setdefault(p.review_id, []).append(
                ("R17", f"explained the foreign activity of samples {p.samples_id!r}")
            )
        elif envelope.kind == "ChampionSelected" and p.decision == "select":
            schema = envelope.schema or 1
            if schema < R12_IMPLAUSIBLE_BLOCKS_CHAMPION or p.samples_id is None:
                return
            samples = before.samples[p.samples_id]
            creator = before.experiments[p.experiment_id].event_id
            interested = interested_actors(actor_of, envelope.actor, creator, samples.event_id)
            views = plausibility.clearing_reviews(
                before, samples, interested, actor_of, named=schema >= R12_NAMED_REVIEW_CLEARS
            )
            self._cleared(views, p.samples_id, f"the champion selection {envelope.id[:12]}")
        elif envelope.kind == "FinalAuditRecorded" and p.status == "pass":
            # R12 (FinalAuditRecorded 12): a pass on flagged samples rests on the reviews
            # naming each flag, as a selection does; a final audit not passed relied on none
            if (envelope.schema or 1) < R12_IMPLAUSIBLE_FINAL_AUDIT:
                return
            samples = before.samples[p.samples_id]
            creator = before.experiments[samples.experiment_id].event_id
            interested = interested_actors(actor_of, envelope.actor, creator, samples.event_id)
            views = plausibility.clearing_reviews(before, samples, interested, actor_of, named=True)
            self._cleared(views, p.samples_id, f"the final audit {envelope.id[:12]}")

    def _cleared(self, views: list[Any] | None, samples_id: str, decision: str) -> None:
        """Note that each review of ``views`` cleared the plausibility flags of ``samples_id``
        for ``decision`` (R12)."""
        for view in views or ():
            self.relied.setdefault(view.review.review_id, []).append(
                ("R12", f"cleared the plausibility flag of samples {samples_id!r} for {decision}")
            )

    def check(self, signers_file: str | None) -> tuple[list[tuple[_Review, str, str]], list[str]]:
        """Judge every review: returns ``(findings, notes)``, each finding ``(review, rule,
        message)``. With ``signers_file``: a signed review whose key is not listed under its
        appender (or whose appender appended the reviewed event) is a finding, and so is an
        unsigned review that decided something. Without it: the reviews that decided something
        are listed in notes (unsigned, or signed by a key nobody checked).
        Raises: BadRequest when ``signers_file`` does not exist."""

        findings: list[tuple[_Review, str, str]] = []
        notes: list[str] = []
        for review_id, seen in self.reviews.items():
            decided = self.relied.get(review_id, [])
            rule = decided[0][0] if decided else REVIEW_RULE
            what = "; ".join(text for _, text in decided)
            did = f" ({what})" if what else ""
            p = seen.payload
            named = f"review {review_id!r}, appended as {seen.actor!r}{did}"
            signed = not isinstance(p.signature, msgspec.UnsetType)
            if signed and signers_file is not None:
                try:
                    principals = signers(
                        _signed_content(p), p.signature.encode(), signers_file,
                        what=f"review {review_id!r}", namespace=REVIEW_NAMESPACE,
                    )  # fmt: skip
                except IntegrityError as exc:
                    findings.append((seen, rule, f"{named}: {exc.message}"))
                    continue
                if seen.actor not in principals:
                    findings.append((seen, rule, f"{named}: its signature is by the key of "
                                     f"{principals} in {signers_file}, not by its appender's"))  # fmt: skip
                elif seen.actor == seen.subject_actor:
                    findings.append((seen, rule, f"{named}: its signer appended the reviewed "
                                     "event: a review by the reviewed actor explains nothing"))  # fmt: skip
            elif signed and decided:
                notes.append(f"unauthenticated review: {named} is signed by key "
                             f"{p.signer_fingerprint}, unchecked: `perfledger audit "
                             "--allowed-signers FILE` checks whose key it is")  # fmt: skip
            elif decided and signers_file is not None:
                findings.append((seen, rule, f"{named} is unsigned: its reviewer is only a typed "
                                 "name; the reviewer signs it (`perfledger review record "
                                 "--sign-with KEY`) with a key the allowed-signers file lists "
                                 "under that name"))  # fmt: skip
            elif decided:
                notes.append(f"unauthenticated review: {named} is unsigned (its reviewer is "
                             "only a typed name)")  # fmt: skip
        return findings, notes


def _signed_content(payload: Any) -> bytes:
    """The content a review's signer signed, rebuilt from its recorded payload (the request's
    fields; the derived ones left out)."""

    recorded = msgspec.to_builtins(payload)
    body = {k: recorded[k] for k in ReviewRecord.__struct_fields__ if k in recorded}
    return signed_content(operations.validate("review.record", body))
