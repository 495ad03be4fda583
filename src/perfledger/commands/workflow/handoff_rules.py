"""R18 from ``HandoffRecorded`` schema :data:`~perfledger.events.workflow.R18_LEDGER_FILLED`:
a handoff is filled from the ledger and refused where it contradicts it (pure).

What the ledger knows (the champion, whether the primary is achieved, the champion's gain
figures with their CIs, local results, rejections with their scope, reconciliations, the owed
obligations, the open experiments, key evidence, budget left) is filled from the state's
projections when the request leaves it out, and checked when the request states it; what only
the agent knows (its words on the gains, questions, the stop reason, resume needs, feedback)
stays free text, but the gains' words may not state a figure: a typed figure proves nothing.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import ORIGINAL
from perfledger.projections.handoff import derived_gains, unresolved
from perfledger.projections.workflow import TargetView, WorkflowState

#: How far a stated figure (a ratio) may lie from the recorded one: half of the last digit of a
#: percentage shown with one decimal (0.05 percentage points), so a figure copied from any
#: rendering of the verdict is accepted and an inflated one is not.
FIGURE_TOLERANCE = 5e-4
#: A figure in words: a number followed by ``%``, ``x``/``×`` or ``times`` (``+20 %``, ``3x``,
#: ``1.5 times``). Figures belong to the verdicts, not to the agent's words (R18).
FIGURE_IN_WORDS = re.compile(r"\d(?:[.,]\d+)?\s*(?:%|[x×](?![A-Za-z0-9])|times\b|percent\b)")
#: Words that say the primary was not achieved (checked first: "primary not achieved").
_SAYS_NOT_ACHIEVED = re.compile(
    r"\b(?:not|never|n't|un)\s*(?:yet\s+|been\s+)?(?:achieved|reached|met|attained)\b"
    r"|\b(?:missed|fell short of|short of)\s+(?:the\s+)?(?:primary|target|goal|minimum effect)",
    re.IGNORECASE,
)
#: Words that say the primary was achieved (``primary achieved``, ``reached the target``).
_SAYS_ACHIEVED = re.compile(
    r"\b(?:primary|target|goal|objective|minimum effect|min effect)\b[^.;,]{0,40}?"
    r"\b(?:achieved|reached|met|attained)\b"
    r"|\b(?:achieved|reached|met|attained|hit)\s+(?:the\s+)?(?:primary|target|goal|objective|"
    r"minimum effect|min effect)\b",
    re.IGNORECASE,
)
#: The hint of every refusal of a stated list: the ledger fills it.
FILLED_HINT = (
    "leave {field} out: perfledger fills it from the ledger (`perfledger handoff record "
    "--example` shows the minimal request)"
)
#: What resuming needs, where the request does not say (the state knows no remote or head).
DEFAULT_RESUME = (
    "a clone of the ledger (`perfledger clone URL DIR`); run `perfledger audit`, then "
    "`perfledger resume` for the next decisions"
)


@dataclass(frozen=True)
class LedgerFacts:
    """What the ledger knows of a Target's handoff (R18), derived from the state.

    Attributes:
        champion: the current champion's experiment id, or ``original``.
        achieved: the current champion's own final audit passed.
        key_evidence: the champion claim's evidence ids and its gains' samples ids.
        figures: the champion's gain figures (``GainFigure`` payload dicts), in order.
        local_results, prediction_corrections: ids, in recorded order.
        rejected: ``(experiment_id, closes)`` of every rejection, in recorded order.
        owed: the obligations still open (pending reconciliations, unjudged or failed stages,
            missing final audit, ...), in words.
        open_experiments: experiments neither rejected nor (ever) champion.
    """

    champion: str
    achieved: bool
    key_evidence: list[str]
    figures: list[dict[str, Any]]
    local_results: list[str]
    rejected: list[tuple[str, str]]
    prediction_corrections: list[str]
    owed: list[str]
    open_experiments: list[str]


def _figure(gain: Any) -> dict[str, Any]:
    """A derived gain's figures as a ``GainFigure`` payload dict."""
    fields = ("experiment_id", "samples_id", "stage", "status", "estimate", "ci_low", "ci_high")
    return {**{f: getattr(gain, f) for f in fields}, "unit": gain.unit}


