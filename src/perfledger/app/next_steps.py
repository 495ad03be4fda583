"""The next steps ``perfledger status``, ``resume`` and the MCP server offer: only those the rules
accept on the head (the application layer: every adapter shows these, none derives its own).

:func:`perfledger.projections.handoff.next_decisions` proposes candidates from the state; this
module keeps a candidate only if the operation's real decider, run dry on the head's state,
accepts it (nothing is appended):

- a candidate with a complete request (a champion selection, a verdict, a final audit) is
  decided as is;
- a candidate whose content the caller writes (a rejection's reason, a reconciliation's premise,
  a conflict's choice, a handoff) is decided on a probe request built from the state, with
  placeholder text where the caller will write;
- an operation that needs data only the caller has (samples, a claim, readiness) cannot be
  decided without it: its decider's preconditions (the same rule checks, in the same order) are
  run instead.

Verdicts and final audits are decided up to their derivation: everything a decider can refuse is
checked before it derives (R12), so the dry run stops there instead of bootstrapping.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

from perfledger.commands.registry import operations
from perfledger.commands.workflow import formal_runs, observed_rules, rules
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import BadRequest, PerfledgerError, RuleRefused
from perfledger.events.workflow import SELF_TIMED_PROTOCOLS
from perfledger.projections.handoff import NextDecision, next_decisions, reviewed
from perfledger.projections.workflow import TargetView, WorkflowState

#: The actor named in dry-run decisions (nothing is appended).
DRY_RUN_ACTOR = "perfledger-resume"
#: Placeholder for free text the caller writes (a probe's reason or explanation).
PLACEHOLDER = "<written by the caller>"


class _Derivable(Exception):
    """Raised by the dry run's ``derive``: the decision got past every refusal to derivation."""


def _stop_at_derivation(*_: Any) -> Any:
    raise _Derivable


def dry_decide(
    state: WorkflowState,
    op: str,
    body: dict[str, Any],
    payload_of: Callable[[str], Any] | None,
    starting_run: str | None = None,
    actor_of: Callable[[str], str] | None = None,
) -> RuleRefused | BadRequest | None:
    """Run operation ``op``'s real decider on ``state`` with ``body``, appending nothing
    (``starting_run``: the samples id of a formal run the caller starts first, R14;
    ``actor_of``: event id -> its appender, where a rule asks who recorded an event, R17).

    Returns: None when the decider accepts it (or reaches derivation, R12), else the refusal
        (RuleRefused) or BadRequest it raised. Never raises for a refusal.
    """

    ctx = DecisionContext(
        op=op,
        actor=DRY_RUN_ACTOR,
        ts=datetime.now(UTC),
        request={"op": op, "body": body},
        payload_of=payload_of,
        derive=_stop_at_derivation,
        starting_run=starting_run,
        actor_of=actor_of,
    )
    try:
        model = operations.validate(op, body)
        operations.decider(op)(state, model, ctx)
    except _Derivable:
        return None
    except (RuleRefused, BadRequest) as exc:
        return exc
    except PerfledgerError as exc:  # an integrity failure reading samples: not offered
        return BadRequest(exc.message, hint=exc.hint)
    return None


