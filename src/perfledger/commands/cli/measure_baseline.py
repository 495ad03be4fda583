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
from typing import Any

import click

from perfledger.app.measure_baseline import (
    BASELINE_ARTIFACT,
    DEFAULT_CALLS,
    measure_baseline_of,
    medians,
)
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
from perfledger.commands.registry.operations import preview
from perfledger.projections.target_kind import measuring_command


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
    measured = measure_baseline_of(
        state, target_id, cmd=cmd, spec_path=spec_path, kernel_dir=kernel_dir,
        cases=list(cases), calls=calls, timeout_s=timeout_s,
        progress=lambda total, label: m._progress(total, label, quiet),
    )  # fmt: skip
    body, rows, env = measured.request, measured.rows, measured.environment
    primary = state.targets[target_id].definition.primary
    result: dict[str, Any] = {"request": body} if dry_run else {}
    per_case = medians(body["cases"], body["values"])
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


__all__ = ["BASELINE_ARTIFACT", "measure_baseline"]
