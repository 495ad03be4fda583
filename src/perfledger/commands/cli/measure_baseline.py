"""``perfledger measure baseline``: the original's baseline measured, not typed (R4).

The original's command (for a Target whose readiness declares a ``{subject}`` place: the
readiness driver with the original's code directory in it, checked against the snapshot
readiness took, R11) is called ``--calls`` times on every case of the test set, on this
machine (whose environment identity must be the readiness's, R11). Every value of the primary
metric from a valid call becomes one baseline value, with its case and call id, and
``baseline.record`` is appended with the calls' raw table attached (``baseline.json``). A call
that fails, or whose own accuracy check fails, stops it: an original that fails its accuracy
rule has no baseline (R5).

Before this command, an agent had to run the original by hand and paste its values, its
content hash and the environment id into a request.
"""

from __future__ import annotations

import shlex
import statistics
from typing import Any

import click

from perfledger.app.measure_workload import measure_original
from perfledger.commands.cli import measure as m
from perfledger.commands.cli.common import (
    actor_option,
    call_timeout_option,
    cases_option,
    idempotency_option,
    json_option,
    measured_target_option,
    quiet_option,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.identity import check_original_command
from perfledger.commands.registry.operations import preview
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest, MeasurementError
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.driver import Subject, run_call
from perfledger.projections.target_kind import measuring_command, target_kind

#: The raw-table artifact attached to the baseline's event.
BASELINE_ARTIFACT = "baseline.json"
#: Calls of the original per case unless --calls says otherwise.
DEFAULT_CALLS = 3


@click.command("baseline")
@measured_target_option
@click.option(
    "--cmd",
    "cmd",
    default=None,
    help="A workload Target: the original's command line as typed, the readiness driver with "
    "{subject} written as the original's code directory, e.g. 'python3 work/original/bench.py "
    "{case} {output}' (perfledger fills {case} and {output}).",
)
@click.option(
    "--spec",
    "spec_path",
    default=None,
    help="A kernel Target: the spec whose REFERENCE is the original, timed by the kernel harness.",
)
@click.option(
    "--dir",
    "kernel_dir",
    default=None,
    help="A kernel Target whose readiness bound the original's directory: that directory (R11).",
)
@cases_option
@click.option(
    "--calls",
    type=click.IntRange(min=1),
    default=DEFAULT_CALLS,
    help=f"Calls of the original per case (default {DEFAULT_CALLS}); every value of the "
    "primary metric a call prints is one baseline value.",
)
@call_timeout_option
@actor_option
@idempotency_option
@click.option("--dry-run", is_flag=True, help="Measure and decide; append nothing.")
@quiet_option
@json_option
def measure_baseline(
    target_id: str,
    cmd: str | None,
    spec_path: str | None,
    kernel_dir: str | None,
    cases: tuple[str, ...],
    calls: int,
    timeout_s: float,
    actor: str | None,
    idempotency_key: str | None,
    dry_run: bool,
    quiet: bool,
    json_flag: bool,
) -> None:
    """Measure the original's baseline and record it (R4): a workload's CMD called --calls times
    on every case (a kernel Target's REFERENCE timed by the kernel harness --calls times per
    case: --spec SPEC, or --dir DIR where readiness bound the original's directory), every
    value of the primary metric kept with its case and call id, in this machine's environment
    (R11); the raw per-call table is attached. Rules: R2 R4 R5 R11."""

    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        state = ledger.state()
    finally:
        ledger.close()
    target = state.targets.get(target_id)
    if target is None:
        raise BadRequest(f"no Target {target_id!r}", hint="`perfledger status` lists them")
    readiness = target.readiness
    if readiness is None:
        raise refuse(
            "R2", "the baseline is measured after readiness", "`perfledger readiness record`"
        )
    kernel = target_kind(target) == "kernel"
    _check_form(target_id, kernel, cmd, spec_path, kernel_dir)
    if cmd is not None:
        check_original_command(target, cmd)  # R11: the baseline runs the original's code
    test_set = readiness.test_set
    chosen = list(cases) or list(test_set.cases if test_set is not None else [])
    if not chosen:
        raise BadRequest(
            "no test cases: pass --case or name them in the readiness's test set",
            hint="pass --case NAME, or record readiness whose test_set names its cases",
        )
    m.check_cases(chosen, test_set, "--case")
    env = m.environment_payload()
    m.check_environment(env, {"readiness_environment_id": readiness.environment_id})
    primary = target.definition.primary
    if kernel:  # the kernel harness times the REFERENCE (R4, as `measure aa --spec`)
        rows, body = _measure_kernel(target, spec_path, kernel_dir, chosen, calls, quiet,
                                     primary.unit)  # fmt: skip
    elif primary.name in OBSERVED_METRICS:  # perfledger's own figures, the worker protocol
        with m._progress(len(chosen) * calls, "baseline calls", quiet) as advance:
            rows, body = measure_original(
                cmd or "", cases=chosen, calls=calls, metric=primary.name, unit=primary.unit,
                timeout_s=timeout_s, on_call=advance,
            )  # fmt: skip
    else:
        rows, body = _measure(cmd or "", chosen, calls, timeout_s, quiet, primary.name)
    body.update(
        target_id=target_id,
        original_hash=readiness.original.content_hash,
        metric=primary.name,
        unit=primary.unit,
        environment_id=env["environment_id"],
    )
    result: dict[str, Any] = {"request": body} if dry_run else {}
    per_case = _medians(body["cases"], body["values"])
    result.update(values=len(body["values"]), per_case_median=per_case, unit=primary.unit)
    lines = [
        f"baseline {primary.name}: {len(body['values'])} value(s) from {calls} call(s) per case; "
        "median per case: " + ", ".join(f"{c} {v:.4g} {primary.unit}" for c, v in per_case.items())
    ]
    if dry_run:
        ledger = ctx.open()
        try:  # decided, not appended: a refusal still exits 3
            preview(ledger, "baseline.record", body, actor=m._actor(actor))
        finally:
            ledger.close()
        m._answer(ctx, result, [*lines, "dry run: nothing appended"])
        return
    artifact = {"kind": "baseline", "environment": env, "table": rows, "command": cmd}
    event = m._append(
        ctx, "baseline.record", body, BASELINE_ARTIFACT, artifact, actor, idempotency_key
    )
    result.update(event_id=event.id, kind=event.kind)
    nxt = "next (R4): `" + measuring_command(state, target_id, "resolution.record", None) + "`"
    if cmd is not None:
        nxt = nxt.replace(" --cmd CMD ", f" --cmd {shlex.quote(cmd)} ")
    elif spec_path is not None:
        nxt = nxt.replace(" --spec SPEC ", f" --spec {shlex.quote(spec_path)} ")
    elif kernel_dir is not None:
        nxt = nxt.replace(" --dir DIR ", f" --dir {shlex.quote(kernel_dir)} ")
    m._answer(ctx, result, [f"{event.kind} {event.id}", *lines, nxt])


def _check_form(
    target_id: str, kernel: bool, cmd: str | None, spec_path: str | None, kernel_dir: str | None
) -> None:
    """The options fit the Target's kind: a kernel's original is timed by the harness (--spec
    or --dir), a workload's is run as a command (--cmd). Raises: BadRequest, before anything
    runs."""
    if kernel and (cmd is not None or (spec_path is None and kernel_dir is None)):
        raise BadRequest(
            f"Target {target_id!r} is a kernel Target (its readiness driver is the kernel "
            "harness): its original is timed by the harness, not run as a command",
            hint=f"`perfledger measure baseline --target {target_id} --spec SPEC` (its "
            "REFERENCE is the original), or --dir DIR where readiness bound the original's "
            "directory",
        )
    if not kernel and (cmd is None or spec_path is not None or kernel_dir is not None):
        raise BadRequest(
            f"Target {target_id!r} is a workload Target: its original is run as a command",
            hint=f"`perfledger measure baseline --target {target_id} --cmd CMD` (the readiness "
            "driver with the original in its place)",
        )


def _measure_kernel(
    target: Any,
    spec_path: str | None,
    kernel_dir: str | None,
    cases: list[str],
    calls: int,
    quiet: bool,
    unit: str,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Time a kernel Target's original (the spec's REFERENCE, in two workers of its own, as
    the A/A does) ``calls`` times per case with the harness; every timed call is one value in
    the primary's ``unit``. Returns (the raw table, ``{"values", "cases", "call_ids"}``).
    Raises: RuleRefused (R11: not the original's directory), MeasurementError (an original
    that fails the harness's correctness checks has no baseline, R5)."""
    from perfledger.kernels.isolation.isolated import compare_spec  # noqa: PLC0415 (numpy via perfledger.kernels.isolation.isolated)

    bound = m.original_kernel_directory(target, spec_path, kernel_dir)
    spec = bound[0] if bound is not None else spec_path or ""
    dirs = None if bound is None else (bound[1], bound[1])
    scale = m._time_scale(unit)
    rows: list[dict[str, Any]] = []
    values: list[float] = []
    of_case: list[str] = []
    call_ids: list[str] = []
    with m._progress(len(cases) * calls, "baseline comparisons", quiet) as advance:
        ceilings = m._ceilings()
        for case in cases:
            for k in range(calls):
                c = compare_spec(spec, case, ceilings=ceilings, monitor=None,
                                 roles=("reference", "reference"), directories=dirs)  # fmt: skip
                if c.ref is None or not c.ref_correctness.ok or c.ref.recheck_failures:
                    raise MeasurementError(
                        f"the original failed the harness's checks on case {case!r} ({c.flags}): "
                        "an original that fails has no baseline (R5); nothing was recorded",
                        hint="run `perfledger measure aa --spec SPEC` to see its flags "
                        "(docs/kernel-harness.md)",
                    )
                got = [v * scale for v in c.ref.samples_s]
                values += got
                of_case += [case] * len(got)
                call_ids += [f"{case}-{k}-{i}" for i in range(len(got))]
                rows.append({"case": case, "flags": c.flags, "rows": c.table()})
                advance()
    if kernel_dir is not None:  # R11: the code timed is the original's, still there
        m.check_original_subject(target, kernel_dir, "baseline")
    return rows, {"values": values, "cases": of_case, "call_ids": call_ids}


def _measure(
    cmd: str, cases: list[str], calls: int, timeout_s: float, quiet: bool, metric: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Call ``cmd`` ``calls`` times per case. Returns (the raw table, ``{"values", "cases",
    "call_ids"}``). Raises: BadRequest for a command that cannot be parsed; MeasurementError
    for a failed call, a call whose accuracy check failed (R5) or one without ``metric``."""

    try:
        subject = Subject("original", shlex.split(cmd))
    except ValueError as exc:
        raise BadRequest(
            f"cannot parse the command: {exc}",
            hint="quote the command as shell words (balanced quotes)",
        ) from None
    # an {output} place gets a fresh private path per call, {seed} a fresh seed: as measure does
    declares = outputs.declares_output(subject.argv)
    seeded = declares or any(outputs.SEED_PLACEHOLDER in a for a in subject.argv)
    rows: list[dict[str, Any]] = []
    values: list[float] = []
    of_case: list[str] = []
    call_ids: list[str] = []
    with m._progress(len(cases) * calls, "baseline calls", quiet) as advance:
        for case in cases:
            for k in range(calls):
                place = outputs.OutputPlace() if declares else None
                try:
                    call = run_call(
                        subject, case=case, call_id=f"baseline-{case}-{k}", timeout_s=timeout_s,
                        output_path=None if place is None else place.path,
                        seed=outputs.new_seed() if seeded else None,
                    )  # fmt: skip
                finally:  # read and removed once the call's processes are gone
                    written = None if place is None else place.collect()
                advance()
                if written is not None and written.data is None:
                    raise MeasurementError(
                        f"the original wrote no readable output at its {{output}} place on case "
                        f"{case!r} ({call.call_id}): {written.error}; nothing was recorded",
                        hint="the command must write its output to the path it is given in "
                        "place of {output} (or $PERFLEDGER_OUTPUT)",
                    )
                rows.append(call.to_json())
                if not call.ok:
                    raise MeasurementError(
                        "a call of the original failed; nothing was recorded"
                        + m.failed_call_text(call),
                        hint="run the command by hand: it must print one JSON object with "
                        "`correct` and `metrics`",
                    )
                if not call.correct:
                    raise MeasurementError(
                        f"the original failed its own accuracy check on case {case!r} "
                        f"({call.call_id}); an original that fails has no baseline (R5); "
                        "nothing was recorded"
                    )
                got = call.metrics.get(metric)
                if not got:
                    raise MeasurementError(
                        f"the call {call.call_id} printed no {metric!r} metric (the Target's "
                        f"primary); it printed {sorted(call.metrics)}; nothing was recorded"
                    )
                values += got
                of_case += [case] * len(got)
                call_ids += [f"{call.call_id}-{i}" for i in range(len(got))]
    return rows, {"values": values, "cases": of_case, "call_ids": call_ids}


def _medians(cases: list[str], values: list[float]) -> dict[str, float]:
    """The median of ``values`` per case (in first-seen case order)."""

    grouped: dict[str, list[float]] = {}
    for case, value in zip(cases, values, strict=True):
        grouped.setdefault(case, []).append(value)
    return {c: float(statistics.median(v)) for c, v in grouped.items()}


__all__ = ["BASELINE_ARTIFACT", "measure_baseline"]
