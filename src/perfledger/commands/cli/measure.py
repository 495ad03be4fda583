"""``perfledger env`` and ``perfledger measure kernel|workload|aa`` (SPEC.md section 5; R4, R5,
R11, R17): run the measurement protocol of :mod:`perfledger.kernels` under the GPU monitor and
append what it measured through the ordinary operations (``samples.record``,
``resolution.record``), so every rule of the deciders applies unchanged.

- ``env`` prints the environment identity; its ``readiness_environment`` is what
  ``readiness.record`` should carry, so that ``environment_id`` matches the samples' (R11).
- ``measure workload`` runs a reference and a candidate command in ABBA order
  (:mod:`perfledger.kernels.workload.driver`) and records one pair per round and case: correctness and
  metrics of each subject from its own call (R11, ``same_process: false``); calls that failed
  (garbage, non-zero exit, timeout, NaN) are left out of the request and kept, with their reason,
  in the raw table.
- ``measure kernel`` compares the ``REFERENCE`` and ``CANDIDATE`` of a spec file (``PROBLEMS``
  or ``PROBLEM``, optional ``CONFIG``) per case, each subject in a worker process of its own
  (:func:`perfledger.kernels.isolation.isolated.compare_spec`; this process never loads the spec, and
  checks the workers' reports against its own clock and their revealed outputs); each ABBA
  block (one monitor window) becomes one recorded pair whose values are the block's per-call
  times, in the Target's primary unit (s, ms, us or ns) (``same_process: true``: one harness
  protocol, both subjects on one device).
- ``measure aa`` runs the original against itself (a workload command or a kernel spec) and
  prints, or with ``--record`` records, the resolution (R4).

The raw per-sample (per-call) table, the protocol's settings, the environment and the monitor's
windows are attached to the event as the artifact ``samples.json`` (``resolution.json`` for A/A).
Progress goes to stderr (rich); ``--json`` prints one object on stdout.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
import msgspec

from perfledger.app.censored import refuse_censored_formal_stage
from perfledger.app.context import (
    SAMPLES_ARTIFACT,
    check_cases,
    check_environment,
    check_installation_unchanged,
    environment_payload,
    foreign_activity_warnings,
    measured_provenance,
    raw_table,
    refuse_formal_dry_run,
    start_formal_run,
)
from perfledger.app.context import default_samples_id as _default_samples_id
from perfledger.app.context import experiment_context as _context
from perfledger.app.context import start_monitor as _start_monitor
from perfledger.app.identity import (
    SubjectsWatch,
    fresh_and_unchanged,
    measure_identity,
    subject_copies,
    unenforced_note,
)
from perfledger.app.measure_aa import MeasureAA
from perfledger.app.measure_aa import measure_aa as run_measure_aa
from perfledger.app.measure_driver import measurement_findings, run_driver, workload_request
from perfledger.app.measure_kernel import MeasureKernel
from perfledger.app.measure_kernel import measure_kernel as run_measure_kernel
from perfledger.app.measure_workload import (
    IdentityEdge,
    MeasureWorkload,
)
from perfledger.app.measure_workload import measure_workload as measure
from perfledger.app.measuring import failed_call_text
from perfledger.app.metrics import target_units as _target_units
from perfledger.app.metrics import work_units as _work_units
from perfledger.app.output_check import (
    accuracy_for,
    output_artifacts,
)
from perfledger.app.preconditions import refuse_formal_unmonitored
from perfledger.app.preview import verdict_preview
from perfledger.commands.cli.common import (
    actor_option,
    call_timeout_option,
    cases_option,
    idempotency_option,
    measure_dry_run_option,
    measured_target_option,
    quiet_option,
    refuse_explain_foreign,
    removed_explain_foreign_option,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.registry.operations import execute, preview
from perfledger.commands.workflow.raw_table import binding_of
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import BadRequest, MeasurementError, PerfledgerError
from perfledger.events.workflow import FORMAL_STAGES, OBSERVED_METRICS, WallCheck
from perfledger.kernels.subjects.spec_loader import load_spec
from perfledger.kernels.workload.subject_env import environment_warnings
from perfledger.ledger.base import Artifact

#: Seconds per unit of a time primary (the kernel harness measures seconds).
TIME_UNITS = UNITS_PER_SECOND
RESOLUTION_ARTIFACT = "resolution.json"


def _emit(data: object) -> None:

    click.echo(to_json_text(data))


# ------------------------------------------------------------------------------------ env


@click.command("env")
@click.option("--device", type=click.IntRange(min=0), default=0, help="CUDA/NVML device index.")
@click.option("--no-tools", is_flag=True, help="Skip `nvcc --version` and `ncu --version`.")
@_json
def env_command(device: int, no_tools: bool, json_flag: bool) -> None:
    """Print the environment identity (GPU, driver, CUDA, CuPy, nvcc, ncu, host); missing items
    are listed as missing, never guessed (R2, R11)."""
    ctx = _ctx(json_flag)
    data = environment_payload(device, tools=not no_tools)
    if ctx.json_mode:
        _emit(data)
        return
    for name, value in data.items():
        if name in {"errors", "readiness_environment"}:
            continue
        click.echo(f"{name:22s} {value if value is not None else '(missing)'}")
    click.echo(f"{'readiness environment':22s} {json.dumps(data['readiness_environment'])}")
    for name, why in data["errors"].items():
        click.echo(f"  missing {name}: {why}")


# ------------------------------------------------------------------------------------ helpers


@contextmanager
def _progress(total: int, label: str, quiet: bool) -> Iterator[Callable[[], None]]:
    """A rich progress bar on stderr; yields ``advance()``."""
    if quiet:
        yield lambda: None
        return
    from rich.console import Console  # noqa: PLC0415 (rich: heavy, only when printing for people)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: PLC0415 (rich: heavy, only when printing for people)

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def _parse_units(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in pairs:
        name, sep, unit = item.partition("=")
        if not sep or not name or not unit:
            raise BadRequest(f"--unit {item!r}: expected NAME=UNIT", hint="e.g. --unit time_ms=ms")
        out[name] = unit
    return out


def _artifact(data: dict[str, Any]) -> Any:

    return Artifact(json.dumps(data, sort_keys=True, default=str).encode(), "application/json")


def _append(
    ctx: Any,
    op: str,
    body: dict[str, Any],
    artifact_name: str,
    artifact: dict[str, Any],
    actor: str | None,
    idempotency_key: str | None,
    extra: dict[str, Any] | None = None,
) -> Any:

    if op == "samples.record":  # R5: the raw table names the samples it was measured for
        artifact = {**artifact, "binding": binding_of(body)}
    ledger = ctx.open()
    try:
        envelopes = execute(
            ledger,
            op,
            body,
            actor=_actor(actor),
            idempotency_key=idempotency_key,
            artifacts={artifact_name: _artifact(artifact), **(extra or {})},
        )
    finally:
        ledger.close()
    return envelopes[0]


def _answer(ctx: Any, result: dict[str, Any], lines: list[str]) -> None:
    if ctx.json_mode:
        _emit(result)
    else:
        for line in lines:
            click.echo(line)


def _progress_of(quiet: bool) -> Callable[[int, str], Any]:
    """The application layer's ``progress`` hook: a rich bar on stderr unless ``quiet``."""
    return lambda total, label: _progress(total, label, quiet)


