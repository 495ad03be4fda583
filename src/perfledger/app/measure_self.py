"""Measure one stage of a workload experiment, whichever protocol measures it (SPEC.md section 5,
"Workload driver" and "Workload worker protocol"; R5, R11, R12, R14, R17).

:func:`measure_workload_stage` is the use case behind ``perfledger measure workload``: by
default, and with ``protocol`` worker or command, perfledger observes every call
(:func:`perfledger.app.measure_workload.measure_workload`; a Target whose primary it observes,
``wall_time`` or ``cpu_time``); only with ``protocol`` self, asked for by name, does
:func:`measure_self_timed` measure: the self-timed driver
(:mod:`perfledger.kernels.workload.driver`) runs the reference's and the candidate's commands in
ABBA order, each call printing its own ``{"correct", "metrics"}``, and one pair per round and
case is recorded (``same_process: false``); calls that failed (garbage, non-zero exit, timeout,
NaN) are left out of the request and kept, with their reason, in the raw table. Its samples are
figures the subject reports: recorded and shown as ``reported``, they make no champion and pass
no final audit (R5, issue 34), so nothing picks that protocol for the caller. After recording,
the verdict the rules would derive from the samples is previewed (nothing appended).

The driver watches its own process for stops (SIGCONT, :mod:`perfledger.kernels.monitor.interference`)
only when it runs on the main thread: a caller on another thread measures without that watch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from perfledger.app.censored import refuse_censored_formal_stage
from perfledger.app.context import (
    SAMPLES_ARTIFACT,
    check_cases,
    check_environment,
    check_installation_unchanged,
    context_of,
    default_samples_id,
    environment_payload,
    experiment_context,
    foreign_activity_warnings,
    measured_provenance,
    raw_table,
    refuse_formal_dry_run,
    start_formal_run,
    start_monitor,
)
from perfledger.app.identity import (
    SubjectsWatch,
    fresh_and_unchanged,
    measure_identity,
    subject_copies,
    unenforced_note,
)
from perfledger.app.measure_baseline import Progress, no_progress
from perfledger.app.measure_driver import measurement_findings, run_driver, workload_request
from perfledger.app.measure_workload import (
    IdentityEdge,
    MeasuredWorkload,
    MeasureWorkload,
    held,
    trivial_output_refusal,
)
from perfledger.app.measure_workload import measure_workload as measure_observed
from perfledger.app.measuring import failed_call_text
from perfledger.app.metrics import target_units, work_units
from perfledger.app.output_check import accuracy_for, output_artifacts
from perfledger.app.preconditions import refuse_formal_unmonitored
from perfledger.app.preview import verdict_preview
from perfledger.app.recording import Warn, append_measured, no_warnings
from perfledger.commands.registry.operations import preview
from perfledger.errors import BadRequest, MeasurementError, PerfledgerError
from perfledger.events.workflow import FORMAL_STAGES, OBSERVED_METRICS, WallCheck
from perfledger.kernels.workload.subject_env import environment_warnings

#: The protocol the self-timed driver records (provenance, formal run).
SELF_PROTOCOL = "workload_abba"


class MeasureWorkloadStage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to measure one stage of a workload experiment (``perfledger measure workload``).

    Attributes:
        experiment_id: the experiment.
        stage: ``screen``, ``target`` or ``final_audit``.
        ref, cand: the reference's and the candidate's command lines (shell words): the
            readiness driver with each subject's directory in its ``{subject}`` place.
        protocol: ``worker``, ``command`` or ``self`` (None: worker; ``self``, the self-timed
            driver, records figures the subject reports, which decide nothing, R5).
        cases: the cases (empty: the readiness's test set).
        pairs: pairs per case (None: the readiness's minimum, at least 5).
        warmup: warm-up calls per case (not recorded).
        timeout_s: the most one call may take, seconds.
        units: metric name -> unit of metrics the Target does not name (self protocol only).
        fresh_worker: a fresh worker per pair (worker protocol).
        monitor: ``gpu`` (NVML), ``host`` (the host's CPU counters) or ``none`` (screens only).
        samples_id: the samples' id (None: ``E-STAGE-N``).
        dry_run: measure and decide, append nothing (a screen only, R14).
        actor: who records.
        idempotency_key: a retry-safe key for the append.
    """

    experiment_id: str
    stage: Literal["screen", "target", "final_audit"]
    ref: str
    cand: str
    protocol: Literal["worker", "command", "self"] | None = None
    cases: tuple[str, ...] = ()
    pairs: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None
    warmup: Annotated[int, msgspec.Meta(ge=0, le=100)] = 1
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 600.0
    units: dict[str, str] = {}
    fresh_worker: bool = False
    monitor: Literal["gpu", "host", "none"] = "gpu"
    samples_id: str | None = None
    dry_run: bool = False
    actor: str
    idempotency_key: str | None = None


