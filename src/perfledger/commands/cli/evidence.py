"""``perfledger evidence``: parsed profiler and compiler reports as ``EvidenceRecorded`` events.

- ``evidence add --kind KIND FILE --evidence-id ID [...]`` parses an existing report (ncu CSV or
  ``.ncu-rep``, nsys SQLite, ``nsys stats`` CSV, PyTorch trace, ``nvcc -Xptxas -v`` output,
  ``cuobjdump --dump-sass`` listing) and records its facts with the raw report as the event's
  artifact ``report``. Without ``--kind`` it is the plain ``evidence add --request FILE``.
- ``evidence ncu --evidence-id ID -- CMD ...`` runs Nsight Compute on CMD (see
  :mod:`perfledger.kernels.profilers.capture`) and records the result, with ncu's version, the
  command and its exit status.
- ``evidence list`` and ``evidence show ID``.

Each command parses its options, calls one use case (:func:`perfledger.app.evidence.add_report`,
:func:`~perfledger.app.evidence.add_ncu_profile`, :func:`perfledger.app.readmodels.evidence_list`,
:func:`~perfledger.app.readmodels.evidence_show`) and renders the answer. Every parse failure is
an EvidenceError (exit 2) that appends nothing (R6).
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from perfledger.app.argv import refuse_evidence_form
from perfledger.app.readmodels import evidence_list, evidence_show
from perfledger.app.request_json import read_request
from perfledger.commands.cli import workflow as workflow_cli
from perfledger.commands.cli.common import (
    actor_option,
    dry_run_option,
    idempotency_option,
    json_option,
    options_of,
    request_option,
    target_field_option,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.registry.catalog import get_operation


def _shared() -> Any:
    return workflow_cli


def _render(ctx: Any, done: Any) -> None:
    """The answer of a recorded (or, dry run, decided) report: the events, then for people
    its facts, kernels, layout, tool and limitations."""
    if done.dry_run:
        _shared()._answer_dry_run(ctx, done.to_json())
        return
    _shared()._answer(ctx, get_operation("evidence.add"), done.events)
    if ctx.json_mode:
        return
    payload = done.events[0].payload
    if not isinstance(payload, dict):
        payload = msgspec.to_builtins(payload)
    report = done.report
    click.echo(
        f"{len(payload['facts'])} facts, {len(report.kernels)} kernel(s), layout {report.layout}, "
        f"{report.tool} {report.tool_version}"
    )
    for item in payload["limitations"]:
        click.echo(f"limitation: {item}")


_with_common = options_of(
    click.option("--evidence-id", default=None, help="The evidence id (or in --request)."),
    click.option(
        "--applicability",
        type=click.Choice(["same_boundary", "conservative_upper_bound", "diagnostic"]),
        default=None,
        help="Applicability to the replacement boundary (R6; default diagnostic).",
    ),
    click.option(
        "--layer",
        type=click.Choice(["kernel", "workload", "service"]),
        default=None,
        help="Layer measured (default: kernel for ncu/ptxas/sass, workload for nsys/torch).",
    ),
    click.option("--shapes", default=None, help="The real shapes the report measured (text)."),
    click.option("--graph/--no-graph", default=None, help="Whether the work ran in a CUDA graph."),
    click.option("--description", default=None, help="One line about the evidence."),
    target_field_option,
    idempotency_option,
    actor_option,
    json_option,
)


def _add_command(generic: click.Command) -> click.Command:
    @click.command("add")
    @request_option(
        "evidence.add",
        "with --kind, only the context fields (evidence_id, layer, applicability, target_id, ...)",
    )
    @click.option(
        "--kind",
        type=click.Choice(["ncu", "nsys", "nsys-stats", "torch", "ptxas", "sass"]),
        default=None,
        help="Parse REPORT as this kind of profiler/compiler output.",
    )
    @click.argument("report", required=False)
    @click.option("--tool-version", default=None, help="The tool's version (its --version text).")
    @click.option(
        "--grouping",
        type=click.Choice(["none", "en_US"]),
        default="none",
        help="ncu digit grouping: none (LC_ALL=C) or en_US (1,234.5).",
    )
    @click.option("--binary", default=None, help="sass: the binary that was dumped (hashed).")
    @click.option("--binary-hash", default=None, help="sass: ALGO:HEX of the dumped binary.")
    @click.option("--ncu", "ncu_path", default=None, help="ncu executable (for .ncu-rep).")
    @dry_run_option
    @_with_common
    def add(
        request_source: str | None,
        kind: str | None,
        report: str | None,
        tool_version: str | None,
        grouping: str,
        binary: str | None,
        binary_hash: str | None,
        ncu_path: str | None,
        dry_run: bool,
        evidence_id: str | None,
        applicability: str | None,
        layer: str | None,
        shapes: str | None,
        graph: bool | None,
        description: str | None,
        target_id: str | None,
        idempotency_key: str | None,
        actor: str | None,
        json_flag: bool,
    ) -> None:
        """Record profiler or compiler evidence: a closed request, or a parsed REPORT with
        --kind (R6, R16)."""
        refuse_evidence_form(kind, report)
        if kind is None:
            assert generic.callback is not None
            generic.callback(
                request_source=request_source,
                idempotency_key=idempotency_key,
                actor=actor,
                json_flag=json_flag,
                dry_run=dry_run,
                target_id=target_id,
            )
            return
        ctx = _ctx(json_flag)
        from perfledger.app import evidence  # noqa: PLC0415 (the profilers' parsers: off `perfledger experiment list`'s start-up path)

        request = evidence.AddReport(
            kind=kind, report=report, context=read_request(request_source),
            overrides={
                "evidence_id": evidence_id, "applicability": applicability, "layer": layer,
                "shapes": shapes, "graph": graph, "description": description,
                "target_id": target_id,
            },
            tool_version=tool_version, grouping=grouping, binary=binary,
            binary_hash=binary_hash, ncu_path=ncu_path, actor=_actor(actor),
            idempotency_key=idempotency_key, dry_run=dry_run,
        )  # fmt: skip
        _render(ctx, evidence.add_report(request, open_ledger=ctx.open))

    return add


@click.command("ncu", context_settings={"ignore_unknown_options": True})
@click.option(
    "--section",
    "sections",
    multiple=True,
    help="ncu section to collect (repeatable; default: SpeedOfLight, LaunchStats, Occupancy, "
    "ComputeWorkloadAnalysis, MemoryWorkloadAnalysis).",
)
@click.option("--ncu", "ncu_path", default=None, help="ncu executable (default ncu on PATH).")
@click.option(
    "--ncu-option",
    "ncu_options",
    multiple=True,
    help="One more ncu argument, e.g. --ncu-option=-k --ncu-option=regex:gemm (repeatable).",
)
@click.option("--timeout", "timeout_s", type=float, default=None, help="Limit in seconds.")
@_with_common
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def _ncu_command(
    sections: tuple[str, ...],
    ncu_path: str | None,
    ncu_options: tuple[str, ...],
    timeout_s: float | None,
    evidence_id: str | None,
    applicability: str | None,
    layer: str | None,
    shapes: str | None,
    graph: bool | None,
    description: str | None,
    target_id: str | None,
    idempotency_key: str | None,
    actor: str | None,
    json_flag: bool,
    command: tuple[str, ...],
) -> None:
    """Profile COMMAND with Nsight Compute (--csv, base units, LC_ALL=C, --clock-control none)
    and record the facts, ncu's version, the command and its exit status (R6, R16)."""
    from perfledger.app import evidence  # noqa: PLC0415 (the profilers' parsers: off `perfledger experiment list`'s start-up path)

    ctx = _ctx(json_flag)
    request = evidence.NcuProfile(
        command=list(command),
        overrides={
            "evidence_id": evidence_id, "applicability": applicability, "layer": layer,
            "shapes": shapes, "graph": graph, "description": description, "target_id": target_id,
        },
        ncu_path=ncu_path, sections=list(sections), extra=list(ncu_options), timeout_s=timeout_s,
        actor=_actor(actor), idempotency_key=idempotency_key,
    )  # fmt: skip
    _render(ctx, evidence.add_ncu_profile(request, open_ledger=ctx.open))


