"""The ``perfledger`` command line: a thin skin over :mod:`perfledger.api` (SPEC.md section 6).

Exit codes: 0 done, 2 bad request, 3 refused by a rule, 4 concurrent-append conflict, 5 integrity
failure, 1 anything else. With ``--json`` every answer is one JSON object on stdout and an error is
``{"error": {"code", "rule", "message", "hint"}}``. No traceback reaches a user for a bad input
(``PERFLEDGER_DEBUG=1`` shows one for an unexpected failure).

Heavy modules (dulwich, the store) are imported inside the commands that need them, so
``perfledger --version`` and ``perfledger --help`` stay fast.
"""

from __future__ import annotations

import os
import sys

import click

from perfledger import __version__
from perfledger.commands.cli.common import (
    Context,
    actor_option,
    actor_option_noting,
    idempotency_option,
    json_option,
    rate_text,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit_json
from perfledger.commands.cli.common import fail as _fail
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.errors import AmbiguousId, BadRequest, PerfledgerError, resource_error

#: Names of the workflow's commands (checked against workflow_cli by a test).
WORKFLOW_COMMANDS = frozenset(
    {
        "activity",
        "baseline", "champion", "conflict", "evidence", "experiment", "final-audit", "handoff",
        "host-advice", "local-result", "metric-audit", "readiness", "reconcile", "reject",
        "resolution", "samples", "schema", "target", "upstream-check", "verdict", "review",
        "formal-run",
    }
)  # fmt: skip


#: Names of the read models' top-level commands (checked against readmodels_cli).
READMODEL_COMMANDS = frozenset({"audit", "claims", "rejected", "report", "resume"})
#: Names of the measurement commands, loaded from measure_cli on first use.
MEASURE_COMMANDS = frozenset({"env", "measure"})
#: ``perfledger checkout`` (R11 code identity), loaded with the measurement commands.
IDENTITY_COMMANDS = frozenset({"checkout"})


class _LedgerGroup(click.Group):
    """The top-level group: workflow commands are imported only when one is used or listed."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in WORKFLOW_COMMANDS or cmd_name in READMODEL_COMMANDS:
            _load_workflow_commands()
        if cmd_name == "loop":
            _load_loop_command()
        if cmd_name == "knowledge":
            _load_knowledge_command()
        if cmd_name in MEASURE_COMMANDS or cmd_name in IDENTITY_COMMANDS:
            _load_measure_commands()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        _load_workflow_commands()
        _load_loop_command()
        _load_knowledge_command()
        _load_measure_commands()
        return super().list_commands(ctx)


@click.group(
    cls=_LedgerGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="New here: `perfledger skill --print` is the workflow step by step; `perfledger "
    "init DIR` makes a ledger; `perfledger status` says where a session stands and what the "
    "rules accept next; `perfledger schema OP --example` is a request to start from.",
)
@click.option(
    "--ledger",
    "ledger",
    metavar="PATH",
    default=None,
    help="The ledger repository (default: $PERFLEDGER_DIR, else the git repository containing "
    "the current directory).",
)
@click.option("--json", "json_mode", is_flag=True, help="Answer with JSON on stdout.")
@click.version_option(__version__, prog_name="perfledger")
@click.pass_context
def cli(click_ctx: click.Context, ledger: str | None, json_mode: bool) -> None:
    """perfledger: an event-sourced, git-backed ledger of GPU performance-optimization work."""
    click_ctx.obj = Context(ledger, json_mode)


@cli.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--name", default=None, help="The ledger's name (default: the directory name).")
@actor_option_noting(
    "Here the root event's actor; --actor is also remembered in this clone's git config as "
    "perfledger.actor, the actor of later commands that name none."
)
@json_option
def init(path: str | None, name: str | None, actor: str | None, json_flag: bool) -> None:
    """Create a ledger at PATH (default: --ledger, $PERFLEDGER_DIR or the current directory):
    a new bare git repository, or an existing one, with the root event."""
    ctx = _ctx(json_flag)
    from perfledger.api import LEDGER_ENV, Ledger

    target = path or ctx.ledger_path or os.environ.get(LEDGER_ENV) or os.getcwd()
    ledger = Ledger.init(target, name=name, actor=_actor(actor), remember_actor=actor is not None)
    try:
        root = next(iter(ledger.log(1)))
        if ctx.json_mode:
            _emit_json(
                {"path": os.path.abspath(target), "head": ledger.head(), "root": root.event_id}
            )
        else:
            click.echo(f"initialised ledger {os.path.abspath(target)}")
            click.echo(f"root event {root.event_id}")
            for line in _use_hint(target):
                click.echo(line)
    finally:
        ledger.close()


def _use_hint(path: str) -> list[str]:
    """How later commands find the ledger just made at ``path``, when a plain ``perfledger
    status`` run here would not (no --ledger, no $PERFLEDGER_DIR naming it, not the repository
    around the current directory); then what to run first."""
    from perfledger.api import LEDGER_ENV, find_ledger_path

    ctx = click.get_current_context().find_object(Context)
    try:
        found = find_ledger_path(ctx.ledger_path if ctx else None)
    except PerfledgerError:
        found = None
    if found is not None and os.path.realpath(found) == os.path.realpath(path):
        return ["next: `perfledger status`"]
    return [
        f"use it: export {LEDGER_ENV}={os.path.abspath(path)}  (or pass --ledger {path} "
        "before each command)",
        "next: `perfledger status`",
    ]


@cli.command()
@click.option(
    "-n", "limit", type=click.IntRange(min=0), default=None, help="Show at most N events."
)
@json_option
def log(limit: int | None, json_flag: bool) -> None:
    """List events, newest first."""
    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        entries = ledger.log(limit)
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit_json({"events": [entry.__dict__ for entry in entries]})
        return
    for entry in entries:
        click.echo(
            f"{entry.event_id[:12]}  {entry.lamport:>6}  {entry.ts}  {entry.actor}  {entry.subject}"
        )


@cli.command()
@click.argument("event_id")
@json_option
def show(event_id: str, json_flag: bool) -> None:
    """Show one event: a full id, a unique prefix of at least 4 characters, or HEAD (the newest
    event). A ledger commit's git sha (or prefix) shows the event that commit carries; a merge
    commit carries none."""
    ctx = _ctx(json_flag)
    import msgspec

    commit = None
    ledger = ctx.open()
    try:
        if event_id.upper() == "HEAD":
            event_id = ledger.log(1)[0].event_id
        try:
            envelope = ledger.get(event_id)
        except AmbiguousId:
            raise  # several events: never read as a commit sha instead
        except BadRequest as exc:
            from perfledger.commands.workflow.commit_lookup import find_commit

            commit = find_commit(ledger.store, event_id)
            if commit is None:
                exc.hint = exc.hint or (
                    "give an event id (`perfledger log`) or a ledger commit sha (`git log ledger`)"
                )
                raise
            if commit.event_id is None:
                raise BadRequest(
                    f"commit {commit.commit} is a merge commit (it joins "
                    f"{', '.join(p[:12] for p in commit.parents)}): it carries no event",
                    hint="show one of its parents, or list events with `perfledger log`",
                ) from None
            envelope = ledger.get(commit.event_id)
    finally:
        ledger.close()
    data = msgspec.to_builtins(envelope)
    if ctx.json_mode:
        _emit_json({"event": data, **({"commit": commit.commit} if commit else {})})
        return
    if commit is not None:
        click.echo(f"commit {commit.commit} carries event {envelope.id}")
    click.echo(to_json_text(data, indent=2))


@cli.command()
@json_option
def verify(json_flag: bool) -> None:
    """Verify the whole ledger from zero (hashes, trailers, parents, Lamport clocks, schemas,
    artifacts) and print its state_hash. Exit 5 naming the first bad event."""
    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        report = ledger.verify()
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit_json(report.to_json())
    elif report.ok:
        click.echo(
            f"ok: {report.events} events, {report.merges} merges verified in "
            f"{report.elapsed_s:.2f} s{rate_text(report.events, report.elapsed_s)}"
        )
        click.echo(f"head        {report.head}")
        click.echo(f"state_hash  {report.extra['state_hash']}")
    else:
        assert report.error is not None
        click.echo(f"perfledger: integrity failure: {report.error.message}", err=True)
        if report.error.hint:
            click.echo(f"hint: {report.error.hint}", err=True)
    if not report.ok:
        sys.exit(5)


@cli.command()
@json_option
def state(json_flag: bool) -> None:
    """Print the folded state at the current head (from the derived cache when it is fresh)."""
    ctx = _ctx(json_flag)
    import msgspec

    ledger = ctx.open()
    try:
        raw = ledger.state_json()
    finally:
        ledger.close()
    if not ctx.json_mode:
        raw = msgspec.json.format(raw, indent=2)
    out = click.get_binary_stream("stdout")
    out.write(raw + b"\n")
    out.flush()


@cli.command()
@click.argument("text")
@click.option("--tag", "tags", multiple=True, help="A label (repeatable).")
@actor_option
@idempotency_option
@json_option
def note(
    text: str,
    tags: tuple[str, ...],
    actor: str | None,
    idempotency_key: str | None,
    json_flag: bool,
) -> None:
    """Append a free-form note (an observation, friction, feedback)."""
    ctx = _ctx(json_flag)
    if not text.strip():
        raise BadRequest("a note needs text", hint='perfledger note "what you observed"')
    ledger = ctx.open()
    try:
        envelope = ledger.append(
            "NoteRecorded",
            {"text": text, "tags": list(tags)},
            actor=_actor(actor),
            request={"text": text, "tags": list(tags)},
            idempotency_key=idempotency_key,
        )
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit_json({"event_id": envelope.id, "lamport": envelope.lamport})
    else:
        click.echo(envelope.id)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``perfledger`` console script: runs the CLI, maps every
    :class:`PerfledgerError` to its exit code and message, and keeps tracebacks away from users."""
    args = argv if argv is not None else sys.argv[1:]
    json_requested = "--json" in args
    if not args:  # a bare `perfledger` shows the help, as git does
        click.echo(cli.get_help(click.Context(cli, info_name="perfledger")))
        sys.exit(0)
    try:
        cli.main(args=argv, prog_name="perfledger", standalone_mode=False)
    except PerfledgerError as exc:
        _fail(Context(None, json_requested), exc)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        _fail(Context(None, json_requested), BadRequest(exc.format_message()))
    except KeyboardInterrupt:
        click.echo("interrupted; the ledger is unchanged unless an append had completed", err=True)
        sys.exit(130)
    except Exception as exc:  # an unexpected failure: say so without a traceback
        if os.environ.get("PERFLEDGER_DEBUG"):
            raise
        resource = resource_error(exc)  # a full disk, a read-only filesystem, a permission
        if resource is not None:
            _fail(Context(None, json_requested), resource)
        _fail(
            Context(None, json_requested),
            PerfledgerError(
                f"unexpected {type(exc).__name__}: {exc}",
                hint="rerun with PERFLEDGER_DEBUG=1 for a traceback, and report it",
            ),
        )


# The optimization workflow's groups load on first use: `perfledger log` and
# `perfledger --version` do not import the operations, requests and deciders.
_workflow_loaded = False


def _load_workflow_commands() -> None:
    global _workflow_loaded
    if not _workflow_loaded:
        _workflow_loaded = True
        from perfledger.commands.cli.workflow import commands

        for command in commands():
            cli.add_command(command)
        from perfledger.commands.cli.evidence import extend

        extend(cli)  # evidence add --kind, evidence ncu|list|show
        from perfledger.commands.cli.readmodels import install

        install(cli)  # claims, champion show|lineage, rejected, handoff, resume, audit, report
        from perfledger.commands.cli.review import extend as extend_review

        extend_review(cli)  # review list


def _load_loop_command() -> None:
    """Add ``perfledger loop`` (the kernel-iteration loop, R19-R25) on first use."""
    if "loop" not in cli.commands:
        from perfledger.commands.cli.loop import loop

        cli.add_command(loop)


def _load_knowledge_command() -> None:
    """Add ``perfledger knowledge`` (offline knowledge cards) on first use."""
    if "knowledge" not in cli.commands:
        from perfledger.commands.cli.knowledge import knowledge

        cli.add_command(knowledge)


_measure_loaded = False


def _load_measure_commands() -> None:
    global _measure_loaded
    if not _measure_loaded:
        _measure_loaded = True
        from perfledger.commands.cli.measure import commands

        for command in commands():
            cli.add_command(command)
        from perfledger.commands.cli.identity import commands as identity_commands

        for command in identity_commands():
            cli.add_command(command)


# Sync: remote, clone, pull, push, sync, resolve. The module imports only click.
from perfledger.commands.cli.sync import register as _register_sync  # noqa: E402

_register_sync(cli)

# gc: the garbage of killed writers and pulls. The module imports only click.
from perfledger.commands.cli.gc import register as _register_gc  # noqa: E402

_register_gc(cli)

# triage: hotspot tables from a profiler trace. The module imports only click.
from perfledger.commands.cli.triage import register as _register_triage  # noqa: E402

_register_triage(cli)

# status, skill, mcp, artifact (agents, SPEC.md section 6). The module imports only click.
from perfledger.commands.cli.agents import register as _register_agents  # noqa: E402

_register_agents(cli)
