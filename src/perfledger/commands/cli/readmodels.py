"""The read models' CLI (SPEC.md section 6): ``claims``, ``champion show|lineage``, ``rejected``,
``handoff [--json|--md]`` and ``handoff record``, ``resume``, ``audit`` and ``report --html``.

Each command opens the ledger, calls one use case (:mod:`perfledger.app.readmodels`, light, at
the top; :mod:`perfledger.app.handoff`, :mod:`perfledger.app.audit`, :mod:`perfledger.app.report`
inside the commands that need them, off `perfledger experiment list`'s start-up path) and
renders it: text for people, one JSON object with ``--json``. ``audit`` replays from zero and
never reads the cache (:mod:`perfledger.commands.audit.replay`).

:func:`install` adds the commands to the ``perfledger`` group, replacing the workflow's
``champion show`` (now with an optional Target and the lineage) and turning ``handoff`` into a
group that prints the derived handoff when called without a verb and keeps ``handoff record``.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from perfledger.app.readmodels import (
    TargetQuery,
    champion_of,
    champions_of,
    claims_of,
    lineage_of,
    rejected_of,
)
from perfledger.app.request_json import read_request
from perfledger.commands.cli.common import (
    actor_option,
    dry_run_option,
    idempotency_option,
    json_param,
    rate_text,
    request_option,
    signed_pct_text,
    target_param,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import target_option as _target
from perfledger.commands.cli.show import print_champion
from perfledger.commands.cli.workflow import submit
from perfledger.projections.handoff import render_markdown
from perfledger.projections.verdict_explain import measured_details

#: Top-level commands this module adds (the CLI loads it lazily by these names).
READMODEL_COMMANDS = frozenset({"audit", "claims", "rejected", "report", "resume"})


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


# ----------------------------------------------------------------------------- claims


@click.command("claims")
@_target
@_json
def claims_command(target_id: str | None, json_flag: bool) -> None:
    """ROI claims vs outcomes: coverage, local speedup, stated and recomputed Amdahl bound,
    minimum effect, measured effect with its CI, prediction error, reconciliation (R7, R14)."""
    ctx = _ctx(json_flag)
    done = ctx.read(claims_of, TargetQuery(target_id=target_id))
    if ctx.json_mode:
        _emit(done)
        return
    header = (
        f"{'experiment':<12} {'f':>6} {'s':>6} {'bound':>7} {'recomp':>7} {'min':>6} "
        f"{'measured (CI)':<28} {'speedup':>8} {'error':>8}  reconciliation"
    )
    click.echo(header)
    for r in done.claims:
        m = r.measured
        measured = (
            f"{signed_pct_text(m.estimate)} ({signed_pct_text(m.ci_low)}..{signed_pct_text(m.ci_high)})"
            if m is not None
            else "-"
        )
        owed = "owed, " + ("recorded" if r.reconciled else "MISSING") if r.reconciliation_owed else (
            "recorded" if r.reconciled else "-"
        )  # fmt: skip
        click.echo(
            f"{r.experiment_id:<12} {_fmt(r.coverage):>6} {_fmt(r.local_speedup):>6} "
            f"{_fmt(r.stated_bound):>7} {_fmt(r.recomputed_bound):>7} {signed_pct_text(r.min_effect):>6} "
            f"{measured:<28} {_fmt(m.speedup if m else None):>8} "
            f"{_fmt(r.prediction_error, '+.3f'):>8}  {owed}"
        )
        for flag in r.measurement_flags:
            click.echo(f"  FLAG {flag}")

        for line in measured_details(m):
            click.echo(f"    {line}")


# ----------------------------------------------------------------------------- champions


def _champion_show(target_id: str | None, json_flag: bool) -> None:
    """Show the current champion of every Target (or of TARGET_ID, with its lineage) (R13)."""
    ctx = _ctx(json_flag)
    if target_id is not None:
        shown = ctx.read(champion_of, TargetQuery(target_id=target_id))
        if ctx.json_mode:
            _emit(shown.to_json())
        else:  # for people: perfledger.commands.cli.show
            print_champion(shown.to_json())
        return
    current = ctx.read(champions_of)
    if ctx.json_mode:
        _emit(current)
        return
    for c in current.champions:
        audit = f"  final audit {c.final_audit.text() if c.final_audit else c.final_audit_status}"
        conflicts = f"  CONFLICTS {c.open_conflicts}" if c.open_conflicts else ""
        click.echo(f"{c.target_id} ({c.target_status}): {c.champion}{audit}{conflicts}")


def _champion_lineage(target_id: str, json_flag: bool) -> None:
    """The chain of champions of TARGET_ID with the evidence behind each: experiment, samples,
    verdict, final audit (R13)."""
    ctx = _ctx(json_flag)
    done = ctx.read(lineage_of, TargetQuery(target_id=target_id))
    if ctx.json_mode:
        _emit(done)
        return
    click.echo(f"{target_id}: original")
    for s in done.lineage:
        audits = ", ".join(f"{a.samples_id} {a.status}" for a in s.final_audits) or "none"
        click.echo(
            f"  -> {s.champion} [{s.decision}] event {s.event_id[:12]} samples {s.samples_id or '-'}"
            f" verdict {s.verdict_status or '-'} {signed_pct_text(s.estimate)} "
            f"({signed_pct_text(s.ci_low)}..{signed_pct_text(s.ci_high)}) vs {s.reference or '-'}; "
            f"evidence {s.claim_evidence or '-'}; final audits: {audits}"
        )


# ----------------------------------------------------------------------------- rejected


@click.command("rejected")
@_target
@_json
def rejected_command(target_id: str | None, json_flag: bool) -> None:
    """Rejected directions, the scope each closed (R15) and why."""
    ctx = _ctx(json_flag)
    done = ctx.read(rejected_of, TargetQuery(target_id=target_id))
    if ctx.json_mode:
        _emit(done)
        return
    if not done.rejected:
        click.echo("no rejected directions")
    for r in done.rejected:
        click.echo(
            f"{r.experiment_id} ({r.target_id}): closes {r.closes} (preregistered "
            f"{r.preregistered}); still open: {', '.join(r.still_open) or 'nothing'} — {r.reason}"
        )


# ----------------------------------------------------------------------------- handoff


#: What the CLI's user runs to freeze a Target (the handoff's refusal without one).
NO_TARGET_HINT = "freeze one: `perfledger target freeze`"


def derived_handoff(ctx: Any, target_id: str | None) -> tuple[Any, Any, Any]:
    """:func:`perfledger.app.handoff.current_handoff` on the command's ledger: ``(state,
    handoff, resume context)``. Raises: BadRequest without a Target."""
    from perfledger.app import handoff  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    return ctx.read(handoff.current_handoff, target_id, no_target_hint=NO_TARGET_HINT)


def _handoff_show(target_id: str | None, json_flag: bool, md_flag: bool) -> None:
    ctx = _ctx(json_flag)

    _, handoff, _ = derived_handoff(ctx, target_id)
    if ctx.json_mode and not md_flag:
        _emit({"handoff": handoff})
    else:
        click.echo(render_markdown(handoff), nl=False)


@click.command("record")
@request_option("handoff.record", "its fields override the derived handoff")
@_target
@click.option(
    "--stop-reason", default=None, help="Why work stops (recorded as `not stated` when omitted)."
)
@click.option("--wall-used", type=float, default=None, help="Wall seconds used.")
@click.option(
    "--gpu-used",
    type=float,
    default=None,
    help="GPU seconds used (required unless the Target's GPU budget is 0).",
)
@click.option(
    "--feedback",
    default=None,
    help="Friction and feedback (or `none`); recorded as `not stated` when omitted.",
)
@click.option("--question", "questions", multiple=True, help="An unresolved question (repeatable).")
@click.option(
    "--example",
    is_flag=True,
    help="Print the minimal request (what only you state; perfledger fills the rest) and exit.",
)
@idempotency_option
@actor_option
@dry_run_option
@_json
def handoff_record(
    request_source: str | None,
    target_id: str | None,
    stop_reason: str | None,
    wall_used: float | None,
    gpu_used: float | None,
    feedback: str | None,
    questions: tuple[str, ...],
    example: bool,
    idempotency_key: str | None,
    actor: str | None,
    dry_run: bool,
    json_flag: bool,
) -> None:
    """Record the handoff (R18): perfledger fills what the ledger knows (champion, achieved, the
    gains' figures with CIs, local results, rejections, reconciliations, owed obligations, open
    experiments) and refuses a request whose lists contradict it; the request's fields and the
    flags state the rest. A stop reason or feedback that neither a flag nor the request gives is
    recorded as `not stated` (never invented); a budget used beyond the Target's is warned about
    on stderr. GPU seconds used are stated by --gpu-used, except on a Target whose GPU budget is
    0 (0 then). Rules: R18."""
    if example:
        from perfledger.commands.registry.request_examples import shown  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

        click.echo(to_json_text(shown("handoff.record"), indent=2))
        return
    ctx = _ctx(json_flag)
    from perfledger.app import handoff  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    statement = handoff.HandoffStatement(
        target_id=target_id, override=read_request(request_source), stop_reason=stop_reason,
        feedback=feedback, wall_used_s=wall_used, gpu_used_s=gpu_used, questions=list(questions),
    )  # fmt: skip
    draft = ctx.read(handoff.draft_handoff_record, statement, no_target_hint=NO_TARGET_HINT)
    for warning in draft.warnings:
        click.echo(f"warning: {warning}", err=True)
    submit(ctx, "handoff.record", draft.request, actor=actor, idempotency_key=idempotency_key,
           dry_run=dry_run)  # fmt: skip


@click.command("resume")
@_target
@_json
def resume_command(target_id: str | None, json_flag: bool) -> None:
    """Print the handoff for the current head and the next decisions the rules allow: each one
    offered only if its decider, run dry on the head, accepts it."""
    ctx = _ctx(json_flag)
    from perfledger.app import handoff  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    done = ctx.read(handoff.resume, target_id, no_target_hint=NO_TARGET_HINT)
    if ctx.json_mode:
        _emit(done)
    else:
        click.echo(render_markdown(done.handoff, done.next), nl=False)


# ----------------------------------------------------------------------------- audit


@click.command("audit")
@click.option("--allowed-signers", "allowed_signers", default=None,
              type=click.Path(dir_okay=False), metavar="FILE",
              help="Your allowed-signers file (git's format): each review's signature must be "
              "by a key it lists under the review's appender; a review that cleared a flag or "
              "allowed a champion without one is a finding (R12, R17).")  # fmt: skip
@click.option("--full", is_flag=True, default=False,
              help="Re-check every event from zero, ignoring this clone's audit cache (the clean "
              "audit of an earlier head, docs/storage.md).")  # fmt: skip
@_json
def audit_command(allowed_signers: str | None, full: bool, json_flag: bool) -> None:
    """The auditor's replay, independent of the state cache: everything `verify` checks,
    every verdict re-derived from its samples, every request re-decided against the state
    before it; with --allowed-signers, every review's SSH signature. Events up to a head
    this clone audited clean before are not re-checked (the audit cache; --full: from
    zero). Exit 0 when clean, 5 with the findings (each naming its event and rule)."""
    ctx = _ctx(json_flag)
    from perfledger.app.audit import audit_exit_code, audit_ledger  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    report = ctx.read(audit_ledger, allowed_signers, full=full)
    if ctx.json_mode:
        _emit(report.to_json())
    else:
        status = "ok" if report.ok else f"{len(report.findings)} finding(s)"
        click.echo(
            f"{status}: {report.events} events replayed, {report.decisions} decisions re-decided "
            f"in {report.elapsed_s:.2f} s{rate_text(report.events, report.elapsed_s)}"
        )
        if report.cached_head is not None:
            click.echo(f"  {report.rechecked} re-checked after {report.cached_head[:12]}, "
                       "audited clean by this clone before (--full: from zero)")  # fmt: skip
        for f in report.findings:
            click.echo(f"  {f.rule:<9} {f.event_id[:16] or '-':<16} {f.kind}: {f.message}")
        for note in report.notes:
            click.echo(f"  note: {note}")
        if report.evidence_rederived or report.evidence_as_written:
            click.echo(
                f"evidence    {report.evidence_rederived} re-derived from their reports, "
                f"{report.evidence_as_written} recorded as written (R6)"
            )
        click.echo(f"head        {report.head}")
        click.echo(f"state_hash  {report.state_hash or '-'}")
    if not report.ok:  # 7: written by a newer perfledger, else 5 (SPEC.md section 6)
        sys.exit(audit_exit_code(report))


# ----------------------------------------------------------------------------- report


@click.command("report")
@click.option("--html", "html_path", required=True, metavar="OUT.html",
              help="Write a self-contained HTML page here.")  # fmt: skip
@_target
@_json
def report_command(html_path: str, target_id: str | None, json_flag: bool) -> None:
    """Write one self-contained HTML page (no network; plots inline): target and status, a
    timeline of decisions, claims vs outcomes, and plots made with matplotlib."""
    ctx = _ctx(json_flag)
    from perfledger.app.report import build_report  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    summary = ctx.read(build_report, html_path, target_id=target_id)
    if ctx.json_mode:
        _emit(summary)
    else:
        click.echo(
            f"wrote {summary['path']} ({summary['bytes']:,} bytes, {summary['plots']} plots)"
        )


# ----------------------------------------------------------------------------- install


def install(cli: click.Group) -> None:
    """Add the read models' commands to ``cli`` (after the workflow's groups are loaded)."""
    for command in (claims_command, rejected_command, resume_command, audit_command,
                    report_command):  # fmt: skip
        cli.add_command(command)
    champion = cli.commands.get("champion")
    if isinstance(champion, click.Group):
        champion.add_command(
            click.command("show")(
                _json(click.argument("target_id", required=False)(_champion_show))
            )
        )
        champion.add_command(
            click.command("lineage")(_json(click.argument("target_id")(_champion_lineage)))
        )
    old = cli.commands.get("handoff")
    group = click.Group(
        "handoff",
        invoke_without_command=True,
        help="Print the handoff of R18 derived from the state (Markdown by default, --json), "
        "or record it (`handoff record`).",
        params=[
            target_param(),
            json_param(),
            click.Option(["--md", "md_flag"], is_flag=True, help="Answer with Markdown."),
        ],
        callback=_handoff_group_callback,
    )
    group.add_command(handoff_record)
    if isinstance(old, click.Group):
        for name, command in old.commands.items():
            if name != "record":
                group.add_command(command)
    cli.add_command(group)


def _handoff_group_callback(target_id: str | None, json_flag: bool, md_flag: bool) -> None:
    click_ctx = click.get_current_context()
    if click_ctx.invoked_subcommand is None:
        _handoff_show(target_id, json_flag, md_flag)


__all__ = ["READMODEL_COMMANDS", "derived_handoff", "install"]
