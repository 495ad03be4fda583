"""``perfledger triage REPORT``: hotspot triage of a PyTorch profiler trace or an nsys SQLite
export (the edge: files in, tables out; see :mod:`perfledger.kernels.triage`).

Prints the kernel, known-path and action tables (rich tables for people, one JSON object with
``--json``). With ``--record EVIDENCE_ID`` the triage is appended as an ``EvidenceRecorded``
(layer ``workload``; applicability ``same_boundary`` with ``--of-target``, the user's statement
that the trace is of the Target's workload, else ``diagnostic``: R6) with the trace, the mapping
trace, the known-path file and the answer attached, so the audit re-derives it
(:mod:`perfledger.app.triage`). A bad input appends nothing. Loaded only for `perfledger triage`, which reads and decides with every module
it imports at its top.
"""

from __future__ import annotations

from typing import Any

import click

from perfledger.app.triage import TriageRequest, triage_report
from perfledger.commands.cli.common import actor_option, json_option, to_json_text
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import resolve_actor as _actor

_NAME_CHARS = 70


def _short(name: str, width: int = _NAME_CHARS) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _render(answer: dict[str, Any]) -> None:
    from rich.console import Console  # noqa: PLC0415 (rich: heavy, only when printing for people)
    from rich.table import Table  # noqa: PLC0415 (rich: heavy, only when printing for people)

    console = Console(width=max(Console().width, 160))
    src, den = answer["source"], answer["denominators"]
    console.print(
        f"{src['path']}: {src['tool']} {src['tool_version']} ({src['layout']}), "
        f"{src['launches']} kernel launches of {src['kernels']} kernels; GPU busy "
        f"{den['gpu_busy_ns'] / 1e3:.1f} us, trace span {den['trace_span_ns'] / 1e3:.1f} us",
        highlight=False,
    )
    kernels = Table(title="kernel table", title_justify="left")
    for column in ("key", "kernel", "n", "total us", "mean us", "% busy", "% span", "grid/block",
                   "launched by"):  # fmt: skip
        kernels.add_column(column, overflow="fold")
    for row in answer["kernels"]:
        shapes = " ".join(f"{g}x{b}" for g, b in zip(row["grids"][:2], row["blocks"][:2],
                                                     strict=False))  # fmt: skip
        by = "; ".join(f"{item['by']} x{item['instances']}" for item in row["launched_by"][:3])
        kernels.add_row(row["key"], _short(row["name"]), str(row["instances"]),
                        f"{row['total_ns'] / 1e3:.2f}", f"{row['mean_ns'] / 1e3:.2f}",
                        _pct(row["share_of_gpu_busy"]), _pct(row["share_of_trace_span"]),
                        shapes, by)  # fmt: skip
    console.print(kernels)
    paths = Table(title="known-path table", title_justify="left")
    for column in ("key", "kernel", "known path", "route"):
        paths.add_column(column, overflow="fold")
    for row in answer["known_paths"]["hotspots"]:
        paths.add_row(row["key"], _short(row["name"]),
                      f"[{row['path']}] {row['pattern']}" if row["matched"] else "no match",
                      row["route"] or "-")  # fmt: skip
    console.print(paths)
    actions = Table(title=f"action table (f = share of {den['f_uses']})", title_justify="left")
    for column in ("key", "kernel", "f", "% busy", "% span", "action"):
        actions.add_column(column, overflow="fold")
    for row in answer["actions"]:
        actions.add_row(row["key"], _short(row["name"]),
                        "-" if row["f"] is None else f"{row['f']:.4f}",
                        _pct(row["f_gpu_busy"]), _pct(row["f_trace_span"]), row["action"])  # fmt: skip
    console.print(actions)
    console.print(f"f: {den['f_means']}", highlight=False)
    graph = answer["graph"]
    if graph["graph_kernels"] or graph["mapping"]:
        console.print(
            f"CUDA graphs: {graph['graph_kernels']} kernel launches in {graph['graph_launches']} "
            f"graph launch(es); {graph['attributed']} attributed through "
            f"{graph['mapping'] or 'no mapping trace (--mapping GRAPH_OFF_REPORT)'}",
            highlight=False,
        )
        for row in graph["unattributed"]:
            console.print(f"  not attributed: {_short(row['name'])} x{row['instances']}: "
                          f"{row['reason']}", highlight=False)  # fmt: skip
    for item in answer["limitations"]:
        console.print(f"limitation: {item}", highlight=False)


@click.command("triage")
@click.argument("report")
@click.option("--known-paths", "known_paths", default=None, metavar="PATHS.toml",
              help="Your map of kernel-name patterns to known optimization routes "
              "([[path]] pattern, route, notes, syntax = regex|glob).")  # fmt: skip
@click.option("--mapping", default=None, metavar="GRAPH_OFF_REPORT",
              help="A trace of the same workload without CUDA graphs: attributes the graph "
              "kernels of REPORT by name and order.")  # fmt: skip
@click.option("--top", type=int, default=20, show_default=True,
              help="Hotspots (by total kernel time) in the known-path and action tables.")  # fmt: skip
@click.option("--denominator", type=click.Choice(["busy", "span"]), default="busy",
              show_default=True,
              help="The action table's f: share of GPU busy time or of the trace span.")  # fmt: skip
@click.option("--record", "evidence_id", default=None, metavar="EVIDENCE_ID",
              help="Append the triage as evidence with this id.")  # fmt: skip
@click.option("--target", "target_id", default=None, help="The Target the evidence is for.")
@click.option("--of-target", is_flag=True,
              help="The trace is of the Target's workload: applicability same_boundary "
              "(else diagnostic).")  # fmt: skip
@actor_option
@json_option
def triage(report: str, known_paths: str | None, mapping: str | None, top: int,
           denominator: str, evidence_id: str | None, target_id: str | None, of_target: bool,
           actor: str | None, json_flag: bool) -> None:  # fmt: skip
    """Hotspot triage of REPORT (a PyTorch profiler trace or an `nsys export --type sqlite`
    file): kernel, known-path and action tables, the action table's time shares being the
    coverage f a claim may cite (R6, R7).

    \b
    Example:
      perfledger triage trace.json --known-paths paths.toml
      perfledger triage graph_on.json --mapping graph_off.json --record tri-1 \\
          --target T1 --of-target
    """

    request = TriageRequest(
        report=report, known_paths=known_paths, mapping=mapping, top=top,
        denominator=denominator, evidence_id=evidence_id, target_id=target_id, of_target=of_target,
    )  # fmt: skip
    ctx = _ctx(json_flag)
    done = triage_report(request, open_ledger=ctx.open, actor=lambda: _actor(actor))
    answer, recorded = done.answer, done.recorded
    if json_flag:
        click.echo(to_json_text({**answer, "recorded": recorded}))
        return
    _render(answer)
    if recorded is not None:
        click.echo(f"recorded evidence {recorded['evidence_id']} ({recorded['applicability']}) "
                   f"as event {recorded['event_id']}")  # fmt: skip


__all__ = ["triage"]
