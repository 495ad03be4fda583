"""The read models' use cases (SPEC.md section 6): the Targets and experiments as folded, a
recorded verdict explained, claims vs outcomes, the current champions, one Target's champion
with its lineage and code, the lineage alone, the rejected directions, and the recorded
evidence (listed, or one piece shown).

Each reads an open ledger (its folded state, or its events), refuses an unknown Target or id,
and returns a msgspec result whose :func:`msgspec.to_builtins` (or ``to_json()``) is the
``--json`` answer of ``perfledger target show``, ``experiment show|list``, ``verdict explain``,
``claims``, ``champion show [TARGET]``, ``champion lineage TARGET``, ``rejected``,
``evidence list`` and ``evidence show ID``; the MCP server's ``claims`` and ``champion`` tools
return the same. Only the pure projections are imported here (a few milliseconds: this module is on
``perfledger experiment list``'s start-up path).
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.errors import BadRequest
from perfledger.projections.champions import (
    CurrentChampion,
    LineageStep,
    current_champions,
    lineage,
)
from perfledger.projections.claims import ClaimRow, claims
from perfledger.projections.draws import FormalDraws, formal_draws
from perfledger.projections.rejections import RejectedRow, rejected
from perfledger.projections.reviews import unresolved_dissent
from perfledger.projections.verdict_explain import explain_verdict

#: The hint of a refused unknown Target.
TARGETS_HINT = "`perfledger status` lists the Targets"


class TargetQuery(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A read of one Target (``target_id``), or of every Target (None)."""

    target_id: str | None = None


class Claims(msgspec.Struct, kw_only=True):
    """ROI claims vs outcomes, one row per experiment (R7, R14): coverage, local speedup,
    stated and recomputed Amdahl bound, minimum effect, the measured effect with its CI,
    prediction error, reconciliation."""

    claims: list[ClaimRow]


class Champions(msgspec.Struct, kw_only=True):
    """The current champion of every Target (R13)."""

    champions: list[CurrentChampion]


class ChampionShown(msgspec.Struct, kw_only=True):
    """One Target's current champion (R13), its lineage (original first) and, for a Target in
    the state, its code snapshot with the ``perfledger checkout`` command that writes it back
    (R11; None where none was recorded). :meth:`to_json` is ``champion show TARGET --json``."""

    champion: CurrentChampion
    lineage: list[LineageStep]
    snapshot: dict[str, Any] | msgspec.UnsetType | None = msgspec.UNSET
    #: the experiments that reached a formal target stage on the Target and how many of them
    #: did not pass (R14: the draws a champion came out of); unset for an unknown Target
    formal_draws: FormalDraws | msgspec.UnsetType = msgspec.UNSET

    def to_json(self) -> dict[str, Any]:
        """The champion's fields, ``lineage``, (where read) ``snapshot`` and ``formal_draws``
        (``{"experiments", "not_passing", "text"}``), in one object."""
        out = {**msgspec.to_builtins(self.champion), "lineage": msgspec.to_builtins(self.lineage)}
        if self.snapshot is not msgspec.UNSET:
            out["snapshot"] = self.snapshot
        if not isinstance(self.formal_draws, msgspec.UnsetType):
            out["formal_draws"] = {
                "experiments": self.formal_draws.experiments,
                "not_passing": self.formal_draws.not_passing,
                "text": self.formal_draws.text(),
            }
        return out


class Lineage(msgspec.Struct, kw_only=True):
    """The chain of champions of ``target_id`` with the evidence behind each (R13)."""

    target_id: str
    lineage: list[LineageStep]


class Rejected(msgspec.Struct, kw_only=True):
    """Rejected directions, the scope each closed (R15) and why."""

    rejected: list[RejectedRow]


class TargetsShown(msgspec.Struct, kw_only=True):
    """Targets as folded (R1-R4, R13): ``targets`` (id -> ``TargetView``), every experiment
    (id -> ``ExperimentView``, what people's rendering lists per Target) and ``one``: a single
    Target was asked for. :meth:`to_json` is ``target show [TARGET] --json``."""

    targets: dict[str, Any]
    experiments: dict[str, Any]
    one: bool = False

    def to_json(self) -> dict[str, Any]:
        """``{"target": ...}`` for one Target, else ``{"targets": {id: ...}}`` (builtins)."""
        if self.one:
            return {"target": msgspec.to_builtins(next(iter(self.targets.values())))}
        return {"targets": msgspec.to_builtins(self.targets)}


class ExperimentShown(msgspec.Struct, kw_only=True):
    """One experiment (``ExperimentView``: claim, figures, stage, status, samples) and its
    recorded verdicts by samples id (R7-R15)."""

    experiment: Any
    verdicts: dict[str, Any]


