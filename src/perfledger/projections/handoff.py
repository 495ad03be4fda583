"""The handoff of SPEC.md R18, derived from the state, and the next decisions the rules allow.

:func:`derive_handoff` states, for one Target: primary achieved or not, Champion or Original, key
evidence and gains, local results, rejected directions with their scope, prediction-error
corrections, unresolved questions, budget used and left, the stop reason, what is needed to resume
(ledger remotes, head, artifacts) and friction/feedback. What the ledger cannot know by itself (GPU
seconds used, the stop reason, feedback) comes from the latest recorded ``HandoffRecorded`` of the
Target when there is one, and is otherwise marked unknown rather than guessed.

:func:`next_decisions` lists the operations the rules allow next at this state, each with the
reason and rule (what ``perfledger resume`` prints). :func:`render_markdown` renders a handoff for
people.

Pure: reads a :class:`~perfledger.projections.workflow.WorkflowState` and a
:class:`ResumeContext` the caller gathered at the edge (head, remotes, artifacts, timestamps).
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.events.workflow import ORIGINAL, DerivedCase, HandoffRecorded
from perfledger.projections.champions import FinalAuditStanding, final_audit_standing
from perfledger.projections.claims import improvement_to_speedup
from perfledger.projections.draws import formal_draws
from perfledger.projections.measurement_flags import experiment_flags
from perfledger.projections.reviews import dissent_line, settled_dissent, unresolved_dissent
from perfledger.projections.verdict_explain import case_line, explain_verdict, pct, provenance_text
from perfledger.projections.workflow import (
    TargetView,
    WorkflowState,
    formal_runs,
    unfinished_runs,
)


class ResumeContext(msgspec.Struct, kw_only=True):
    """What the read model needs from outside the state (gathered by the CLI).

    Attributes:
        head: the ledger head commit (hex).
        branch: the ledger branch (``ledger``).
        remotes: remote name -> URL of the ledger repository.
        artifacts: ``<event id prefix>/<artifact name>`` of every attached file.
        wall_used_s: seconds from the Target's freezing to the newest event (None: unknown).
        path: the ledger repository's path on this machine (None: unknown).
        champion_snapshot: the champion's (or original's) code snapshot (R11): ``digest``,
            ``files``, ``git``, ``checkout`` (the command that writes it), None when none was
            recorded.
    """

    head: str
    branch: str = "ledger"
    remotes: dict[str, str] = msgspec.field(default_factory=dict)
    artifacts: list[str] = msgspec.field(default_factory=list)
    wall_used_s: float | None = None
    path: str | None = None
    champion_snapshot: dict[str, Any] | None = None


class Gain(msgspec.Struct, kw_only=True):
    """A measured gain on the primary: the verdict's improvement and CI (ratios) and the
    end-to-end speedup they mean; per test case, each subject's absolute per-call statistic with
    its CI (``cases``, in ``unit``, R12); ``samples_provenance`` ``outside`` marks samples
    recorded from outside perfledger (R5); the verdict's notes (e.g. foreign activity explained,
    R17)."""

    experiment_id: str
    samples_id: str
    stage: str
    status: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    speedup: float | None
    notes: list[str] = msgspec.field(default_factory=list)
    cases: list[DerivedCase] = msgspec.field(default_factory=list)
    unit: str | None = None
    samples_provenance: str | None = None


class LocalResultLine(msgspec.Struct, kw_only=True):
    """A local (secondary-only) result with its scenario (R13)."""

    result_id: str
    experiment_id: str
    metric: str
    scenario: str
    estimate: float
    ci_low: float
    ci_high: float


class RejectedLine(msgspec.Struct, kw_only=True):
    """A rejected direction and the scope it closed (R15). ``note``: what its last target-stage
    verdict said when that verdict was inconclusive only because of the A/A resolution (the CI
    cleared the minimum effect: a lead, not a dead end), else None."""

    experiment_id: str
    closes: str
    reason: str
    note: str | None = None


class Correction(msgspec.Struct, kw_only=True):
    """A prediction-error correction (R14): the corrected premise and model."""

    experiment_id: str
    premise: str
    model: str
    corrected_bound: float | None
    explanation: str


class BudgetLine(msgspec.Struct, kw_only=True):
    """Budget of the Target, used and left, in seconds (None: not known to the ledger)."""

    wall_s: float
    gpu_s: float
    wall_used_s: float | None
    gpu_used_s: float | None
    wall_left_s: float | None
    gpu_left_s: float | None
    source: str


class NextDecision(msgspec.Struct, kw_only=True):
    """An operation the rules allow next: ``op`` (``samples.record``), why, and its rule.

    Attributes:
        about: the id the decision is about (experiment, samples or conflict id), if any.
        request: the complete request body where the state determines it (a champion
            selection, a verdict, a final audit): the one ``perfledger resume`` has run dry
            through its decider on the head; None where the caller supplies the content.
    """

    op: str
    why: str
    rule: str
    about: str | None = None
    request: dict[str, Any] | None = None


class Handoff(msgspec.Struct, kw_only=True):
    """The derived handoff of one Target (R18); see the module docstring.

    Attributes:
        target_id, title, primary, min_effect: the Target (primary as ``name (statistic, unit,
            direction)``; minimum effect as a ratio).
        resolution: the latest recorded A/A resolution (ratio; R4), None before one is recorded;
            a pass needs the CI's lower end above max(min_effect, resolution) (R12).
        primary_achieved: the current champion's own final audit passed (R13, R18).
        champion, champion_hash: the current champion (``original`` when none).
        final_audit_status: the current champion's final-audit standing: ``pass``, ``fail``,
            ``inconclusive``, ``none`` or ``stale`` (an earlier champion's audit, R13).
        final_audit: that standing in full (samples, the champion they audited).
        key_evidence: evidence and samples ids behind the champion.
        gains: the champion's target-stage gain and its final audit, if any.
        local_results, rejected, prediction_corrections: as named.
        unresolved_questions: what is still open (derived, plus those of the last handoff).
        budget: budget used and left.
        stop_reason: why work stopped (from the last recorded handoff, else derived).
        resume_needs: what resuming needs (remotes, head, artifacts, the command).
        feedback: friction/feedback from the last recorded handoff, else ``not stated``.
        head: the ledger head this handoff describes.
        recorded_handoffs: how many handoffs of this Target are recorded.
        champion_snapshot: the champion's code snapshot and how to get it (R11); unset when
            none was recorded.
    """

    target_id: str
    title: str
    primary: str
    min_effect: float
    primary_achieved: bool
    champion: str
    champion_hash: str | None
    final_audit_status: str
    key_evidence: list[str]
    gains: list[Gain]
    local_results: list[LocalResultLine]
    rejected: list[RejectedLine]
    prediction_corrections: list[Correction]
    unresolved_questions: list[str]
    budget: BudgetLine
    stop_reason: str
    resume_needs: list[str]
    feedback: str
    head: str
    recorded_handoffs: int
    resolution: float | None = None
    final_audit: FinalAuditStanding | None = None
    #: absent (not null) without a snapshot, so handoffs of old-rule Targets read as before
    champion_snapshot: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET
    #: ``N formal target stage(s) on this Target, M not passing`` (R14: the draws the
    #: champion came out of); absent while the original is champion
    formal_draws: str | msgspec.UnsetType = msgspec.UNSET


def default_target(state: WorkflowState) -> str | None:
    """The Target a handoff describes by default: the most recently frozen current Target."""
    current = [tid for tid, t in state.targets.items() if t.status == "current"]
    return current[-1] if current else None


def _last_handoff(state: WorkflowState, target_id: str) -> HandoffRecorded | None:
    recorded = [h for h in state.handoffs if h.target_id == target_id]
    return recorded[-1] if recorded else None


def derived_gains(state: WorkflowState, target: TargetView) -> list[Gain]:
    """The current champion's gains on the primary: its target-stage verdict and its final
    audits, each with the figures (ratios) and CI as recorded (R18)."""
    out = []
    champion = target.champion
    if champion is None:
        return out
    entry = next((e for e in reversed(target.lineage) if e.champion == champion), None)
    samples = [entry.samples_id] if entry is not None and entry.samples_id else []
    samples += [a.samples_id for a in state.final_audits.values() if a.champion == champion]
    for samples_id in samples:
        verdict = state.verdicts.get(samples_id)
        audit = state.final_audits.get(samples_id)
        primary = verdict.primary if verdict else audit.primary if audit else None
        if primary is None:
            continue
        decided = verdict if verdict is not None else audit
        out.append(
            Gain(
                experiment_id=champion,
                samples_id=samples_id,
                stage=verdict.stage if verdict else "final_audit",
                status=verdict.status if verdict else audit.status if audit else "",
                estimate=primary.estimate,
                ci_low=primary.ci_low,
                ci_high=primary.ci_high,
                speedup=improvement_to_speedup(primary.estimate, primary.direction),
                notes=list(verdict.notes if verdict else audit.notes if audit else ()),
                cases=list(primary.cases),
                unit=decided.unit if decided is not None else None,
                samples_provenance=decided.samples_provenance if decided is not None else None,
            )
        )
    return out


def unresolved(state: WorkflowState, target: TargetView) -> list[str]:
    """The questions still open on ``target``, derived from the state (R14, R13, R2, R3)."""
    tid = target.definition.target_id
    out = []
    for pending in target.pending.values():
        out.append(
            f"{pending.experiment_id} contradicted its claim (measured CI "
            f"[{_fmt(pending.ci_low)}, {_fmt(pending.ci_high)}] vs predicted "
            f"[{_fmt(pending.predicted_low)}, {_fmt(pending.predicted_high)}]): reconcile before "
            "the next experiment (R14)"
        )
    for conflict in state.conflicts.values():
        if conflict.target_id == tid and conflict.resolved_by is None:
            out.append(
                f"unresolved {conflict.kind} conflict {conflict.conflict_id} between "
                f"{conflict.options}"
            )
    for experiment_id in target.experiments:
        experiment = state.experiments[experiment_id]
        if experiment.status in ("rejected", "champion", "passed"):
            continue
        verdicts = [state.verdicts[s] for s in experiment.verdicts if s in state.verdicts]
        target_verdicts = [v for v in verdicts if v.stage == "target"]
        if experiment.status == "screen_failed":
            out.append(f"{experiment_id} failed its screen and is not rejected yet")
        elif not target_verdicts:
            out.append(
                f"{experiment_id} is open at stage {experiment.stage} without a target verdict"
            )
        elif target_verdicts[-1].status == "inconclusive":
            out.append(f"{experiment_id}'s target verdict is inconclusive")
        elif target_verdicts[-1].status == "fail":
            out.append(f"{experiment_id} failed its target stage and is not rejected yet")
    for experiment_id in target.experiments:
        if state.experiments[experiment_id].status != "rejected":
            out += [f"measurement flag: {f}" for f in experiment_flags(state, experiment_id)]
    if target.champion is not None and target.final_audit_status is None:
        standing = final_audit_standing(state, target)
        stale = (
            f" (the latest final audit, {standing.samples_id}, audited earlier champion "
            f"{standing.champion}: stale)"
            if standing.status == "stale"
            else ""
        )
        out.append(f"champion {target.champion} has no final audit against the original{stale}")
    if target.readiness is not None and target.readiness.missing_lineage:
        out.append(_lineage_line(target.readiness.missing_lineage))
    # stated at readiness (R11): nothing binds the results to the code that ran
    if target.readiness is not None and isinstance(target.readiness.original.unsnapshotted, str):
        out.append(
            "code not snapshotted (R11): results are not bound to the code that ran (the "
            f"readiness says: {target.readiness.original.unsnapshotted})"
        )
    if target.diagnostic_only:
        out.append("results are diagnostic only: the metric audit found a mismatch (R3)")
    # dissent a reviewer kept and no later review resolved (recorded, never judged)
    out += [dissent_line(v) for v in unresolved_dissent(state.reviews, tid)]
    return out


def _lineage_line(missing: tuple[str, ...] | list[str], *, gpu_note: bool = True) -> str:
    """The open question of environment fields the readiness did not record (R2). Its words
    with ``gpu_note`` are part of a recorded handoff's ``owed`` (re-derived at audit): keep
    them."""
    note = "; on a CPU-only run the GPU fields are expected to be missing" if gpu_note else ""
    return (
        "environment lineage not recorded in the readiness: "
        + ", ".join(missing)
        + f" (R2: claims hold only for the parts of the environment that were recorded{note})"
    )


#: The environment fields a host without a GPU cannot record.
GPU_FIELDS = frozenset({"gpu", "driver", "cuda"})


def _without_gpu_lineage(target: TargetView, questions: list[str]) -> list[str]:
    """``questions`` as a handoff shows them: on a Target that budgets no GPU time and whose
    readiness recorded no GPU, the lineage question names only the non-GPU fields missing (none
    left: no question). The recorded ``owed`` keeps the R2 line as decided."""
    readiness = target.readiness
    if readiness is None or not readiness.missing_lineage or target.definition.budget.gpu_s:
        return questions
    if "gpu" not in readiness.missing_lineage:  # a GPU was recorded: every field matters
        return questions
    full = _lineage_line(readiness.missing_lineage)
    rest = [f for f in readiness.missing_lineage if f not in GPU_FIELDS]
    shown = [_lineage_line(rest, gpu_note=False)] if rest else []
    return [r for q in questions for r in (shown if q == full else [q])]


def _resolution_lead(state: WorkflowState, experiment_id: str) -> str | None:
    """When ``experiment_id``'s last target-stage verdict was inconclusive only because its CI's
    lower end did not clear the A/A resolution (it cleared the minimum effect), say so with its
    figures (:func:`perfledger.projections.verdict_explain.explain_verdict`); else None."""

    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return None
    verdicts = [state.verdicts[s] for s in experiment.verdicts if s in state.verdicts]
    target_verdicts = [v for v in verdicts if v.stage == "target"]
    if not target_verdicts:
        return None
    last = target_verdicts[-1]
    e = explain_verdict(msgspec.to_builtins(last))
    if e["condition"] != "below_resolution":
        return None
    return (
        f"its target verdict ({last.samples_id}) was inconclusive only because of the resolution: "
        f"improvement {pct(e['estimate'])}, CI [{pct(e['ci_low'])}, {pct(e['ci_high'])}] clears "
        f"the minimum effect {pct(e['min_effect'])} but not the A/A resolution "
        f"{pct(e['resolution'])}; a tighter resolution could decide it"
    )


def _gain_details(g: Gain) -> list[str]:
    """Per-case figures (R12) and the outside-samples mark (R5) of a gain, one line each."""

    lines = [case_line(msgspec.to_builtins(c), g.unit) for c in g.cases]
    marked = provenance_text(g.samples_provenance)
    return lines + ([marked] if marked else [])


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _budget(target: TargetView, last: HandoffRecorded | None, ctx: ResumeContext) -> BudgetLine:
    total = target.definition.budget
    if last is not None:
        wall_used: float | None = last.budget_used.wall_s
        gpu_used: float | None = last.budget_used.gpu_s
        source = "the last recorded handoff"
    else:
        wall_used, gpu_used = ctx.wall_used_s, None
        source = "event timestamps (wall); GPU time is not recorded until a handoff states it"
    return BudgetLine(
        wall_s=total.wall_s,
        gpu_s=total.gpu_s,
        wall_used_s=wall_used,
        gpu_used_s=gpu_used,
        wall_left_s=None if wall_used is None else max(0.0, total.wall_s - wall_used),
        gpu_left_s=None if gpu_used is None else max(0.0, total.gpu_s - gpu_used),
        source=source,
    )


def _stop_reason(target: TargetView, achieved: bool, last: HandoffRecorded | None) -> str:
    if last is not None:
        return last.stop_reason
    if achieved:
        return f"primary achieved: champion {target.champion} passed its final audit"
    if target.lineage and target.lineage[-1].decision == "restore_original":
        return "the champion failed its final audit; the original was restored"
    return "not stopped: work in progress (no handoff recorded yet)"


def _resume_needs(ctx: ResumeContext) -> list[str]:
    needs = []
    if ctx.remotes:
        for name, url in sorted(ctx.remotes.items()):
            needs.append(  # perfledger's own clone verifies every event before it is used
                f"clone the ledger: `perfledger clone {url} LEDGER` (remote {name}, branch "
                f"{ctx.branch})"
            )
    else:
        where = f" at {ctx.path}" if ctx.path else ""
        needs.append(
            f"copy the ledger repository{where} (no remote configured; branch {ctx.branch})"
            + (f", e.g. `perfledger clone {ctx.path} COPY`" if ctx.path else "")
        )
    needs.append(f"ledger head {ctx.head} (a git commit; `perfledger show {ctx.head[:12]}`)")
    if ctx.artifacts:
        needs.append(f"{len(ctx.artifacts)} artifact(s) travel inside the ledger's commits")
    if ctx.champion_snapshot:  # R11: the code to resume from travels in the ledger too
        snap = ctx.champion_snapshot
        needs.append(
            f"the {snap['of']} code (snapshot {snap['digest'][:16]}): `{snap['checkout']}`"
        )
    needs.append("run `perfledger audit`, then `perfledger resume` for the next decisions")
    return needs


def derive_handoff(state: WorkflowState, target_id: str, ctx: ResumeContext) -> Handoff:
    """Derive the handoff of ``target_id`` at ``ctx.head`` (R18).

    Raises: KeyError when the Target is unknown.
    """
    target = state.targets[target_id]
    definition = target.definition
    last = _last_handoff(state, target_id)
    champion = target.champion or ORIGINAL
    standing = final_audit_standing(state, target)
    # R13/R18: achieved only by the current champion's own final audit, never a predecessor's.
    achieved = target.champion is not None and standing.status == "pass"
    key: list[str] = []
    if target.champion is not None:
        experiment = state.experiments.get(target.champion)
        if experiment is not None:
            key += sorted({e.evidence_id for e in experiment.created.claim.evidence})
    gains = derived_gains(state, target)
    key += [g.samples_id for g in gains]
    questions = unresolved(state, target)
    if last is not None:
        questions += [
            q
            for q in last.unresolved_questions
            if q not in questions and not settled_dissent(state.reviews, q)
        ]
    questions = list(dict.fromkeys(_without_gpu_lineage(target, questions)))
    primary = definition.primary
    readiness_hash = target.readiness.original.content_hash if target.readiness else None
    return Handoff(
        target_id=target_id,
        title=definition.title,
        primary=f"{primary.name} ({primary.statistic}, {primary.unit}, {primary.direction})",
        min_effect=definition.min_effect,
        resolution=target.resolution.resolution if target.resolution is not None else None,
        primary_achieved=achieved,
        champion=champion,
        champion_hash=target.champion_hash if target.champion else readiness_hash,
        final_audit_status=standing.status,
        final_audit=standing,
        key_evidence=key,
        gains=gains,
        local_results=[
            LocalResultLine(
                result_id=r.result_id,
                experiment_id=r.experiment_id,
                metric=r.metric,
                scenario=r.scenario,
                estimate=r.estimate,
                ci_low=r.ci_low,
                ci_high=r.ci_high,
            )
            for r in state.local_results.values()
            if r.target_id == target_id
        ],
        rejected=[
            RejectedLine(
                experiment_id=r.experiment_id,
                closes=r.closes,
                reason=r.reason,
                note=_resolution_lead(state, r.experiment_id),
            )
            for r in state.rejections.values()
            if r.target_id == target_id
        ],
        prediction_corrections=[
            Correction(
                experiment_id=r.experiment_id,
                premise=r.premise,
                model=r.corrected_model.description,
                corrected_bound=r.corrected_model.bound,
                explanation=r.explanation,
            )
            for r in state.reconciliations
            if r.target_id == target_id
        ],
        unresolved_questions=questions,
        budget=_budget(target, last, ctx),
        stop_reason=_stop_reason(target, achieved, last),
        resume_needs=_resume_needs(ctx),
        feedback=last.feedback if last is not None else "not stated (no handoff recorded yet)",
        head=ctx.head,
        recorded_handoffs=sum(1 for h in state.handoffs if h.target_id == target_id),
        champion_snapshot=(
            msgspec.UNSET if ctx.champion_snapshot is None else ctx.champion_snapshot
        ),
        formal_draws=(
            formal_draws(state, target_id).text() if target.champion is not None else msgspec.UNSET
        ),
    )


# ----------------------------------------------------------------------------- next decisions


def next_decisions(state: WorkflowState, target_id: str) -> list[NextDecision]:
    """The operations the rules allow next on ``target_id``, most urgent first.

    Derived from the state the deciders check (R1-R4 readiness chain, R11 stage order, R13
    champion and final audit, R14 pending reconciliations, R15 rejections, open conflicts); each
    entry names the operation, why it is allowed or needed, and its rule.
    """
    target = state.targets[target_id]
    out: list[NextDecision] = []
    if target.status != "current":
        return [NextDecision(op="target.freeze", why=f"{target_id} is superseded by "
                             f"{target.superseded_by}; resume from that Target", rule="R1")]  # fmt: skip
    for conflict in state.conflicts.values():
        if conflict.target_id == target_id and conflict.resolved_by is None:
            out.append(NextDecision(op="conflict.resolve", why=f"conflict {conflict.conflict_id} "
                                    f"blocks {conflict.kind} decisions", rule="R13",
                                    about=conflict.conflict_id))  # fmt: skip
    chain = (
        (target.readiness is None, "readiness.record", "formal samples need readiness", "R2"),
        (target.definition.primary.name not in target.metric_audits, "metric-audit.record",
         "the primary needs a metric audit before candidate samples", "R3"),
        (target.baseline is None, "baseline.record", "the original's baseline comes first", "R4"),
        (target.resolution is None, "resolution.record",
         "the measurement resolution (A/A) precedes candidate experiments", "R4"),
    )  # fmt: skip
    for missing, op, why, rule in chain:
        if missing and not target.definition.diagnostic:
            out.append(NextDecision(op=op, why=why, rule=rule))
            return out
    for pending in target.pending.values():
        out.append(NextDecision(op="reconcile", why=f"{pending.experiment_id} contradicted its "
                                "claim; no new experiment or champion selection until reconciled",
                                rule="R14", about=pending.experiment_id))  # fmt: skip
    for experiment_id in target.experiments:
        out += _experiment_next(state, target, experiment_id)
    if target.champion is not None:
        champion = state.experiments.get(target.champion)
        unaudited = [
            s for s in (champion.samples.get("final_audit", []) if champion else [])
            if s not in state.final_audits
        ] + [s for s in unfinished_runs(state, target.champion)
             if formal_runs(state)[s].stage == "final_audit"]  # fmt: skip
        if target.final_audit_status is None and unaudited:
            out += explain_first(state, unaudited[-1], "final audit")
            out.append(NextDecision(op="final-audit.record", why=f"final-audit samples "
                                    f"{unaudited[-1]} of champion {target.champion} have no "
                                    "final audit yet", rule="R13", about=unaudited[-1],
                                    request={"target_id": target_id,
                                             "samples_id": unaudited[-1]}))  # fmt: skip
        elif target.final_audit_status is None:
            out.append(NextDecision(op="samples.record", why=f"final-audit samples of champion "
                                    f"{target.champion} against the original", rule="R13",
                                    about=target.champion))  # fmt: skip
        elif target.final_audit_status == "fail":
            out.append(NextDecision(op="champion.select", why="the final audit failed: restore "
                                    "the original (decision restore_original)", rule="R13",
                                    request={"target_id": target_id,
                                             "decision": "restore_original",
                                             "expected_current": target.champion}))  # fmt: skip
    if not target.pending:
        out.append(NextDecision(op="experiment.create", why="a new candidate with its "
                                "opportunity claim and preregistration", rule="R7 R9"))  # fmt: skip
    out.append(NextDecision(op="evidence.add", why="profiler or compiler facts", rule="R6"))
    out.append(NextDecision(op="handoff.record", why="record the handoff of this state",
                            rule="R18"))  # fmt: skip
    return out


def reviewed(state: WorkflowState, samples_id: str) -> bool:
    """Whether a review of ``samples_id``'s event with no remaining dissent is recorded (the
    evidence an explanation of its foreign activity cites, R17; who appended it is checked
    when the explanation is decided)."""
    view = state.samples.get(samples_id)
    return view is not None and any(
        v.review.subject_event == view.event_id and not v.review.dissent_remains
        for v in state.reviews.reviews.values()
    )


def explain_first(state: WorkflowState, samples_id: str, decision: str) -> list[NextDecision]:
    """The steps that explain ``samples_id``'s unexplained foreign activity before its
    ``decision`` (a verdict or final audit, which that activity would leave inconclusive, R17):
    another actor's review of the samples first, then the explanation citing it. Empty when
    nothing is left to explain."""
    view = state.samples.get(samples_id)
    if view is None:
        return []
    explained = {i for e in state.explanations.get(samples_id, []) for i in e.pairs}
    left = view.unexplained_activity - len(explained)
    if left <= 0:
        return []
    why = (f"samples {samples_id} have {left} window(s) with unexplained foreign activity: "
           f"explain them before the {decision}, or it is inconclusive")  # fmt: skip
    if not reviewed(state, samples_id):
        return [NextDecision(op="review.record", why=f"{why}. An explanation cites a review by "
                             "another actor: a reviewer other than the experiment's agent "
                             "records it (`perfledger review record --actor REVIEWER`, subject "
                             f"`other`, subject_event {view.event_id}, dissent_remains false); "
                             "then `perfledger activity explain` cites its review_id",
                             rule="R17", about=samples_id)]  # fmt: skip
    return [NextDecision(op="activity.explain", why=f"{why}; cite the review of these samples "
                         "(review_id)", rule="R17", about=samples_id)]  # fmt: skip


def _experiment_next(
    state: WorkflowState, target: TargetView, experiment_id: str
) -> list[NextDecision]:
    experiment = state.experiments[experiment_id]
    if experiment.rejection is not None or experiment.status == "champion":
        return []
    unjudged = [
        s
        for stage in ("screen", "target")
        for s in experiment.samples.get(stage, [])
        if s not in state.verdicts
    ]
    for run in unfinished_runs(state, experiment_id):  # R14: a run without samples failed
        if formal_runs(state)[run].stage == "target":
            return [NextDecision(op="verdict.record", why=f"target run {run} of {experiment_id} "
                                 "started but recorded no samples: it counts as failed and owes "
                                 "its verdict before the next target run or any champion",
                                 rule="R14", about=run, request={"samples_id": run})]  # fmt: skip
    if unjudged:
        out = explain_first(state, unjudged[0], "verdict")
        out.append(NextDecision(op="verdict.record", why=f"samples {unjudged[0]} of "
                                f"{experiment_id} have no verdict yet", rule="R12",
                                about=unjudged[0], request={"samples_id": unjudged[0]}))  # fmt: skip
        return out
    prereg = experiment.created.preregistration.rejects
    reject = NextDecision(op="reject", why=f"{experiment_id} failed; close at most its "
                          f"preregistered scope ({prereg})", rule="R15",
                          about=experiment_id)  # fmt: skip
    if experiment.status == "screen_failed" or experiment.status == "failed":
        return [reject]
    if not experiment.samples.get("screen"):
        return [NextDecision(op="samples.record", why=f"screen samples of {experiment_id}",
                             rule="R11", about=experiment_id)]  # fmt: skip
    if experiment.status == "passed":
        last = experiment.verdicts[-1] if experiment.verdicts else None
        verdict = state.verdicts.get(last or "")
        if (
            verdict is not None
            and verdict.stage == "target"
            and not verdict.stale
            and all(g.status == "pass" for g in verdict.guardrails)
        ):
            return [NextDecision(op="champion.select", why=f"{experiment_id}'s target verdict "
                                 f"passed ({verdict.samples_id})", rule="R13",
                                 about=verdict.samples_id,
                                 request={"target_id": target.definition.target_id,
                                          "samples_id": verdict.samples_id,
                                          "expected_current": target.champion or ORIGINAL})]  # fmt: skip
    return [NextDecision(op="samples.record", why=f"target-stage samples of {experiment_id} "
                         "against the current champion", rule="R11", about=experiment_id)]  # fmt: skip


# ----------------------------------------------------------------------------- markdown


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.2f} %"


def _resolution_text(h: Handoff) -> str:
    """``, A/A resolution R %`` (and, when it is the larger, that it is the pass threshold)."""
    if h.resolution is None:
        return ", A/A resolution not recorded"
    text = f", A/A resolution {h.resolution * 100:.2f} %"
    if h.resolution >= h.min_effect:
        text += " (above the minimum effect: a pass needs the CI's lower end above the resolution)"
    return text


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.0f} s"


def _snapshot_lines(h: Handoff) -> list[str]:
    """The champion's code snapshot line (R11), or none when no snapshot was recorded."""
    snap = h.champion_snapshot
    if not isinstance(snap, dict):
        return []
    git = snap.get("git")
    where = f"; git commit {git['commit']} ({'dirty' if git['dirty'] else 'clean'})" if git else ""
    return [
        f"- Champion's code: snapshot `{snap['digest']}` ({snap['files']} file(s){where}); "
        f"get it with `{snap['checkout']}`"
    ]


