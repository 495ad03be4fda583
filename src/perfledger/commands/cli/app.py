"""The ``perfledger`` command line: a thin skin over :mod:`perfledger.api` (SPEC.md section 6).

Exit codes: 0 done, 2 bad request, 3 refused by a rule, 4 concurrent-append conflict, 5 integrity
failure, 6 a pull or sync that left a conflict, 7 a ledger written by a newer perfledger, 1
anything else. With ``--json`` every answer is one JSON object on stdout and an error is
``{"error": {"code", "rule", "message", "hint"}}``. No traceback reaches a user for a bad input
(``PERFLEDGER_DEBUG=1`` shows one for an unexpected failure).

Heavy modules (dulwich, the store) are imported inside the commands that need them, so
``perfledger --version`` and ``perfledger --help`` stay fast.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from perfledger._version import __version__
from perfledger.app.argv import hoist_global_options, refuse_misplaced_ledger
from perfledger.app.options import usage_hint
from perfledger.commands.cli.command_help import COMMAND_HELP
from perfledger.commands.cli.common import (
    Context,
    actor_option,
    actor_option_noting,
    checkpoint_policy,
    checkpoint_policy_options,
    checkpoints_text,
    exit_verify_failure,
    idempotency_option,
    json_option,
    rate_text,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit_json
from perfledger.commands.cli.common import fail as _fail
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.cli.state_view import state_lines
from perfledger.errors import BadRequest, PerfledgerError, resource_error

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


#: Commands loaded on first use, click's lazy-subcommand pattern: name -> ``"module:attribute"``.
#: The attribute is the click command, or (the workflow's commands, generated from the operation
#: registry) a function returning every such command by name. ``perfledger log`` and
#: ``--version`` import none of these modules.
LAZY_COMMANDS: dict[str, str] = {
    **{name: "perfledger.commands.cli.workflow_commands:workflow_commands"
       for name in WORKFLOW_COMMANDS | READMODEL_COMMANDS},
    "loop": "perfledger.commands.cli.loop:loop",
    "knowledge": "perfledger.commands.cli.knowledge:knowledge",
    "env": "perfledger.commands.cli.measure:env_command",
    "measure": "perfledger.commands.cli.measure_group:measure_group",
    "checkout": "perfledger.commands.cli.identity:checkout_command",
    "remote": "perfledger.commands.cli.remote:remote_group",
    "clone": "perfledger.commands.cli.sync:clone",
    "pull": "perfledger.commands.cli.sync:pull",
    "push": "perfledger.commands.cli.sync:push",
    "sync": "perfledger.commands.cli.sync:sync",
    "resolve": "perfledger.commands.cli.workflow:resolve_command",
    "gc": "perfledger.commands.cli.gc:gc",
    "triage": "perfledger.commands.cli.triage:triage",
    "status": "perfledger.commands.cli.agents:status_command",
    "skill": "perfledger.commands.cli.skill:skill_group",
    "mcp": "perfledger.commands.cli.agents:mcp_command",
    "artifact": "perfledger.commands.cli.agents:artifact_group",
    "checkpoint": "perfledger.commands.cli.checkpoint:checkpoint_group",
    "attest": "perfledger.commands.cli.attest:attest_command",
    "verify-attestation": "perfledger.commands.cli.attest:verify_attestation_command",
}  # fmt: skip


class LazyGroup(click.Group):
    """A group whose subcommands named in ``lazy_subcommands`` (name -> ``"module:attribute"``)
    are imported when used or listed (click's documented lazy-loading pattern)."""

    def __init__(
        self,
        *args: Any,
        lazy_subcommands: dict[str, str] | None = None,
        lazy_help: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_subcommands = dict(lazy_subcommands or {})
        self.lazy_help = dict(lazy_help or {})

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:  # the root: global options after the subcommand too
            refuse_misplaced_ledger(args, self.list_commands(ctx))
            args = hoist_global_options(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _PipeClosed() from None  # past click's EPIPE handler, to main

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_subcommands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands and cmd_name not in self.commands:
            self.add_command(self._load(cmd_name), cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's listing of the subcommands, with the help of one not yet imported read from
        ``lazy_help`` (``perfledger --help`` then imports no command module)."""
        rows: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            if name not in self.commands and name in self.lazy_help:
                rows.append((name, click.Command(name, help=self.lazy_help[name])))
            elif (command := self.get_command(ctx, name)) is not None and not command.hidden:
                rows.append((name, command))
        if rows:
            limit = formatter.width - 6 - max(len(name) for name, _ in rows)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in rows])

    def _load(self, cmd_name: str) -> click.Command:
        module_name, _, attribute = self.lazy_subcommands[cmd_name].partition(":")
        found = getattr(importlib.import_module(module_name), attribute)
        command = found if isinstance(found, click.Command) else found()[cmd_name]
        if not isinstance(command, click.Command):  # a wrong table entry: a bug, said plainly
            raise TypeError(f"{self.lazy_subcommands[cmd_name]} is not a click command")
        return command


@click.group(
    cls=LazyGroup,
    lazy_subcommands=LAZY_COMMANDS,
    lazy_help=COMMAND_HELP,
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
    from perfledger.app.ledgers import init_ledger, ledger_location, use_hint  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

    target = ledger_location(path, ctx.ledger_path)
    done = init_ledger(target, name=name, actor=_actor(actor), remember_actor=actor is not None)
    if ctx.json_mode:
        _emit_json({"path": done.path, "head": done.head, "root": done.root})
        return
    click.echo(f"initialised ledger {done.path}")
    click.echo(f"root event {done.root}")
    for line in use_hint(target, ctx.ledger_path):
        click.echo(line)


@cli.command()
@click.option(
    "-n", "limit", type=click.IntRange(min=0), default=None, help="Show at most N events."
)
@json_option
def log(limit: int | None, json_flag: bool) -> None:
    """List events, newest first."""
    ctx = _ctx(json_flag)
    entries = ctx.read(lambda ledger: ledger.log(limit))
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
    from perfledger.app.event_lookup import show_event  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

    shown = ctx.read(show_event, event_id)
    data = shown.to_json()
    if ctx.json_mode:
        _emit_json(data)
        return
    if shown.commit is not None:
        click.echo(f"commit {shown.commit} carries event {shown.envelope.id}")
    click.echo(to_json_text(data["event"], indent=2))


@cli.command()
@checkpoint_policy_options
@json_option
def verify(checkpoint_options: tuple[Any, ...], json_flag: bool) -> None:
    """Verify the whole ledger from zero (hashes, trailers, parents, Lamport clocks, schemas,
    artifacts) and its signed checkpoints, and print its state_hash. Exit 5 naming the first
    bad event or checkpoint. With --signers every checkpoint's signature is checked
    (docs/checkpoints.md)."""
    ctx = _ctx(json_flag)
    policy = checkpoint_policy(checkpoint_options)
    from perfledger.app.checkpoints import verify as verify_ledger  # noqa: PLC0415 (dulwich via perfledger.app.checkpoints)

    report = ctx.read(verify_ledger, policy)
    if not report.ok:  # 5, or 7 for a ledger written by a newer perfledger
        exit_verify_failure(ctx, report)
    if ctx.json_mode:
        _emit_json(report.to_json())
        return
    click.echo(
        f"ok: {report.events} events, {report.merges} merges verified in "
        f"{report.elapsed_s:.2f} s{rate_text(report.events, report.elapsed_s)}"
    )
    click.echo(f"head        {report.head}")
    click.echo(f"state_hash  {report.extra['state_hash']}")
    if "checkpoints" in report.extra:
        click.echo(checkpoints_text(report.extra["checkpoints"]))


@cli.command()
@json_option
def state(json_flag: bool) -> None:
    """Print the folded state at the current head (from the derived cache when it is fresh):
    a summary for people (Targets, readiness, champion, experiments, counts), every field with
    --json."""
    ctx = _ctx(json_flag)
    import msgspec  # noqa: PLC0415 (msgspec: off `perfledger --version`'s start-up path)

    raw = ctx.read(lambda ledger: ledger.state_json())
    if not ctx.json_mode:
        for line in state_lines(msgspec.json.decode(raw)):
            click.echo(line)
        return
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
    from perfledger.app import event_lookup  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

    note = event_lookup.Note(
        text=text, tags=list(tags), actor=_actor(actor), idempotency_key=idempotency_key
    )
    done = event_lookup.record_note(note, open_ledger=ctx.open)
    if ctx.json_mode:
        _emit_json({"event_id": done.event_id, "lamport": done.lamport})
    else:
        click.echo(done.event_id)


class _PipeClosed(Exception):
    """Stdout's reader went away (``perfledger log | head -1``). Not an OSError, so that click's
    own EPIPE handling (exit 1) does not take it."""


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``perfledger`` console script: runs the CLI, maps every
    :class:`PerfledgerError` to its exit code and message, and keeps tracebacks away from users.
    A closed pipe on stdout ends any command quietly with exit 0: the reader has what it
    wanted (``perfledger log | head -1``); an append that completed stays appended."""
    closed = False
    try:
        _main(argv)
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
        # click turns an EPIPE it meets itself (printing help) into exit 1 and pacifies stdout
        closed = type(sys.stdout).__name__ == "_PacifyFlushWrapper"
    except (_PipeClosed, BrokenPipeError):
        code, closed = 0, True
    try:
        sys.stdout.flush()  # what is still buffered: the usual place a closed pipe shows
    except BrokenPipeError:
        closed = True
    if closed:
        # nothing more reaches the reader, and Python's flush at exit must not complain
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(0)
    sys.exit(code)


def _main(argv: list[str] | None) -> None:
    """:func:`main` without the closed-pipe handling."""
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
        _fail(
            Context(None, json_requested),
            BadRequest(exc.format_message(), hint=usage_hint(exc)),
        )
    except KeyboardInterrupt:
        click.echo("interrupted; the ledger is unchanged unless an append had completed", err=True)
        sys.exit(130)
    except (_PipeClosed, BrokenPipeError):
        raise  # main ends quietly
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
