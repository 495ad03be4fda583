"""What every CLI module shares: the command context, JSON output, error reporting and who acts;
the options many commands take (declared once in :mod:`perfledger.app.options`, re-exported).

Imported at the top of the CLI modules (it is cheap: click and the errors), so that no CLI
module keeps a forwarding copy of these functions.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from perfledger.app import actors
from perfledger.app.command_lines import TARGET_FIELD_HELP
from perfledger.app.options import (
    ACTOR_DECLS,
    ACTOR_HELP,
    IDEMPOTENCY_DECLS,
    IDEMPOTENCY_HELP,
    JSON_HELP,
    actor_option,
    call_timeout_option,
    cases_option,
    idempotency_option,
    json_option,
    measure_dry_run_option,
    measured_target_option,
    options_of,
    quiet_option,
    removed_explain_foreign_option,
)
from perfledger.errors import PerfledgerError


class Context:
    """Options shared by every command: where the ledger is and how to answer."""

    def __init__(self, ledger: str | None, json_mode: bool) -> None:
        self.ledger_path = ledger
        self.json_mode = json_mode

    def open(self) -> Any:
        """Open the ledger named by ``--ledger``, ``$PERFLEDGER_DIR`` or the enclosing repo."""
        from perfledger.api import Ledger, find_ledger_path  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

        return Ledger.open(find_ledger_path(self.ledger_path))

    def read(self, use_case: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``use_case(ledger, *args, **kw)`` on a fresh open of the ledger, closed after."""
        ledger = self.open()
        try:
            return use_case(ledger, *args, **kw)
        finally:
            ledger.close()


def to_json_text(data: object, indent: int = 0) -> str:
    """Encode ``data`` as JSON text with sorted keys (UTF-8, compact unless ``indent``)."""
    import msgspec  # noqa: PLC0415 (msgspec: off `perfledger --version`'s start-up path)

    raw = msgspec.json.encode(data, order="sorted")
    if indent:
        raw = msgspec.json.format(raw, indent=indent)
    return raw.decode("utf-8")


def emit_json(data: object) -> None:
    """Print ``data`` as one line of JSON on stdout."""
    click.echo(to_json_text(data))


