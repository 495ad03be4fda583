"""The sync commands: ``clone``, ``pull``, ``push`` and ``sync`` (``remote add|list|remove``:
:mod:`perfledger.commands.cli.remote`; ``resolve``, the user-facing name of ``conflict resolve``:
:mod:`perfledger.commands.cli.workflow`).

A thin skin over :mod:`perfledger.app.sync` (the sync use cases, over
:mod:`perfledger.ledger.sync` through :class:`perfledger.api.Ledger`): each command calls one
application function and renders its answer (text for people, ``--json`` for
agents). Only click is imported at load time.
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import Any

import click

from perfledger.app.sync import CONFLICT_EXIT, clone_ledger, pull_ledger, push_ledger, sync_ledger
from perfledger.commands.cli.common import (
    checkpoint_policy,
    checkpoint_policy_options,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json

#: Events listed by name in the text summary of a pull (all of them are in ``--json``).
SUMMARY_EVENTS = 10


def _summary(result: Any) -> None:
    """Print a pull's (or clone's) summary: what happened and the new events."""
    new = result.new_events
    how = {
        "up_to_date": "already up to date",
        "fast_forward": "fast-forward",
        "merged": f"merged (merge commit {str(result.merge_commit)[:12]}, it carries no event)",
        "cloned": "cloned",
    }.get(result.action, result.action)
    click.echo(
        f"{result.remote} ({result.url}): {how}; {len(new)} new event"
        f"{'' if len(new) == 1 else 's'}, verified in {result.elapsed_s:.2f} s"
    )
    if new:
        kinds = Counter(e.kind for e in new)
        click.echo("  " + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())))
        for envelope in new[-SUMMARY_EVENTS:]:
            click.echo(
                f"  {envelope.id[:12]}  {envelope.lamport:>6}  {envelope.actor}  {envelope.kind}"
            )
        if len(new) > SUMMARY_EVENTS:
            click.echo(f"  ... and {len(new) - SUMMARY_EVENTS} earlier (perfledger log)")
    click.echo(f"head {result.after}")


def _say_conflicts(conflicts: list[dict[str, Any]]) -> None:
    for c in conflicts:
        click.echo(
            f"CONFLICT ({c['kind']}) {c['conflict_id']} on Target {c['target_id']}: the two "
            f"machines chose {' and '.join(c['options'])}",
            err=True,
        )
        click.echo(f"  blocks: {c['blocks']}", err=True)
        click.echo(f"  resolve: {c['resolve']}", err=True)


@click.command("clone")
@click.argument("url")
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--origin", "remote", default="origin", help="Name of the remote (default origin).")
@checkpoint_policy_options
@_json
def clone(
    url: str,
    path: str | None,
    remote: str,
    checkpoint_options: tuple[Any, ...],
    json_flag: bool,
) -> None:
    """Clone the ledger at URL into PATH (a new bare repository; default: the URL's last part),
    verifying every event before the ledger ref is written."""
    ctx = _ctx(json_flag)
    policy = checkpoint_policy(checkpoint_options)

    done = clone_ledger(url, path, remote=remote, policy=policy)
    if ctx.json_mode:
        _emit({"path": done.path, **done.result.to_json()})
    else:
        click.echo(f"cloned into {done.path}")
        _summary(done.result)


@click.command("pull")
@click.argument("remote", required=False)
@checkpoint_policy_options
@_json
def pull(
    remote: str | None,
    checkpoint_options: tuple[Any, ...],
    json_flag: bool,
) -> None:
    """Fetch REMOTE's ledger (default origin), verify every new event, and join it: a
    fast-forward, or a merge commit that carries no event. A rewritten or tampered remote is
    refused and nothing changes locally. Exit 6 when the merge joined concurrent decisions the
    rules forbid together (e.g. two champion selections): the conflict is named with what it
    blocks and the `perfledger resolve` command. A remote whose signed checkpoints fail (with
    --signers: their signatures; --trust DIR: a witness's copies the history must extend;
    --require-signer, --max-unsigned-events) is refused, exit 5 (docs/checkpoints.md)."""
    ctx = _ctx(json_flag)
    policy = checkpoint_policy(checkpoint_options)
    path, result, conflicts = ctx.read(pull_ledger, remote, policy=policy)
    if ctx.json_mode:
        _emit({"ledger": path, **result.to_json(), "conflicts": conflicts})
    else:
        click.echo(f"ledger {path}")
        _summary(result)
        _say_conflicts(conflicts)
    if conflicts:
        sys.exit(CONFLICT_EXIT)


@click.command("push")
@click.argument("remote", required=False)
@_json
def push(remote: str | None, json_flag: bool) -> None:
    """Push the ledger to REMOTE (default origin); fast-forward only: pull first when the remote
    has events this ledger has not seen (exit 4). Never forces."""
    ctx = _ctx(json_flag)
    path, result = ctx.read(push_ledger, remote)
    if ctx.json_mode:
        _emit({"ledger": path, **result.to_json()})
    elif result.pushed:
        before = result.before[:12] if result.before else "(new)"
        click.echo(f"{path} -> {result.remote} ({result.url}): {before} -> {result.after[:12]}")
    else:
        click.echo(f"{path} -> {result.remote} ({result.url}): already up to date")


@click.command("sync")
@click.argument("remote", required=False)
@checkpoint_policy_options
@_json
def sync(
    remote: str | None,
    checkpoint_options: tuple[Any, ...],
    json_flag: bool,
) -> None:
    """Pull then push REMOTE (default origin); pulled again and pushed again when another
    machine pushed in between. Exit 6 when the pull joined concurrent decisions the rules forbid
    together: the conflict is named with what it blocks and the `perfledger resolve` command."""
    ctx = _ctx(json_flag)
    policy = checkpoint_policy(checkpoint_options)
    path, result, conflicts = ctx.read(sync_ledger, remote, policy=policy)
    if ctx.json_mode:
        _emit({"ledger": path, **result.to_json(), "conflicts": conflicts})
    else:
        click.echo(f"ledger {path}")
        _summary(result.pull)
        pushed = result.push
        click.echo(
            f"pushed {pushed.after[:12]}" if pushed.pushed else "push: remote already up to date"
        )
        _say_conflicts(conflicts)
    if conflicts:
        sys.exit(CONFLICT_EXIT)


__all__ = ["clone", "pull", "push", "sync"]
