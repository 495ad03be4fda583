"""The auditor's replay (SPEC.md sections 1, 4, 6): ``perfledger audit``.

Independent of the derived state cache and index, in one pass over git: from zero, or (the
audit cache, :func:`audit`) over the events after the head of this clone's last clean audit,
each checked as from zero:

1. everything ``verify`` checks (:func:`perfledger.ledger.verify.verify_store`: hashes, trailers,
   parents, Lamport clocks, schemas, artifacts); its per-event callback drives the rest, so git is
   read once;
2. every recorded decision (the kinds of :data:`perfledger.events.vocabulary.DECISION_KINDS`) is
   re-decided: its stored request ``{"op", "body"}`` is validated again and run through the
   operation's pure decider against the state *before* it (the state its author saw: for an event
   on a concurrent branch, the fold of its own ancestors), and the decided payload must equal the
   recorded one byte for byte (canonical JSON). This re-derives every verdict and final audit
   from its samples (R12), every claim's figures (R7), every failure count (R5), so an event the
   rules would have refused, or whose derived content was forged, is a finding naming its event
   and rule. A decision recorded without its request is re-decided from a request rebuilt from
   its payload (and noted);
3. the state is folded (the workflow projection); an event the fold cannot place is a finding;
4. evidence parsed from a report is re-derived from the attached raw report, re-parsed with
   the recorded tool and parser versions (R6, :mod:`perfledger.commands.audit.evidence`): a
   mismatch with the recorded facts is an integrity finding naming the event;
5. idempotency keys (SPEC.md section 2, ``docs/storage.md``): a key carried by several events
   belongs to the first in the total order, the event every clone answers a retry with; each
   later holder is a finding (rule ``idempotency``), on a linear history or on a concurrent
   branch alike, never an integrity failure;
6. rule versions (:mod:`perfledger.commands.audit.schema_floor`): an event recorded under a
   schema version below what its ancestors show was written by no perfledger (versions only
   rise along the DAG); it is an integrity finding naming the ancestor, since its lowered
   version would have it re-checked by an older, weaker rule;
7. reviews (:mod:`perfledger.commands.audit.review_auth`): with the auditor's allowed-signers
   file, each signed review's key must be listed under its appender, and a review that cleared
   a flag or allowed a champion (R12, R17) without such a signature is a finding naming it;
   without the file those reviews are listed in the notes;
8. the final ``state_hash``.

Exit 0 when clean, 5 with the list of findings. Needs no GPU: verdicts are derived from the
recorded samples with numpy/scipy only.
"""

from __future__ import annotations

import bisect
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from perfledger.commands.audit import schema_floor
from perfledger.commands.audit.evidence import rederive_evidence
from perfledger.commands.audit.review_auth import ReviewWatch, _Review
from perfledger.commands.registry import operations
from perfledger.commands.registry.operations import OPERATIONS
from perfledger.commands.workflow.deciders import DecisionContext, derive_samples
from perfledger.commands.workflow.identity import unattached_files
from perfledger.commands.workflow.raw_table import BOUND_SCHEMA, CHECKS_SCHEMA, raw_table_mismatch
from perfledger.errors import BadRequest, IntegrityError, NewerLedger, PerfledgerError, RuleRefused
from perfledger.events.canonical import canonical_bytes
from perfledger.events.envelope import parse_ts
from perfledger.events.kinds import RecordedEvent, recorded
from perfledger.events.vocabulary import DECISION_KINDS
from perfledger.ledger.store import FORMAT_VERSION
from perfledger.projections.base import DEFAULT_PROJECTION
from perfledger.projections.draws import champion_draws_note, unfinished_run_notes
from perfledger.projections.ledger_state import state_hash

#: The rule a decision's recorded content answers to when it differs from what its request
#: decides (the most specific rule deriving that content).
KIND_RULE = {
    "TargetFrozen": "R1",
    "TargetSuperseded": "R1",
    "ReadinessRecorded": "R2",
    "MetricAuditRecorded": "R3",
    "BaselineRecorded": "R4",
    "ResolutionEstimated": "R4",
    "EvidenceRecorded": "R6",
    "UpstreamCheckRecorded": "R10",
    "ExperimentCreated": "R7",
    "SamplesRecorded": "R5",
    "VerdictRecorded": "R12",
    "LocalResultRecorded": "R13",
    "CandidateRejected": "R15",
    "ReconciliationRecorded": "R14",
    "ChampionSelected": "R13",
    "FinalAuditRecorded": "R12",
    "HostAdviceRecorded": "R16",
    "HandoffRecorded": "R18",
    "ConflictResolved": "S2",
    "ActivityExplained": "R17",
}


#: At most this many ids of evidence recorded as written are listed in an audit report.
AS_WRITTEN_IDS_MAX = 100


