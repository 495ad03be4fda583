"""The options several commands take, declared once for every front end (SPEC.md section 6):
their help texts, click declarations (the CLI's decorators and the MCP server's parser are made
from the same ones) and :func:`parse_options`, which reads a command's words into its options
and refuses what the command does not take. Light by design (click and the errors): the CLI
imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from perfledger.errors import BadRequest

#: The help of a command's ``--json`` (the group's own ``perfledger --json`` is another option).
JSON_HELP = "Answer with one JSON object on stdout."
#: The help of ``--actor``, the same on every command that writes
#: (:func:`perfledger.app.actors.resolve_actor`).
ACTOR_HELP = (
    "Who records: the name every event this command appends carries as its actor "
    "(default: $PERFLEDGER_ACTOR, else the clone's perfledger.actor set by `init --actor`, "
    "else $USER, else $LOGNAME, else this process's user; an empty name is refused)."
)
#: The help of ``--idempotency-key``, the same on every command that writes (SPEC.md section 2,
#: idempotency; ``idempotent_replay`` in ``ledger/base.py``).
IDEMPOTENCY_HELP = (
    "Retry-safe key: a retry of the same request with this key answers with the event it first "
    "appended and appends nothing (the key reused for another request is refused)."
)
#: Declarations of the two options, one source for the decorators and the parameter objects.
ACTOR_DECLS = ["--actor"]
IDEMPOTENCY_DECLS = ["--idempotency-key"]

#: A click option decorator (what ``click.option(...)`` returns).
Decorator = Callable[[Any], Any]

#: ``--json`` of every command that answers (sets the ``json_flag`` parameter).
json_option = click.option("--json", "json_flag", is_flag=True, help=JSON_HELP)
#: ``--actor`` of every command that writes (the value goes through ``resolve_actor``).
actor_option = click.option(*ACTOR_DECLS, default=None, help=ACTOR_HELP)
#: ``--idempotency-key`` of every command that writes.
idempotency_option = click.option(*IDEMPOTENCY_DECLS, default=None, help=IDEMPOTENCY_HELP)

#: Options of the measure commands that run the Target's calls (aa, baseline, workload).
#: ``--target`` of a measurement: required, the Target whose readiness says what to run.
measured_target_option = click.option("--target", "target_id", required=True, help="The Target id.")
#: ``--case`` (repeatable): which of the readiness's test cases to run.
cases_option = click.option(
    "--case", "cases", multiple=True, help="Test cases (default: the readiness's)."
)
#: ``--timeout-s``: the limit on one call of a measured command.
call_timeout_option = click.option(
    "--timeout-s",
    type=click.FloatRange(min=0.001),
    default=600.0,
    help="Seconds one call may run (default 600).",
)
#: ``--dry-run`` of a measurement that records samples or evidence (workload, kernel, serving).
measure_dry_run_option = click.option(
    "--dry-run", is_flag=True, help="Measure and print the request; append nothing."
)
#: ``--quiet``: no progress bar (the answer on stdout is the same).
quiet_option = click.option("--quiet", is_flag=True, help="No progress bar on stderr.")
#: ``--explain-foreign``, hidden: kept only so that passing it gets
#: ``app.command_lines.EXPLAIN_FOREIGN_REMOVED`` (exit 2) instead of click's bare "no such
#: option".
removed_explain_foreign_option = click.option(
    "--explain-foreign", "explain_foreign", default=None, hidden=True, help="Removed (R17)."
)


def options_of(*options: Decorator) -> Decorator:
    """One decorator applying click ``options`` in the order listed (the first is the first in
    ``--help``): a table of options several commands share."""

    def apply(func: Any) -> Any:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


def params_of(*options: Decorator) -> list[click.Parameter]:
    """The click parameter objects of the option decorators ``options``, in the order listed
    (fresh objects on every call): a command built from a table, ``click.Command(params=...)``."""

    def holder() -> None:
        """Carries the parameters the decorators attach."""

    options_of(*options)(holder)
    return list(reversed(getattr(holder, "__click_params__", [])))


def parse_options(
    name: str, params: Sequence[click.Parameter], args: Sequence[str]
) -> dict[str, Any]:
    """``args`` (the words after ``perfledger NAME``) read by a command taking ``params``,
    without running it: ``{parameter name: value}``, converted and checked as the CLI's command
    checks them (types, ranges, choices, required options).

    Raises: BadRequest (exit 2) for an option the command does not take or a value it refuses,
    as the CLI answers it, with a hint naming ``perfledger NAME --help``."""
    command = click.Command(name, params=list(params))
    try:
        with command.make_context(f"perfledger {name}", list(args)) as ctx:
            return dict(ctx.params)
    except click.ClickException as exc:
        raise BadRequest(
            f"perfledger {name}: {exc.format_message()}",
            hint=f"`perfledger {name} --help` shows its options",
        ) from None


def usage_hint(exc: click.ClickException) -> str:
    """The hint of a usage error: the failing command's own ``--help`` and, for an option it
    does not take (``click.NoSuchOption``), the options it does take (a trial agent guessed
    ``report --output`` and was pointed only at ``perfledger COMMAND --help``)."""
    ctx = getattr(exc, "ctx", None)
    if ctx is None or ctx.command is None:
        return "`perfledger COMMAND --help` shows its arguments and options"
    hint = f"`{ctx.command_path} --help` shows its arguments and options"
    if isinstance(exc, click.NoSuchOption):
        taken = sorted(
            {
                name
                for param in ctx.command.params
                if isinstance(param, click.Option) and not param.hidden
                for name in param.opts
                if name.startswith("--")
            }
        )
        if taken:
            hint = f"{ctx.command_path} takes {', '.join(taken)}; {hint}"
    return hint


def parse_words(root: click.Group, args: Sequence[str]) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The command that ``args`` (a command line's words after ``perfledger`` and its global
    options) names under ``root`` (the CLI's group) and its parameters, read by that command's
    own click declarations without running it: ``(("champion", "show"), {"target_id": ...})``.
    A group that runs without a subcommand (``handoff``) is named with its own parameters.

    Raises: BadRequest (exit 2) for an unknown command, an option the command does not take or
    a value it refuses: the message and hint the CLI gives (:func:`usage_hint`)."""
    parent = click.Context(root, info_name="perfledger")
    command: click.Command = root
    path: list[str] = []
    rest = list(args)
    try:
        while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
            name, found, rest = command.resolve_command(parent, rest)
            assert name is not None and found is not None  # resolve_command raises otherwise
            path.append(name)
            command = found
            if isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
                parent = click.Context(command, info_name=name, parent=parent)
        if not path:
            raise click.UsageError("Missing command.", ctx=parent)
        with command.make_context(path[-1], rest, parent=parent) as ctx:
            return tuple(path), dict(ctx.params)
    except click.exceptions.Exit:  # --help: its text is the CLI's to print
        raise BadRequest(
            f"perfledger {' '.join(path)} --help prints text, not an answer",
            hint="run `perfledger COMMAND --help` in a shell",
        ) from None
    except click.ClickException as exc:
        raise BadRequest(exc.format_message(), hint=usage_hint(exc)) from None


__all__ = [
    "ACTOR_DECLS",
    "ACTOR_HELP",
    "IDEMPOTENCY_DECLS",
    "IDEMPOTENCY_HELP",
    "JSON_HELP",
    "actor_option",
    "call_timeout_option",
    "cases_option",
    "idempotency_option",
    "json_option",
    "measure_dry_run_option",
    "measured_target_option",
    "options_of",
    "params_of",
    "parse_options",
    "parse_words",
    "quiet_option",
    "removed_explain_foreign_option",
    "usage_hint",
]