def _warn(warnings: list[str]) -> None:
    """Print each warning on stderr (``warning: ...``); the answer's ``warnings`` list carries
    them in ``--json`` mode."""
    for text in warnings:
        click.echo(f"warning: {text}", err=True)


def aa_overall_line(
    resolution: float, per_case: dict[str, float], aggregation: str | None = None
) -> str:
    """One line on how the Target's A/A ``resolution`` relates to the cases' (docs/verdicts.md,
    "Resolution per case"): for a workload whose verdict judges an aggregate across cases
    (``aggregation``: geomean, mean, ...) it is that aggregate's noise, which need not equal any
    one case's (below all of them, or between them); for ``every_case`` or a kernel spec
    (``aggregation`` None) it is the largest case's."""
    if aggregation is None or aggregation == "every_case" or not per_case:
        return "  overall: the largest case's; each case's verdict uses its own"
    what = "geometric mean" if aggregation == "geomean" else aggregation
    return (
        f"  overall: the noise of the {what} over cases (what a verdict judges), not any one "
        "case's; each case's verdict uses its own"
    )


def start_formal_run_of_command(
    ctx: Any, experiment_id: str, stage: str, samples_id: str, protocol: str, actor: str | None
) -> None:
    """:func:`perfledger.app.context.start_formal_run` on the command's ledger (R14)."""
    ledger = ctx.open()
    try:
        start_formal_run(ledger, experiment_id, stage, samples_id, protocol, _actor(actor))
    finally:
        ledger.close()


