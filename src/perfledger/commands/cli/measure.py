"""``perfledger env`` and ``perfledger measure kernel|workload|aa`` (SPEC.md section 5; R4, R5,
R11, R17): adapters over the application layer. Each command parses its options into the use
case's request, calls one function and renders its result (text, or one ``--json`` object on
stdout; progress and warnings on stderr):

- ``env``: :func:`perfledger.app.context.environment_payload` (its ``readiness_environment`` is
  what ``readiness.record`` should carry, R11);
- ``measure workload``: :func:`perfledger.app.measure_self.measure_workload_stage` (the worker or
  command protocol, or the self-timed driver; then the verdict preview);
- ``measure kernel``: :func:`perfledger.app.measure_kernel.measure_kernel` (the harness, each
  subject in a worker process of its own);
- ``measure aa``: :func:`perfledger.app.measure_aa.measure_aa` (the original against itself;
  with ``--record`` the resolution is recorded, R4).

Every rule refusal is raised by the application layer or a decider, never here; docs/api.md
shows the same use cases called from Python.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from perfledger.app.context import environment_payload, foreign_activity_warnings
from perfledger.app.context import experiment_context as _context
from perfledger.app.measure_aa import measure_aa as run_measure_aa
from perfledger.app.measure_kernel import measure_kernel as run_measure_kernel
from perfledger.app.measure_self import failed_call_lines, measure_workload_stage
from perfledger.app.request_options import (
    aa_request_of,
    kernel_request_of,
    measure_params,
    workload_request_of,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.kernels.subjects.spec_loader import load_spec

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


# ------------------------------------------------------------------------------------ workload


@click.command("workload", params=measure_params("workload"))
def measure_workload(**kw: Any) -> None:
    """Run the reference and candidate commands in ABBA order and record SamplesRecorded.

    The Target's primary is one perfledger observes (wall_time, cpu_time); under the worker
    protocol (the default) each command starts a worker (`perfledger.subject.serve(setup,
    call)`), perfledger sends every call its case, seed and output place, times it with its own
    clock, reads its CPU time from the kernel and compares every output with the reference's
    (R5). Formal stages (target, final_audit) need --monitor (host for a CPU workload, gpu on a
    GPU). Only with --protocol self does each command print one JSON object, {"correct": bool,
    "metrics": {name: number | [numbers]}}: figures the subject reports, recorded and shown as
    reported, never a champion nor a passing final audit (R5). Failed calls are kept with their
    reason in the raw table.
    Where the readiness driver declares a {subject} place, each command must be that driver with
    a code directory in its place; both are snapshotted and checked first (R11,
    docs/code-identity.md).
    """
    ctx = _ctx(kw["json_flag"])
    request = workload_request_of(kw, _actor)
    ledger = ctx.open()
    try:
        done = measure_workload_stage(
            ledger, request, progress=_progress_of(kw["quiet"]), warn=_warn
        )
    finally:
        ledger.close()
    if done.observed is not None:
        measured = done.observed
        lines = [
            f"samples {measured.samples_id}: {measured.pairs_recorded} pairs ({measured.protocol})"
        ]
        if measured.event_id is None:
            lines = [json.dumps(measured.request, indent=2), *measured.findings]
        else:
            lines = [f"{measured.kind} {measured.event_id}", *lines, *measured.findings]
        _answer(ctx, done.answer(), lines + done.preview_lines)
        return
    self_timed = done.self_timed
    assert self_timed is not None
    if self_timed.event_id is None:  # a dry run
        _answer(
            ctx, done.answer(), [json.dumps(self_timed.request, indent=2), *self_timed.findings]
        )
        return
    lines = [
        f"{self_timed.kind} {self_timed.event_id}",
        f"samples {self_timed.samples_id}: {self_timed.pairs_recorded} pairs recorded",
    ]
    if self_timed.snapshots is not None:
        lines.append(
            f"snapshots: reference {self_timed.snapshots['reference'][:16]}, candidate "
            f"{self_timed.snapshots['candidate'][:16]}"
        )
    lines += failed_call_lines(self_timed) + self_timed.findings
    _answer(ctx, done.answer(), lines + done.preview_lines)


# ------------------------------------------------------------------------------------ kernel


@click.command("kernel", params=measure_params("kernel"))
def measure_kernel(**kw: Any) -> None:
    """Compare REFERENCE and CANDIDATE of a kernel spec with the harness (correctness, cold ABBA
    timing, stopping, plausibility), each subject in a worker process of its own, and record
    SamplesRecorded; one recorded pair per ABBA block (one monitor window).
    Where the readiness bound the original to a snapshot (driver ["{subject}/spec.py"]), pass
    --ref DIR --cand DIR instead of --spec: each worker runs the SUBJECT of the spec in its own
    directory, both snapshotted and checked first (R11, docs/code-identity.md)."""

    ctx = _ctx(kw["json_flag"])
    request = kernel_request_of(kw, _actor)
    done = ctx.read(run_measure_kernel, request, progress=_progress_of(kw["quiet"]), warn=_warn)
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


@click.command("aa", params=measure_params("aa"))
def measure_aa(**kw: Any) -> None:
    """Measure the resolution: the original against itself under the same protocol, on every
    case (R4). The resolution is the largest distance of an A/A CI end from a ratio of 1: per
    case, and for the Target the aggregate a verdict derives (workload) or the largest case
    (kernel spec). On a kernel Target bound to code, --dir DIR (the original's directory)
    replaces --spec: two workers run the SUBJECT of its spec (R11)."""
    ctx = _ctx(kw["json_flag"])
    request = aa_request_of(kw, _actor)
    done = ctx.read(run_measure_aa, request, progress=_progress_of(kw["quiet"]), warn=_warn)
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


#: ``_context``, ``environment_payload``, ``foreign_activity_warnings`` and ``load_spec``: the
#: names tests and older callers import from here (their homes: perfledger.app.context,
#: perfledger.kernels.subjects.spec_loader).
__all__ = [
    "_context",
    "aa_overall_line",
    "env_command",
    "environment_payload",
    "foreign_activity_warnings",
    "load_spec",
]