def _probe(
    state: WorkflowState, d: NextDecision, handoff_body: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A request for candidate ``d`` whose content the caller writes, built from the state."""
    if d.op == "conflict.resolve":
        conflict = state.conflicts.get(d.about or "")
        if conflict is None or not conflict.options:
            return None
        return {"target_id": conflict.target_id, "conflict_id": conflict.conflict_id,
                "keep": conflict.options[0], "reason": PLACEHOLDER}  # fmt: skip
    if d.op == "reject":
        return {"experiment_id": d.about, "closes": "implementation", "reason": PLACEHOLDER}
    if d.op == "reconcile":
        return {"experiment_id": d.about, "premise": "scope", "explanation": PLACEHOLDER,
                "corrected_model": {"description": PLACEHOLDER}}  # fmt: skip
    if d.op == "review.record":
        view = state.samples.get(d.about or "")
        if view is None:
            return None
        return {"review_id": fresh_id(f"rv-{view.samples_id}", state.reviews.reviews),
                "reviewer": PLACEHOLDER, "model_family": PLACEHOLDER, "subject": "other",
                "subject_event": view.event_id, "challenge": PLACEHOLDER,
                "response": PLACEHOLDER, "dissent_remains": False}  # fmt: skip
    if d.op == "handoff.record":
        return handoff_body
    return None


def _gate(state: WorkflowState, target: TargetView, d: NextDecision) -> None:
    """The preconditions of an operation that needs the caller's data: the checks its decider
    runs before reading that data. Raises: RuleRefused."""
    tid = target.definition.target_id
    if d.op in ("readiness.record", "metric-audit.record", "baseline.record"):
        rules.r1_target_current(state, tid)
        if d.op == "baseline.record":
            rules.r2_ready(target)
    elif d.op == "resolution.record":
        rules.r1_target_current(state, tid)
        if target.baseline is None:
            raise rules.refuse(
                "R4",
                "record the original's measured baseline first"
                + rules.declared_baseline_note(target),
                "`perfledger status` names the baseline measurement of this Target's kind",
            )
    elif d.op == "experiment.create":
        rules.r1_target_current(state, tid)
        rules.r14_no_pending_reconciliation(target)
        rules.r2_ready(target)
        rules.r4_baseline_and_resolution(target)
    elif d.op == "samples.record":
        _gate_samples(state, target, d.about)
    elif d.op == "activity.explain":
        if d.about in state.verdicts or d.about in state.final_audits:
            raise rules.refuse(
                "R17",
                f"the verdict of samples {d.about!r} is already recorded",
                "read it with `perfledger verdict explain ID`; new samples get a verdict of "
                "their own",
            )
        if not reviewed(state, d.about or ""):
            raise rules.refuse(
                "R17",
                f"no review of samples {d.about!r} is recorded: an explanation cites one",
                "another actor records `perfledger review record` of the samples first",
            )


def _gate_samples(state: WorkflowState, target: TargetView, experiment_id: str | None) -> None:
    """``samples.record``'s preconditions for the next stage of ``experiment_id``
    (:func:`~perfledger.commands.workflow.formal_runs.formal_stage_preconditions`, under the
    current rules): the champion's final audit, the target stage after a screen, else a
    screen."""
    rules.r1_target_current(state, target.definition.target_id)
    experiment = state.experiments.get(experiment_id or "")
    stage = "screen"
    if experiment is not None and target.champion == experiment_id:
        stage = "final_audit"
    elif experiment is not None and experiment.samples.get("screen"):
        stage = "target"
    formal_runs.formal_stage_preconditions(state, target, experiment_id, stage, one_result=True)


def allowed_decisions(
    state: WorkflowState,
    target_id: str,
    payload_of: Callable[[str], Any] | None,
    handoff_body: dict[str, Any] | None = None,
) -> list[NextDecision]:
    """The next decisions on ``target_id`` that the rules accept on this state (see the module
    docstring), most urgent first. A champion selection refused as stale (R11), or as resting
    on samples recorded from outside or reported by the subject (R5), is replaced by
    target-stage samples of that experiment measured against the current champion. On a Target
    whose primary the subject reports (:func:`reported_primary`) no new experiment or
    measurement is offered, since none could decide: superseding the Target is, instead.

    Args:
        state: the folded state at the head.
        target_id: a Target of ``state``.
        payload_of: event id -> recorded payload (the verdict deciders read samples by id).
        handoff_body: the ``handoff.record`` request derived from the state (the adapter's
            ``handoff_request``), decided dry as the probe of that candidate (None: the
            candidate is gated on the Target only).
    Raises: KeyError for an unknown Target.
    """
    target = state.targets[target_id]
    demoted = former_champions(target)
    out: list[NextDecision] = []
    reported = reported_primary(state, target, payload_of)
    for d in next_decisions(state, target_id):
        if d.about in demoted or _experiment_of(state, d) in demoted:
            continue  # a champion a later one replaced: closed, never offered again
        if target.status != "current":
            out.append(d)  # "resume from the superseding Target": advice, not a decision
            continue
        if reported is not None and d.op in _REPORTED_ONLY:
            if reported not in out:  # R5: what works instead, where the first such step was
                out.append(reported)
            continue
        body = d.request if d.request is not None else _probe(state, d, handoff_body)
        try:
            if body is not None:
                refusal = dry_decide(state, d.op, body, payload_of)
                if refusal is not None:
                    raise refusal
            else:
                _gate(state, target, d)
        except (RuleRefused, BadRequest) as exc:
            experiment_id = _experiment_of(state, d)
            rule = getattr(exc, "rule", None)
            if d.op == "champion.select" and rule in ("R11", "R5") and experiment_id:
                why = (
                    "is stale (its reference is no longer the current champion): target-stage "
                    "samples against the current champion"
                    if rule == "R11"
                    else _not_measured_why(state, d.about, payload_of)
                )
                stale = NextDecision(op="samples.record", why=f"{experiment_id}'s passed result "
                                     f"{why}", rule=rule, about=experiment_id)  # fmt: skip
                if reported is not None:  # R5: no measurement of it can decide
                    out += [reported] if reported not in out else []
                elif _accepted_gate(state, target, stale):
                    out.append(stale)
            elif (
                d.op == "samples.record"
                and getattr(exc, "rule", None) == "R8"
                and d.about in state.experiments
            ):
                # no target stage can follow (R8): closing the experiment is the step left
                close = NextDecision(op="reject", why=f"{d.about}'s bound cannot clear the "
                                     "minimum effect or the resolution, so no target stage may "
                                     "follow (R8): close its implementation", rule="R8",
                                     about=d.about)  # fmt: skip
                probe = _probe(state, close, handoff_body)
                if probe is not None and dry_decide(state, "reject", probe, payload_of) is None:
                    out.append(close)
            continue
        out.append(d)
    return out


#: The steps whose outcome, on a Target whose primary the subject reports, can only be figures
#: the subject reports (new experiments, their measurements): none of them decides (R5).
_REPORTED_ONLY = ("experiment.create", "samples.record")


def reported_primary(
    state: WorkflowState, target: TargetView, payload_of: Callable[[str], Any] | None
) -> NextDecision | None:
    """R5 (issue 34): where ``target``'s readiness is one the readiness decider now refuses,
    its primary being a figure the workload reports itself (a Target made ready by an older
    perfledger, :func:`perfledger.commands.workflow.observed_rules.check_readiness`), the step
    that works: supersede it with an observed primary (``wall_time`` in ms), the probe
    decided by ``target.supersede``'s own decider. None for any other Target, or where that
    decider refuses the probe."""
    readiness = target.readiness
    if target.status != "current" or readiness is None:
        return None
    try:
        observed_rules.check_readiness(target.definition, readiness)
    except RuleRefused as exc:
        if exc.rule != "R5":
            return None
    else:
        return None
    definition = msgspec.to_builtins(target.definition)
    primary = {**definition["primary"], "name": "wall_time", "unit": "ms",
               "direction": "lower_is_better"}  # fmt: skip
    primary.pop("work_metric", None)
    if primary.get("statistic") not in ("median", "mean", "p95", "p99"):
        primary["statistic"] = "median"  # a rate's statistic does not fit a time
    name = target.definition.primary.name
    new_id = fresh_id(f"{target.definition.target_id}-observed", state.targets)
    probe = {"target_id": target.definition.target_id, "reason": PLACEHOLDER,
             "new_target": {**definition, "target_id": new_id, "primary": primary}}  # fmt: skip
    if dry_decide(state, "target.supersede", probe, payload_of) is not None:
        return None
    return NextDecision(op="target.supersede", why=f"the primary {name!r} is a figure the "
                        "subject reports: no verdict, champion or final audit rests on it (R5); "
                        "supersede the Target with an observed primary (wall_time or cpu_time, "
                        "measured under the worker protocol) and keep it as a secondary",
                        rule="R5", about=target.definition.target_id)  # fmt: skip


def _not_measured_why(
    state: WorkflowState, samples_id: str | None, payload_of: Callable[[str], Any] | None
) -> str:
    """Why a champion selection refused under R5 is replaced by new target-stage samples: its
    samples are figures the subject reported (the self-timed driver), or were recorded from
    outside perfledger; either way the step that works is the worker protocol (an observed
    primary, perfledger's clock)."""
    view = state.samples.get(samples_id or "")
    recorded = None
    if view is not None and payload_of is not None:
        try:
            recorded = payload_of(view.event_id)
        except PerfledgerError:  # unreadable: said as outside, the rule's own default
            recorded = None
    provenance = getattr(recorded, "provenance", None)
    source = getattr(provenance, "source", None)
    if source == "perfledger" and provenance.protocol in SELF_TIMED_PROTOCOLS:
        return ("rests on figures the subject reported (the self-timed driver): target-stage "
                "samples perfledger measures under the worker protocol")  # fmt: skip
    return ("rests on samples recorded from outside perfledger: target-stage samples "
            "perfledger measures under the worker protocol")  # fmt: skip


def former_champions(target: TargetView) -> set[str]:
    """The experiments that were ``target``'s champion and were replaced by a later champion
    (R13 lineage): their work is carried by the champion that replaced them, so nothing offers
    to measure or select them again."""
    current = target.champion
    return {e.champion for e in target.lineage if e.champion not in (current, "original")}


def obligations(state: WorkflowState, target_id: str) -> list[dict[str, Any]]:
    """What blocks decisions on ``target_id``: owed reconciliations (R14), unresolved conflicts,
    and passed target-stage results whose reference is no longer current (R11 stale) that the
    rules let be measured again now (a former champion is not one: see
    :func:`former_champions`). Each ``{"kind", "rule", "about", "text"}``.

    Raises: KeyError for an unknown Target."""
    target = state.targets[target_id]
    out: list[dict[str, Any]] = []
    for pending in target.pending.values():
        out.append({"kind": "reconciliation", "rule": "R14", "about": pending.experiment_id,
                    "text": f"{pending.experiment_id}: result {pending.samples_id} lies outside "
                    "its claim's interval; no new experiment or champion until "
                    "`perfledger reconcile`"})  # fmt: skip
    for conflict in state.conflicts.values():
        if conflict.target_id == target_id and conflict.resolved_by is None:
            out.append({"kind": "conflict",
                        "rule": {"champion": "R13", "owed_champion": "R14"}.get(conflict.kind, "R1"),
                        "about": conflict.conflict_id,
                        "text": f"{conflict.kind} conflict {conflict.conflict_id} between "
                        f"{' and '.join(conflict.options)} blocks {conflict.kind} decisions: "
                        f"`perfledger resolve {conflict.conflict_id} --keep OPTION`"})  # fmt: skip
    demoted = former_champions(target)
    for experiment_id in target.experiments:
        e = state.experiments.get(experiment_id)
        if e is None or e.status != "passed" or experiment_id in demoted:
            continue
        latest = (e.samples.get("target") or [None])[-1]
        view = state.samples.get(latest or "")
        if view is None or rules.is_current_reference(state, target, view.reference):
            continue
        again = NextDecision(op="samples.record", why="", rule="R11", about=experiment_id)
        if target.status == "current" and _accepted_gate(state, target, again):
            out.append({"kind": "stale", "rule": "R11", "about": latest,
                        "text": f"{experiment_id}'s passed result {latest} was measured against "
                        "a reference that is no longer the current champion: measure its target "
                        "stage again before selecting it"})  # fmt: skip
    return out


def fresh_id(base: str, taken: Any) -> str:
    """``base``, or ``base-2``, ``base-3``, ... : the first not in ``taken``."""
    n, found = 1, base
    while found in taken:
        n += 1
        found = f"{base}-{n}"
    return found


def _experiment_of(state: WorkflowState, d: NextDecision) -> str | None:
    view = state.samples.get(d.about or "")
    return view.experiment_id if view is not None else None


def gate_refusal(
    state: WorkflowState, target: TargetView, d: NextDecision
) -> RuleRefused | BadRequest | None:
    """The refusal of ``d``'s preconditions on ``target`` (an operation that needs the
    caller's data, decided up to reading it), or None when they hold."""
    try:
        _gate(state, target, d)
    except (RuleRefused, BadRequest) as exc:
        return exc
    return None


def _accepted_gate(state: WorkflowState, target: TargetView, d: NextDecision) -> bool:
    try:
        _gate(state, target, d)
    except RuleRefused:
        return False
    return True
