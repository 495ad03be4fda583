"""Measure a workload comparison under the worker (or whole-command) protocol and record it
(SPEC.md section 5, "Workload worker protocol"; R2, R5, R11, R12, R17).

:func:`measure_workload` is the use case behind ``perfledger measure workload --protocol
worker|command``; the CLI parses into :class:`MeasureWorkload`, calls it and renders the
:class:`MeasuredWorkload`. In order:

1. everything that recording would refuse is checked *before* anything runs: the experiment's
   context, a Target whose primary is an observed metric (``wall_time``/``cpu_time``, R5), a
   readiness that compares outputs (every output is judged), the subjects' code identity
   (R11), the cases, this machine's environment (R11), the monitor of a formal stage (R17),
   and the ``samples.record`` decision itself, previewed on a stand-in of the samples with the
   same shape (stage order, reference, obligations: whatever the deciders refuse);
2. the pairs run under :func:`perfledger.kernels.workload.worker.run_pairs`: perfledger's clock,
   the kernel's CPU accounting, a fresh seed per pair drawn when it starts, every output judged
   against the reference's; a worker that fails the protocol makes the comparison invalid
   (MeasurementError, nothing recorded);
3. the samples body (observed values only) and its raw table (kind ``worker``, protocol
   ``worker/v1`` or ``command/v1``, from which ``samples.record`` and ``perfledger audit``
   re-derive every pair, :mod:`perfledger.commands.workflow.raw_table`) are appended through
   the operation registry.

Code identity (R11) is taken at the edge by functions the caller passes (:class:`IdentityEdge`;
the CLI's are :mod:`perfledger.app.identity`'s): they read the subjects' files, and
their home is being reworked (issue 34's code identity), so this module does not import them.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec

from perfledger.app.aa_environment import check_aa_environment
from perfledger.app.context import (
    SAMPLES_ARTIFACT,
    check_cases,
    check_environment,
    check_installation_unchanged,
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
from perfledger.app.identity import split_command, subject_copies
from perfledger.commands.registry.operations import execute, preview
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.foreign_share import FOREIGN_SHARE_LIMIT, over_limit
from perfledger.commands.workflow.output_rules import compared
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.commands.workflow.requests import OutputCheck
from perfledger.commands.workflow.samples_body import samples_body
from perfledger.errors import BadRequest, MeasurementError, RuleRefused
from perfledger.events.workflow import FORMAL_STAGES, OBSERVED_METRICS, OBSERVED_UNITS
from perfledger.kernels.workload.startup_surface import (
    StartupWatch,
)
from perfledger.kernels.workload.subject_env import closed_environment, recorded_environment
from perfledger.kernels.workload.worker import (
    WorkerRun,
    WorkerSubject,
    run_pairs,
)
from perfledger.ledger.base import Artifact
from perfledger.projections.verdict_cases import aa_resolution
from perfledger.projections.verdicts import Pair


class MeasureWorkload(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to measure one stage of an experiment under the worker protocol.

    Attributes:
        experiment_id: the experiment.
        stage: ``screen``, ``target`` or ``final_audit``.
        ref, cand: the reference's and the candidate's commands (shell words): the readiness
            driver with each subject's directory in its ``{subject}`` place.
        protocol: ``worker`` (one process per subject speaking the worker protocol) or
            ``command`` (one process per call, timed from spawn to exit).
        cases: the cases to measure (empty: the readiness's test set).
        pairs: pairs per case (None: the readiness's minimum, at least 5).
        warmup: warm-up rounds per case (not recorded).
        timeout_s: the most one call (or a worker's start-up) may take, seconds.
        fresh_worker: a fresh worker per pair even where the reference's outputs follow the seed.
        monitor: ``gpu`` (NVML), ``host`` (the host's CPU counters) or ``none`` (screens only).
        samples_id: the samples' id (None: ``E-STAGE-N``).
        dry_run: measure and decide, append nothing.
        actor: who records.
        idempotency_key: a retry-safe key for the append.
    """

    experiment_id: str
    stage: Literal["screen", "target", "final_audit"]
    ref: str
    cand: str
    protocol: Literal["worker", "command"] = "worker"
    cases: tuple[str, ...] = ()
    pairs: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None
    warmup: Annotated[int, msgspec.Meta(ge=0, le=100)] = 1
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 600.0
    fresh_worker: bool = False
    monitor: Literal["gpu", "host", "none"] = "gpu"
    samples_id: str | None = None
    dry_run: bool = False
    actor: str
    idempotency_key: str | None = None


class CaseFigures(msgspec.Struct, frozen=True, kw_only=True):
    """Per case: medians over the recorded pairs (seconds) and the candidate's failed calls."""

    ref_wall_s: float
    cand_wall_s: float
    ref_cpu_s: float
    cand_cpu_s: float
    cand_incorrect: int
    #: medians of what the subjects reported themselves (name -> value), never deciding
    reported: dict[str, dict[str, float]] = {}