@click.command("list")
@json_option
def _list(json_flag: bool) -> None:
    """List recorded evidence: id, layer, tool, applicability, facts, kernels, limitations."""
    ctx = _ctx(json_flag)
    done = ctx.read(evidence_list)
    if ctx.json_mode:
        _shared()._emit(done)
        return
    for r in done.evidence:
        click.echo(
            f"{r.evidence_id}  {r.layer}  {r.tool}  {r.applicability or '-'}  "
            f"facts={r.facts} kernels={r.kernels} limitations={r.limitations}"
        )


@click.command("show")
@click.argument("evidence_id")
@json_option
def _show(evidence_id: str, json_flag: bool) -> None:
    """Show one piece of evidence: its facts, boundary, capture and attached artifacts."""

    ctx = _ctx(json_flag)
    done = ctx.read(evidence_show, evidence_id)
    if ctx.json_mode:
        _shared()._emit(done)
    else:
        click.echo(_shared().to_json_text(done, indent=2))


def extend(cli: click.Group) -> None:
    """Add ``evidence add --kind``, ``evidence ncu``, ``list`` and ``show`` to the ``evidence``
    group of ``cli`` (after the workflow commands are loaded)."""
    group = cli.commands.get("evidence")
    if not isinstance(group, click.Group):
        return
    generic = group.commands.get("add")
    if generic is not None and generic.name == "add" and not getattr(generic, "_parsed", False):
        command = _add_command(generic)
        command._parsed = True  # type: ignore[attr-defined]
        group.add_command(command, "add")
    group.add_command(_ncu_command, "ncu")
    group.add_command(_list, "list")
    group.add_command(_show, "show")