class ExperimentRow(msgspec.Struct, kw_only=True):
    """One experiment listed: its id, Target, stage, status and Amdahl ``bound`` (a speedup;
    None for a tail primary)."""

    experiment_id: str
    target_id: str
    stage: str
    status: str
    bound: float | None


class ExperimentList(msgspec.Struct, kw_only=True):
    """Experiments in the ledger's order."""

    experiments: list[ExperimentRow]


class VerdictExplained(msgspec.Struct, kw_only=True):
    """A recorded verdict or final audit explained (R5, R12): the condition that decided it,
    estimate, CI and threshold, every case's per-call figures, the samples' provenance.
    ``recorded`` is the payload as builtins (for people's rendering); :meth:`to_json` is
    ``verdict explain SAMPLES --json``."""

    samples_id: str
    explanation: dict[str, Any]
    recorded: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """``{"samples_id", "explanation"}``."""
        return {"samples_id": self.samples_id, "explanation": self.explanation}


def targets_of(ledger: Any, query: TargetQuery) -> TargetsShown:
    """The Target ``query.target_id`` (None: every current Target) as folded.
    Raises: BadRequest (exit 2) for an unknown Target."""
    state = ledger.state()
    if query.target_id is None:
        shown = {k: v for k, v in state.targets.items() if v.status == "current"}
    elif query.target_id not in state.targets:
        raise BadRequest(
            f"no Target {query.target_id!r}", hint="`perfledger target show` lists them"
        )
    else:
        shown = {query.target_id: state.targets[query.target_id]}
    return TargetsShown(
        targets=shown, experiments=dict(state.experiments), one=query.target_id is not None
    )


def experiment_of(ledger: Any, experiment_id: str) -> ExperimentShown:
    """The experiment ``experiment_id`` and its recorded verdicts.
    Raises: BadRequest (exit 2) for an unknown experiment."""
    state = ledger.state()
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        raise BadRequest(
            f"no experiment {experiment_id!r}", hint="`perfledger experiment list` lists them"
        )
    verdicts = {s: state.verdicts[s] for s in experiment.verdicts if s in state.verdicts}
    return ExperimentShown(experiment=experiment, verdicts=verdicts)


def experiments_of(ledger: Any, query: TargetQuery) -> ExperimentList:
    """The experiments of ``query.target_id`` (None: of every Target)."""
    return ExperimentList(experiments=[
        ExperimentRow(experiment_id=eid, target_id=e.created.target_id, stage=e.stage,
                      status=e.status, bound=e.created.figures.bound)
        for eid, e in ledger.state().experiments.items()
        if query.target_id is None or e.created.target_id == query.target_id
    ])  # fmt: skip


def verdict_explained(ledger: Any, samples_id: str) -> VerdictExplained:
    """The recorded verdict (or final audit) of ``samples_id`` explained (R5, R12); reads,
    records nothing. Raises: BadRequest (exit 2) where none is recorded."""
    state = ledger.state()
    recorded = state.verdicts.get(samples_id) or state.final_audits.get(samples_id)
    if recorded is None:
        raise BadRequest(
            f"no verdict or final audit is recorded for samples {samples_id!r}",
            hint="`perfledger verdict record --samples ID` derives and records one",
        )
    payload = msgspec.to_builtins(recorded)
    return VerdictExplained(
        samples_id=samples_id, explanation=explain_verdict(payload), recorded=payload
    )


def _known(state: Any, target_id: str) -> None:
    if target_id not in state.targets:
        raise BadRequest(f"no Target {target_id!r}", hint=TARGETS_HINT)


def claims_of(ledger: Any, query: TargetQuery) -> Claims:
    """ROI claims vs outcomes of ``query.target_id`` (None: every Target), R7, R14.
    Raises: BadRequest (exit 2) for an unknown Target."""
    state = ledger.state()
    if query.target_id is not None:
        _known(state, query.target_id)
    return Claims(claims=claims(state, query.target_id))


def champions_of(ledger: Any) -> Champions:
    """The current champion of every Target (R13)."""
    return Champions(champions=current_champions(ledger.state()))


def champion_of(ledger: Any, query: TargetQuery, *, snapshot: bool = True) -> ChampionShown:
    """The current champion of ``query.target_id`` with its lineage (R13) and, with
    ``snapshot``, its code snapshot (R11). Raises: BadRequest (exit 2) for an unknown Target."""
    state = ledger.state()
    chosen = [c for c in current_champions(state) if c.target_id == query.target_id]
    if query.target_id is None or not chosen:
        raise BadRequest(f"no Target {query.target_id!r}", hint=TARGETS_HINT)
    shown = ChampionShown(champion=chosen[0], lineage=lineage(state, query.target_id))
    if query.target_id in state.targets:  # R14: how many draws the champion came out of
        shown.formal_draws = formal_draws(state, query.target_id)
    if snapshot and query.target_id in state.targets:  # the champion's code, how to get it (R11)
        from perfledger.app.snapshots import champion_snapshot  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

        shown.snapshot = champion_snapshot(ledger, state, state.targets[query.target_id])
    return shown