def ledger_facts(state: WorkflowState, target: TargetView) -> LedgerFacts:
    """:class:`LedgerFacts` of ``target`` from the projections (pure)."""
    tid = target.definition.target_id
    gains = derived_gains(state, target)
    key: list[str] = []
    if target.champion is not None and target.champion in state.experiments:
        created = state.experiments[target.champion].created
        key += sorted({e.evidence_id for e in created.claim.evidence})
    key += [g.samples_id for g in gains]
    ever_champion = {step.champion for step in target.lineage}
    return LedgerFacts(
        champion=target.champion or ORIGINAL,
        achieved=target.champion is not None and target.final_audit_status == "pass",
        key_evidence=key,
        figures=[_figure(g) for g in gains],
        local_results=[r.result_id for r in state.local_results.values() if r.target_id == tid],
        rejected=[
            (r.experiment_id, r.closes) for r in state.rejections.values() if r.target_id == tid
        ],
        prediction_corrections=list(
            dict.fromkeys(r.experiment_id for r in state.reconciliations if r.target_id == tid)
        ),
        owed=unresolved(state, target),
        open_experiments=[
            e
            for e in target.experiments
            if state.experiments[e].status not in ("rejected", "champion")
            and e not in ever_champion
        ],
    )


def _differ(field: str, stated: list[Any], known: list[Any], what: str) -> None:
    """Refuse (R18) a stated list that is not the ledger's, naming what is missing or extra."""
    missing = [x for x in known if x not in stated]
    extra = [x for x in stated if x not in known]
    if not missing and not extra:
        return
    parts = []
    if missing:
        parts.append(f"omits {what} {missing}")
    if extra:
        parts.append(f"lists {extra}, which the ledger does not hold as {what}")
    raise refuse(
        "R18",
        f"the handoff's {field} contradicts the ledger: it "
        + " and ".join(parts)
        + f" (the ledger's: {known})",
        FILLED_HINT.format(field=field),
    )


def _check_figures(stated: list[rq.GainFigure], known: list[dict[str, Any]]) -> None:
    """Refuse (R18) a stated figure that is not its recorded verdict's (beyond
    :data:`FIGURE_TOLERANCE`) or of samples that are not the champion's gain."""
    by_samples = {f["samples_id"]: f for f in known}
    for figure in stated:
        recorded = by_samples.get(figure.samples_id)
        if recorded is None:
            raise refuse(
                "R18",
                f"figures name samples {figure.samples_id!r}, which are not a gain of the "
                f"champion (its gains: {sorted(by_samples) or 'none'})",
                FILLED_HINT.format(field="figures"),
            )
        for name in ("estimate", "ci_low", "ci_high"):
            value, truth = getattr(figure, name), recorded[name]
            if value is None:
                continue
            if truth is None or not math.isclose(value, truth, rel_tol=0.0,
                                                 abs_tol=FIGURE_TOLERANCE):  # fmt: skip
                raise refuse(
                    "R18",
                    f"figures: {name} {value!r} of samples {figure.samples_id!r} is not the "
                    f"recorded verdict's ({truth!r})",
                    FILLED_HINT.format(field="figures"),
                )


