"""The read models' use cases (SPEC.md section 6): claims vs outcomes, the current champions, one
Target's champion with its lineage and code, the lineage alone, the rejected directions, and
the recorded evidence (listed, or one piece shown).

Each reads an open ledger (its folded state, or its events), refuses an unknown Target or id,
and returns a msgspec result whose :func:`msgspec.to_builtins` is the ``--json`` answer of
``perfledger claims``, ``champion show [TARGET]``, ``champion lineage TARGET``, ``rejected``,
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
from perfledger.projections.rejections import RejectedRow, rejected

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

    def to_json(self) -> dict[str, Any]:
        """The champion's fields, ``lineage`` and (where read) ``snapshot``, in one object."""
        out = {**msgspec.to_builtins(self.champion), "lineage": msgspec.to_builtins(self.lineage)}
        if self.snapshot is not msgspec.UNSET:
            out["snapshot"] = self.snapshot
        return out


class Lineage(msgspec.Struct, kw_only=True):
    """The chain of champions of ``target_id`` with the evidence behind each (R13)."""

    target_id: str
    lineage: list[LineageStep]


class Rejected(msgspec.Struct, kw_only=True):
    """Rejected directions, the scope each closed (R15) and why."""

    rejected: list[RejectedRow]


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
    if snapshot and query.target_id in state.targets:  # the champion's code, how to get it (R11)
        from perfledger.app.identity import champion_snapshot  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

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


__all__ = [
    "ChampionShown",
    "Champions",
    "Claims",
    "EvidenceList",
    "EvidenceRow",
    "EvidenceShown",
    "Lineage",
    "Rejected",
    "TargetQuery",
    "champion_of",
    "champions_of",
    "claims_of",
    "evidence_list",
    "evidence_show",
    "lineage_of",
    "rejected_of",
]
