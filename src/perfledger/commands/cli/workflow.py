"""The workflow's CLI groups (SPEC.md section 6): ``perfledger <group> <verb>``, built from the
operation catalog (:mod:`perfledger.commands.registry.catalog`).

Every write takes a closed JSON request (``--request FILE`` or ``-`` for stdin); flags for the
common fields (``--target``, ``--experiment``, ``--samples``) fill or override the request's
fields. ``--json`` answers with one object; ``--idempotency-key`` makes a retry return the first
event; ``--actor`` names who decides (default: ``$PERFLEDGER_ACTOR``, else the ``perfledger.actor`` that ``init --actor`` remembered, else ``$USER``).

Read commands: ``target show``, ``experiment show|list``, ``champion show`` and ``schema OP``.
This module imports the operation catalog and the pure read models at load time; the request
models, the deciders and (for verdicts) numpy load inside the commands that need them. :func:`commands` returns the click commands that
``perfledger.commands.cli.app`` adds to its group.
"""

from __future__ import annotations

from typing import Any

import click
import msgspec

from perfledger.app.command_lines import (
    COMMON_FLAGS,
    FIELD_HINTS,
    final_audit_next,
    refuse_with_flag_hint,
)
from perfledger.app.readmodels import (
    TargetQuery,
    experiment_of,
    experiments_of,
    targets_of,
    verdict_explained,
)
from perfledger.app.request_json import read_request
from perfledger.commands.cli.common import (
    actor_option,
    actor_param,
    dry_run_option,
    dry_run_param,
    idempotency_option,
    idempotency_param,
    json_param,
    request_option,
    request_param,
    target_field_option,
    target_option,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.cli.show import claim_lines, print_experiment, print_targets
from perfledger.commands.registry.catalog import OPERATIONS, Operation, get_operation
from perfledger.errors import BadRequest
from perfledger.projections.verdict_explain import verdict_lines


def _answer(ctx: Any, operation: Operation, envelopes: list[Any]) -> None:
    """Render the appended ``envelopes`` of ``operation``: JSON (:meth:`Recorded.to_json`) or a
    line per event with what it asks next."""
    if ctx.json_mode:
        from perfledger.app.decisions import Recorded  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

        _emit(Recorded(operation.name, envelopes).to_json())
        return
    events = [
        {
            "event_id": e.id,
            "kind": e.kind,
            "lamport": e.lamport,
            "payload": msgspec.to_builtins(e.payload),
        }
        for e in envelopes
    ]
    for event in events:
        status = event["payload"].get("status")
        suffix = f"  status={status}" if status else ""
        click.echo(f"{event['kind']} {event['event_id']}{suffix}")
        if event["kind"] in ("VerdictRecorded", "FinalAuditRecorded"):
            for line in verdict_lines(event["payload"]):
                click.echo(line)
        if event["kind"] == "ChampionSelected":  # who it is now, and what R13 asks next
            p = event["payload"]
            chosen = p.get("experiment_id") or "original"
            click.echo(f"champion of {p['target_id']}: {chosen} (was {p.get('previous')})")
            if p.get("experiment_id"):  # what R13 asks next: its final audit
                click.echo(ctx.read(final_audit_next, p))
        if event["kind"] == "ExperimentCreated":  # the bound the tool computed (R7, R8)
            for line in claim_lines(event["payload"]):
                click.echo(line)
        if event["kind"] == "ReadinessRecorded" and "environment_id" in event["payload"]:
            # baseline, resolution and samples must carry this id (R11): say it where it is made
            click.echo(f"environment_id {event['payload']['environment_id']}")
            snap = (event["payload"].get("original") or {}).get("snapshot")
            if snap:  # what measure's reference must be (R11)
                click.echo(
                    f"original's code: snapshot {snap['digest'][:16]}, {len(snap['files'])} "
                    f"file(s) of {snap['subject']} (R11)"
                )


def submit(
    ctx: Any,
    name: str,
    body: dict[str, Any],
    *,
    actor: str | None,
    idempotency_key: str | None,
    dry_run: bool,
    request_given: bool = True,
) -> None:
    """Decide and append one request of operation ``name`` (with ``dry_run``: decide and show,
    append nothing) and answer; ``request_given`` False adds a hint to pass ``--request`` to a
    request found invalid. Raises: BadRequest (2), RuleRefused (3), ConcurrentAppend (4)."""

    from perfledger.app.decisions import record_decision  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

    operation = get_operation(name)
    ledger = ctx.open()
    try:
        recorded = record_decision(
            ledger, name, body, actor=_actor(actor), idempotency_key=idempotency_key,
            dry_run=dry_run, warn=lambda text: click.echo(text, err=True),
        )  # fmt: skip
    except BadRequest as exc:
        refuse_with_flag_hint(exc, name, request_given=request_given)
    finally:
        ledger.close()
    if recorded.dry_run:
        _answer_dry_run(ctx, recorded.dry_run_json())
        return
    _answer(ctx, operation, recorded.events)


def _answer_dry_run(ctx: Any, answer: dict[str, Any]) -> None:
    """Render the answer of ``--dry-run`` (:meth:`perfledger.app.decisions.Recorded.dry_run_json`):
    JSON, or what would be appended for people."""
    events = answer["events"]
    if ctx.json_mode:
        _emit(answer)
        return
    for event in events:
        if "existing_event_id" in event:
            click.echo(
                f"would return the existing {event['kind']} {event['existing_event_id']} "
                "(its idempotency key is already in the ledger)"
            )
            continue
        status = event["payload"].get("status")
        click.echo(f"would append {event['kind']}" + (f"  status={status}" if status else ""))
        if event["kind"] == "VerdictRecorded":
            for line in verdict_lines(event["payload"]):
                click.echo(line)
        click.echo(to_json_text(event["payload"], indent=2))
    click.echo("dry run: nothing appended")


def _write_command(operation: Operation) -> click.Command:
    params: list[click.Parameter] = [
        request_param(operation.name),
        idempotency_param(),
        actor_param(),
        json_param(),
        dry_run_param(),
    ]

    fields = set(FIELD_HINTS.get(operation.name, ()))
    for flag, field, text in COMMON_FLAGS:
        if field in fields:
            params.append(click.Option([flag, field], default=None, help=text))

    def callback(
        request_source: str | None,
        idempotency_key: str | None,
        actor: str | None,
        json_flag: bool,
        dry_run: bool,
        **flags: str | None,
    ) -> None:
        ctx = _ctx(json_flag)
        body = read_request(request_source)
        for field, value in flags.items():
            if value is not None:
                body[field] = value
        submit(
            ctx, operation.name, body, actor=actor, idempotency_key=idempotency_key,
            dry_run=dry_run, request_given=request_source is not None,
        )  # fmt: skip

    rules = f" Rules: {operation.rules}." if operation.rules else ""
    return click.Command(
        operation.verb, params=params, callback=callback, help=operation.help + rules
    )


# ------------------------------------------------------------------------------ reads


def _show(ctx: Any, data: Any) -> None:

    builtins = msgspec.to_builtins(data)
    if ctx.json_mode:
        _emit(builtins)
    else:
        click.echo(to_json_text(builtins, indent=2))


def _target_show(target_id: str | None, json_flag: bool) -> None:
    """Show a Target (default: every current Target) with readiness, baseline, champion."""
    ctx = _ctx(json_flag)
    done = ctx.read(targets_of, TargetQuery(target_id=target_id))
    if not ctx.json_mode:  # for people: perfledger.commands.cli.show
        print_targets(msgspec.to_builtins(done.targets), msgspec.to_builtins(done.experiments))
        return
    _show(ctx, done.to_json())


def _experiment_show(experiment_id: str, json_flag: bool) -> None:
    """Show an experiment: claim, figures, stage, status, samples, verdicts."""
    ctx = _ctx(json_flag)
    done = ctx.read(experiment_of, experiment_id)
    if not ctx.json_mode:  # for people: perfledger.commands.cli.show
        print_experiment(msgspec.to_builtins(done.experiment), msgspec.to_builtins(done.verdicts))
        return
    _show(ctx, done)


def _experiment_list(target_id: str | None, json_flag: bool) -> None:
    """List experiments (optionally of one Target): id, target, stage, status."""
    ctx = _ctx(json_flag)
    done = ctx.read(experiments_of, TargetQuery(target_id=target_id))
    if ctx.json_mode:
        _emit(done)
        return
    for row in done.experiments:
        click.echo(f"{row.experiment_id}  {row.target_id}  {row.stage}  {row.status}")


def _verdict_explain(samples_id: str, json_flag: bool) -> None:
    """Explain the recorded verdict (or final audit) of SAMPLES_ID: the condition that decided
    it, the estimate, CI and threshold, every case's absolute per-call figures (original ->
    candidate, with CIs) and the samples' provenance (R5, R12). Reads; records nothing."""

    ctx = _ctx(json_flag)
    done = ctx.read(verdict_explained, samples_id)
    if ctx.json_mode:
        _emit(done.to_json())
        return
    for line in verdict_lines(done.recorded):
        click.echo(line)


def _schema(operation: str | None, json_flag: bool, example: bool = False) -> None:
    """Print the JSON Schema of OPERATION's request (e.g. ``experiment.create``), or with
    ``--example`` a valid example request; without OPERATION, list the operations (``--json``:
    ``{"operations": [...]}``)."""

    if example:
        from perfledger.app.examples import schema_example  # noqa: PLC0415 (off `perfledger experiment list`'s start-up path)

        done = schema_example(operation, open_ledger=_ctx(json_flag).open, variants=json_flag)
        if done.refusal is not None:  # the operation cannot apply now: say why
            click.echo(f"no {done.op} request is accepted on this ledger now:", err=True)
            raise done.refusal
        click.echo(to_json_text(done.body, indent=2))
        if done.note:
            click.echo(f"note: {done.note}", err=True)
        return

    if operation is None:
        if json_flag:
            click.echo(to_json_text({"operations": sorted(OPERATIONS)}))
            return
        click.echo("operations (perfledger schema OPERATION prints one request's JSON Schema):")
        for name in sorted(OPERATIONS):
            click.echo(f"  {name:24s} {OPERATIONS[name].help}")
        return
    from perfledger.commands.registry.request_models import json_schema  # noqa: PLC0415 (the request models: off `perfledger experiment list`'s start-up path)

    click.echo(to_json_text(json_schema(operation), indent=2))


#: One line per group for ``perfledger --help`` (SPEC.md section 4 names the rules).
GROUP_HELP = {
    "target": "Freeze, supersede or show the optimization Target (R1).",
    "readiness": "Record readiness: original, real test set, accuracy rule, driver, environment (R2).",
    "metric-audit": "Record the audit of the primary metric's computation (R3).",
    "baseline": "Record a typed baseline, declared: it decides nothing (R4; `measure baseline` measures one).",
    "resolution": "Record the measurement resolution from repeated original samples (R4).",
    "evidence": "Record profiler or compiler evidence with its layer and applicability (R6).",
    "upstream-check": "Record the check for an existing upstream equivalent (R10).",
    "experiment": "Create an experiment with its opportunity claim (R7-R10); list or show them.",
    "samples": "Record paired samples of one stage (R5, R11, R17).",
    "verdict": "Derive and record a verdict from recorded samples (R12).",
    "local-result": "Record a secondary-only gain with its scenario (R13).",
    "champion": "Select or show the champion of a Target (R13).",
    "final-audit": "Record the final audit of the champion against the original (R13).",
    "host-advice": "Record host changes as advice; never applied (R16).",
    "handoff": "Record the handoff of R18.",
    "conflict": "Resolve a conflict between concurrent decisions.",
    "activity": "Explain foreign activity in sample windows after the samples, before the verdict (R17).",
}


def commands() -> list[click.Command]:
    """Return the workflow's click commands and groups, to add to the ``perfledger`` group."""
    groups: dict[str, click.Group] = {}
    top: list[click.Command] = []
    for operation in OPERATIONS.values():
        if not operation.generic_cli:
            continue  # has its own commands (the loop: perfledger.commands.cli.loop)
        command = _write_command(operation)
        if operation.group is None:
            top.append(command)
            continue
        group = groups.get(operation.group)
        if group is None:
            group = groups[operation.group] = click.Group(
                operation.group,
                help=GROUP_HELP.get(operation.group, f"{operation.group} commands."),
            )
        group.add_command(command)
    groups["target"].add_command(
        click.command("show")(_json(click.argument("target_id", required=False)(_target_show)))
    )
    groups["experiment"].add_command(
        click.command("show")(_json(click.argument("experiment_id")(_experiment_show)))
    )
    groups["experiment"].add_command(click.command("list")(_json(target_option(_experiment_list))))
    groups["verdict"].add_command(
        click.command("explain")(_json(click.argument("samples_id")(_verdict_explain)))
    )
    example = click.option(
        "--example", is_flag=True, help="Print a valid example request instead of the schema."
    )
    schema = click.command("schema")(
        example(_json(click.argument("operation", required=False, default=None)(_schema)))
    )
    return [*groups.values(), *top, schema]


@click.command("resolve")
@request_option("conflict.resolve")
@target_field_option
@click.option("--conflict", "conflict_id", default=None, help="The conflict id (sets conflict_id).")
@click.option("--keep", default=None, help="What stands (one of the conflict's options).")
@click.option("--reason", default=None, help="Why.")
@idempotency_option
@actor_option
@dry_run_option
@_json
def resolve_command(
    request_source: str | None,
    target_id: str | None,
    conflict_id: str | None,
    keep: str | None,
    reason: str | None,
    idempotency_key: str | None,
    actor: str | None,
    dry_run: bool,
    json_flag: bool,
) -> None:
    """Record which side of a conflict stands (`perfledger state` lists open conflicts); the
    same operation as `perfledger conflict resolve`."""
    ctx = _ctx(json_flag)
    body = read_request(request_source)
    fields = {"target_id": target_id, "conflict_id": conflict_id, "keep": keep, "reason": reason}
    body.update({k: v for k, v in fields.items() if v is not None})
    submit(ctx, "conflict.resolve", body, actor=actor, idempotency_key=idempotency_key,
           dry_run=dry_run)  # fmt: skip


__all__ = ["COMMON_FLAGS", "FIELD_HINTS", "commands", "read_request", "resolve_command"]