def fail(ctx: Context | None, exc: PerfledgerError) -> NoReturn:
    """Report ``exc`` (JSON under ``--json``, else one line on stderr, no traceback) and exit
    with its code (2 bad request, 3 refused, 4 conflict, 5 integrity, 1 other)."""
    if ctx is not None and ctx.json_mode:
        emit_json(exc.to_json())
    else:
        rule = f"{exc.rule} " if exc.rule and not exc.message.startswith(exc.rule) else ""
        label = "refused" if exc.exit_code == 3 else "error"
        click.echo(f"perfledger: {label}: {rule}{exc.message}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
    sys.exit(exc.exit_code)


def json_param() -> click.Option:
    """``--json`` (:data:`JSON_HELP`) as a parameter object, for a command built from a list of
    parameters."""
    return click.Option(["--json", "json_flag"], is_flag=True, help=JSON_HELP)


def actor_option_noting(note: str) -> Callable[[Any], Any]:
    """``--actor`` (:data:`ACTOR_HELP`) as a decorator, with ``note`` added to its help: for a
    command whose actor does more than name who records (``init`` remembers it)."""
    return click.option(*ACTOR_DECLS, default=None, help=f"{ACTOR_HELP} {note}".strip())


def actor_param() -> click.Option:
    """``--actor`` as a parameter object, for a command built from a list of parameters."""
    return click.Option(ACTOR_DECLS, default=None, help=ACTOR_HELP)


def idempotency_param() -> click.Option:
    """``--idempotency-key`` as a parameter object, for a command built from a list of
    parameters."""
    return click.Option(IDEMPOTENCY_DECLS, default=None, help=IDEMPOTENCY_HELP)


#: The help of ``--dry-run`` on a command that decides a request (``preview``, then the answer
#: of :func:`perfledger.commands.cli.workflow._answer_dry_run`); the measure commands' differs.
DRY_RUN_HELP = (
    "Validate and decide on the current head, show the event(s) it would append, append "
    "nothing (a refusal still exits 3)."
)
#: ``--dry-run`` of every command that decides a request.
dry_run_option = click.option("--dry-run", is_flag=True, help=DRY_RUN_HELP)


def dry_run_param() -> click.Option:
    """``--dry-run`` (:data:`DRY_RUN_HELP`) as a parameter object, for a command built from a
    list of parameters."""
    return click.Option(["--dry-run"], is_flag=True, help=DRY_RUN_HELP)


def request_help(operation: str, note: str = "") -> str:
    """The help of ``--request`` for ``operation`` (e.g. ``target.freeze``), with ``note`` (what
    else the command does with it) after the schema it names."""
    tail = f"; {note}" if note else ""
    return (
        f"The closed JSON request (a file, or - for stdin; schema: `perfledger schema "
        f"{operation}`){tail}."
    )


def request_option(operation: str, note: str = "") -> Callable[[Any], Any]:
    """``--request FILE|-`` of a command that records ``operation``, as a decorator (the value
    lands in the ``request_source`` parameter)."""
    return click.option(
        "--request",
        "request_source",
        metavar="FILE|-",
        default=None,
        help=request_help(operation, note),
    )


def request_param(operation: str) -> click.Option:
    """``--request FILE|-`` of ``operation`` as a parameter object, for a command built from a
    list of parameters."""
    return click.Option(
        ["--request", "request_source"],
        metavar="FILE|-",
        default=None,
        help=request_help(operation),
    )


#: ``--target`` of a read command: which Target to show (each command says what it does without).
target_option = click.option("--target", "target_id", default=None, help="The Target id.")


def target_param() -> click.Option:
    """``--target`` of a read command as a parameter object, for a command built from a list of
    parameters."""
    return click.Option(["--target", "target_id"], default=None, help="The Target id.")


#: The help of ``--target`` on a command that records: it sets the request's ``target_id``.
#: ``--target`` of a command that records a request with a ``target_id`` field.
target_field_option = click.option("--target", "target_id", default=None, help=TARGET_FIELD_HELP)


def checkpoint_policy_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--signers``, ``--trust``, ``--require-signer`` (repeatable) and
    ``--max-unsigned-events``: what a reader demands of a ledger's signed checkpoints
    (docs/checkpoints.md). The command receives them as one ``checkpoint_options`` tuple, for
    :func:`checkpoint_policy`."""

    @functools.wraps(func)
    def command(
        *args: Any,
        signers_file: str | None,
        trusted_dir: str | None,
        require_signers: tuple[str, ...],
        max_unsigned_events: int | None,
        **kwargs: Any,
    ) -> Any:
        options = (signers_file, trusted_dir, tuple(require_signers), max_unsigned_events)
        return func(*args, checkpoint_options=options, **kwargs)

    options = [
        click.option("--signers", "signers_file", type=click.Path(dir_okay=False), default=None,
                     help="git's allowed-signers file: check every checkpoint's signature."),
        click.option("--trust", "trusted_dir", type=click.Path(file_okay=False), default=None,
                     help="A witness's directory of copies: the history must extend each."),
        click.option("--require-signer", "require_signers", multiple=True,
                     help="A signer (a name in --signers) who must have signed or witnessed the "
                     "last checkpoint (repeatable)."),
        click.option("--max-unsigned-events", type=click.IntRange(min=0), default=None,
                     help="How many events the head may hold past the last checkpoint."),
    ]  # fmt: skip
    for option in reversed(options):
        command = option(command)
    return command


def checkpoint_policy(options: tuple[Any, ...]) -> Any:
    """The :class:`~perfledger.ledger.checkpoints.CheckpointPolicy` of the options above.
    Raises: BadRequest for --trust or --require-signer without --signers."""
    from perfledger.ledger.checkpoints import CheckpointPolicy  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

    return CheckpointPolicy(*options)


def exit_verify_failure(ctx: Context, report: Any) -> NoReturn:
    """Render a failed verification (``report``: a VerifyReport) and exit with its error's
    code (5, or 7 for a ledger written by a newer perfledger)."""
    error = report.error
    if ctx.json_mode:
        emit_json(report.to_json())
    elif error is not None:
        label = "error" if error.exit_code == 7 else "integrity failure"
        click.echo(f"perfledger: {label}: {error.message}", err=True)
        if error.hint:
            click.echo(f"hint: {error.hint}", err=True)
    sys.exit(error.exit_code if error is not None else 5)


def checkpoints_text(report: Any) -> str:
    """One line on a ledger's checkpoints (``report``: a CheckpointReport's JSON)."""
    found = report["checkpoints"]
    if not found:
        return "checkpoints none"
    last = found[-1]
    signers = ", ".join(last["signers"]) or "signatures not checked (--signers FILE)"
    return (
        f"checkpoints {len(found)}; the last: {last['events']} events at {last['head'][:12]} "
        f"(tag {last['tag'][:12]}), signed by {signers}; the head holds "
        f"{report['unsigned_events']} events past it"
    )


def command_context(json_flag: bool) -> Context:
    """The current command's :class:`Context`, switched to JSON answers by ``--json``."""
    ctx = click.get_current_context().find_object(Context)
    assert ctx is not None
    if json_flag:
        ctx.json_mode = True
    return ctx


#: Below this many events a rate says more about start-up than about the ledger: not shown.
RATE_MIN_EVENTS = 1_000


def signed_pct_text(value: float | None) -> str:
    """A ratio as a signed percentage (``0.0123`` -> ``+1.23%``), ``-`` for None."""
    return "-" if value is None else f"{value * 100:+.2f}%"


def rate_text(events: int, elapsed_s: float) -> str:
    """`` (N events/s)`` for a verify or audit answer, or nothing for a small ledger (fewer than
    :data:`RATE_MIN_EVENTS` events), where the time is mostly imports and start-up."""
    if events < RATE_MIN_EVENTS or elapsed_s <= 0:
        return ""
    return f" ({events / elapsed_s:,.0f} events/s)"


def resolve_actor(actor: str | None) -> str:
    """Who this command acts as (:func:`perfledger.app.actors.resolve_actor` on its ledger).
    Raises: BadRequest for an empty ``--actor``, and when nothing names anyone."""
    click_ctx = click.get_current_context(silent=True)
    ctx = click_ctx.find_object(Context) if click_ctx is not None else None
    return actors.resolve_actor(actor, ctx.ledger_path if ctx else None)


__all__ = [
    "ACTOR_HELP", "DRY_RUN_HELP", "IDEMPOTENCY_HELP", "JSON_HELP", "RATE_MIN_EVENTS", "Context", "actor_option",
    "actor_option_noting", "actor_param", "call_timeout_option", "cases_option",
    "checkpoint_policy", "checkpoint_policy_options", "checkpoints_text", "command_context",
    "dry_run_option", "dry_run_param", "emit_json", "exit_verify_failure", "fail",
    "idempotency_option", "idempotency_param", "json_option", "json_param",
    "measure_dry_run_option", "measured_target_option", "options_of", "quiet_option",
    "rate_text", "removed_explain_foreign_option", "request_help", "request_option",
    "request_param", "resolve_actor", "signed_pct_text", "target_field_option", "target_option",
    "target_param", "to_json_text",
]  # fmt: skip