def render_markdown(handoff: Handoff, decisions: list[NextDecision] | None = None) -> str:
    """Render ``handoff`` (and, for ``resume``, the next ``decisions``) as Markdown."""
    h = handoff
    lines = [
        f"# Handoff: {h.target_id} — {h.title}",
        "",
        f"- Primary: {h.primary}, minimum effect {h.min_effect * 100:.2f} %" + _resolution_text(h),
        f"- Primary achieved: {'yes' if h.primary_achieved else 'no'}",
        f"- Champion: {h.champion}"
        + (
            f" (content hash of its code, as recorded "
            f"{'in the readiness' if h.champion == 'original' else 'for the candidate'}: "
            f"{h.champion_hash})"
            if h.champion_hash
            else ""
        )
        + f", final audit {h.final_audit.text() if h.final_audit else h.final_audit_status}",
        *_snapshot_lines(h),
        *([f"- Champion drawn after {h.formal_draws}"] if isinstance(h.formal_draws, str) else []),
        f"- Stop reason: {h.stop_reason}",
        f"- Ledger head: `{h.head}` (git commit)",
        "",
        "## Key evidence and gains",
        "",
    ]
    in_gains = {g.samples_id for g in h.gains}
    lines += [f"- `{e}`" for e in h.key_evidence if e not in in_gains]
    for g in h.gains:
        speed = "" if g.speedup is None else f", speedup {g.speedup:.4g}x"
        lines.append(
            f"- {g.experiment_id} {g.stage} `{g.samples_id}`: {g.status}, improvement "
            f"{_ratio(g.estimate)} (CI {_ratio(g.ci_low)} .. {_ratio(g.ci_high)}){speed}"
        )
        lines += [f"  - note: {n}" for n in g.notes]
        lines += [f"  - {line}" for line in _gain_details(g)]
    if not h.key_evidence and not h.gains:
        lines.append("- none")
    lines += ["", "## Local results (secondary-only gains, R13)", ""]
    lines += [
        f"- {r.result_id} ({r.experiment_id}): {r.metric} {_ratio(r.estimate)} "
        f"(CI {_ratio(r.ci_low)} .. {_ratio(r.ci_high)}), scenario: {r.scenario}"
        for r in h.local_results
    ] or ["- none"]
    lines += ["", "## Rejected directions", ""]
    lines += [
        f"- {r.experiment_id}: closes {r.closes} — {r.reason}"
        + (f" (note: {r.note})" if r.note else "")
        for r in h.rejected
    ] or ["- none"]
    lines += ["", "## Prediction-error corrections", ""]
    lines += [
        f"- {c.experiment_id}: corrected premise: {c.premise}; corrected model: {c.model}"
        + ("" if c.corrected_bound is None else f" (corrected bound {c.corrected_bound:.4g})")
        + f" — {c.explanation}"
        for c in h.prediction_corrections
    ] or ["- none"]
    lines += ["", "## Unresolved questions", ""]
    lines += [f"- {q}" for q in h.unresolved_questions] or ["- none"]
    b = h.budget
    lines += [
        "",
        "## Budget",
        "",
        "| | total | used | left |",
        "|---|---|---|---|",
        f"| wall | {_seconds(b.wall_s)} | {_seconds(b.wall_used_s)} | {_seconds(b.wall_left_s)} |",
        f"| GPU | {_seconds(b.gpu_s)} | {_seconds(b.gpu_used_s)} | {_seconds(b.gpu_left_s)} |",
        "",
        f"Where the used and left figures come from: {b.source}.",
        "",
        "## To resume",
        "",
    ]
    lines += [f"- {n}" for n in h.resume_needs]
    lines += ["", "## Friction and feedback", "", h.feedback or "none"]
    if decisions is not None:
        lines += ["", "## Next decisions the rules allow", ""]
        lines += [
            f"- `{d.op}` ({d.rule}): {d.why}"
            + (
                ""
                if d.request is None
                else f"; request `{msgspec.json.encode(d.request).decode()}`"
            )
            for d in decisions
        ] or ["- none"]
    return "\n".join(lines) + "\n"