class MeasuredSelfTimed(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_self_timed` measured and recorded.

    Attributes:
        samples_id: the samples' id.
        pairs_recorded: pairs in the samples.
        failed_calls: ``{call_id, reason, message}`` of each failed call (kept in the raw table).
        environment_id: this machine's environment identity.
        monitor: the monitor's source, None without one.
        foreign_windows: pairs whose monitor window saw foreign activity (R17).
        warnings: what the caller should say before anything else.
        wall_check: the wall-clock check ``samples.record`` derived (R12), as builtins.
        candidate_failed_calls: the candidate's calls that failed their accuracy check (R5).
        accuracy_judged: who judged correctness (perfledger comparing outputs, or the subject).
        left_processes: call id -> processes it left behind (ended with the call).
        findings: lines for people: ``FLAG`` blocks a pass or a champion, ``note`` does not.
        code_identity: ``{"enforced": False, "note"}`` under the old, unsnapshotted rule (R11).
        request: the ``samples.record`` body on a dry run (None otherwise).
        event_id, kind: the appended event (None on a dry run).
        snapshots: role -> snapshot digest, where the code was snapshotted (R11).
    """

    samples_id: str
    pairs_recorded: int
    failed_calls: list[dict[str, Any]]
    environment_id: str
    monitor: str | None
    foreign_windows: int
    warnings: list[str] = []
    wall_check: Any = None
    candidate_failed_calls: list[str] = []
    accuracy_judged: Any = None
    left_processes: dict[str, int] = {}
    findings: list[str] = []
    code_identity: dict[str, Any] | None = None
    request: dict[str, Any] | None = None
    event_id: str | None = None
    kind: str | None = None
    snapshots: dict[str, str] | None = None


class MeasuredStage(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_workload_stage` measured: ``observed`` (worker or command protocol)
    or ``self_timed`` (the self-timed driver), and, once recorded, the verdict the rules would
    derive from the samples (``verdict_preview``, None where they refuse it now, and its lines
    for people, ``preview_lines``)."""

    observed: MeasuredWorkload | None = None
    self_timed: MeasuredSelfTimed | None = None
    verdict_preview: dict[str, Any] | None = None
    preview_lines: list[str] = []

    def answer(self) -> dict[str, Any]:
        """The ``--json`` answer of ``perfledger measure workload``."""
        if self.observed is not None:
            out = msgspec.to_builtins(self.observed)
        else:
            out = msgspec.to_builtins(self.self_timed)
            for key in ("code_identity", "request", "event_id", "kind", "snapshots"):
                if out.get(key) is None:
                    out.pop(key, None)
        measured = self.observed or self.self_timed
        if measured is not None and measured.event_id is not None:
            out["verdict_preview"] = self.verdict_preview
        return out


def observing(target: Any, protocol: str | None) -> bool:
    """True when a workload is measured under the worker or command protocol: by default
    (``protocol`` None) whatever ``target``'s primary, since only what perfledger observes
    decides (R5, issue 34; a Target whose primary the subject reports is then refused with the
    way to an observed one); False only for ``self``, asked for by name."""
    del target  # the protocol no longer follows the primary
    return protocol != "self"


def measure_workload_stage(
    ledger: Any,
    request: MeasureWorkloadStage,
    *,
    progress: Progress = no_progress,
    warn: Warn = no_warnings,
) -> MeasuredStage:
    """Measure and record one stage of a workload experiment under the protocol that fits it
    (module docstring), then preview the verdict of the recorded samples.

    Args:
        ledger: the open ledger.
        request: the :class:`MeasureWorkloadStage`.
        progress: ``(total, label) -> context manager yielding advance()``.
        warn: handed warnings as soon as they are known.
    Returns: the :class:`MeasuredStage`.
    Raises: BadRequest (exit 2) and RuleRefused (exit 3) before anything runs (R11, R14, R17,
        ...); MeasurementError (exit 1) when nothing usable was measured; RuleRefused after the
        run where its subjects' files changed (R11) or a formal stage lost a round (R5, R12).
    """
    refuse_formal_dry_run(request.stage, request.dry_run)
    info = experiment_context(ledger, request.experiment_id, request.stage)
    if observing(info["target"], request.protocol):
        if request.units:
            raise BadRequest(
                "--unit belongs to the self-timed protocol: under the worker protocol perfledger "
                "observes every figure it records (wall_time, cpu_time)",
                hint="leave --unit out: what the subject reports of itself (`reported` in its "
                "`done` answer) is kept in the raw table, labelled reported, without one",
            )
        observed_request = MeasureWorkload(
            experiment_id=request.experiment_id, stage=request.stage, ref=request.ref,
            cand=request.cand, protocol=request.protocol or "worker",  # type: ignore[arg-type]
            cases=request.cases, pairs=request.pairs, warmup=request.warmup,
            timeout_s=request.timeout_s, fresh_worker=request.fresh_worker,
            monitor=request.monitor, samples_id=request.samples_id, dry_run=request.dry_run,
            actor=request.actor, idempotency_key=request.idempotency_key,
        )  # fmt: skip
        edge = IdentityEdge(measure_identity, SubjectsWatch, fresh_and_unchanged)
        calls = 2 * len(request.cases or ["?"]) * (request.pairs or 5)
        with progress(calls, "worker calls") as advance:
            result = measure_observed(
                ledger, observed_request, identity=edge, on_call=lambda _row: advance()
            )
        warn(result.warnings)
        if result.event_id is None:
            return MeasuredStage(observed=result)
        target_id = ledger.state().samples[result.samples_id].target_id
        explained, shown = verdict_preview(ledger, request.stage, target_id, result.samples_id)
        return MeasuredStage(observed=result, verdict_preview=explained, preview_lines=shown)
    done, target_id = measure_self_timed(ledger, request, info, progress=progress, warn=warn)
    if done.event_id is None:
        return MeasuredStage(self_timed=done)
    # per case: per-call medians, the improvement and its CI, as the verdict derives them
    explained, shown = verdict_preview(ledger, request.stage, target_id, done.samples_id)
    return MeasuredStage(self_timed=done, verdict_preview=explained, preview_lines=shown)


def measure_self_timed(
    ledger: Any,
    request: MeasureWorkloadStage,
    info: dict[str, Any],
    *,
    progress: Progress = no_progress,
    warn: Warn = no_warnings,
) -> tuple[MeasuredSelfTimed, str]:
    """Measure one stage with the self-timed driver and record it (module docstring); ``info``
    is :func:`perfledger.app.context.experiment_context`'s. Returns: ``(the
    :class:`MeasuredSelfTimed`, the Target's id)``. Raises: as :func:`measure_workload_stage`."""
    experiment_id, stage, ref_cmd, cand_cmd = (
        request.experiment_id, request.stage, request.ref, request.cand,
    )  # fmt: skip
    # R11: both subjects snapshotted and checked before anything runs
    code, code_files = measure_identity(ledger, info, ref_cmd, cand_cmd, stage, experiment_id)
    # R5: where the readiness compares outputs, perfledger judges them, not the subject
    accuracy = accuracy_for(info["target"], {"--ref": ref_cmd, "--cand": cand_cmd})
    unenforced = unenforced_note(info["target"])  # the old rule: say so before measuring
    if unenforced is not None:
        warn([unenforced])
    chosen = list(request.cases) or info["cases"]
    if not chosen:
        raise BadRequest(
            "no test cases: pass --case or name them in the readiness's test set",
            hint="pass --case NAME, or record readiness whose test_set names its cases",
        )
    check_cases(chosen, info["test_set"], "--case")
    n_pairs = request.pairs or max(5, info["min_pairs"])
    units = {**work_units(info["target"]), **target_units(info["target"]), **request.units}
    env = environment_payload()
    check_environment(env, info)
    source = "gpu" if request.monitor == "none" else request.monitor
    monitor, monitor_note = start_monitor(request.monitor != "none", source)
    if monitor is None:
        refuse_formal_unmonitored(stage, monitor_note)
    sid = request.samples_id or default_samples_id(experiment_id, stage, info["state"])
    with held(monitor, None):
        start_formal_run(ledger, experiment_id, stage, sid, SELF_PROTOCOL, request.actor)
        # R11: each call runs from a read-only copy of its subject's snapshot, with its own
        # bytecode cache; the subjects' directories are checked before every call too: a
        # subject could edit the other's files for a while and restore them before the end
        copies = None if code is None else subject_copies(info["target"], code, code_files)
        with held(None, copies):
            unchanged = None if code is None else SubjectsWatch(info, code)
            run = run_driver(  # R17: each call's process is the monitor's own while it runs
                ref_cmd, cand_cmd, chosen, n_pairs, request.warmup, request.timeout_s,
                progress, accuracy, unchanged, copies, monitor=monitor,
            )  # fmt: skip
    if code is not None:
        fresh_and_unchanged(info, code)
    check_installation_unchanged(env)  # R11: an installed module edited during the run
    refusal = trivial_output_refusal(run.settings, f"a {stage} stage")
    if refusal is not None and stage in FORMAL_STAGES:
        raise refusal
    body, windows = workload_request(
        run, info, samples_id=sid, experiment_id=experiment_id, stage=stage,
        environment_id=env["environment_id"], units=units, monitor=monitor,
    )  # fmt: skip
    failed = [
        {"call_id": c.call_id, "reason": c.reason, "message": c.message} for c in run.failed_calls
    ]
    # R5/R12: a formal stage drops no round: a dropped round is one a candidate chose to drop
    first = failed_call_text(run.failed_calls[0]) if run.failed_calls else ""
    censored = refuse_censored_formal_stage(
        run, info["primary"].name, stage, stage in FORMAL_STAGES, first
    )
    if not body["pairs"]:
        raise MeasurementError(
            f"no usable pair: every pair had a failed call ({len(failed)} failed calls)" + first,
            hint="run the command by hand: it must print one JSON object with `correct` and `metrics`",
        )
    body["units"] = {
        k: v for k, v in units.items() if any(k in p["ref"]["values"] for p in body["pairs"])
    }
    if code is not None:
        body["identity"] = code
    body["provenance"] = measured_provenance(SELF_PROTOCOL, run.settings)
    artifact = raw_table("workload", run, env, windows, monitor_note, monitor)
    warnings = foreign_activity_warnings(body["pairs"], stage)
    warnings += environment_warnings(  # code loaded from outside both subjects
        run.settings["environment"], [run.settings["ref_argv"], run.settings["cand_argv"]], stage
    )
    warnings += censored
    warn(warnings)
    figures: dict[str, Any] = {
        "samples_id": sid,
        "pairs_recorded": len(body["pairs"]),
        "failed_calls": failed,
        "environment_id": env["environment_id"],
        "monitor": None if monitor is None else source,
        "foreign_windows": sum(1 for w in windows if w.get("foreign_activity")),
        "warnings": warnings,
        "code_identity": None if unenforced is None else {"enforced": False, "note": unenforced},
    }
    target_id = body["target_id"]
    if request.dry_run:
        # the decider's own wall-clock check, decided on the head and not appended
        wall_check, refusal = _previewed_wall_check(ledger, body, request.actor)
        findings = measurement_findings(body, stage, run, wall_check, info["target"])
        findings["findings"] += [f"note dry run: {refusal}"] if refusal else []
        return MeasuredSelfTimed(**figures, **findings, request=body), target_id
    extra = {**(code_files or {}), **output_artifacts(run)}  # small outputs, for the audit
    event = append_measured(
        ledger, "samples.record", body, SAMPLES_ARTIFACT, artifact, actor=request.actor,
        idempotency_key=request.idempotency_key, extra=extra,
    )  # fmt: skip
    # what samples.record derived and recorded is what is shown: one wall-clock check
    findings = measurement_findings(
        body, stage, run, _recorded_wall_check(event.payload), info["target"]
    )
    snapshots = None if code is None else {r: code[r]["digest"] for r in ("reference", "candidate")}
    done = MeasuredSelfTimed(
        **figures, **findings, event_id=event.id, kind=event.kind, snapshots=snapshots
    )
    return done, target_id


def _previewed_wall_check(ledger: Any, body: dict[str, Any], actor: str) -> tuple[Any, str]:
    """The wall-clock check ``samples.record`` would derive for ``body`` on the current head
    (nothing appended) and ``""``; or ``(None, why)`` when the decision would be refused."""
    try:
        drafts = preview(ledger, "samples.record", body, actor=actor)
    except PerfledgerError as exc:
        rule = f"{exc.rule}: " if getattr(exc, "rule", None) else ""
        return None, f"samples.record would refuse these samples: {rule}{exc.message}"
    return _recorded_wall_check(drafts[0].payload), ""


def _recorded_wall_check(payload: Any) -> Any:
    """The WallCheck of a decided SamplesRecorded payload (a Struct, or its builtins), or None."""
    check = payload.get("wall_check") if isinstance(payload, dict) else payload.wall_check
    return msgspec.convert(check, WallCheck) if isinstance(check, dict) else check


def failed_call_lines(done: MeasuredSelfTimed) -> list[str]:
    """One line per failed call, for people."""
    return [f"failed call {f['call_id']}: {f['reason']}: {f['message']}" for f in done.failed_calls]


__all__ = [
    "SELF_PROTOCOL",
    "MeasureWorkloadStage",
    "MeasuredSelfTimed",
    "MeasuredStage",
    "driver_timed",
    "failed_call_lines",
    "measure_self_timed",
    "measure_workload_stage",
    "observing",
]


def driver_timed(state: Any, request: Any) -> bool:
    """Whether ``request`` (a :class:`MeasureWorkloadStage`,
    :class:`~perfledger.app.measure_aa.MeasureAA` or
    :class:`~perfledger.app.baseline.MeasureBaseline`) is measured by the self-timed driver on
    the folded ``state``: a workload stage asked for under ``protocol`` self, or an A/A or
    baseline of a Target whose primary the subject reports. The driver's watch of its
    own process's stops (SIGCONT, R11) runs only on a process's main thread, so a caller on
    another thread (the MCP server's tool calls) runs such a measurement in a process of its own.
    False where the request names nothing known (the use case then refuses it)."""
    if isinstance(request, MeasureWorkloadStage):
        try:
            info = context_of(state, request.experiment_id, request.stage)
        except PerfledgerError:
            return False
        return not observing(info["target"], request.protocol)
    target_id, cmd = getattr(request, "target_id", None), getattr(request, "cmd", None)
    target = state.targets.get(target_id) if target_id is not None else None
    if target is None or cmd is None:
        return False
    return target.definition.primary.name not in OBSERVED_METRICS
