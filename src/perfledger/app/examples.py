"""Examples fitted to a ledger (``perfledger schema OP --example --ledger L``, issue 38): the
request an agent can submit on that ledger now, or, where the operation cannot apply to its
state, the decider's own refusal instead of an example that would be refused.

The packaged example (:func:`perfledger.commands.registry.request_examples.example`) is rewritten
from the state: the current Target's id, its primary's name and unit, its readiness's original
hash and environment, the ledger's real experiment, samples, review and conflict ids (or the id
the next measuring command would take, ``E-STAGE-N``), fresh ids where the request creates
something, the event ids a review can cite. The result is then decided dry by the operation's
real decider (:func:`perfledger.app.next_steps.dry_decide`, nothing appended): the example is
shown only when accepted, else its refusal (rule, message, hint) is.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from perfledger.app.context import context_of, default_samples_id, stand_in_samples
from perfledger.app.next_steps import allowed_decisions, dry_decide, fresh_id, gate_refusal
from perfledger.commands.registry import request_examples
from perfledger.commands.registry.operations import get_operation, json_schema
from perfledger.commands.registry.placeholders import filled, with_placeholders
from perfledger.commands.workflow import observed_rules
from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.workflow import FORMAL_STAGES, OBSERVED_METRICS
from perfledger.projections.handoff import NextDecision, reviewed
from perfledger.projections.target_kind import measuring_command, next_stage
from perfledger.projections.workflow import TargetView, WorkflowState, is_judged


@dataclass(frozen=True)
class FittedExample:
    """An example of ``op`` fitted to a ledger's state.

    Attributes:
        op: the operation's name.
        body: the request (accepted on the state when ``refusal`` is None, once each free-text
            placeholder ``<...>`` is replaced by what the agent knows).
        refusal: the decider's refusal of ``body`` on that state: the operation cannot apply
            now (None: accepted).
        note: what the agent should know beside it (a measuring command that records it, the
            other actor a review needs), or None.
    """

    op: str
    body: dict[str, Any]
    refusal: RuleRefused | BadRequest | None
    note: str | None = None


def fitted_example(
    op: str,
    state: WorkflowState,
    payload_of: Callable[[str], Any] | None,
    actor_of: Callable[[str], str] | None = None,
) -> FittedExample:
    """The example of ``op`` fitted to ``state`` and decided dry on it (see the module
    docstring). ``payload_of``/``actor_of``: event id -> payload / appending actor (the
    ledger's).

    Raises: BadRequest for an unknown operation."""
    name = get_operation(op).name
    # free text only the agent knows is a placeholder (a request is refused with it); the
    # fitters may write what the ledger knows in its place
    body = copy.deepcopy(with_placeholders(name, request_examples.example_for(name, state)))
    target = _current_target(state)
    fit = _FITTERS.get(name)
    note: str | None = None
    starting_run: str | None = None
    if target is None and name not in ("target.freeze", "evidence.add"):
        body.pop("target_id", None)  # optional where it may be left out (advice, checks)
        if "target_id" in json_schema(name).get("required", []) or name not in (
            "host-advice.record",
            "upstream-check.record",
        ):
            refusal = BadRequest(
                f"{name} cannot apply to this ledger now: no Target is frozen",
                hint="freeze one first: `perfledger schema target.freeze --example` shows the "
                "request",
            )
            return FittedExample(op=name, body=body, refusal=refusal)
    if target is not None and fit is not None:
        try:
            body, note, starting_run = fit(state, target, body, payload_of)
        except NotApplicable as exc:
            refusal = BadRequest(f"{name} cannot apply to this ledger now: {exc.message}",
                                 hint=exc.hint)  # fmt: skip
            return FittedExample(op=name, body=body, refusal=refusal)
    # decided with each placeholder's words in its place
    if name == "experiment.create" and "subject" in body.get("candidate", {}):
        # the candidate's directory is snapshotted at the edge: decide what the edge checks
        refusal = _experiment_gate(state, target)
    else:
        refusal = dry_decide(state, name, _edge_free(name, filled(body)), payload_of,
                             starting_run, actor_of=actor_of)  # fmt: skip
    return FittedExample(op=name, body=body, refusal=refusal, note=note)


@dataclass(frozen=True)
class SchemaExample:
    """The answer of ``perfledger schema OP --example``: ``body`` (stdout: one request as is),
    ``note`` (stderr: what else to know, or None) and, on a ledger where ``op`` cannot apply
    now, ``refusal`` (the decider's; ``body`` then unused)."""

    op: str
    body: Any
    note: str | None = None
    refusal: RuleRefused | BadRequest | None = None


def schema_example(
    op: str | None, *, open_ledger: Callable[[], Any], variants: bool = False
) -> SchemaExample:
    """A valid example request of ``op``: with a ledger (``open_ledger`` does not refuse), the
    example fitted to its state and decided dry on it (:func:`fitted_example`; R11: subject
    directories or not); without one, the catalog's example, its other Target kind's form in
    ``note`` (``variants``: both forms as ``{"variants": {...}}`` instead).
    Raises: BadRequest without ``op`` or for an unknown one."""
    if op is None:
        raise BadRequest("--example needs an OPERATION", hint="perfledger schema")
    try:
        ledger = open_ledger()
    except BadRequest:
        ledger = None
    if ledger is not None:
        try:  # fitted to the ledger's state and decided on it: shown only if accepted
            fitted = fitted_example(op, ledger.state(), ledger.payload,
                                    lambda event_id: ledger.get(event_id).actor)  # fmt: skip
        finally:
            ledger.close()
        return SchemaExample(fitted.op, fitted.body, fitted.note, fitted.refusal)
    both = request_examples.variants(op)
    if not both:  # free text only the agent knows shown as a placeholder (refused as is)
        return SchemaExample(op, request_examples.shown(op))
    if variants:
        return SchemaExample(op, {"variants": both})
    if "GPU Target" in both:  # one request as is; the other in the note
        return SchemaExample(op, both["GPU Target"], (
            "this example is for a GPU Target; for a CPU workload Target (no GPU "
            "budget; the worker observes cpu_time or wall_time): "
            + _json_text(both["CPU workload Target"])
            + "; run with --ledger LEDGER for the example that fits its Target"
        ))  # fmt: skip
    (first, body), (other, other_body) = both.items()
    return SchemaExample(op, body, (
        f"this example is for a Target {first}; for a Target {other} (its "
        "readiness binds the original's directory, R11) name the candidate's directory "
        "in candidate.subject: perfledger snapshots it and computes content_hash and "
        "changed_paths (typed changed_paths are refused): "
        + _json_text(other_body.get("candidate"))
        + "; run with --ledger LEDGER for the example that fits its Target"
    ))  # fmt: skip


def _json_text(data: Any) -> str:
    """``data`` as compact JSON text with sorted keys (as the CLI prints JSON)."""
    return msgspec.json.encode(data, order="sorted").decode("utf-8")


def _edge_free(name: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the decider sees it without the edge's snapshot (``original.subject`` ->
    ``original.snapshot``, R11, which reads the directory): the driver with the directory in
    its ``{subject}`` place, every other field as sent."""
    original = body.get("original")
    driver = body.get("driver")
    if name != "readiness.record" or not isinstance(original, dict) or "subject" not in original:
        return body
    subject = str(original["subject"])
    argv = driver.get("argv", []) if isinstance(driver, dict) else []
    return {
        **body,
        "original": {k: v for k, v in original.items() if k != "subject"},
        "driver": {**driver, "argv": [str(w).replace("{subject}", subject) for w in argv]},
    }


def _current_target(state: WorkflowState) -> TargetView | None:
    current = [v for v in state.targets.values() if v.status == "current"]
    return current[0] if current else None


def _experiment_gate(
    state: WorkflowState, target: TargetView | None
) -> RuleRefused | BadRequest | None:
    if target is None:
        return BadRequest("no current Target", hint="freeze one: `perfledger target freeze`")
    return gate_refusal(state, target, NextDecision(op="experiment.create", why="", rule="R7"))


Fitted = tuple[dict[str, Any], str | None, str | None]


class NotApplicable(Exception):
    """Raised by a fitter: nothing on the ledger's state is what the operation acts on (no
    samples to judge, no conflict, ...): shown as a BadRequest with ``hint``."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _tid(target: TargetView) -> str:
    return target.definition.target_id


def _next_id(prefix: str, taken: Any) -> str:
    """``prefix1``, ``prefix2``, ...: the first not in ``taken``."""
    n = 1
    while f"{prefix}{n}" in taken:
        n += 1
    return f"{prefix}{n}"


def _definition(target: TargetView, target_id: str) -> dict[str, Any]:
    """``target``'s definition as a ``target.freeze`` body under ``target_id``."""
    data = msgspec.to_builtins(target.definition)
    allowed = set(json_schema("target.freeze").get("properties", {}))
    return {**{k: v for k, v in data.items() if k in allowed}, "target_id": target_id}


def _freeze(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    fresh = _next_id("t", state.targets)
    return (
        {**_definition(target, fresh), "title": f"{target.definition.title} (copy)"},
        (f"a new Target {fresh} with {_tid(target)}'s definition; change what differs"),
        None,
    )


def _supersede(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    fresh = _next_id("t", state.targets)
    body["target_id"] = _tid(target)
    body["new_target"] = {**_definition(target, fresh),
                          "title": f"{target.definition.title} (revised)"}  # fmt: skip
    return body, f"the new Target {fresh} starts from {_tid(target)}'s definition", None


def _metric_audit(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    primary = target.definition.primary
    body.update(target_id=_tid(target), metric=primary.name, unit=primary.unit,
                **request_examples.metric_audit_words(primary))  # fmt: skip
    return body, None, None


#: The readiness driver of a GPU Target's example whose primary perfledger does not observe:
#: the kernel harness (it times every batch itself, R5); a workload driver's own figure is
#: secondary only (``ReadinessRecorded`` 6).
KERNEL_HARNESS_DRIVER = {"argv": ["perfledger", "measure", "kernel", "--spec", "spec.py"]}


def _readiness(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    if not request_examples.runs_on_cpu(target):
        fitted = {**body, "target_id": _tid(target)}
        primary = target.definition.primary.name
        if primary not in OBSERVED_METRICS and not observed_rules.serving_primary(primary):
            fitted["driver"] = dict(KERNEL_HARNESS_DRIVER)
            fitted.pop("accuracy", None)  # the harness judges every output itself
        return fitted, None, None
    return (
        request_examples.workload_readiness(body, _tid(target)),
        "original.subject is the original's code directory (snapshotted now, R11); the "
        "environment is `perfledger env --json`'s readiness_environment; the test set's hash "
        "and cases are the real ones",
        None,
    )


def _baseline(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    primary = target.definition.primary
    body.update(target_id=_tid(target), metric=primary.name, unit=primary.unit)
    if target.readiness is not None:
        body.update(original_hash=target.readiness.original.content_hash,
                    environment_id=target.readiness.environment_id)  # fmt: skip
    return body, _measured_note(state, target, "baseline.record", None), None


def _resolution(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    body["target_id"] = _tid(target)
    return (
        body,
        _measured_note(state, target, "resolution.record", None)
        + ("; a typed resolution is recorded as declared and decides nothing (R4)"),
        None,
    )


def _measured_note(state: WorkflowState, target: TargetView, op: str, about: str | None) -> str:
    return (
        "perfledger measures and records this: `"
        + measuring_command(state, _tid(target), op, about).replace(" T ", f" {_tid(target)} ")
        + "`"
    )


def _evidence(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    if request_examples.runs_on_cpu(target):
        body = request_examples.workload_evidence(body, _tid(target))
    body["evidence_id"] = fresh_id(str(body.get("evidence_id", "ev")), state.evidence)
    body["target_id"] = _tid(target)
    return body, None, None


def _experiment(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    if request_examples.runs_on_cpu(target):
        body = request_examples.workload_claim_scope(body, target)
    body["experiment_id"] = _next_id("e", state.experiments)
    body["target_id"] = _tid(target)
    claim = body.get("claim")
    known = list(state.evidence)
    if isinstance(claim, dict) and known:
        for cited in claim.get("evidence", []):
            cited["evidence_id"] = known[-1]
    candidate = body.get("candidate")
    if isinstance(candidate, dict) and "content_hash" in candidate:
        candidate["content_hash"] = _unused_hash(state, target)
    note = None if known else "a claim cites recorded evidence: `perfledger evidence add` first"
    return body, note, None


def _unused_hash(state: WorkflowState, target: TargetView) -> str:
    """A content hash no experiment, champion or original of the ledger has (a candidate must
    differ from its reference, R11)."""
    used = {e.created.candidate.content_hash for e in state.experiments.values()}
    if target.readiness is not None:
        used.add(target.readiness.original.content_hash)
    n = 1
    while f"sha256:{n:016x}" in used:
        n += 1
    return f"sha256:{n:016x}"


def _open_experiments(state: WorkflowState, target: TargetView) -> list[str]:
    """``target``'s experiments that are not rejected (the deciders say which may be measured)."""
    return [
        e
        for e in target.experiments
        if e in state.experiments and state.experiments[e].rejection is None
    ]


def _samples(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    """The next samples a measuring command would record, of the first experiment that may be
    measured now: its stage, ``E-STAGE-N`` id, reference, candidate, the Target's primary and
    cases (outside samples: typed, not measured, R5)."""
    tid = _tid(target)
    chosen: Fitted | None = None
    for experiment_id in reversed(_open_experiments(state, target)):
        stage = next_stage(state, tid, experiment_id)
        try:
            info = context_of(state, experiment_id, stage)
        except BadRequest:
            continue
        sid = default_samples_id(experiment_id, stage, state)
        fitted = stand_in_samples(
            info, experiment_id=experiment_id, stage=stage, samples_id=sid, cases=info["cases"],
            environment_id=info["readiness_environment_id"], protocol="typed", monitored=True,
        )  # fmt: skip
        fitted.pop("provenance", None)  # typed values: outside samples (R5)
        formal = stage in FORMAL_STAGES
        note = _measured_note(state, target, "samples.record", experiment_id) + (
            f"; a formal stage starts its run first (`formal-run.start` with samples_id {sid})"
            if formal
            else ""
        )
        candidate = (fitted, note, sid if formal else None)
        if chosen is None:
            chosen = candidate
        if dry_decide(state, "samples.record", fitted, payload_of, candidate[2]) is None:
            return candidate
    if chosen is None:
        raise NotApplicable(
            f"Target {tid} has no experiment that may be measured",
            "create one first (`perfledger schema experiment.create --example` on this ledger)",
        )
    return chosen


def _formal_run(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    tid = _tid(target)
    chosen: dict[str, Any] | None = None
    for experiment_id in reversed(_open_experiments(state, target)):
        stage = next_stage(state, tid, experiment_id)
        if stage not in FORMAL_STAGES:
            continue
        fitted = {**body, "experiment_id": experiment_id, "stage": stage,
                  "samples_id": default_samples_id(experiment_id, stage, state)}  # fmt: skip
        chosen = chosen or fitted
        if dry_decide(state, "formal-run.start", fitted, payload_of) is None:
            return fitted, None, None
    if chosen is None:
        raise NotApplicable(
            f"no experiment of Target {tid} has a formal stage (target, final audit) next",
            "a target stage follows a screen's verdict; a final audit follows a champion "
            "selection (`perfledger status` names the next steps)",
        )
    return chosen, None, None


def _offered(state: WorkflowState, target: TargetView, op: str, payload_of: Any) -> Any:
    """The first next decision of ``op`` the rules accept on ``target`` now, or None."""
    for d in allowed_decisions(state, _tid(target), payload_of):
        if d.op == op:
            return d
    return None


def _verdict(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    d = _offered(state, target, "verdict.record", payload_of)
    if d is not None and d.request is not None:
        return dict(d.request), None, None
    unjudged = [s for s, v in state.samples.items() if v.target_id == _tid(target)
                and v.stage != "final_audit" and not is_judged(state, s)]  # fmt: skip
    if not unjudged:
        raise NotApplicable(
            f"Target {_tid(target)} has no screen or target samples without a verdict",
            "measure samples first (`perfledger status` names the measuring command)",
        )
    body["samples_id"] = unjudged[-1]
    return body, None, None


def _final_audit(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    body["target_id"] = _tid(target)
    d = _offered(state, target, "final-audit.record", payload_of)
    if d is not None and d.request is not None:
        return dict(d.request), None, None
    audits = [s for s, v in state.samples.items()
              if v.target_id == _tid(target) and v.stage == "final_audit"]  # fmt: skip
    if not [s for s in audits if s not in state.final_audits]:
        raise NotApplicable(
            f"Target {_tid(target)} has no final-audit samples without a final audit",
            "a champion's final audit is measured first (`perfledger status` names the command)",
        )
    body["samples_id"] = [s for s in audits if s not in state.final_audits][-1]
    return body, None, None


def _champion(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    d = _offered(state, target, "champion.select", payload_of)
    if d is not None and d.request is not None:
        return dict(d.request), None, None
    body.update(target_id=_tid(target), expected_current=target.champion or "original")
    raise NotApplicable(
        f"no passed target-stage result of Target {_tid(target)} may be selected now",
        "a champion is a target stage that passed against the current champion (R13): "
        "`perfledger status` names the next steps",
    )


def _flagged(state: WorkflowState, target: TargetView) -> str | None:
    """The latest samples of ``target`` with foreign activity left to explain, no verdict."""
    for sid in reversed(list(state.samples)):
        view = state.samples[sid]
        if view.target_id != _tid(target) or sid in state.verdicts or sid in state.final_audits:
            continue
        explained = {i for e in state.explanations.get(sid, []) for i in e.pairs}
        if view.unexplained_activity > len(explained):
            return sid
    return None


def _explain(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    sid = _flagged(state, target)
    if sid is None or payload_of is None:
        raise NotApplicable(
            f"no samples of Target {_tid(target)} without a verdict have foreign activity "
            "left to explain",
            "nothing to explain: `perfledger verdict explain ID` shows a verdict's windows",
        )
    view = state.samples[sid]
    explained = {i for e in state.explanations.get(sid, []) for i in e.pairs}
    pairs = payload_of(view.event_id).pairs
    body["samples_id"] = sid
    body["pairs"] = [i for i, p in enumerate(pairs) if p.monitor is not None
                     and p.monitor.foreign_activity and i not in explained]  # fmt: skip
    reviews = [v.review.review_id for v in state.reviews.reviews.values()
               if v.review.subject_event == view.event_id and not v.review.dissent_remains]  # fmt: skip
    body["review_id"] = reviews[-1] if reviews else f"rv-{sid}"
    note = None if reviewed(state, sid) else (
        f"first another actor reviews samples {sid}: `perfledger schema review.record --example` "
        "on this ledger, recorded with `perfledger review record --actor REVIEWER`"
    )  # fmt: skip
    return body, note, None


def _review(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    body["review_id"] = fresh_id("rv-1", state.reviews.reviews)
    sid = _flagged(state, target)
    if sid is not None:
        view = state.samples[sid]
        body.update(subject="other", subject_event=view.event_id, review_id=fresh_id(
            f"rv-{sid}", state.reviews.reviews), dissent_remains=False,
            challenge=f"samples {sid} saw foreign activity in some windows: could it move "
            f"{target.definition.primary.name}?",
            response="<what ran, where, and why it cannot move the metric>")  # fmt: skip
        return (
            body,
            (
                "recorded by another actor than the experiment's agent (`perfledger review record "
                f"--actor REVIEWER`); then `perfledger activity explain` cites review_id "
                f"{body['review_id']}"
            ),
            None,
        )
    experiments = [e for e in target.experiments if e in state.experiments]
    if experiments:
        body.update(subject="claim", subject_event=state.experiments[experiments[-1]].event_id)
    else:
        body.update(subject="other", subject_event=target.frozen_event)
    return body, None, None


def _reject(
    state: WorkflowState, target: TargetView, body: dict[str, Any], payload_of: Any
) -> Fitted:
    d = _offered(state, target, "reject", payload_of)
    candidates = [d.about] if d is not None else []
    candidates += [e for e in reversed(_open_experiments(state, target))
                   if target.champion != e]  # fmt: skip
    if not candidates:
        raise NotApplicable(
            f"Target {_tid(target)} has no open experiment to reject (rejected ones are closed; "
            "the champion is replaced by a new selection, not rejected)",
            "create an experiment first, or read `perfledger status`",
        )
    experiment_id = candidates[0]
    e = state.experiments[experiment_id]
    taken = [s for stage in ("screen", "target") for s in e.samples.get(stage, [])]
    body.update(experiment_id=experiment_id, closes=e.created.preregistration.rejects)
    if taken:
        body["samples_ids"] = taken
    else:
        body.pop("samples_ids", None)
    return body, None, None


def _reconcile(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    if not target.pending:
        raise NotApplicable(
            f"no reconciliation is owed on Target {_tid(target)} (R14: only a result outside "
            "its claim's interval owes one)",
            "nothing to reconcile: `perfledger status` lists what is owed",
        )
    body["experiment_id"] = next(iter(target.pending))
    return body, None, None


def _conflict(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    body["target_id"] = _tid(target)
    for conflict in state.conflicts.values():
        if conflict.target_id == _tid(target) and conflict.resolved_by is None:
            body.update(conflict_id=conflict.conflict_id, keep=conflict.options[0])
            return body, None, None
    raise NotApplicable(
        f"Target {_tid(target)} has no unresolved conflict",
        "conflicts come from decisions made on diverged clones (`perfledger sync`); none to resolve",
    )


def _handoff(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    budget = target.definition.budget
    body["target_id"] = _tid(target)
    # only what the Target budgets: a Target without a GPU budget states no GPU time
    body["budget_used"] = {"wall_s": min(1200.0, budget.wall_s),
                           "gpu_s": min(600.0, budget.gpu_s)}  # fmt: skip
    return body, "`perfledger handoff record --target T` fills the rest from the ledger", None


def _with_target(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    body["target_id"] = _tid(target)
    for key, taken in (("advice_id", state.host_advice), ("check_id", state.upstream_checks)):
        if key in body:
            body[key] = fresh_id(str(body[key]), taken)
    return body, None, None


def _local_result(state: WorkflowState, target: TargetView, body: dict[str, Any], _: Any) -> Fitted:
    secondaries = list(target.definition.secondaries)
    if secondaries:
        body["metric"] = secondaries[0].name
    judged = [s for s, v in state.verdicts.items()
              if v.target_id == _tid(target) and v.stage == "target"]  # fmt: skip
    if not judged:
        raise NotApplicable(
            f"Target {_tid(target)} has no target-stage verdict a local result could cite",
            "a local result is a secondary metric's gain measured at the target stage (R13)",
        )
    body["samples_id"] = judged[-1]
    body["result_id"] = fresh_id(str(body.get("result_id", "lr")), state.local_results)
    return body, None, None


_FITTERS: dict[str, Callable[[WorkflowState, TargetView, dict[str, Any], Any], Fitted]] = {
    "target.freeze": _freeze,
    "target.supersede": _supersede,
    "metric-audit.record": _metric_audit,
    "readiness.record": _readiness,
    "baseline.record": _baseline,
    "resolution.record": _resolution,
    "evidence.add": _evidence,
    "experiment.create": _experiment,
    "samples.record": _samples,
    "formal-run.start": _formal_run,
    "verdict.record": _verdict,
    "final-audit.record": _final_audit,
    "champion.select": _champion,
    "activity.explain": _explain,
    "review.record": _review,
    "reject": _reject,
    "reconcile": _reconcile,
    "conflict.resolve": _conflict,
    "handoff.record": _handoff,
    "host-advice.record": _with_target,
    "upstream-check.record": _with_target,
    "local-result.record": _local_result,
}


__all__ = ["FittedExample", "NotApplicable", "SchemaExample", "fitted_example", "schema_example"]
