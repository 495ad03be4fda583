"""``perfledger review``: research and review records. ``review record --request FILE`` is the
generic write command of ``review.record``, with ``--sign-with KEY`` (the reviewer's SSH key:
the review is recorded with its signature, R12, R17); this module adds ``review content
--request FILE`` (the exact bytes a reviewer signs, for ``ssh-keygen -Y sign -n
perfledger-review``) and ``review list [--unresolved] [--target ID]``, which lists the
recorded reviews and the dissent still unresolved."""

from __future__ import annotations

from typing import Any

import click

from perfledger.app.readmodels import reviews_of
from perfledger.app.request_json import read_request
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option, to_json_text

GROUP_HELP = (
    "Record a reviewer's challenge to a claim, rejection or stop, the response and whether "
    "dissent remains; list unresolved dissent. Recorded, never judged."
)


@click.command("list")
@click.option("--unresolved", is_flag=True, help="Only dissent that no later review resolved.")
@click.option("--target", "target_id", default=None, help="Only reviews of this Target.")
@json_option
def review_list(unresolved: bool, target_id: str | None, json_flag: bool) -> None:
    """List recorded reviews (reviewer, model family, subject, dissent, resolved by)."""

    ctx = _ctx(json_flag)
    rows = ctx.read(reviews_of, unresolved=unresolved, target_id=target_id)
    if ctx.json_mode:
        click.echo(to_json_text({"reviews": rows}))
        return
    for r in rows:
        status = (
            "dissent unresolved"
            if r["unresolved_dissent"]
            else (f"resolved by {r['resolved_by']}" if r["resolved_by"] else "no dissent")
        )
        click.echo(
            f"{r['review_id']}  {r['subject']} {r['subject_event'][:12]}  {r['reviewer']} "
            f"({r['model_family']})  {status}\n    challenge: {r['challenge']}\n"
            f"    response: {r['response']}"
        )
    if not rows:
        click.echo("no review recorded" + (" with unresolved dissent" if unresolved else ""))


def _signing_record(generic: click.Command) -> click.Command:
    """The generic ``review record`` with ``--sign-with KEY``."""
    from perfledger.commands.cli.workflow import submit  # noqa: PLC0415 (cli.workflow installs this group: a cycle at import)

    def callback(sign_with: str | None, **options: Any) -> None:
        if sign_with is None:
            assert generic.callback is not None
            generic.callback(**options)
            return
        from perfledger.app.decisions import signed_review_request  # noqa: PLC0415 (the request models: off `perfledger log`'s start-up path)

        ctx = _ctx(options["json_flag"])
        body = signed_review_request(read_request(options["request_source"]), sign_with)
        submit(
            ctx, "review.record", body, actor=options["actor"],
            idempotency_key=options["idempotency_key"], dry_run=options["dry_run"],
        )  # fmt: skip

    sign_option = click.Option(
        ["--sign-with", "sign_with"], default=None, type=click.Path(dir_okay=False),
        metavar="KEY", help="The reviewer's private SSH key: sign the review with it "
        "(namespace perfledger-review); `perfledger audit --allowed-signers FILE` checks the "
        "key is listed under the appender (--actor).",
    )  # fmt: skip
    return click.Command(
        generic.name, params=[*generic.params, sign_option], callback=callback,
        help=(generic.help or "") + " --sign-with KEY signs it with the reviewer's SSH key.",
    )  # fmt: skip


@click.command("content")
@click.option("--request", "request_source", required=True, metavar="FILE|-",
              help="The closed JSON request (a file, or - for stdin; schema: `perfledger schema "
              "review.record`); its signature, if any, is left out.")  # fmt: skip
def review_content(request_source: str) -> None:
    """Print the exact bytes a reviewer signs for this review (R12, R17): sign them with
    `ssh-keygen -Y sign -n perfledger-review -f KEY` and put the armored output in the request's
    "signature" (or let `review record --sign-with KEY` do both)."""
    from perfledger.commands.registry import operations  # noqa: PLC0415 (off `perfledger log`'s start-up path)
    from perfledger.commands.workflow.review_signature import signed_content  # noqa: PLC0415 (off `perfledger log`'s start-up path)

    body = {k: v for k, v in read_request(request_source).items() if k != "signature"}
    out = click.get_binary_stream("stdout")
    out.write(signed_content(operations.validate("review.record", body)))
    out.flush()


def extend(cli: click.Group) -> None:
    """Add ``review list`` and ``review content`` to the ``review`` group of ``cli``, and
    ``--sign-with`` to its ``record`` (after the workflow commands)."""
    group = cli.commands.get("review")
    if isinstance(group, click.Group):
        group.help = GROUP_HELP
        group.add_command(review_list, "list")
        group.add_command(review_content, "content")
        generic = group.commands.get("record")
        if generic is not None:
            group.add_command(_signing_record(generic), "record")
