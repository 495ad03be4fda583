"""Measure a kernel comparison with the harness and record it (SPEC.md section 5, "Kernel
harness"; R5, R11, R14, R15, R17).

:func:`measure_kernel` is the use case behind ``perfledger measure kernel``: the REFERENCE and
CANDIDATE of a spec file (or, on a Target whose readiness bound the original's code, the
SUBJECT of the spec in each subject's directory, both snapshotted and checked first, R11), per
case, each subject in a worker process of its own
(:func:`perfledger.kernels.isolation.isolated.compare_spec`: this process never loads the spec).
Each ABBA block (one monitor window) becomes one recorded pair whose values are the block's
per-call times in the Target's primary unit (``same_process: true``). In order: every refusal
recording would raise is decided on a stand-in before the harness runs; the formal run's start
is recorded (R14); the harness runs under the monitor; ``samples.record`` is appended with the
per-case table attached as ``samples.json``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from perfledger.app.context import (
    SAMPLES_ARTIFACT,
    check_cases,
    check_environment,
    default_samples_id,
    environment_payload,
    experiment_context,
    measured_provenance,
    refuse_before_measuring,
    refuse_formal_dry_run,
    stand_in_samples,
    start_formal_run,
    start_monitor,
)
from perfledger.app.identity import SubjectsWatch, fresh_and_unchanged
from perfledger.app.kernel_identity import bound_kernel_subjects, kernel_batch_checks, unbound_note
from perfledger.app.measure_baseline import Progress, no_progress
from perfledger.app.measure_workload import held
from perfledger.app.measuring import ceilings, time_scale
from perfledger.app.recording import Warn, append_measured, no_warnings
from perfledger.commands.workflow.output_rules import compared
from perfledger.commands.workflow.samples_body import samples_body
from perfledger.errors import BadRequest, MeasurementError
from perfledger.events.workflow import FORMAL_STAGES

#: The protocol ``measure kernel`` records (provenance, formal run).
KERNEL_PROTOCOL = "kernel_harness_abba"


class MeasureKernel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to measure one stage of a kernel experiment with the harness.

    Attributes:
        experiment_id: the experiment.
        stage: ``screen``, ``target`` or ``final_audit``.
        spec: a spec file defining PROBLEMS, REFERENCE and CANDIDATE (an unbound Target).
        ref_dir, cand_dir: the reference's and the candidate's code directories (a Target whose
            readiness bound the original's code, R11; instead of ``spec``).
        samples_id: the samples' id (None: ``E-STAGE-N``).
        monitor: run the NVML monitor (False: screens only).
        dry_run: measure, record nothing (a screen only, R14).
        actor: who records.
        idempotency_key: a retry-safe key for the append.
    """

    experiment_id: str
    stage: Literal["screen", "target", "final_audit"]
    spec: str | None = None
    ref_dir: str | None = None
    cand_dir: str | None = None
    samples_id: str | None = None
    monitor: bool = True
    dry_run: bool = False
    actor: str
    idempotency_key: str | None = None