def lineage_of(ledger: Any, query: TargetQuery) -> Lineage:
    """The chain of champions of ``query.target_id`` (R13): experiment, samples, verdict, final
    audits. Raises: BadRequest (exit 2) for no Target or an unknown one."""
    state = ledger.state()
    if query.target_id is None:
        raise BadRequest("name the Target", hint=TARGETS_HINT)
    _known(state, query.target_id)
    return Lineage(target_id=query.target_id, lineage=lineage(state, query.target_id))


def rejected_of(ledger: Any, query: TargetQuery) -> Rejected:
    """The rejected directions of ``query.target_id`` (None: every Target), R15."""
    return Rejected(rejected=rejected(ledger.state(), query.target_id))


class EvidenceRow(msgspec.Struct, kw_only=True):
    """One recorded piece of evidence: its id and event, layer, tool (name and version),
    applicability (R6), and how many facts, kernels and limitations it holds."""

    evidence_id: str
    event_id: str
    layer: str | None
    tool: str
    applicability: str | None
    facts: int
    kernels: int
    limitations: int


class EvidenceList(msgspec.Struct, kw_only=True):
    """The recorded evidence, in the ledger's order."""

    evidence: list[EvidenceRow]


class EvidenceShown(msgspec.Struct, kw_only=True):
    """One piece of evidence: its event, the ``EvidenceRecorded`` payload and its attached
    artifacts (name -> the artifact's digest and media type)."""

    event_id: str
    evidence: Any
    artifacts: Any


def _evidence_events(ledger: Any) -> list[Any]:
    return [e for e in ledger.events() if e.envelope.kind == "EvidenceRecorded"]


def evidence_list(ledger: Any) -> EvidenceList:
    """Every recorded piece of evidence (R6), one :class:`EvidenceRow` each."""
    rows = []
    for event in _evidence_events(ledger):
        p = event.payload
        rows.append(EvidenceRow(
            evidence_id=p.evidence_id, event_id=event.envelope.id, layer=p.layer,
            tool=f"{p.tool.name} {p.tool.version}", applicability=p.applicability,
            facts=len(p.facts), kernels=len(p.boundary.kernels) if p.boundary else 0,
            limitations=len(p.limitations),
        ))  # fmt: skip
    return EvidenceList(evidence=rows)


def evidence_show(ledger: Any, evidence_id: str) -> EvidenceShown:
    """The piece of evidence ``evidence_id`` (the first recorded with that id).
    Raises: BadRequest (exit 2) for no such evidence."""
    for event in _evidence_events(ledger):
        if event.payload.evidence_id == evidence_id:
            return EvidenceShown(event_id=event.envelope.id, evidence=event.payload,
                                 artifacts=event.envelope.artifacts)  # fmt: skip
    raise BadRequest(
        f"no evidence {evidence_id!r}",
        hint="`perfledger evidence list` lists the recorded evidence",
    )


def reviews_of(
    ledger: Any, *, unresolved: bool = False, target_id: str | None = None
) -> list[dict[str, Any]]:
    """The recorded reviews (R12, R17) on the open ``ledger``, of ``target_id`` (and those of
    no Target) or every one; ``unresolved``: only dissent that no later review resolved. Each
    row: the review's fields with ``event_id``, ``resolved_by`` and ``unresolved_dissent``."""
    reviews = ledger.state().reviews
    views = (
        unresolved_dissent(reviews, target_id)
        if unresolved
        else [
            v
            for v in reviews.reviews.values()
            if target_id is None or v.review.target_id in (None, target_id)
        ]
    )
    return [
        {
            **msgspec.to_builtins(v.review),
            "event_id": v.event_id,
            "resolved_by": v.resolved_by,
            "unresolved_dissent": v.review.dissent_remains and v.resolved_by is None,
        }
        for v in views
    ]


__all__ = [
    "ChampionShown",
    "Champions",
    "Claims",
    "EvidenceList",
    "EvidenceRow",
    "EvidenceShown",
    "ExperimentList",
    "ExperimentRow",
    "ExperimentShown",
    "Lineage",
    "Rejected",
    "TargetQuery",
    "TargetsShown",
    "VerdictExplained",
    "champion_of",
    "champions_of",
    "claims_of",
    "evidence_list",
    "evidence_show",
    "experiment_of",
    "experiments_of",
    "lineage_of",
    "rejected_of",
    "reviews_of",
    "targets_of",
    "verdict_explained",
]