class MeasuredWorkload(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_workload` measured and recorded.

    Attributes:
        samples_id: the samples' id.
        protocol: ``worker/v1`` or ``command/v1``.
        pairs_recorded: pairs in the samples.
        fresh_worker: whether every pair had fresh workers, and ``fresh_reason`` why.
        environment_id: this machine's environment identity.
        monitor: the monitor's source, None without one.
        cases: per-case figures (:class:`CaseFigures`).
        warnings: what the caller should say before anything else.
        findings: lines for people: ``FLAG`` blocks a pass or a champion, ``note`` does not.
        event_id, kind: the appended event (None on a dry run).
        request: the ``samples.record`` body on a dry run (None otherwise).
        snapshots: role -> snapshot digest, where the code was snapshotted (R11).
    """

    samples_id: str
    protocol: str
    pairs_recorded: int
    fresh_worker: bool
    fresh_reason: str
    environment_id: str
    monitor: str | None
    cases: dict[str, CaseFigures]
    warnings: list[str] = []
    findings: list[str] = []
    event_id: str | None = None
    kind: str | None = None
    request: dict[str, Any] | None = None
    snapshots: dict[str, str] | None = None


@dataclass(frozen=True)
class IdentityEdge:
    """Code identity at the edge (R11), passed by the caller.

    Attributes:
        snapshot: ``(ledger, info, ref_cmd, cand_cmd, stage, experiment_id) -> (identity or
            None, artifacts)``: both subjects snapshotted and checked before anything runs.
        watch: ``(info, identity) -> check(label)``: called before every call (files unchanged).
        confirm: ``(info, identity) -> None``: after the run (files unchanged).
    """

    snapshot: Callable[..., tuple[dict[str, Any] | None, dict[str, Any]]]
    watch: Callable[[dict[str, Any], dict[str, Any]], Callable[[str], None]]
    confirm: Callable[[dict[str, Any], dict[str, Any]], None]


def observed_units(target: Any) -> dict[str, str]:
    """The Target's observed metrics (primary, guardrails, secondaries named in
    :data:`~perfledger.events.workflow.OBSERVED_METRICS`) -> unit. Raises: BadRequest when the
    primary is not observed, or an observed metric is not in a time unit."""
    d = target.definition
    units = {d.primary.name: d.primary.unit}
    units.update({g.metric: g.unit for g in d.guardrails})
    units.update({s.name: s.unit for s in d.secondaries})
    if d.primary.name not in OBSERVED_METRICS:
        raise BadRequest(
            f"the worker protocol observes {sorted(OBSERVED_METRICS)}; Target "
            f"{d.target_id!r}'s primary {d.primary.name!r} is a figure the subject reports; "
            "nothing was measured",
            hint="only what perfledger observes decides (R5): supersede the Target with an "
            'observed primary (`perfledger target supersede`, {"name": "wall_time", "unit": '
            '"ms", ...} or cpu_time) and keep the subject\'s figure as a secondary; '
            "`--protocol self` records it only as reported, deciding nothing",
        )
    observed = {name: unit for name, unit in units.items() if name in OBSERVED_METRICS}
    for name, unit in observed.items():
        if unit not in OBSERVED_UNITS:
            raise BadRequest(
                f"observed metric {name!r} is a time; its unit {unit!r} is not one of "
                f"{list(OBSERVED_UNITS)}",
                hint=f"use one of {list(OBSERVED_UNITS)} for {name!r} in the Target",
            )
    return observed


def _stand_in(info: dict[str, Any], request: MeasureWorkload, cases: list[str], n_pairs: int,
              units: dict[str, str], environment_id: str, code: dict[str, Any] | None,
              monitored: bool, accuracy: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """A samples body of the shape the run will record (values 1.0, every call correct,
    observed, judged), for previewing the decision before anything is measured."""
    output = {"method": "outputs_v2", "compare": accuracy["compare"], "self_correct": True,
              "blake3": None, "size": None, "ok": True, "reason": ""}  # fmt: skip
    pairs = []
    for k in range(n_pairs):
        for case in cases:
            side = {"correct": True, "values": {m: [1.0] for m in units},
                    "environment_id": environment_id, "wall_s": 1.0, "output": output}  # fmt: skip
            pairs.append({
                "case": case, "same_process": False,
                "ref": {"call_id": f"ref-{case}-{k}", **side},
                "cand": {"call_id": f"cand-{case}-{k}", **side},
                **({"monitor": {"observed": True, "foreign_activity": False, "explained": None,
                                "flags": []}} if monitored else {}),
            })  # fmt: skip
    body = samples_body(
        info, samples_id=request.samples_id or "stand-in", experiment_id=request.experiment_id,
        stage=request.stage, environment_id=environment_id, units=units, pairs=pairs,
    )  # fmt: skip
    if code is not None:
        body["identity"] = code
    settings: dict[str, Any] = {}
    if code is not None:  # as the run records them (R11: the copies and equal environments)
        settings = {
            "subject_copies": {"ref": code["reference"]["digest"],
                               "cand": code["candidate"]["digest"]},
            "call_environment": {"ref": {"PATH": "stand-in"}, "cand": {"PATH": "stand-in"}},
        }  # fmt: skip
    body["provenance"] = {"source": "perfledger", "protocol": f"{request.protocol}/v1",
                          "settings": settings, "raw_table": SAMPLES_ARTIFACT}  # fmt: skip
    return body


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _case_figures(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, CaseFigures]:
    out: dict[str, CaseFigures] = {}
    for case in dict.fromkeys(r["case"] for r, _c in pairs):
        rows = [(r, c) for r, c in pairs if r["case"] == case]
        reported: dict[str, dict[str, float]] = {}
        for label, index in (("ref", 0), ("cand", 1)):
            names = {n for p in rows for n in p[index]["reported"]}
            for name in sorted(names):
                values = [p[index]["reported"][name] for p in rows if name in p[index]["reported"]]
                reported.setdefault(label, {})[name] = _median(values)
        out[case] = CaseFigures(
            ref_wall_s=_median([r["wall_s"] for r, _c in rows]),
            cand_wall_s=_median([c["wall_s"] for _r, c in rows]),
            ref_cpu_s=_median([r["cpu_s"] for r, _c in rows]),
            cand_cpu_s=_median([c["cpu_s"] for _r, c in rows]),
            cand_incorrect=sum(1 for _r, c in rows if not c["correct"]),
            reported=reported,
        )
    return out


#: The fields of a recorded output check that the per-call row holds (``self_correct`` aside).
_OUTPUT_FIELDS = tuple(
    f.name for f in msgspec.structs.fields(OutputCheck) if f.name != "self_correct"
)


def _side(row: dict[str, Any], environment_id: str) -> dict[str, Any]:
    """One recorded side of a pair from its call's row (values: the observed metrics)."""
    return {
        "call_id": row["call_id"],
        "correct": row["correct"],
        "values": row["metrics"],
        "environment_id": environment_id,
        "wall_s": row["wall_s"],
        "output": {
            **{k: row["output"].get(k) for k in _OUTPUT_FIELDS},
            "self_correct": row["self_correct"],
        },
    }


def measure_workload(
    ledger: Any,
    request: MeasureWorkload,
    *,
    identity: IdentityEdge | None = None,
    on_call: Callable[[dict[str, Any]], None] | None = None,
) -> MeasuredWorkload:
    """Measure and record one stage under the worker protocol (module docstring).

    Args:
        ledger: the open ledger.
        request: the :class:`MeasureWorkload`.
        identity: code identity at the edge (:class:`IdentityEdge`); required where the Target's
            readiness snapshotted the original (R11).
        on_call: called with each per-call row as it is made (progress).
    Returns: the :class:`MeasuredWorkload`.
    Raises: BadRequest (exit 2) and RuleRefused (exit 3) before anything runs;
        MeasurementError (exit 1) when a worker fails the protocol (nothing recorded);
        RuleRefused when the subjects' files, or the Python installation's, changed during
        the run (R11).
    """

    # 1. every refusal before anything runs
    info = experiment_context(ledger, request.experiment_id, request.stage)
    target = info["target"]
    units = observed_units(target)
    accuracy = compared(target.readiness)
    if accuracy is None:
        raise BadRequest(
            "the worker protocol judges every call's output against the reference's, and the "
            "Target's readiness compares none; nothing was measured",
            hint='record readiness with "accuracy": {"compare": "exact"} (or "allclose") and '
            "a driver that declares {output}",
        )
    argvs = {"ref": split_command(request.ref), "cand": split_command(request.cand)}
    if not argvs["ref"] or not argvs["cand"]:
        raise BadRequest(
            "--ref and --cand must each name a command",
            hint="give --ref and --cand the commands of the reference and the candidate (`perfledger status` names the measurement)",
        )
    code, code_files = None, {}
    if identity is not None:
        code, code_files = identity.snapshot(
            ledger, info, request.ref, request.cand, request.stage, request.experiment_id
        )
    elif target.readiness.original.snapshot is not msgspec.UNSET:
        raise BadRequest(
            "this Target's readiness snapshotted the original: pass `identity`",
            hint="measure through `perfledger measure workload`, which takes the snapshots (or pass identity from the API)",
        )
    cases = list(request.cases) or info["cases"]
    if not cases:
        raise BadRequest(
            "no test cases: pass cases or name them in the readiness's test set",
            hint="pass --case NAME (repeatable), or record readiness whose test_set names its cases",
        )
    check_cases(cases, info["test_set"], "cases")
    n_pairs = request.pairs or max(5, info["min_pairs"])
    env = environment_payload()
    check_environment(env, info)
    check_aa_environment(ledger, target, request.stage)  # R11: the watch's yardstick applies
    refuse_formal_dry_run(request.stage, request.dry_run)  # R14: a formal stage has no dry run
    formal = request.stage in FORMAL_STAGES
    sid = request.samples_id or default_samples_id(request.experiment_id, request.stage,
                                                    info["state"])  # fmt: skip
    stand_in = _stand_in(info, request, cases, n_pairs, units, env["environment_id"], code,
                         formal, accuracy)  # fmt: skip
    stand_in["samples_id"] = sid
    protocol = f"{request.protocol}/v1"
    if formal:  # what starting the run would refuse (an earlier result without its verdict)
        preview(ledger, "formal-run.start", {"experiment_id": request.experiment_id,
                "stage": request.stage, "samples_id": sid, "protocol": protocol},
                actor=request.actor)  # fmt: skip
    # what the deciders refuse of the samples, as those of the run about to start (R14)
    preview(ledger, "samples.record", stand_in, actor=request.actor,
            starting_run=sid if formal else None)  # fmt: skip
    # R11: each call runs from a read-only copy of its subject's snapshot (the readiness
    # driver with the copy in its {subject} place), under perfledger's bootstrap, with its own
    # bytecode cache; what it reads from outside them is refused (CopyGuard)
    copies = None
    if code is not None:
        copies = subject_copies(target, code, code_files, boot_per_call=False)
        argvs = copies.argvs
    monitor, monitor_note = start_monitor(request.monitor != "none", request.monitor)
    if monitor is None and request.stage in FORMAL_STAGES:
        release(None, copies)
        raise rules.refuse(
            "R17",
            f"a formal ({request.stage}) stage needs the monitor over every sample window, and "
            f"it is not running: {monitor_note}; nothing was measured",
            "on a machine without a GPU, measure a CPU workload with monitor host",
        )

    # 2. the run, its start recorded first (R14: a run that records no samples counts as failed)
    with held(monitor, copies):
        start_formal_run(ledger, request.experiment_id, request.stage, sid, protocol,
                         request.actor)  # fmt: skip
        watch = None if code is None or identity is None else identity.watch(info, code)
        run = run_subjects(
            argvs, copies, watch=watch, cases=cases, pairs_per_case=n_pairs, accuracy=accuracy,
            units=units, mode=request.protocol, warmup_calls=request.warmup,
            timeout_s=request.timeout_s, fresh_worker=request.fresh_worker, on_call=on_call,
            monitor=monitor,
        )  # fmt: skip
    if code is not None and identity is not None:
        identity.confirm(info, code)
    # R11: an installed module edited during the run (even put back) ran in no snapshot; the
    # self-timed driver checked this and the worker protocol did not
    check_installation_unchanged(env)
    refusal = trivial_output_refusal(run.settings, f"a {request.stage} stage")
    if refusal is not None and formal:
        raise refusal

    # 3. the samples and their raw table
    pairs, windows = [], []
    for r, c in run.pairs():
        pair: dict[str, Any] = {
            "case": r["case"], "same_process": False,
            "ref": _side(r, env["environment_id"]), "cand": _side(c, env["environment_id"]),
        }  # fmt: skip
        if monitor is not None:
            verdict = monitor.verdict(min(r["start_s"], c["start_s"]), max(r["end_s"], c["end_s"]))
            windows.append({"call_ids": [r["call_id"], c["call_id"]], **verdict.to_json()})
            pair["monitor"] = verdict.to_request()  # R17: never a typed explanation
        pairs.append(pair)
    body = samples_body(
        info, samples_id=sid, experiment_id=request.experiment_id, stage=request.stage,
        environment_id=env["environment_id"], units=units, pairs=pairs,
    )  # fmt: skip
    if code is not None:
        body["identity"] = code
    body["provenance"] = measured_provenance(run.settings["protocol"], run.settings)
    table = {
        **raw_table("worker", run, env, windows, monitor_note, monitor),
        "binding": binding_of(body),
    }
    figures = _case_figures(run.pairs())
    findings = _findings(figures, request.stage, run.settings)
    warnings = foreign_activity_warnings(pairs, request.stage)
    result = {
        "samples_id": sid, "protocol": run.settings["protocol"], "pairs_recorded": len(pairs),
        "fresh_worker": run.settings["fresh_worker"], "fresh_reason": run.settings["fresh_reason"],
        "environment_id": env["environment_id"],
        "monitor": None if monitor is None else request.monitor, "cases": figures,
        "warnings": warnings, "findings": findings,
        "snapshots": None if code is None else {
            role: code[role]["digest"] for role in ("reference", "candidate")},
    }  # fmt: skip
    if request.dry_run:
        preview(ledger, "samples.record", body, actor=request.actor)
        return MeasuredWorkload(**result, request=body)
    artifacts = {
        SAMPLES_ARTIFACT: Artifact(
            json.dumps(table, sort_keys=True, default=str).encode(), "application/json"
        ),
        **code_files,
        **{name: Artifact(data, "application/octet-stream") for name, data in run.outputs.items()},
    }
    envelopes = execute(
        ledger, "samples.record", body, actor=request.actor,
        idempotency_key=request.idempotency_key, artifacts=artifacts,
    )  # fmt: skip
    return MeasuredWorkload(**result, event_id=envelopes[0].id, kind=envelopes[0].kind)


def original_argvs(command: str, copies: Any) -> dict[str, list[str]]:
    """The ``ref`` and ``cand`` argvs of the original measured against itself: the copies'
    (each worker its own read-only copy, R11) where there are copies, else ``command``'s twice.
    Raises: BadRequest for a command that cannot be parsed."""
    if copies is not None:
        return dict(copies.argvs)
    argv = split_command(command)
    return {"ref": argv, "cand": argv}


def run_subjects(
    argvs: dict[str, list[str]],
    copies: Any,
    *,
    watch: Callable[[str], None] | None = None,
    monitor: Any = None,
    **options: Any,
) -> WorkerRun:
    """Run the ``ref`` and ``cand`` commands of ``argvs`` under the worker protocol as a formal
    stage runs its subjects (R5, R11): :func:`~perfledger.kernels.workload.worker.run_pairs`
    with ``options``, each call checked first (the subjects' Python start-up files unchanged;
    ``watch``: the caller's own check of the label; ``monitor``: the run's monitor, which adopts
    each worker as perfledger's own (its ``adopt``, R17); ``copies``: the read-only copies' guard,
    :func:`perfledger.app.identity.subject_copies`, whose environment and private directories
    the workers get and whose digests the settings record; None: the commands run as given).
    Every worker's full environment (names, values' hashes) is in the run's settings. With
    copies, a worker's environment is closed (R11, red36 E1): the caller's ``PATH``, ``HOME``
    and locale, the readiness driver's declared ``env`` and the copy's own places, nothing else
    (:func:`~perfledger.kernels.workload.subject_env.closed_environment`); the settings record
    it in full (``subject_environment``, values with the copy's directory as a token) and the
    caller's names it dropped (``environment_dropped``).

    Returns: the :class:`~perfledger.kernels.workload.worker.WorkerRun`.
    Raises: as ``run_pairs`` (MeasurementError subclasses, RuleRefused R11) and the guard."""
    startup = StartupWatch(list(argvs.values()))

    def before_call(label: str) -> None:
        startup.check()  # R11: the subjects' Python start-up files unchanged
        if watch is not None:
            watch(label)
        if copies is not None:
            copies.guard(label)

    envs: dict[str, dict[str, str] | None] = {"ref": None, "cand": None}
    extra: dict[str, Any] | None = None
    if copies is not None:
        dropped: list[str] = []
        for label in envs:
            envs[label], dropped = closed_environment(
                os.environ, copies.declared, copies.copies[label].env
            )
        # R11: every value that reaches a subject is readable in the ledger (the two subjects'
        # are equal but for their directories, which run_pairs checks on the hashes)
        extra = {
            **copies.settings,
            "subject_environment": recorded_environment(envs["ref"] or {}, copies.roots["ref"]),
            "environment_dropped": dropped,
        }
    run = run_pairs(
        WorkerSubject("ref", argvs["ref"], env=envs["ref"]),
        WorkerSubject("cand", argvs["cand"], env=envs["cand"]),
        before_call=before_call,
        subject_roots=None if copies is None else copies.roots,
        extra_settings=extra,
        on_worker=getattr(monitor, "adopt", None),  # R17: our own workers are not foreign
        **options,
    )
    if copies is not None:
        copies.guard(None)  # the last call's report and both copies, after the run
    return run


def release(monitor: Any, copies: Any) -> None:
    """Stop ``monitor`` (once more is harmless: its last observation brackets the last window)
    and remove ``copies`` (the read-only copies, :class:`perfledger.app.identity.SubjectCopies`);
    either may be None. Never raises for a None."""
    if monitor is not None:
        monitor.stop()
    if copies is not None:
        copies.close()


@contextmanager
def held(monitor: Any, copies: Any) -> Iterator[None]:
    """The block a measurement runs in: ``monitor`` and ``copies`` are released
    (:func:`release`) when it ends, however it ends (a formal stage, a self-timed stage, the
    baseline and the A/A of the original share it, R11, R17)."""
    try:
        yield
    finally:
        release(monitor, copies)


def original_monitor(primary: str) -> tuple[Any, str | None]:
    """The monitor a measurement of the original against itself (the baseline, the A/A, R4)
    runs under: the one a formal stage of its Target uses (``host`` for a ``cpu_time``
    primary, else NVML where it runs, else ``host``). Returns ``(monitor or None, why not)``."""
    monitor, note = start_monitor(True, "host" if primary == "cpu_time" else "gpu")
    if monitor is None and primary != "cpu_time":
        monitor, note = start_monitor(True, "host")
    return monitor, note


def monitor_windows(run: WorkerRun, monitor: Any) -> list[dict[str, Any]]:
    """The monitor's verdict of every pair's window of ``run`` (R17), as the raw tables record
    them (``call_ids`` and the verdict); none without a monitor. The monitor is stopped first,
    so its last observation brackets the last window."""
    if monitor is None:
        return []
    monitor.stop()
    windows = []
    for r, c in run.pairs():
        verdict = monitor.verdict(min(r["start_s"], c["start_s"]), max(r["end_s"], c["end_s"]))
        windows.append({"call_ids": [r["call_id"], c["call_id"]], **verdict.to_json()})
    return windows


def foreign_windows_refusal(
    windows: list[dict[str, Any]], what: str, *, span: str = "pair"
) -> RuleRefused | None:
    """R17 for a measurement of the original against itself (the baseline, the A/A): where the
    monitor saw foreign activity in more than
    :data:`~perfledger.commands.workflow.foreign_share.FOREIGN_SHARE_LIMIT` of its windows, the
    share beyond which a formal stage cannot pass without another actor's review, it is refused,
    whatever the readiness declares (``statistics.allow_explained_foreign_activity``, a value the
    agent types, waives nothing: issue 34). No review can lift it: a refused measurement has no
    event to review, so the remedy is a quieter host. ``what`` names it (``baseline``, ``A/A``),
    ``span`` what one window covers (``pair``; ``call``: a self-timed baseline's calls). Both
    protocols' baselines and A/As are judged here, the worker protocol's and the self-timed
    driver's. Returns: the refusal to raise (its message gives the figures), or None."""
    touched = [w for w in windows if w.get("foreign_activity")]
    if not over_limit(len(touched), len(windows)):
        return None
    cores = sorted(float(w.get("foreign_cores") or 0.0) for w in touched)
    reasons = sorted({r for w in touched for r in w.get("reasons", ()) if r != "host_monitor"})
    shown = f"; foreign cores {cores[0]:.2f} to {cores[-1]:.2f}" if cores[-1] > 0 else ""
    return rules.refuse(
        "R17",
        f"the monitor saw foreign activity in {len(touched)} of {len(windows)} {what} {span} "
        f"windows ({100 * len(touched) / len(windows):.0f} % > "
        f"{100 * FOREIGN_SHARE_LIMIT:.0f} %{shown}; {', '.join(reasons[:5]) or 'no reason'}): "
        f"the {what}'s figures would carry another process's load; nothing was recorded",
        "measure again on a quieter host (the windows are what the monitor saw; stop the other "
        "work, or use a machine of its own); no readiness setting waives this",
    )


def trivial_output_refusal(settings: dict[str, Any], what: str) -> RuleRefused | None:
    """R5: the readiness's accuracy rule, checked against what the reference wrote: where an
    output that does no work (zeros, a constant, the reference's rows reordered) passes it on
    some case (``settings["outputs"]["trivial_passes"]``, judged by the run), the rule cannot
    tell a candidate that computes nothing from a correct one, and ``what`` (a formal stage, a
    recorded A/A) is refused. Returns: the refusal to raise, or None."""
    passes = (settings.get("outputs") or {}).get("trivial_passes") or {}
    if not passes:
        return None
    shown = "; ".join(f"case {case}: {why}" for case, why in sorted(passes.items())[:3])
    return rules.refuse(
        "R5",
        f"the readiness's accuracy rule accepts outputs that do no work against the reference's "
        f"({shown}): it cannot tell a candidate that computes nothing from a correct one, so "
        f"{what} measured under it is not recorded",
        "record readiness again with a rule that refuses such outputs (`exact`, or `allclose` "
        "with rtol/atol below the outputs' own scale), or inputs whose outputs are not "
        "constant",
    )


def _findings(figures: dict[str, CaseFigures], stage: str, settings: dict[str, Any]) -> list[str]:
    lines = []
    passes = (settings.get("outputs") or {}).get("trivial_passes") or {}
    for case, why in sorted(passes.items()):
        lines.append(f"FLAG accuracy: case {case}: {why}; a formal stage is refused (R5)")
    failed = sum(f.cand_incorrect for f in figures.values())
    if failed:
        what = "cannot support a champion (R5, R13)" if stage in FORMAL_STAGES else "has no "
        what += "" if stage in FORMAL_STAGES else "performance meaning on those calls (R5)"
        lines.append(
            f"{'FLAG' if stage in FORMAL_STAGES else 'note'} accuracy: the candidate's output "
            f"differed from the reference's on {failed} call(s); it {what}"
        )
    if settings["fresh_worker"]:
        lines.append(f"note workers: a fresh worker per pair ({settings['fresh_reason']})")
    for case, f in figures.items():
        lines.append(
            f"case {case}: wall {1e3 * f.ref_wall_s:.3f} -> {1e3 * f.cand_wall_s:.3f} ms, cpu "
            f"{1e3 * f.ref_cpu_s:.3f} -> {1e3 * f.cand_cpu_s:.3f} ms (medians, perfledger's clock "
            "and the kernel's accounting)"
        )
        if f.reported:
            lines.append(f"  reported by the subjects (decides nothing): {f.reported}")
    return lines


def measure_original(
    command: str,
    *,
    cases: list[str],
    calls: int,
    metric: str,
    unit: str,
    accuracy: dict[str, Any] | None = None,
    copies: Any = None,
    monitor: Any = None,
    timeout_s: float = 600.0,
    on_call: Callable[[], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, list[Any]], dict[str, Any]]:
    """The original's baseline of an observed metric (R4), run as a formal stage runs its
    subjects (:func:`run_subjects`): two workers of ``command`` (the readiness driver with the
    original's directory in its ``{subject}`` place) in ABBA pairs, ceil(``calls`` / 2) pairs
    per case after a warm-up round, each call with a fresh seed and output place, every output
    judged against the other worker's of the same seed (``accuracy``, default exact); values
    from perfledger's clock or the kernel's CPU accounting, never from the subject. ``copies``:
    the original's read-only copies (:func:`perfledger.app.identity.original_copies`), whose
    commands run instead of ``command``; ``monitor``: a started monitor whose verdict of each
    pair's window is recorded.

    Returns: ``(rows, {"values", "cases", "call_ids"}, settings)``: rows one per call (seconds;
        every timed call of both workers is one value), settings the run's (protocol, every
        worker's call environment: names and values' hashes, the copies' digests) and the
        monitor's windows.
    Raises: BadRequest for a command that cannot be parsed; MeasurementError when a worker
        fails the protocol, a call writes no readable output, or the original's outputs of one
        seed differ (nothing is recorded); RuleRefused (R11) from the copies' guard.
    """

    argvs = original_argvs(command, copies)
    run = run_subjects(
        argvs, copies, cases=cases, pairs_per_case=max(1, math.ceil(calls / 2)),
        accuracy=accuracy or {"compare": "exact"}, units={metric: unit}, timeout_s=timeout_s,
        on_call=None if on_call is None else (lambda row: None if row["warmup"] else on_call()),
        monitor=monitor,
    )  # fmt: skip
    for row in run.table():
        if not row["correct"]:  # an original that fails, or differs from itself, has no baseline
            raise MeasurementError(
                f"the original's call {row['call_id']} on case {row['case']!r} failed its output "
                f"check ({row['output'].get('reason') or row['output'].get('error')}): an "
                "original that writes no readable output, or other outputs for the same case "
                "and seed, has no baseline; nothing was recorded",
                hint="the command must write its output to the path it is given in place of "
                "{output} (or $PERFLEDGER_OUTPUT), the same for the same seed",
            )
    body: dict[str, list[Any]] = {"values": [], "cases": [], "call_ids": []}
    rows = [row for row in run.table() if not row["warmup"]]
    for row in rows:
        body["values"].append(row["metrics"][metric][0])
        body["cases"].append(row["case"])
        body["call_ids"].append(row["call_id"])
    windows = monitor_windows(run, monitor)
    monitored = {"windows": windows, "settings": monitor.settings() if monitor else None}
    return run.table(), body, {"settings": run.settings, "monitor": monitored}


#: The workload A/A's stopping rule (R4) when no ``--runs`` is given: :data:`AA_START_PAIRS`
#: ABBA pairs per case first, then more until the resolution is at most :data:`AA_TARGET_SHARE`
#: of the Target's minimum effect, or :data:`AA_MAX_PAIRS` pairs per case ran. Every pair run is
#: kept (the table holds them all; the recorded figures derive from all of them).
AA_START_PAIRS = 10
AA_MAX_PAIRS = 60
AA_TARGET_SHARE = 0.5
#: The fewest pairs per case one more block of the stopping rule adds.
AA_MIN_BLOCK = 5


def aa_figures(target: Any, valid: list[Pair]) -> tuple[float, dict[str, float]]:
    """The A/A figures of ``valid`` pairs as the Target's verdicts derive them (its statistic,
    aggregation, resamples and confidence): ``(resolution, per case)`` (R4).
    Raises: ValueError as :func:`~perfledger.projections.verdict_cases.aa_resolution`."""
    primary = target.definition.primary
    stats = target.readiness.statistics if target.readiness is not None else None
    options: dict[str, Any] = (
        {"aggregation": stats.aggregation, "resamples": stats.resamples,
         "confidence": stats.confidence}
        if stats is not None else {}
    )  # fmt: skip
    return aa_resolution(valid, direction=primary.direction, statistic=primary.statistic,
                         **options)  # fmt: skip


def aa_pairs_to_add(target: Any, valid: list[Pair], ran: int) -> int:
    """The stopping rule of a workload A/A (see :data:`AA_START_PAIRS`): after ``ran`` pairs
    per case whose ``valid`` ones are given, the pairs per case still to run: none once the
    resolution is at most :data:`AA_TARGET_SHARE` of the minimum effect (or the cap is
    reached, or a case has too few valid pairs to derive one); else enough that the CI, which
    narrows about as 1/sqrt(pairs), should reach it, at least :data:`AA_MIN_BLOCK`."""
    if ran >= AA_MAX_PAIRS:
        return 0
    try:
        resolution, _ = aa_figures(target, valid)
    except ValueError:
        return 0  # too few valid pairs: the caller says why, more pairs would not help
    goal = AA_TARGET_SHARE * target.definition.min_effect
    if resolution <= goal:
        return 0
    wanted = math.ceil(ran * (resolution / goal) ** 2)
    return min(AA_MAX_PAIRS - ran, max(AA_MIN_BLOCK, wanted - ran))


def aa_more_pairs(target: Any, cases: list[str]) -> Callable[[list[dict[str, Any]]], int]:
    """:func:`aa_pairs_to_add` as the worker protocol's ``run_pairs(more_pairs=...)``: from
    the rows so far."""

    def more(rows: list[dict[str, Any]]) -> int:
        run = WorkerRun(rows, {}, {})
        ran = max((sum(1 for r, _c in run.pairs() if r["case"] == c) for c in cases), default=0)
        return aa_pairs_to_add(target, _valid_aa_pairs(run, target.definition.primary.name), ran)

    return more


def aa_more_driver_pairs(target: Any, cases: list[str]) -> Callable[[list[Any]], int]:
    """:func:`aa_pairs_to_add` as the command driver's ``run_pairs(more_pairs=...)``: from the
    :class:`~perfledger.kernels.workload.driver.PairResult` list so far (a pair counts where
    both calls ran, were correct and reported the primary)."""
    metric = target.definition.primary.name

    def more(pairs: list[Any]) -> int:
        valid = [
            Pair(p.case, tuple(p.ref.metrics[metric]), tuple(p.cand.metrics[metric]))
            for p in pairs
            if p.usable and p.ref.correct and p.cand.correct
            and p.ref.metrics.get(metric) and p.cand.metrics.get(metric)
        ]  # fmt: skip
        ran = max((sum(1 for p in pairs if p.case == c) for c in cases), default=0)
        return aa_pairs_to_add(target, valid, ran)

    return more


def aa_stopping_rule(target: Any, pairs_per_case: int) -> dict[str, Any]:
    """What an A/A's stopping rule ran, as its settings record it (R4)."""
    return {
        "start_pairs": AA_START_PAIRS, "max_pairs": AA_MAX_PAIRS,
        "until_resolution_at_most": AA_TARGET_SHARE * target.definition.min_effect,
        "pairs_per_case": pairs_per_case,
    }  # fmt: skip


def _valid_aa_pairs(run: Any, metric: str) -> list[Pair]:
    return [
        Pair(r["case"], tuple(r["metrics"][metric]), tuple(c["metrics"][metric]))
        for r, c in run.pairs()
        if r["correct"] and c["correct"]
    ]


def observed_aa(
    command: str,
    *,
    target: Any,
    cases: list[str],
    runs: int | None,
    timeout_s: float = 600.0,
    on_call: Callable[[dict[str, Any]], None] | None = None,
    copies: Any = None,
    monitor: Any = None,
) -> tuple[list[Any], list[str], Any]:
    """The original against itself under the worker protocol (R4's A/A of an observed
    primary), run as a formal stage runs its subjects (:func:`run_subjects`): ``runs`` ABBA
    pairs per case (None: the stopping rule of :func:`aa_more_pairs`, from
    :data:`AA_START_PAIRS`), every output judged against the other's of the pair. ``copies``:
    the original's two read-only copies (:func:`perfledger.app.identity.original_copies`),
    whose commands run instead of ``command``, each call under their guard (R11); None: the
    command runs as given (a Target whose readiness snapshotted nothing).

    Returns: ``(valid pairs as projections.verdicts.Pair, notes, the WorkerRun)``; a pair whose
    outputs differ is left out and said so (a workload that is not deterministic on one seed).
    Raises: BadRequest (no accuracy rule that compares, a primary that is not observed);
        MeasurementError when a worker fails the protocol.
    """

    units = observed_units(target)
    accuracy = compared(target.readiness)
    if accuracy is None:
        raise BadRequest(
            "the worker protocol's A/A judges outputs: the readiness compares none",
            hint='record readiness with "accuracy": {"compare": "exact"} (or "allclose") and a driver that declares {output}, or measure with --protocol command',
        )
    argvs = original_argvs(command, copies)
    run = run_subjects(
        argvs, copies, cases=cases, pairs_per_case=runs or AA_START_PAIRS, accuracy=accuracy,
        units=units, timeout_s=timeout_s, on_call=on_call,
        more_pairs=aa_more_pairs(target, cases) if runs is None else None, monitor=monitor,
    )  # fmt: skip
    if runs is None:  # what ran: the rule, and the pairs it took (R4)
        run.settings["stopping_rule"] = aa_stopping_rule(target, run.settings["pairs_per_case"])
    valid = _valid_aa_pairs(run, target.definition.primary.name)
    unequal = [c for r, c in run.pairs() if r["correct"] and not c["correct"]]
    notes = (
        [
            f"{len(unequal)} A/A pair(s): the original's outputs of the same case and seed differ "
            f"({unequal[0]['call_id']}: {unequal[0]['output']['reason']})"
        ]
        if unequal
        else []
    )
    return valid, notes, run


__all__ = [
    "CaseFigures",
    "IdentityEdge",
    "MeasureWorkload",
    "MeasuredWorkload",
    "aa_figures",
    "aa_more_driver_pairs",
    "aa_more_pairs",
    "aa_pairs_to_add",
    "aa_stopping_rule",
    "foreign_windows_refusal",
    "held",
    "measure_original",
    "measure_workload",
    "monitor_windows",
    "observed_aa",
    "observed_units",
    "original_argvs",
    "original_monitor",
    "release",
    "run_subjects",
    "trivial_output_refusal",
]