def r18_filled(state: WorkflowState, target: TargetView, req: rq.HandoffRecord) -> dict[str, Any]:
    """The ``HandoffRecorded`` payload (builtins) of ``req`` under
    :data:`~perfledger.events.workflow.R18_LEDGER_FILLED`: the request's fields, with what it
    left out filled from :func:`ledger_facts` and ``figures``, ``owed`` and
    ``open_experiments`` derived. Raises: RuleRefused (R18) where a stated field contradicts
    the ledger (champion, achieved, lists, figures, unknown key evidence), where the gains'
    words state a figure, or where the budget does not add up."""
    facts = ledger_facts(state, target)
    body = rq.dump(req)
    if req.champion is not msgspec.UNSET and req.champion != facts.champion:
        raise refuse(
            "R18",
            f"the handoff names champion {req.champion!r}; the ledger's is {facts.champion!r}",
            FILLED_HINT.format(field="champion"),
        )
    if req.primary_achieved is not msgspec.UNSET and req.primary_achieved != facts.achieved:
        raise refuse(
            "R18",
            f"the handoff says primary_achieved={req.primary_achieved}; the ledger says "
            f"{facts.achieved} (achieved only with a champion whose own final audit passed)",
            FILLED_HINT.format(field="primary_achieved"),
        )
    if req.local_results is not msgspec.UNSET:
        _differ("local_results", list(req.local_results), facts.local_results, "local results")
    if req.rejected is not msgspec.UNSET:
        stated = [(r.experiment_id, r.closes) for r in req.rejected]
        _differ("rejected", stated, facts.rejected, "rejections (with their scope)")
    if req.prediction_corrections is not msgspec.UNSET:
        _differ(
            "prediction_corrections",
            list(req.prediction_corrections),
            facts.prediction_corrections,
            "reconciliations",
        )
    if req.figures is not msgspec.UNSET:
        _check_figures(list(req.figures), facts.figures)
    if req.key_evidence is not msgspec.UNSET:
        unknown = [
            e for e in req.key_evidence if e not in state.evidence and e not in state.samples
        ]
        if unknown:
            raise refuse(
                "R18",
                f"key evidence {unknown} is neither recorded evidence nor samples",
                FILLED_HINT.format(field="key_evidence"),
            )
    for index, text in enumerate(req.gains):
        found = FIGURE_IN_WORDS.search(text)
        if found:
            raise refuse(
                "R18",
                f"gains[{index}] states a figure ({found.group(0).strip()!r}): the gains' "
                "figures come from the recorded verdicts, not from words",
                "leave the figures out of gains (perfledger records them with their CIs in "
                "figures); say in words what only you know",
            )
    budget = target.definition.budget
    left = {
        "wall_s": max(0.0, budget.wall_s - req.budget_used.wall_s),
        "gpu_s": max(0.0, budget.gpu_s - req.budget_used.gpu_s),
    }
    return {
        **body,
        "champion": facts.champion,
        "primary_achieved": facts.achieved,
        "key_evidence": body.get("key_evidence", facts.key_evidence),
        "local_results": facts.local_results,
        "rejected": [{"experiment_id": e, "closes": c} for e, c in facts.rejected],
        "prediction_corrections": facts.prediction_corrections,
        "budget_left": body.get("budget_left", left),
        "resume_needs": body.get("resume_needs", [DEFAULT_RESUME]),
        "figures": facts.figures,
        "owed": facts.owed,
        "open_experiments": facts.open_experiments,
    }


def says_achieved(text: str) -> bool | None:
    """Whether ``text`` (a handoff's ``stop_reason``) says the primary was achieved (True),
    was not (False), or says neither (None). Text in parentheses is a quotation (``not stated
    (the ledger shows: ...)``), not what the caller says."""
    text = re.sub(r"\([^()]*\)", " ", text)
    if _SAYS_NOT_ACHIEVED.search(text):
        return False
    if _SAYS_ACHIEVED.search(text):
        return True
    return None


def r18_stop_reason_agrees(stop_reason: str, achieved: bool) -> None:
    """R18 (``HandoffRecorded`` schema :data:`~perfledger.events.workflow.
    R18_STOP_REASON_AGREES` on): a ``stop_reason`` that says the primary was (not) achieved
    agrees with the ledger's ``primary_achieved`` (a champion whose own final audit passed).
    Raises: RuleRefused (R18) for a contradiction."""
    said = says_achieved(stop_reason)
    if said is None or said == achieved:
        return
    raise refuse(
        "R18",
        f"the stop reason {stop_reason!r} says the primary was "
        f"{'' if said else 'not '}achieved; the ledger says primary_achieved={achieved} "
        "(achieved only with a champion whose own final audit passed)",
        "say why you stopped in words that agree with the ledger (e.g. 'the budget is spent', "
        "'no further candidate is expected to clear the minimum effect')"
        + ("" if achieved else ", or record the champion's passing final audit first"),
    )


__all__ = [
    "FIGURE_IN_WORDS",
    "FIGURE_TOLERANCE",
    "LedgerFacts",
    "ledger_facts",
    "r18_filled",
    "r18_stop_reason_agrees",
    "says_achieved",
]
