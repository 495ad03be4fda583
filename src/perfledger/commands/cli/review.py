"""``perfledger review``: research and review records. ``review record --request FILE`` is the
generic write command of ``review.record``; this module adds ``review list [--unresolved]
[--target ID]``, which lists the recorded reviews and the dissent still unresolved."""

from __future__ import annotations

from typing import Any

import click
import msgspec

from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option, to_json_text
from perfledger.projections.reviews import unresolved_dissent

GROUP_HELP = (
    "Record a reviewer's challenge to a claim, rejection or stop, the response and whether "
    "dissent remains; list unresolved dissent. Recorded, never judged."
)


def _rows(state: Any, unresolved_only: bool, target_id: str | None) -> list[dict[str, Any]]:

    views = (
        unresolved_dissent(state.reviews, target_id)
        if unresolved_only
        else [
            v
            for v in state.reviews.reviews.values()
            if target_id is None or v.review.target_id in (None, target_id)
        ]
    )
    return [
        {
            **msgspec.to_builtins(v.review),
            "event_id": v.event_id,
            "resolved_by": v.resolved_by,
            "unresolved_dissent": v.review.dissent_remains and v.resolved_by is None,
        }
        for v in views
    ]


@click.command("list")
@click.option("--unresolved", is_flag=True, help="Only dissent that no later review resolved.")
@click.option("--target", "target_id", default=None, help="Only reviews of this Target.")
@json_option
def review_list(unresolved: bool, target_id: str | None, json_flag: bool) -> None:
    """List recorded reviews (reviewer, model family, subject, dissent, resolved by)."""

    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        state = ledger.state()
    finally:
        ledger.close()
    rows = _rows(state, unresolved, target_id)
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


def extend(cli: click.Group) -> None:
    """Add ``review list`` to the ``review`` group of ``cli`` (after the workflow commands)."""
    group = cli.commands.get("review")
    if isinstance(group, click.Group):
        group.help = GROUP_HELP
        group.add_command(review_list, "list")