@dataclass(frozen=True)
class Finding:
    """One audit finding.

    Attributes:
        event_id: the event concerned ("" for a storage failure before any event).
        kind: its kind; lamport: its Lamport clock.
        rule: the rule it breaks (``R13``), ``S2`` for conflict resolution, ``integrity`` for a
            storage failure found by verify, ``fold`` for an event the projection cannot place.
        message: what is wrong, in one sentence.
    """

    event_id: str
    kind: str
    lamport: int
    rule: str
    message: str

    def to_json(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {
            "event_id": self.event_id,
            "kind": self.kind,
            "lamport": self.lamport,
            "rule": self.rule,
            "message": self.message,
        }


@dataclass
class AuditReport:
    """The outcome of :func:`audit`.

    Attributes:
        ok: no findings and storage verified.
        head: the audited head commit (hex).
        events: events replayed; decisions: decisions re-decided.
        findings: every finding, in the total order.
        notes: irregularities that break no rule (a decision recorded without its request).
        state_hash: blake3 of the final folded state (the same as ``verify``'s when clean).
        elapsed_s: wall time in seconds.
        per_kind: kind -> (events, seconds spent re-deciding and folding them), the replay's
            own cost per kind (verify's checks excluded).
        derived_here: verdict and final-audit derivations (R12) the replay made.
        evidence_rederived: evidence events whose facts were re-derived from their attached
            raw report (R6); evidence_as_written: evidence recorded from a hand-written request,
            without a report to re-derive from, and the first :data:`AS_WRITTEN_IDS_MAX` of
            their ids (evidence_as_written_ids).
    """

    ok: bool
    head: str
    events: int = 0
    decisions: int = 0
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    state_hash: str | None = None
    elapsed_s: float = 0.0
    per_kind: dict[str, list[float]] = field(default_factory=dict)
    derived_here: int = 0
    evidence_rederived: int = 0
    evidence_as_written: int = 0
    evidence_as_written_ids: list[str] = field(default_factory=list)
    #: events re-checked by this run (all of them but those the audit cache vouched for)
    rechecked: int = 0
    #: the head whose clean audit the audit cache vouched for (this run re-checked only the
    #: events after it), or None for a replay from zero
    cached_head: str | None = None

    def to_json(self) -> dict[str, object]:
        """Return a JSON-ready dict."""
        return {
            "ok": self.ok,
            "rechecked": self.rechecked,
            "cached_head": self.cached_head,
            "head": self.head,
            "events": self.events,
            "decisions": self.decisions,
            "findings": [f.to_json() for f in self.findings],
            "notes": list(self.notes),
            "state_hash": self.state_hash,
            "elapsed_s": round(self.elapsed_s, 6),
            "derived_here": self.derived_here,
            "evidence": {
                "rederived": self.evidence_rederived,
                "as_written": self.evidence_as_written,
                "as_written_ids": list(self.evidence_as_written_ids),
            },
            "per_kind": {
                kind: {"events": int(n), "seconds": round(seconds, 6)}
                for kind, (n, seconds) in sorted(self.per_kind.items())
            },
        }


# ----------------------------------------------------------------------------- requests


def _request_from_payload(kind: str, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Rebuild ``(op, body)`` from a recorded payload for a decision stored without its request:
    the payload minus its derived fields (those a decider computes)."""

    op = next(o.name for o in OPERATIONS.values() if o.kind == kind)
    p = dict(payload)
    p.pop("kind", None)
    drop: dict[str, tuple[str, ...]] = {
        "ReadinessRecorded": ("environment_id", "missing_lineage"),
        "BaselineRecorded": ("median", "per_case_median", "source"),
        "ExperimentCreated": ("figures",),
        "SamplesRecorded": ("ref_failures", "cand_failures", "unexplained_activity", "wall_check"),
        "CandidateRejected": ("target_id",),
        "HandoffRecorded": ("figures", "owed", "open_experiments"),
    }
    for name in drop.get(kind, ()):
        p.pop(name, None)
    if kind == "SamplesRecorded" and isinstance(p.get("identity"), dict):  # R11: derived
        p["identity"] = {k: v for k, v in p["identity"].items() if k != "changed_paths"}
    candidate = p.get("candidate")
    if (
        kind == "ExperimentCreated"
        and isinstance(candidate, dict)
        and not candidate.get("changed_paths")
    ):  # computed from snapshots, never typed
        p["candidate"] = {k: v for k, v in candidate.items() if k != "changed_paths"}
    source = candidate.get("content_hash_source") if isinstance(candidate, dict) else None
    if kind == "ExperimentCreated" and source is not None:
        # R11 (schema 6): the source is derived, and computed paths are never typed
        derived = {"content_hash_source", *(["changed_paths"] if source == "computed" else [])}
        p["candidate"] = {k: v for k, v in p["candidate"].items() if k not in derived}
    if kind == "TargetFrozen":
        p = dict(payload.get("target") or {})
    elif kind == "VerdictRecorded":
        p = {"samples_id": payload.get("samples_id")}
    elif kind == "FinalAuditRecorded":
        p = {"target_id": payload.get("target_id"), "samples_id": payload.get("samples_id")}
    elif kind == "LocalResultRecorded":
        p = {k: payload.get(k) for k in ("result_id", "samples_id", "metric", "scenario")}
    elif kind == "ReconciliationRecorded":
        model = dict(payload.get("corrected_model") or {})
        model.pop("bound", None)
        p = {
            "experiment_id": payload.get("experiment_id"),
            "premise": payload.get("premise"),
            "corrected_model": model,
            "explanation": payload.get("explanation"),
        }
    elif kind == "ChampionSelected":
        p = {
            "target_id": payload.get("target_id"),
            "decision": payload.get("decision"),
            "samples_id": payload.get("samples_id"),
            "expected_current": payload.get("previous"),
            "reason": payload.get("reason", ""),
        }
    return op, p


def _r5_used_failed_samples(state: Any, event: RecordedEvent, payload_of: Any) -> str | None:
    """R5: a verdict (or final audit) that counted a pair whose accuracy check failed; returns the
    message, or None. Checked against the recorded samples (``payload_of``: event id -> payload),
    whatever the request said."""
    payload = event.payload
    view = state.samples.get(getattr(payload, "samples_id", ""))
    primary = getattr(payload, "primary", None)
    if view is None or primary is None:
        return None
    samples = payload_of(view.event_id)
    failed = sum(1 for p in samples.pairs if not (p.ref.correct and p.cand.correct))
    valid = len(samples.pairs) - failed
    if failed and (primary.n_pairs > valid or primary.n_excluded < failed):
        return (
            f"the verdict of samples {samples.samples_id!r} used {primary.n_pairs} pairs and "
            f"excluded {primary.n_excluded}, but {failed} pair(s) failed their accuracy check "
            f"(only {valid} are valid): a failed sample has no performance meaning"
        )
    return None


# ----------------------------------------------------------------------------- the replay


class _Replay:
    """The per-event work of the audit, fed by verify's callback in the total order."""

    def __init__(self, store: Any, report: AuditReport) -> None:

        self.store = store
        self.report = report
        self.projection = DEFAULT_PROJECTION
        self.state = DEFAULT_PROJECTION.initial()
        self.decision_kinds = DECISION_KINDS
        #: event id -> number of its ancestors (the events before it that it saw)
        self.ancestors: dict[str, int] = {}
        self.parents: dict[str, tuple[str, ...]] = {}
        self.seen = 0

        self.operations = operations
        self.context = DecisionContext
        self.deciders: dict[str, Any] = {}
        #: event id -> verified payload of every SamplesRecorded (the state keeps samples
        #: without their pairs; a verdict's re-derivation reads them through ``payload_of``)
        self.samples_payloads: dict[str, Any] = {}
        self.derived_here = 0
        #: idempotency key -> the first event that carried it
        self.keys: dict[str, str] = {}
        #: event id -> the rule versions it and its ancestors show (schema_floor.Floor)
        self.floors: dict[str, Any] = {}
        #: event id -> its commit (binary sha) as verify walked it from the ref, and its place
        #: in the total order: earlier events are read through these, never through the
        #: store's derived index (a forged index must not choose what a decision is checked on)
        self.commit_of: dict[str, bytes] = {}
        self.position: dict[str, int] = {}
        #: the reviews and the decisions that relied on them (R12, R17)
        self.reviews = ReviewWatch()
        #: what the audit cache held, when this replay started from it (:func:`_restore`)
        self.restored: tuple[Any, list[Any]] | None = None

    def __call__(self, event: RecordedEvent) -> None:
        started = time.perf_counter()
        self._replay(event)
        cost = self.report.per_kind.setdefault(event.envelope.kind, [0, 0.0])
        cost[0] += 1
        cost[1] += time.perf_counter() - started

    def _replay(self, event: RecordedEvent) -> None:
        envelope = event.envelope
        count = self._ancestor_count(envelope.id, tuple(envelope.parents))
        self._check_schema_floor(event)
        key = envelope.idempotency_key
        if key is not None:
            # events come in the total order, so the first holder of a key is the event every
            # store answers a retry with (SPEC.md section 2: idempotency is a function of the DAG)
            first = self.keys.setdefault(key, envelope.id)
            if first != envelope.id and count == self.seen:
                # every event folded so far is an ancestor (a linear history up to it), so its
                # writer saw the key in the ledger: the store returns the existing event instead
                self._find(event, "idempotency", f"its idempotency key {key!r} was already "
                           f"in the ledger (event {first}); an append with it returns that "
                           "event instead of recording another")  # fmt: skip
            elif first != envelope.id:
                # two writers each used the key legitimately on concurrent branches; since the
                # merge, a retry returns the first in the total order on every clone, so this
                # event's writer would now be answered with another event
                self._find(event, "idempotency", f"its idempotency key {key!r} was also used "
                           f"on a concurrent branch by event {first}, first in the total order: "
                           "since the merge a retry with the key returns that event, not this "
                           "one")  # fmt: skip
        if envelope.kind in self.decision_kinds:
            self.report.decisions += 1
            before = self.state if count == self.seen else self._state_before(event)
            if before.event_count != count:
                # the fold of its verified ancestors lost or gained events (git changed under us)
                self._find(event, "integrity", f"the state before it folds {before.event_count} "
                           f"events; its verified ancestry has {count}")  # fmt: skip
                return
            self._redecide(before, event)
            self.reviews.observe(before, event, self._actor_of)
        self.position[envelope.id] = self.seen
        if envelope.kind == "SamplesRecorded":
            self.samples_payloads[envelope.id] = event.payload
        elif envelope.kind == "EvidenceRecorded":
            self._rederive_evidence(event)
        anomalies = len(self.state.anomalies)
        self.state = self.projection.evolve(self.state, event)
        for anomaly in self.state.anomalies[anomalies:]:
            self._find(event, "fold", f"the projection cannot place it: {anomaly}")
        self.seen += 1
        self.report.events += 1
        self.report.rechecked += 1

    def _check_schema_floor(self, event: RecordedEvent) -> None:
        """Rule versions only rise along the DAG (:mod:`perfledger.commands.audit.schema_floor`):
        an event recorded under a version below what its ancestors show had its version lowered,
        so that an older, weaker rule would re-check it."""

        envelope = event.envelope
        floor = schema_floor.merge(self.floors[p] for p in envelope.parents)
        schema = envelope.schema or 1
        shown = schema_floor.check(floor, envelope.kind, schema)
        if shown is not None:
            self._find(event, "integrity", f"it is recorded under {envelope.kind} schema "
                       f"{schema}, but event {shown.event_id} before it ({shown.kind} schema "
                       f"{shown.schema}) was written by a perfledger that records {envelope.kind} "
                       f"under schema {shown.version} or later, and no perfledger writes an "
                       "older rule version after a newer one: its version was lowered, so the "
                       "older, weaker rule would re-check it; treat the history as rewritten "
                       "and compare its head with a copy you trust")  # fmt: skip
        self.floors[envelope.id] = schema_floor.after(floor, envelope.id, envelope.kind, schema)

    def _rederive_evidence(self, event: RecordedEvent) -> None:
        """R6: facts parsed from a report must be what the attached report yields, re-parsed
        (:mod:`perfledger.commands.audit.evidence`); a mismatch is an integrity finding."""

        envelope = event.envelope
        check = rederive_evidence(
            event.payload,
            dict(envelope.artifacts),
            lambda name: self.store.read_artifact(envelope.id, name),
        )
        if check.finding is not None:
            self._find(event, check.rule, check.finding)
        elif check.rederived:
            self.report.evidence_rederived += 1
        else:  # an auditor sees which evidence rests on a report and which on a request
            self.report.evidence_as_written += 1
            if len(self.report.evidence_as_written_ids) < AS_WRITTEN_IDS_MAX:
                self.report.evidence_as_written_ids.append(event.payload.evidence_id)

    def _ancestor_count(self, event_id: str, parents: tuple[str, ...]) -> int:
        """Number of events ``event_id`` descends from; equal to the events folded so far exactly
        when it saw all of them (a linear history), else it was appended on a concurrent branch."""
        self.parents[event_id] = parents
        if not parents:
            count = 0
        elif len(parents) == 1:
            count = self.ancestors[parents[0]] + 1
        else:  # after a merge: count the union of the ancestries
            seen: set[str] = set()
            stack = list(parents)
            while stack:
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    stack.extend(self.parents[current])
            count = len(seen)
        self.ancestors[event_id] = count
        return count

    def _state_before(self, event: RecordedEvent) -> Any:
        """The state its author saw: the fold, in the total order, of its ancestors in the
        verified DAG, each read from git at the commit verify walked (never through the store's
        derived index or the state cache; the caller checks the fold's event count)."""
        ancestors: set[str] = set()
        stack = list(self.parents[event.envelope.id])
        while stack:
            current = stack.pop()
            if current not in ancestors:
                ancestors.add(current)
                stack.extend(self.parents[current])

        ordered = sorted(ancestors, key=self.position.__getitem__)
        state = self.projection.initial()
        commits = (self.commit_of[event_id].hex().encode() for event_id in ordered)
        for event_id, envelope in zip(ordered, self.store.read_envelopes(commits), strict=True):
            if envelope.id != event_id:  # verify read this event there: git changed under us
                raise IntegrityError(f"commit {self.commit_of[event_id].hex()} no longer "
                                     f"holds event {event_id}")  # fmt: skip
            state = self.projection.evolve(state, recorded(envelope))
        return state

    def _read(self, event_id: str) -> RecordedEvent:
        """An earlier event, read again from its verified commit (its id re-checked)."""

        envelope = self.store.read_envelope(self.commit_of[event_id].hex().encode())
        if envelope.id != event_id:  # verify checked this commit's event: git changed under us
            raise IntegrityError(f"commit {self.commit_of[event_id].hex()} no longer holds "
                                 f"event {event_id}")  # fmt: skip
        return recorded(envelope)

    def _payload_of(self, event_id: str) -> Any:
        """The verified payload of an earlier event (samples are kept; others read from git
        at their verified commit). Raises: BadRequest for an event not before this one."""
        payload = self.samples_payloads.get(event_id)
        if payload is not None:
            return payload
        if event_id not in self.position:
            raise BadRequest(
                f"no event {event_id[:80]!r} before this one in this ledger",
                hint="a decision reads only events before it: `perfledger log` lists them",
            )
        return self._read(event_id).payload

    def _actor_of(self, event_id: str) -> str:
        """``DecisionContext.actor_of``: who appended an earlier event. Raises: BadRequest for
        an event not before this one."""
        if event_id not in self.position:
            raise BadRequest(
                f"no event {event_id[:80]!r} before this one in this ledger",
                hint="a decision reads only events before it: `perfledger log` lists them",
            )
        return self._read(event_id).envelope.actor

    def _derive(self, samples_event: str, params: Any, samples: Any) -> Any:
        """``DecisionContext.derive``: :func:`perfledger.commands.workflow.deciders.derive_samples`
        (``samples_event`` names the samples; the replay derives every verdict itself)."""

        self.derived_here += 1
        return derive_samples(params, samples)

    def _find(self, event: RecordedEvent, rule: str, message: str) -> None:
        envelope = event.envelope
        self.report.findings.append(
            Finding(envelope.id, envelope.kind, envelope.lamport, rule, message)
        )

    def _artifact_reader(self, envelope: Any) -> Callable[[str], bytes | None]:
        """What a re-decision reads of the artifacts attached to ``envelope``'s event (R4: the
        A/A raw table), by name: None for a name not attached or unreadable."""

        def read(name: str) -> bytes | None:
            if name not in envelope.artifacts:
                return None
            try:
                return self.store.read_artifact(envelope.id, name)
            except PerfledgerError:
                return None

        return read

    def _redecide(self, state: Any, event: RecordedEvent) -> None:
        operations = self.operations
        envelope = event.envelope
        kind = envelope.kind
        missing_table = _r5_missing_raw_table(event)
        if missing_table is not None:
            self._find(event, "R5", missing_table)
        else:
            unlike = _r5_unlike_raw_table(self.store, event)
            if unlike is not None:
                self._find(event, "R5", unlike)
        rule = KIND_RULE.get(kind, "request")
        # R11: snapshots travel whole
        if kind in ("ReadinessRecorded", "ExperimentCreated", "SamplesRecorded"):
            missing = unattached_files(event.payload, envelope.artifacts)
            if missing:
                self._find(event, "R11", f"snapshot files not attached to the event: {missing}")
        request = envelope.request
        if isinstance(request, dict) and set(request) == {"op", "body"}:
            op, body = request["op"], request["body"]
            operation = operations.OPERATIONS.get(op) if isinstance(op, str) else None
            if operation is None or operation.kind != kind:
                self._find(event, rule, f"its request names operation {op!r}, which does not "
                           f"record {kind}")  # fmt: skip
                return
        else:
            as_json = msgspec.json.decode(msgspec.json.encode(event.payload))  # lists, not tuples
            op, body = _request_from_payload(kind, as_json)
            self.report.notes.append(
                f"{envelope.id[:16]} {kind}: recorded without its request; re-decided from a "
                "request rebuilt from its payload"
            )
        try:
            model = operations.validate(op, body)
            ctx = self.context(
                op=op, actor=envelope.actor, ts=parse_ts(envelope.ts),
                idempotency_key=envelope.idempotency_key, request=request,
                payload_of=self._payload_of, derive=self._derive, schema=envelope.schema,
                actor_of=self._actor_of, artifact=self._artifact_reader(envelope),
            )  # fmt: skip
            decide = self.deciders.get(op)
            if decide is None:
                decide = self.deciders[op] = operations.decider(op)
            drafts = decide(state, model, ctx)
        except RuleRefused as exc:
            self._find(event, exc.rule or rule, f"the rules refuse it against the state before "
                       f"it: {exc.message}")  # fmt: skip
            return
        except BadRequest as exc:
            self._find(event, rule, f"its request is invalid against the state before it: "
                       f"{exc.message}")  # fmt: skip
            return
        except PerfledgerError as exc:
            self._find(event, rule, f"re-deciding it failed: {exc.message}")
            return
        except (KeyError, AssertionError, TypeError, ValueError) as exc:
            # a decider meeting a state that its own rules would never have produced
            self._find(event, rule, f"re-deciding it failed on an inconsistent state: "
                       f"{type(exc).__name__}: {exc}")  # fmt: skip
            return
        if len(drafts) != 1 or drafts[0].kind != kind:
            self._find(event, rule, f"its request decides {[d.kind for d in drafts]}, not {kind}")
            return
        if drafts[0].payload == event.payload:  # typed Structs: field-by-field equality
            return
        recorded_payload = msgspec.to_builtins(event.payload)
        if canonical_bytes(msgspec.to_builtins(drafts[0].payload)) == canonical_bytes(
            recorded_payload
        ):
            return
        r5 = _r5_used_failed_samples(state, event, self._payload_of) if kind in (
            "VerdictRecorded", "FinalAuditRecorded") else None  # fmt: skip
        if r5 is not None:
            self._find(event, "R5", r5)
            return
        decided = msgspec.to_builtins(drafts[0].payload)
        if kind == "SamplesRecorded" and all(  # only its code identity differs (R11)
            recorded_payload.get(k) == decided.get(k) for k in set(recorded_payload) | set(decided)
            if k != "identity"
        ):  # fmt: skip
            rule = "R11"
        self._find(event, rule, _difference(kind, recorded_payload, drafts[0].payload))


def _r5_missing_raw_table(event: RecordedEvent) -> str | None:
    """R5: samples whose provenance says perfledger measured them must carry the raw table it
    names as an artifact of their event; returns the finding's message, or None."""
    provenance = getattr(event.payload, "provenance", None)
    if event.envelope.kind != "SamplesRecorded" or provenance is None:
        return None
    if provenance.source != "perfledger" or provenance.raw_table in event.envelope.artifacts:
        return None
    return (
        f"its samples claim to be measured by perfledger, but the raw table "
        f"{provenance.raw_table!r} their provenance names is not attached"
    )


def _r5_unlike_raw_table(store: Any, event: RecordedEvent) -> str | None:
    """R5: samples measured by perfledger must be what their attached raw table holds, re-derived
    (:func:`perfledger.commands.workflow.raw_table.raw_table_mismatch`); samples of schema
    :data:`~perfledger.commands.workflow.raw_table.BOUND_SCHEMA` or later must also be bound to it.
    Returns the finding's message, or None."""

    provenance = getattr(event.payload, "provenance", None)
    if event.envelope.kind != "SamplesRecorded" or provenance is None:
        return None
    if provenance.source != "perfledger":
        return None
    try:
        raw = store.read_artifact(event.envelope.id, provenance.raw_table)
    except PerfledgerError as exc:
        return f"its raw table {provenance.raw_table!r} cannot be read: {exc.message}"
    bound = (event.envelope.schema or 1) >= BOUND_SCHEMA

    def read(name: str) -> bytes | None:  # kept outputs, compared again (R5)
        if name not in event.envelope.artifacts:
            return None
        try:
            return store.read_artifact(event.envelope.id, name)
        except PerfledgerError:
            return None

    mismatch = raw_table_mismatch(
        msgspec.to_builtins(event.payload), raw, bound=bound, read_artifact=read,
        checks=(event.envelope.schema or 1) >= CHECKS_SCHEMA,
    )  # fmt: skip
    if mismatch is None:
        return None
    return f"its samples claim to be measured by perfledger, but {mismatch}"


def _difference(kind: str, recorded: dict[str, Any], decided: Any) -> str:
    """Say how a recorded payload differs from the decided one (the first differing fields)."""
    decided_b = msgspec.to_builtins(decided)
    fields = sorted(
        k for k in set(recorded) | set(decided_b) if recorded.get(k) != decided_b.get(k)
    )
    detail = ""
    if kind in ("VerdictRecorded", "FinalAuditRecorded") and "status" in fields:
        detail = (
            f": recorded status {recorded.get('status')!r}, derived from its samples "
            f"{decided_b.get('status')!r}"
        )
    elif fields and all(  # the first differing field, when short: both values
        len(repr(v)) <= 80 for v in (recorded.get(fields[0]), decided_b.get(fields[0]))
    ):
        detail = (
            f": recorded {fields[0]} {recorded.get(fields[0])!r}, decided "
            f"{decided_b.get(fields[0])!r}"
        )
    elif kind == "SamplesRecorded" and "identity" in fields:  # R11: derived, never typed
        paths = [(p.get("identity") or {}).get("changed_paths") for p in (recorded, decided_b)]
        if paths[0] != paths[1]:
            detail = (
                f": recorded changed paths {paths[0]}, derived from its two code snapshots "
                f"{paths[1]}"
            )
    return (
        f"its recorded content differs from what its request decides against the state before "
        f"it (fields {fields[:6]}){detail}"
    )


# ----------------------------------------------------------------------------- the audit cache
# A clean audit leaves its replay's state in the clone's audit cache (perfledger.ledger.
# audit_cache; SPEC.md section 2, "Audit cache"), keyed by the audited head and by perfledger's
# own code; a later audit of a head descending from it restores that state and re-checks only
# the events after it, exactly as a replay from zero checks them. What it proves and what it
# does not: docs/storage.md, "The audit cache".


class _Shown(msgspec.Struct, array_like=True):
    version: int
    event_id: str
    kind: str
    schema: int


class _CachedReview(msgspec.Struct, array_like=True):
    review_id: str
    event_id: str
    subject_actor: str | None


class _ReplayState(msgspec.Struct):
    """What :class:`_Replay` and :class:`AuditReport` hold after a clean replay (events in the
    total order; parents as places in it; floors shared, by place in ``floors``)."""

    events: list[str]
    commits: list[str]
    parents: list[list[int]]
    ancestors: list[int]
    floor_of: list[int]
    floors: list[dict[str, _Shown]]
    keys: dict[str, str]
    reviews: list[_CachedReview]
    relied: dict[str, list[tuple[str, str]]]
    state: bytes
    decisions: int
    notes: list[str]
    evidence_rederived: int
    evidence_as_written: int
    evidence_as_written_ids: list[str]


class _Restored:
    """A map of the replay (event id -> ...) restored from the audit cache: ``build`` makes the
    cached part on its first lookup (a linear append reads a parent's entry or none, and
    decoding every entry cost more than the new events' checks); entries set since live in
    ``new``."""

    def __init__(self, build: Callable[[], dict[str, Any]]) -> None:
        self.build: Callable[[], dict[str, Any]] | None = build
        self.cached: dict[str, Any] = {}
        self.new: dict[str, Any] = {}

    def _base(self) -> dict[str, Any]:
        if self.build is not None:
            self.cached, self.build = self.build(), None
        return self.cached

    def __getitem__(self, key: str) -> Any:
        return self.new[key] if key in self.new else self._base()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.new[key] if key in self.new else self._base().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.new or key in self._base()

    def __setitem__(self, key: str, value: Any) -> None:
        self.new[key] = value

    def update(self, other: dict[str, Any]) -> None:
        """Set every entry of ``other`` not cached (a walked graph's, which names the cached
        commits it touched too)."""
        base = self._base()
        self.new.update((k, v) for k, v in other.items() if k not in base)


def _capture(replay: _Replay, report: AuditReport, notes: list[str]) -> bytes:
    """The state of a clean replay, encoded (msgpack); ``notes``: those its events made. A
    replay restored from the cache (:func:`_restore`) adds its new events to what it read."""
    restored = replay.restored
    if restored is None:
        base = _ReplayState([], [], [], [], [], [], {}, [], {}, b"", 0, [], 0, 0, [])
        new = sorted(replay.position, key=replay.position.__getitem__)
        floor_index: dict[int, int] = {}
    else:
        base, floor_objects = restored
        new = sorted(replay.position.new, key=replay.position.new.__getitem__)
        floor_index = {id(f): i for i, f in enumerate(floor_objects)}
    place = replay.position
    events, floors, floor_of = list(base.events), list(base.floors), list(base.floor_of)
    for event_id in new:
        floor = replay.floors[event_id]
        index = floor_index.get(id(floor))
        if index is None:
            index = floor_index[id(floor)] = len(floors)
            floors.append({k: _Shown(v.version, v.event_id, v.kind, v.schema) for k, v in floor.items()})  # fmt: skip
        floor_of.append(index)
        events.append(event_id)
    watch = replay.reviews
    return msgspec.msgpack.encode(
        _ReplayState(
            events=events,
            commits=[*base.commits, *(replay.commit_of[e].hex() for e in new)],
            parents=[*base.parents, *([place[p] for p in replay.parents[e]] for e in new)],
            ancestors=[*base.ancestors, *(replay.ancestors[e] for e in new)],
            floor_of=floor_of,
            floors=floors,
            keys=dict(replay.keys),
            reviews=[
                _CachedReview(review_id, seen.event_id, seen.subject_actor)
                for review_id, seen in watch.reviews.items()
            ],
            relied={k: list(v) for k, v in watch.relied.items()},
            state=msgspec.msgpack.encode(replay.state),
            decisions=report.decisions,
            notes=notes,
            evidence_rederived=report.evidence_rederived,
            evidence_as_written=report.evidence_as_written,
            evidence_as_written_ids=list(report.evidence_as_written_ids),
        )
    )


def _restore(replay: _Replay, report: AuditReport, data: bytes) -> None:
    """Put a clean replay's state (:func:`_capture`) back into ``replay`` and ``report``; its
    maps are :class:`_Restored`. Raises: msgspec.DecodeError / ValidationError for bytes that
    do not decode, ValueError / IndexError / KeyError for a state that does not fit together,
    PerfledgerError for a review event that cannot be read again."""
    cached = msgspec.msgpack.decode(data, type=_ReplayState)
    events = cached.events
    n = len(events)
    if not (n == len(cached.commits) == len(cached.parents) == len(cached.ancestors)
            == len(cached.floor_of)):  # fmt: skip
        raise ValueError("the cached replay's lists differ in length")
    floors = [
        {k: schema_floor.Shown(v.version, v.event_id, v.kind, v.schema) for k, v in f.items()}
        for f in cached.floors
    ]
    replay.restored = (cached, floors)
    replay.position = _Restored(lambda: {event_id: i for i, event_id in enumerate(events)})
    replay.commit_of = _RestoredCommits(lambda: dict(zip(events, cached.commits, strict=True)))
    replay.parents = _Restored(
        lambda: {
            e: tuple(events[i] for i in ps) for e, ps in zip(events, cached.parents, strict=True)
        }
    )
    replay.ancestors = _Restored(lambda: dict(zip(events, cached.ancestors, strict=True)))
    replay.floors = _Restored(
        lambda: {e: floors[i] for e, i in zip(events, cached.floor_of, strict=True)}
    )
    replay.keys = dict(cached.keys)
    replay.state = msgspec.msgpack.decode(cached.state, type=replay.projection.state_type)
    replay.seen = n
    for review in cached.reviews:  # the review itself, read again from its verified commit
        envelope = replay._read(review.event_id).envelope
        replay.reviews.reviews[review.review_id] = _Review(
            envelope.id, envelope.lamport, envelope.actor, recorded(envelope).payload,
            review.subject_actor,
        )  # fmt: skip
    replay.reviews.relied = {k: [tuple(x) for x in v] for k, v in cached.relied.items()}
    report.events = n
    report.decisions = cached.decisions
    report.notes = list(cached.notes)  # those of its events; the reviews' are made again
    report.evidence_rederived = cached.evidence_rederived
    report.evidence_as_written = cached.evidence_as_written
    report.evidence_as_written_ids = list(cached.evidence_as_written_ids)


class _SortedStrings:
    """``in`` over a sorted list of strings (binary search)."""

    def __init__(self, items: list[str]) -> None:
        self.items = items

    def __contains__(self, item: object) -> bool:
        i = bisect.bisect_left(self.items, item)  # type: ignore[call-overload]
        return i < len(self.items) and self.items[i] == item


class _RestoredCommits(_Restored):
    """``commit_of`` restored: event id -> binary sha, the cached ones kept in hex until read
    (read by subscript only)."""

    def __getitem__(self, key: str) -> Any:
        return self.new[key] if key in self.new else bytes.fromhex(self._base()[key])


def audit(
    ledger: Any, allowed_signers: str | None = None, *, use_cache: bool = True
) -> AuditReport:
    """Replay ``ledger`` (a :class:`perfledger.api.Ledger`); see the module docstring.
    ``allowed_signers``: the auditor's allowed-signers file (git's format) the reviews'
    signatures are checked against (step 7); None: reviews that decided something are listed
    in the notes. ``use_cache``: start from the clone's audit cache when it holds a clean
    audit of a head the current head descends from, under this perfledger's code (re-checking
    only the events after it); False (``audit --full``): replay from zero, the cache neither
    read nor written. A clean audit writes the cache; an unusable one is ignored and said so
    in the notes.

    Returns: an :class:`AuditReport`; ``ok`` is False when verify failed or any finding exists.
    Never reads or writes the derived state cache.
    Raises: BadRequest when ``allowed_signers`` names no file.
    """
    if allowed_signers is not None and not os.path.isfile(allowed_signers):
        raise BadRequest(
            f"no allowed-signers file at {allowed_signers}",
            hint="pass --allowed-signers FILE naming an existing allowed-signers file "
            "(git's format: `principal keytype key`, one a line)",
        )
    started = time.perf_counter()
    # The replay allocates millions of objects and almost no reference cycles (316 cyclic
    # objects left over after the 100,000-event audit ledger): the cyclic collector's full
    # passes over the growing heap cost ~2 s of CPU there (8 full collections) and free
    # nothing, so it is paused for the replay (reference counting still frees everything else).
    collecting = gc.isenabled()
    gc.disable()
    try:
        report = _audit_from_cache(ledger, allowed_signers) if use_cache else None
        if report is None or not report.ok:  # a finding after the cached head: judge it all
            why = report.notes[-1:] if report is not None and report.cached_head is None else []
            report = AuditReport(ok=False, head="", notes=list(why))
            replay = _Replay(ledger.store, report)
            _replay_all(ledger, replay, report, allowed_signers, save=use_cache)
    finally:
        if collecting:
            gc.enable()
    report.elapsed_s = time.perf_counter() - started
    return report


def _audit_from_cache(ledger: Any, allowed_signers: str | None) -> AuditReport | None:
    """An audit that starts from the clone's audit cache: the report (``cached_head`` set), or
    None when there is no cache, or a report with ``cached_head`` None whose last note says
    why the cache was not used (damaged, other code, a head not descending from it)."""
    from perfledger.ledger.audit_cache import load_audit_cache  # noqa: PLC0415 (with verify, below)
    from perfledger.ledger.verify import Checked, NotDescendant  # noqa: PLC0415 (dulwich via perfledger.ledger.verify)

    store = ledger.store
    cached, why = load_audit_cache(store.controldir)
    report = AuditReport(ok=False, head="")
    if cached is None:
        if why is None:
            return None
        report.notes.append(f"{why}: it was ignored and every event re-checked")
        return report
    replay = _Replay(store, report)
    try:
        _restore(replay, report, cached.replay)
        # the cache lists its commits sorted: a walk asks about a few, a set of all would
        # cost more than the new events' checks
        since = Checked(bytes.fromhex(cached.head), _SortedStrings(cached.commits), replay.position)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, KeyError, IndexError,
            PerfledgerError) as exc:  # fmt: skip
        report.notes.append(
            f"the audit cache does not hold a usable replay state ({type(exc).__name__}): it "
            "was ignored and every event re-checked"
        )
        return report
    report.cached_head = cached.head
    try:
        _replay_all(ledger, replay, report, allowed_signers, since=since, cached=cached.commits)
    except NotDescendant:
        report.cached_head = None
        report.notes.append(
            f"the audit cache holds a clean audit of commit {cached.head}, which the head "
            "does not descend from (the history was rewritten or reset below it): it was "
            "ignored and every event re-checked"
        )
    return report


def _replay_all(
    ledger: Any,
    replay: _Replay,
    report: AuditReport,
    allowed_signers: str | None = None,
    *,
    since: Any = None,
    cached: list[str] | None = None,
    save: bool = True,
) -> None:
    """Verify ``ledger`` with ``replay`` on every event (``since``: those after a checked head,
    :class:`perfledger.ledger.verify.Checked`, whose commits are ``cached``); fill ``report``'s
    head, findings, notes, state hash and ``ok`` (the reviews checked against
    ``allowed_signers``); with ``save``, a clean replay's state goes to the audit cache."""
    from perfledger.ledger.verify import verify_store  # noqa: PLC0415 (dulwich via perfledger.ledger.verify)

    walked: list[bytes] = []
    event_notes: list[str] = []
    first_note = 0 if since is not None else len(report.notes)  # the notes of the events

    def keep_commits(graph: Any) -> None:
        replay.commit_of.update(graph.commit_of)
        walked.extend(graph.walked)

    verified = verify_store(
        ledger.store, on_event=replay, on_graph=keep_commits, format_version=FORMAT_VERSION,
        since=since,
    )  # fmt: skip
    report.derived_here = replay.derived_here
    report.head = verified.head
    if not verified.ok:
        error = verified.error
        assert error is not None
        # a ledger written by a newer perfledger is not an integrity failure: its own rule,
        # which the CLI answers with exit 7 (SPEC.md section 6)
        rule = "newer_ledger" if isinstance(error, NewerLedger) else "integrity"
        report.findings.append(Finding(error.event_id or "", "", 0, rule, error.message))
    else:
        report.state_hash = state_hash(replay.state)
        event_notes = report.notes[first_note:]
        found, notes = replay.reviews.check(allowed_signers)
        for review, rule, message in found:
            report.findings.append(
                Finding(review.event_id, "ReviewRecorded", review.lamport, rule, message)
            )
        report.notes += notes
        # R14: the draws each champion came out of (a count to weigh a pass by, no finding)
        report.notes += [
            note for tid in replay.state.targets if (note := champion_draws_note(replay.state, tid))
        ]
        report.notes += unfinished_run_notes(replay.state)  # R14: runs that never finished
    report.ok = verified.ok and not report.findings
    if save and report.ok and (since is None or walked):  # nothing new: the cache stands
        commits = sorted([*(cached or ()), *(sha.hex() for sha in walked)])
        _save_cache(ledger.store, replay, report, commits, event_notes)


def _save_cache(
    store: Any, replay: _Replay, report: AuditReport, commits: list[str], notes: list[str]
) -> None:
    """Write the audit cache of a clean replay at ``report.head`` (``commits``: every commit
    it reaches, hex; ``notes``: those its events made, not the reviews', which every audit
    makes again)."""
    from perfledger.ledger.audit_cache import (  # noqa: PLC0415 (with verify)
        AUDIT_CACHE_FORMAT,
        AuditCache,
        rules_fingerprint,
        save_audit_cache,
    )

    try:
        rules = rules_fingerprint()
    except OSError:
        return
    cache = AuditCache(
        AUDIT_CACHE_FORMAT, rules, report.head, report.state_hash or "", commits,
        _capture(replay, report, notes),
    )  # fmt: skip
    save_audit_cache(store.controldir, cache)