_common = [
    click.option("--experiment", "experiment_id", required=True, help="The experiment id."),
    click.option(
        "--stage",
        type=click.Choice(["screen", "target", "final_audit"]),
        required=True,
        help="The stage these samples are for (R11).",
    ),
    click.option("--samples", "samples_id", default=None, help="Samples id (default: E-STAGE-N)."),
    click.option("--no-monitor", is_flag=True, help="Run without the NVML monitor (screens only)."),
    measure_dry_run_option,
    actor_option,
    idempotency_option,
    quiet_option,
    _json,
]


def _with_common(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(_common):
        fn = option(fn)
    return fn


# ------------------------------------------------------------------------------------ workload


@click.command("workload")
@_with_common
@click.option("--ref", "ref_cmd", required=True, help="The reference's command line as typed: the "
              "readiness driver with {subject} written as the reference's code directory, e.g. "
              "'python3 work/original/bench.py {case} {output}' (perfledger fills {case} and "
              "{output}).")  # fmt: skip
@click.option("--cand", "cand_cmd", required=True, help="The candidate's command line as typed: "
              "the readiness driver with {subject} written as the candidate's code directory, "
              "e.g. 'python3 work/candidate/bench.py {case} {output}'.")  # fmt: skip
@cases_option
@click.option("--pairs", type=click.IntRange(min=1), default=None, help="Pairs per case.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, help="Warm-up calls per case.")
@call_timeout_option
@click.option(
    "--unit", "unit_flags", multiple=True, help="NAME=UNIT of a metric not in the Target."
)
@click.option(
    "--monitor",
    "monitor_source",
    type=click.Choice(["gpu", "host"]),
    default="gpu",
    help="What the monitor watches (R17): the GPU through NVML, or the host's CPU counters "
    "(a CPU workload).",
)
@removed_explain_foreign_option
@click.option(
    "--protocol",
    type=click.Choice(["worker", "command", "self"]),
    default=None,
    help="worker: perfledger times every call and judges every output (the subject speaks the "
    "worker protocol); command: one process per call, timed from spawn to exit; self: the "
    "self-timed driver of Targets whose primary the subject reports. Default: worker for a "
    "Target whose primary is observed (wall_time, cpu_time), else self.",
)
@click.option(
    "--fresh-worker",
    is_flag=True,
    help="A fresh worker per pair (the default wherever the reference's outputs do not follow "
    "the seed).",
)
def measure_workload(
    experiment_id: str,
    stage: str,
    samples_id: str | None,
    no_monitor: bool,
    dry_run: bool,
    actor: str | None,
    idempotency_key: str | None,
    quiet: bool,
    json_flag: bool,
    ref_cmd: str,
    cand_cmd: str,
    cases: tuple[str, ...],
    pairs: int | None,
    warmup: int,
    timeout_s: float,
    unit_flags: tuple[str, ...],
    monitor_source: str,
    explain_foreign: str | None,
    protocol: str | None,
    fresh_worker: bool,
) -> None:
    """Run the reference and candidate commands in ABBA order and record SamplesRecorded.

    For a Target whose primary perfledger observes (wall_time, cpu_time) the default is the
    worker protocol: each command starts a worker (`perfledger.subject.serve(setup, call)`),
    perfledger sends every call its case, seed and output place, times it with its own clock,
    reads its CPU time from the kernel and compares every output with the reference's (R5).
    Formal stages (target, final_audit) need --monitor (host for a CPU workload, gpu on a GPU).
    With --protocol self (Targets whose primary the subject reports), each command prints one
    JSON object: {"correct": bool, "metrics": {name: number | [numbers]}}; `{case}` and
    $PERFLEDGER_CASE carry the case. Failed calls are kept with their reason in the raw table.
    Where the readiness driver declares a {subject} place, each command must be that driver with
    a code directory in its place; both are snapshotted and checked first (R11,
    docs/code-identity.md).
    """
    ctx = _ctx(json_flag)
    refuse_formal_dry_run(stage, dry_run)
    refuse_explain_foreign(explain_foreign)
    ledger = ctx.open()
    try:
        info = _context(ledger, experiment_id, stage)
        if _observing(info["target"], protocol):  # the application layer's use case
            request = MeasureWorkload(
                experiment_id=experiment_id, stage=stage, ref=ref_cmd, cand=cand_cmd,  # type: ignore[arg-type]
                protocol=protocol or "worker", cases=cases, pairs=pairs, warmup=warmup,  # type: ignore[arg-type]
                timeout_s=timeout_s, fresh_worker=fresh_worker,
                monitor="none" if no_monitor else monitor_source,  # type: ignore[arg-type]
                samples_id=samples_id, dry_run=dry_run,
                actor=_actor(actor),
                idempotency_key=idempotency_key,
            )  # fmt: skip
            _measure_observed(ctx, ledger, request, quiet, unit_flags)
            return
        # R11: both subjects snapshotted and checked before anything runs
        code, code_files = measure_identity(ledger, info, ref_cmd, cand_cmd, stage, experiment_id)
    finally:
        ledger.close()

    # R5: where the readiness compares outputs, perfledger judges them, not the subject
    accuracy = accuracy_for(info["target"], {"--ref": ref_cmd, "--cand": cand_cmd})
    unenforced = unenforced_note(info["target"])  # the old rule: say so before measuring
    if unenforced is not None:
        _warn([unenforced])
    chosen = list(cases) or info["cases"]
    if not chosen:
        raise BadRequest(
            "no test cases: pass --case or name them in the readiness's test set",
            hint="pass --case NAME, or record readiness whose test_set names its cases",
        )
    check_cases(chosen, info["test_set"], "--case")
    n_pairs = pairs or max(5, info["min_pairs"])
    units = {
        **_work_units(info["target"]),
        **_target_units(info["target"]),
        **_parse_units(unit_flags),
    }
    env = environment_payload()
    check_environment(env, info)
    monitor, monitor_note = _start_monitor(not no_monitor, monitor_source)
    if monitor is None:
        refuse_formal_unmonitored(stage, monitor_note)
    sid = samples_id or _default_samples_id(experiment_id, stage, info["state"])
    try:
        start_formal_run_of_command(ctx, experiment_id, stage, sid, "workload_abba", actor)
    except BaseException:
        if monitor is not None:
            monitor.stop()
        raise
    copies = None
    try:
        # R11: each call runs from a read-only copy of its subject's snapshot, with its own
        # bytecode cache; the subjects' directories are checked before every call too: a
        # subject could edit the other's files for a while and restore them before the end
        copies = None if code is None else subject_copies(info["target"], code, code_files)
        unchanged = None if code is None else SubjectsWatch(info, code)
        run = run_driver(
            ref_cmd, cand_cmd, chosen, n_pairs, warmup, timeout_s,
            lambda total, label: _progress(total, label, quiet), accuracy, unchanged, copies,
        )  # fmt: skip
    finally:
        if monitor is not None:
            monitor.stop()
        if copies is not None:
            copies.close()
    if code is not None:
        fresh_and_unchanged(info, code)
    check_installation_unchanged(env)  # R11: an installed module edited during the run
    body, windows = workload_request(
        run,
        info,
        samples_id=sid,
        experiment_id=experiment_id,
        stage=stage,
        environment_id=env["environment_id"],
        units=units,
        monitor=monitor,
    )
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
            f"no usable pair: every pair had a failed call ({len(failed)} failed calls)"
            + (failed_call_text(run.failed_calls[0]) if run.failed_calls else ""),
            hint="run the command by hand: it must print one JSON object with `correct` and `metrics`",
        )
    body["units"] = {
        k: v for k, v in units.items() if any(k in p["ref"]["values"] for p in body["pairs"])
    }
    if code is not None:
        body["identity"] = code
    body["provenance"] = measured_provenance("workload_abba", run.settings)
    artifact = raw_table("workload", run, env, windows, monitor_note, monitor)
    result: dict[str, Any] = {
        "samples_id": sid,
        "pairs_recorded": len(body["pairs"]),
        "failed_calls": failed,
        "environment_id": env["environment_id"],
        "monitor": None if monitor is None else monitor_source,
        "foreign_windows": sum(1 for w in windows if w.get("foreign_activity")),
    }
    if unenforced is not None:
        result["code_identity"] = {"enforced": False, "note": unenforced}
    readiness = info["target"].readiness
    allowed = bool(readiness and readiness.statistics.allow_explained_foreign_activity)
    result["warnings"] = foreign_activity_warnings(body["pairs"], stage, allowed)

    result["warnings"] += environment_warnings(  # code loaded from outside both subjects
        run.settings["environment"], [run.settings["ref_argv"], run.settings["cand_argv"]], stage
    )
    result["warnings"] += censored
    _warn(result["warnings"])
    if dry_run:
        # the decider's own wall-clock check, decided on the head and not appended
        wall_check, refusal = _previewed_wall_check(ctx, body, actor)
        findings = measurement_findings(body, stage, run, wall_check, info["target"])
        findings["findings"] += [f"note dry run: {refusal}"] if refusal else []
        result.update(findings)
        result["request"] = body
        _answer(ctx, result, [json.dumps(body, indent=2), *findings["findings"]])
        return
    extra = {**(code_files or {}), **output_artifacts(run)}  # small outputs, for the audit
    event = _append(
        ctx, "samples.record", body, SAMPLES_ARTIFACT, artifact, actor, idempotency_key, extra
    )
    # what samples.record derived and recorded is what is shown: one wall-clock check
    findings = measurement_findings(
        body, stage, run, _recorded_wall_check(event.payload), info["target"]
    )
    result.update(findings)
    result.update(event_id=event.id, kind=event.kind)
    lines = [f"{event.kind} {event.id}", f"samples {sid}: {len(body['pairs'])} pairs recorded"]
    if code is not None:
        result["snapshots"] = {r: code[r]["digest"] for r in ("reference", "candidate")}
        lines.append(
            f"snapshots: reference {code['reference']['digest'][:16]}, candidate "
            f"{code['candidate']['digest'][:16]}"
        )
    lines += [f"failed call {f['call_id']}: {f['reason']}: {f['message']}" for f in failed]
    lines += findings["findings"]

    ledger = ctx.open()
    try:  # per case: per-call medians, the improvement and its CI, as the verdict derives them
        result["verdict_preview"], shown = verdict_preview(ledger, stage, body["target_id"], sid)
    finally:
        ledger.close()
    _answer(ctx, result, lines + shown)


def _observing(target: Any, protocol: str | None) -> bool:
    """True when ``measure workload`` runs under the worker or command protocol: asked for, or
    by default for a Target whose primary perfledger observes (``wall_time``, ``cpu_time``)."""

    if protocol is None:
        return target.definition.primary.name in OBSERVED_METRICS
    return protocol != "self"


def _measure_observed(
    ctx: Any,
    ledger: Any,
    request: Any,
    quiet: bool,
    unit_flags: tuple[str, ...],
) -> None:
    """The adapter of :func:`perfledger.app.measure_workload.measure_workload`: call it on the
    open ``ledger`` and render its answer (text, or ``--json``)."""

    if unit_flags:
        raise BadRequest(
            "--unit belongs to the self-timed protocol: under the worker protocol perfledger "
            "observes every figure it records (wall_time, cpu_time)",
            hint="leave --unit out, or measure with --protocol self (the subject reports its metrics)",
        )
    edge = IdentityEdge(measure_identity, SubjectsWatch, fresh_and_unchanged)
    calls = 2 * len(request.cases or ["?"]) * (request.pairs or 5)
    with _progress(calls, "worker calls", quiet) as advance:
        result = measure(ledger, request, identity=edge, on_call=lambda _row: advance())
    _warn(result.warnings)
    answer = msgspec.to_builtins(result)
    lines = [f"samples {result.samples_id}: {result.pairs_recorded} pairs ({result.protocol})"]
    if result.event_id is not None:
        lines.insert(0, f"{result.kind} {result.event_id}")
        answer["verdict_preview"], shown = verdict_preview(
            ledger, request.stage, ledger.state().samples[result.samples_id].target_id,
            result.samples_id,
        )  # fmt: skip
        lines += result.findings + shown
    else:
        lines = [json.dumps(result.request, indent=2), *result.findings]
    _answer(ctx, answer, lines)


def _previewed_wall_check(ctx: Any, body: dict[str, Any], actor: str | None) -> tuple[Any, str]:
    """The wall-clock check ``samples.record`` would derive for ``body`` on the current head
    (nothing appended) and ``""``; or ``(None, why)`` when the decision would be refused."""

    ledger = ctx.open()
    try:
        drafts = preview(ledger, "samples.record", body, actor=_actor(actor))
    except PerfledgerError as exc:
        rule = f"{exc.rule}: " if getattr(exc, "rule", None) else ""
        return None, f"samples.record would refuse these samples: {rule}{exc.message}"
    finally:
        ledger.close()
    return _recorded_wall_check(drafts[0].payload), ""


def _recorded_wall_check(payload: Any) -> Any:
    """The WallCheck of a decided SamplesRecorded payload (a Struct, or its builtins), or None."""

    check = payload.get("wall_check") if isinstance(payload, dict) else payload.wall_check
    return msgspec.convert(check, WallCheck) if isinstance(check, dict) else check


# ------------------------------------------------------------------------------------ kernel


@click.command("kernel")
@_with_common
@click.option(
    "--spec", "spec_path", default=None, help="Python file: PROBLEMS, REFERENCE, CANDIDATE."
)
@click.option(
    "--ref", "ref_dir", default=None, help="Code directory of the reference (R11, bound Target)."
)
@click.option(
    "--cand", "cand_dir", default=None, help="Code directory of the candidate (R11, bound Target)."
)
def measure_kernel(
    experiment_id: str,
    stage: str,
    samples_id: str | None,
    no_monitor: bool,
    dry_run: bool,
    actor: str | None,
    idempotency_key: str | None,
    quiet: bool,
    json_flag: bool,
    spec_path: str | None,
    ref_dir: str | None,
    cand_dir: str | None,
) -> None:
    """Compare REFERENCE and CANDIDATE of a kernel spec with the harness (correctness, cold ABBA
    timing, stopping, plausibility), each subject in a worker process of its own, and record
    SamplesRecorded; one recorded pair per ABBA block (one monitor window).
    Where the readiness bound the original to a snapshot (driver ["{subject}/spec.py"]), pass
    --ref DIR --cand DIR instead of --spec: each worker runs the SUBJECT of the spec in its own
    directory, both snapshotted and checked first (R11, docs/code-identity.md)."""

    ctx = _ctx(json_flag)
    request = MeasureKernel(
        experiment_id=experiment_id, stage=stage, spec=spec_path, ref_dir=ref_dir,  # type: ignore[arg-type]
        cand_dir=cand_dir, samples_id=samples_id, monitor=not no_monitor, dry_run=dry_run,
        actor=_actor(actor), idempotency_key=idempotency_key,
    )  # fmt: skip
    ledger = ctx.open()
    try:
        done = run_measure_kernel(ledger, request, progress=_progress_of(quiet), warn=_warn)
    finally:
        ledger.close()
    answer = done.answer()
    if done.request is not None:  # a dry run
        _answer(ctx, answer, [json.dumps(answer, indent=2, default=str)])
        return
    lines = [f"{done.kind} {done.event_id}"]
    if done.snapshots is not None:
        lines.append(
            f"snapshots: reference {done.snapshots['reference'][:16]}, candidate "
            f"{done.snapshots['candidate'][:16]}"
        )
    for case, s in done.stats.items():
        if s:
            lines.append(
                f"{case}: ratio {s['median_ratio']:.5f} CI [{s['ci_low']:.5f}, {s['ci_high']:.5f}] {s['direction']}"
            )
    _answer(ctx, answer, lines + done.findings)


# ------------------------------------------------------------------------------------ A/A


@click.command("aa")
@measured_target_option
@click.option("--cmd", "cmd", default=None, help="A workload Target: the original's command line "
              "as typed, the readiness driver with {subject} written as the original's directory, "
              "e.g. 'python3 work/original/bench.py {case} {output}'.")  # fmt: skip
@click.option("--spec", "spec_path", default=None, help="A kernel spec (its REFERENCE is run).")
@click.option(
    "--dir", "kernel_dir", default=None, help="The original's code directory (kernel, R11)."
)
@cases_option
@click.option(
    "--runs",
    type=click.IntRange(min=2),
    default=None,
    help="Workload: A/A pairs per case (default: a stopping rule, 10 pairs and more until the "
    "resolution is at most half the minimum effect, at most 60). Kernel: A/A comparisons "
    "(default 5).",
)
@call_timeout_option
@click.option("--record", is_flag=True, help="Append resolution.record with the result (R4).")
@click.option(
    "--accept-resolution",
    is_flag=True,
    help="Record a resolution at or above the minimum effect (refused otherwise: no verdict "
    "could pass).",
)
@actor_option
@idempotency_option
@quiet_option
@_json
def measure_aa(
    target_id: str,
    cmd: str | None,
    spec_path: str | None,
    kernel_dir: str | None,
    cases: tuple[str, ...],
    runs: int | None,
    timeout_s: float,
    record: bool,
    accept_resolution: bool,
    actor: str | None,
    idempotency_key: str | None,
    quiet: bool,
    json_flag: bool,
) -> None:
    """Measure the resolution: the original against itself under the same protocol, on every
    case (R4). The resolution is the largest distance of an A/A CI end from a ratio of 1: per
    case, and for the Target the aggregate a verdict derives (workload) or the largest case
    (kernel spec). On a kernel Target bound to code, --dir DIR (the original's directory)
    replaces --spec: two workers run the SUBJECT of its spec (R11)."""
    ctx = _ctx(json_flag)
    request = MeasureAA(
        target_id=target_id, cmd=cmd, spec=spec_path, directory=kernel_dir, cases=cases,
        runs=runs, timeout_s=timeout_s, record=record, accept_resolution=accept_resolution,
        actor=_actor(actor) if record else None, idempotency_key=idempotency_key,
    )  # fmt: skip
    ledger = ctx.open()
    try:
        done = run_measure_aa(ledger, request, progress=_progress_of(quiet), warn=_warn)
    finally:
        ledger.close()
    kind = "A/A pairs" if done.workload else "A/A comparisons"
    lines = [
        f"resolution {done.resolution:.5f} ({100 * done.resolution:.3f} %) from {done.repeats} "
        + kind,
        *(f"  case {c}: {100 * r:.3f} %" for c, r in sorted(done.per_case.items())),
        aa_overall_line(done.resolution, done.per_case, done.aggregation),
        done.notes,
    ]
    if done.recorded:
        lines.insert(0, f"{done.kind} {done.event_id}")
    _answer(ctx, done.answer(), lines)


__all__ = ["env_command", "environment_payload", "load_spec"]