class MeasuredKernel(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_kernel` measured and recorded.

    Attributes:
        samples_id: the samples' id.
        pairs_recorded: pairs (ABBA blocks) in the samples.
        stats: case -> the harness's statistics (ratio, CI, direction) or None.
        flags: case -> what the harness flagged (a re-check, the clock, a digest...).
        environment_id: this machine's environment identity.
        monitor: ``idle``, why the GPU was not idle, or why there was no monitor.
        code_identity: ``{"enforced": False, "note"}`` where the Target is not bound to code.
        request: the ``samples.record`` body on a dry run (None otherwise).
        event_id, kind: the appended event (None on a dry run).
        snapshots: role -> snapshot digest, where the code was snapshotted (R11).
        findings: lines for people: ``FLAG`` per flagged case, unconfirmable clock notes.
    """

    samples_id: str
    pairs_recorded: int
    stats: dict[str, Any]
    flags: dict[str, list[str]]
    environment_id: str
    monitor: str | None
    code_identity: dict[str, Any] | None = None
    request: dict[str, Any] | None = None
    event_id: str | None = None
    kind: str | None = None
    snapshots: dict[str, str] | None = None
    findings: list[str] = []

    def answer(self) -> dict[str, Any]:
        """The ``--json`` answer of ``perfledger measure kernel`` (no ``findings``)."""
        out = msgspec.to_builtins(self)
        out.pop("findings", None)
        for key in ("code_identity", "request", "event_id", "kind", "snapshots"):
            if out.get(key) is None:
                out.pop(key, None)
        return out


def measure_kernel(
    ledger: Any,
    request: MeasureKernel,
    *,
    progress: Progress = no_progress,
    warn: Warn = no_warnings,
) -> MeasuredKernel:
    """Measure and record one stage of a kernel experiment (module docstring).

    Args:
        ledger: the open ledger.
        request: the :class:`MeasureKernel`.
        progress: ``(total, label) -> context manager yielding advance()``.
        warn: handed warnings as soon as they are known (before the harness runs).
    Returns: the :class:`MeasuredKernel`.
    Raises: BadRequest (exit 2) and RuleRefused (exit 3) before the harness runs (R11, R14,
        R15, ...); MeasurementError (exit 1) when a subject fails correctness (R5); RuleRefused
        when the subjects' files changed during the run (R11).
    """
    from perfledger.kernels.isolation.isolated import compare_spec, spec_facts  # noqa: PLC0415 (numpy via perfledger.kernels.isolation.isolated)

    experiment_id, stage = request.experiment_id, request.stage
    refuse_formal_dry_run(stage, request.dry_run)
    info = experiment_context(ledger, experiment_id, stage)
    # R11: both code directories snapshotted and checked before anything runs
    bound = bound_kernel_subjects(
        ledger, info, request.spec, request.ref_dir, request.cand_dir, stage, experiment_id
    )
    # the Target's accuracy rule judges the revealed outputs (None: the problem's tolerances)
    accuracy = compared(info["target"].readiness)
    unenforced = None if bound is not None else unbound_note(info["target"])
    if unenforced is not None:  # the old rule: say so before measuring
        warn([unenforced])
    # property 3: the spec (subject code) runs only in worker processes; this one asks them
    spec = bound.spec if bound is not None else request.spec or ""
    dirs = None if bound is None else bound.directories
    facts = spec_facts(spec, directory=None if dirs is None else dirs[0])
    if bound is None and not facts["has_candidate"]:
        raise BadRequest(
            f"the spec {request.spec!r} defines no CANDIDATE",
            hint="define CANDIDATE in the spec (docs/subjects.md); on a Target bound to code, --ref DIR --cand DIR",
        )
    if bound is not None and not facts.get("has_subject"):
        raise BadRequest(
            f"the spec {spec!r} in {request.ref_dir!r} defines no SUBJECT",
            hint="a spec in a subject directory defines PROBLEMS and SUBJECT (its code)",
        )
    cases = check_cases(facts["cases"], info["test_set"], f"the spec {spec!r}")
    primary = info["primary"]
    scale = time_scale(primary.unit)
    env = environment_payload()
    check_environment(env, info)
    sid = request.samples_id or default_samples_id(experiment_id, stage, info["state"])
    # every refusal recording would raise, before the harness runs (R11, R15, R14)
    stand_in = stand_in_samples(
        info, experiment_id=experiment_id, stage=stage, samples_id=sid, cases=cases,
        environment_id=env["environment_id"], protocol=KERNEL_PROTOCOL,
        monitored=request.monitor, identity=None if bound is None else bound.identity,
    )  # fmt: skip
    refuse_before_measuring(ledger, stand_in, request.actor)
    start_formal_run(ledger, experiment_id, stage, sid, KERNEL_PROTOCOL, request.actor)
    monitor, monitor_note = start_monitor(request.monitor)
    comparisons = {}
    with held(monitor, None):
        if monitor is not None:
            idle = monitor.idle_check()
            monitor_note = monitor_note or ("idle" if idle.idle else f"not idle: {idle.reasons}")
        with progress(len(cases), "kernel comparisons") as advance:
            measured_ceilings = ceilings(remeasure=stage in FORMAL_STAGES)
            before_batch = None
            if bound is not None:  # R11: no bytecode planted before the run is loaded
                fresh_and_unchanged(info, bound.identity)
                watch = SubjectsWatch(info, bound.identity, strict=True)
                # both directories checked before every batch (lstat: a file written since the
                # run began is refused, restored or not), not only after the case, and the
                # workers' Python start-up files
                before_batch = kernel_batch_checks(watch)
            for case in cases:
                comparisons[case] = compare_spec(
                    spec,
                    case,
                    ceilings=measured_ceilings,
                    monitor=monitor,
                    directories=dirs,
                    before_batch=before_batch,
                    accuracy=accuracy,
                )
                if bound is not None:  # R11: the code measured is the code snapshotted
                    watch()
                    fresh_and_unchanged(info, bound.identity)
                advance()
    pairs, table = _pairs_and_table(comparisons, primary.name, scale, env["environment_id"])
    body = samples_body(
        info, samples_id=sid, experiment_id=experiment_id, stage=stage,
        environment_id=env["environment_id"], units={primary.name: primary.unit}, pairs=pairs,
    )  # fmt: skip
    subjects = next(iter(comparisons.values())).settings["subjects"]
    if bound is not None:
        body["identity"] = bound.identity
    body["provenance"] = measured_provenance(
        KERNEL_PROTOCOL,
        {
            "cases": sorted(comparisons),
            "config": next(iter(comparisons.values())).settings["harness"],
            "isolation": "process",
        },
    )
    figures: dict[str, Any] = {
        "samples_id": sid,
        "pairs_recorded": len(pairs),
        "stats": {case: c.stats.to_json() if c.stats else None for case, c in comparisons.items()},
        "flags": {case: c.flags for case, c in comparisons.items()},
        "environment_id": env["environment_id"],
        "monitor": monitor_note,
        "code_identity": None if unenforced is None else {"enforced": False, "note": unenforced},
        "findings": _findings(comparisons),
    }
    if request.dry_run:
        return MeasuredKernel(**figures, request=body)
    artifact = {
        "kind": "kernel",
        "cases": table,
        "environment": env,
        "reference_source_hash": subjects["reference"]["content_hash"],
        "candidate_source_hash": subjects["candidate"]["content_hash"],
    }
    for role in ("reference", "candidate"):  # a built subject's library hash, flags, sources
        if subjects[role].get("identity") is not None:
            artifact[f"{role}_identity"] = subjects[role]["identity"]
    code_files = {} if bound is None else bound.artifacts  # the snapshots' files (R11)
    event = append_measured(
        ledger, "samples.record", body, SAMPLES_ARTIFACT, artifact, actor=request.actor,
        idempotency_key=request.idempotency_key, extra=code_files,
    )  # fmt: skip
    snapshots = (
        None
        if bound is None
        else {r: bound.identity[r]["digest"] for r in ("reference", "candidate")}
    )
    return MeasuredKernel(**figures, event_id=event.id, kind=event.kind, snapshots=snapshots)


def _pairs_and_table(
    comparisons: dict[str, Any], metric: str, scale: float, environment_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The recorded pairs (one per ABBA block, values in the primary's unit) and the per-case
    raw table. Raises: MeasurementError when a subject failed correctness (R5)."""
    pairs = []
    table = []
    for case, c in comparisons.items():
        if not (c.ref_correctness.ok and c.cand_correctness.ok) or c.ref is None or c.cand is None:
            raise MeasurementError(
                f"case {case!r}: correctness failed ({c.flags}): "
                f"{(c.ref_correctness.reasons + c.cand_correctness.reasons)[:5]}",
                hint="a subject that fails correctness has no performance meaning (R5)",
            )
        batch = int(c.settings["harness"]["batch"])  # one monitor window per batch
        for b, start in enumerate(range(0, len(c.pair_orders), batch)):
            stop = start + batch
            call_id = f"{case}-b{b}"
            window = c.monitor[b] if b < len(c.monitor) else None
            pair: dict[str, Any] = {
                "case": case,
                "ref": {
                    "call_id": call_id,
                    # a failed re-check of any timed call makes the subject incorrect
                    "correct": not c.ref.recheck_failures,
                    "values": {metric: [v * scale for v in c.ref.samples_s[start:stop]]},
                    "environment_id": environment_id,
                },
                "cand": {
                    "call_id": call_id,
                    "correct": not c.cand.recheck_failures,
                    "values": {metric: [v * scale for v in c.cand.samples_s[start:stop]]},
                    "environment_id": environment_id,
                },
                "same_process": True,
            }
            if window is not None:
                pair["monitor"] = {
                    "observed": window["observed"],
                    "foreign_activity": window["foreign_activity"],
                    "explained": None,
                    "flags": list(window["reasons"]),
                }
            pairs.append(pair)
        table.append(
            {
                "case": case,
                "rows": c.table(),
                "flags": c.flags,
                "stats": c.stats.to_json() if c.stats else None,
                "stop_reason": c.stop_reason,
                "settings": c.settings,
                "monitor": c.monitor,
            }
        )
    return pairs, table


def _findings(comparisons: dict[str, Any]) -> list[str]:
    """What the measurement found, for people (not only in the JSON's flags)."""
    lines = []
    for case, c in comparisons.items():
        found = [f for f in c.flags if f != "no_ceilings"]
        if found:
            lines.append(
                f"FLAG {case}: {', '.join(found)} (a subject flagged by a re-check, the clock, "
                "a digest or the cross-check is recorded as incorrect in every pair: R5)"
            )
        confirmation = c.settings.get("clock", {}).get("confirmation")
        if confirmation is not None and not confirmation["confirmable"]:
            # issue 36, hole 1: why a "faster" statistic is not a pass
            lines.append(f"{case}: {confirmation['note']}; not a pass")
    return lines


__all__ = ["KERNEL_PROTOCOL", "MeasureKernel", "MeasuredKernel", "measure_kernel"]
