"""The operation catalog: name -> event kind, request model's and decider's names, CLI group and
verb, rules and help (SPEC.md section 6).

It imports nothing but :mod:`perfledger.errors`: the CLI builds its commands from
:data:`OPERATIONS` without loading a request model or a decider (``perfledger experiment list``
stays near the import floor). The request models are bound in
:mod:`perfledger.commands.registry.request_models`, the deciders and the write path in
:mod:`perfledger.commands.registry.operations`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from perfledger.errors import BadRequest


@dataclass(frozen=True)
class Operation:
    """One write operation.

    Attributes:
        name: ``group.verb`` (``experiment.create``), the key of envelopes' ``request.op``.
        group: the CLI group (``experiment``), or None for a top-level command (``reject``).
        verb: the CLI verb (``create``).
        kind: the event kind it appends.
        model: the request model's name in :mod:`perfledger.commands.workflow.requests`.
        decider: the decider's name in :mod:`perfledger.commands.workflow.deciders`.
        rules: the rule ids it enforces.
        help: one line for ``--help``.
        models: which family's request module holds the model: ``workflow``
            (:mod:`perfledger.commands.workflow.requests`) or ``loop``
            (:mod:`perfledger.commands.loop.requests`), as given to
            :func:`perfledger.commands.registry.request_models.models_module`.
        deciders: which module holds the decider: ``workflow``, ``activity``, ``formal_run``,
            ``review`` or ``loop``, as given to
            :func:`perfledger.commands.registry.operations.decider_module`.
        generic_cli: whether ``workflow_cli`` builds its ``--request`` command (the loop's
            operations have their own CLI, :mod:`perfledger.commands.cli.loop`).
    """

    name: str
    group: str | None
    verb: str
    kind: str
    model: str
    decider: str
    rules: str
    help: str
    models: str = "workflow"
    deciders: str = "workflow"
    generic_cli: bool = True


OPERATIONS: dict[str, Operation] = {
    op.name: op
    for op in (
        Operation(
            "target.freeze",
            "target",
            "freeze",
            "TargetFrozen",
            "TargetFreeze",
            "decide_target_freeze",
            "R1",
            "Freeze a Target (primary, minimum effect, "
            "guardrails, secondaries, scope, risk, budget).",
        ),
        Operation(
            "target.supersede",
            "target",
            "supersede",
            "TargetSuperseded",
            "TargetSupersede",
            "decide_target_supersede",
            "R1",
            "Freeze a new Target in place of the current one.",
        ),
        Operation(
            "readiness.record",
            "readiness",
            "record",
            "ReadinessRecorded",
            "ReadinessRecord",
            "decide_readiness_record",
            "R1 R2",
            "Record readiness: original, real test set, accuracy rule, driver, "
            "environment, statistics.",
        ),
        Operation(
            "metric-audit.record",
            "metric-audit",
            "record",
            "MetricAuditRecorded",
            "MetricAuditRecord",
            "decide_metric_audit_record",
            "R1 R3",
            "Record how a decision metric is computed and whether it matches the Target.",
        ),
        Operation(
            "baseline.record",
            "baseline",
            "record",
            "BaselineRecorded",
            "BaselineRecord",
            "decide_baseline_record",
            "R1 R2 R4 R11",
            "Record the original's baseline from repeated samples.",
        ),
        Operation(
            "resolution.record",
            "resolution",
            "record",
            "ResolutionEstimated",
            "ResolutionRecord",
            "decide_resolution_record",
            "R1 R4",
            "Record the measurement resolution (A/A of the original).",
        ),
        Operation(
            "evidence.add",
            "evidence",
            "add",
            "EvidenceRecorded",
            "EvidenceAdd",
            "decide_evidence_add",
            "R6 R16",
            "Record profiler or compiler facts with their layer.",
        ),
        Operation(
            "upstream-check.record",
            "upstream-check",
            "record",
            "UpstreamCheckRecorded",
            "UpstreamCheckRecord",
            "decide_upstream_check_record",
            "R10",
            "Record an upstream check before a new kernel, primitive or adapter.",
        ),
        Operation(
            "experiment.create",
            "experiment",
            "create",
            "ExperimentCreated",
            "ExperimentCreate",
            "decide_experiment_create",
            "R1 R2 R4 R6 R7 R8 R9 R10 R11 R14",
            "Create an experiment with its opportunity claim and preregistration; "
            "candidate.subject names the candidate's directory, which perfledger hashes (R11).",
        ),
        Operation(
            "samples.record",
            "samples",
            "record",
            "SamplesRecorded",
            "SamplesRecord",
            "decide_samples_record",
            "R1 R2 R3 R4 R5 R8 R11 R15 R17",
            "Record paired samples of one stage (screen, target, final_audit).",
        ),
        Operation(
            "verdict.record",
            "verdict",
            "record",
            "VerdictRecorded",
            "VerdictRecord",
            "decide_verdict_record",
            "R3 R11 R12 R14 R17",
            "Derive and record the verdict of screen or target samples.",
        ),
        Operation(
            "local-result.record",
            "local-result",
            "record",
            "LocalResultRecorded",
            "LocalResultRecord",
            "decide_local_result_record",
            "R13",
            "Record a secondary-only gain as a local result.",
        ),
        Operation(
            "reject",
            None,
            "reject",
            "CandidateRejected",
            "Reject",
            "decide_reject",
            "R15",
            "Reject an experiment, stating what it closes.",
        ),
        Operation(
            "reconcile",
            None,
            "reconcile",
            "ReconciliationRecorded",
            "Reconcile",
            "decide_reconcile",
            "R7 R14",
            "Reconcile a contradicted prediction: corrected premise and model.",
        ),
        Operation(
            "champion.select",
            "champion",
            "select",
            "ChampionSelected",
            "ChampionSelect",
            "decide_champion_select",
            "R1 R2 R3 R11 R13",
            "Select a champion (compare-and-swap), or restore the original.",
        ),
        Operation(
            "final-audit.record",
            "final-audit",
            "record",
            "FinalAuditRecorded",
            "FinalAuditRecord",
            "decide_final_audit_record",
            "R11 R12 R13 R17",
            "Derive and record the final audit of the champion against the original.",
        ),
        Operation(
            "host-advice.record",
            "host-advice",
            "record",
            "HostAdviceRecorded",
            "HostAdviceRecord",
            "decide_host_advice_record",
            "R16",
            "Record host-change advice (never applied).",
        ),
        Operation(
            "handoff.record",
            "handoff",
            "record",
            "HandoffRecorded",
            "HandoffRecord",
            "decide_handoff_record",
            "R18",
            "Record a handoff: state target_id, budget_used, stop_reason and feedback; "
            "perfledger fills the champion, gain figures, rejections and the other lists from "
            "the ledger (stated lists must match it).",
        ),
        Operation(
            "conflict.resolve",
            "conflict",
            "resolve",
            "ConflictResolved",
            "ConflictResolve",
            "decide_conflict_resolve",
            "",
            "Resolve a conflict between concurrent decisions.",
        ),
        Operation(
            "activity.explain",
            "activity",
            "explain",
            "ActivityExplained",
            "ActivityExplain",
            "decide_activity_explain",
            "R17",
            "Explain foreign activity in sample windows after the samples, before the verdict.",
            deciders="activity",
        ),
        Operation(
            "formal-run.start",
            "formal-run",
            "start",
            "FormalRunStarted",
            "FormalRunStart",
            "decide_formal_run_start",
            "R2 R3 R4 R8 R11 R13 R14 R15",
            "Record the start of a formal-stage measurement (perfledger measure does, first).",
            deciders="formal_run",
        ),
    )
}


#: The kernel-iteration loop's operations (R19-R25): requests in ``loop.requests``, deciders in
#: ``loop.deciders``, commands in ``cli.loop`` (which measures, then executes these).
_LOOP: dict[str, Any] = {"models": "loop", "deciders": "loop", "generic_cli": False}
OPERATIONS.update(
    (op.name, op)
    for op in (
        Operation("loop.setup", "loop", "setup", "RunSetUp", "LoopSetup", "decide_loop_setup",
                  "R16 R23", "Set up a kernel-iteration run.", **_LOOP),
        Operation("loop.profile", "loop", "profile", "ProfileRecorded", "LoopProfile",
                  "decide_loop_profile", "R16 R25", "Record one profile of a run's kernel.",
                  **_LOOP),
        Operation("loop.attempt", "loop", "attempt", "AttemptRecorded", "LoopAttempt",
                  "decide_loop_attempt", "R19 R20 R21 R22 R23 R24 R25",
                  "Record a candidate that failed its correctness check.", **_LOOP),
        Operation("loop.close-iter", "loop", "close-iter", "IterationClosed", "LoopCloseIter",
                  "decide_loop_close_iter", "R19 R20 R21 R22 R23 R24 R25",
                  "Close an iteration with its methods, analysis and paired timing.", **_LOOP),
        Operation("loop.finalize", "loop", "finalize", "RunFinalized", "LoopFinalize",
                  "decide_loop_finalize", "", "Finalize a run with its headline.", **_LOOP),
    )
)  # fmt: skip

#: Research and review records: the request in ``requests``, the decider in ``review_deciders``.
OPERATIONS["review.record"] = Operation(
    "review.record", "review", "record", "ReviewRecorded", "ReviewRecord",
    "decide_review_record", "",
    "Record a reviewer's challenge, the response and whether dissent remains (never judged).",
    deciders="review",
)  # fmt: skip


def get_operation(name: str) -> Operation:
    """Return the operation ``name``; BadRequest listing the known ones otherwise."""
    try:
        return OPERATIONS[" ".join(name.split()).replace(" ", ".")]
    except KeyError:
        # `schema supersede` for `target.supersede`: name the one operation with that verb
        alike = [op for op in OPERATIONS if op.rsplit(".", 1)[-1] == name.strip()]
        mean = f"did you mean {alike[0]}? " if len(alike) == 1 else ""
        raise BadRequest(
            f"unknown operation {name!r}", hint=mean + "known: " + ", ".join(sorted(OPERATIONS))
        ) from None


__all__ = ["OPERATIONS", "Operation", "get_operation"]
