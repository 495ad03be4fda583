"""The sync commands: ``remote add|list|remove``, ``clone``, ``pull``, ``push``,
``sync``, and ``resolve`` (the user-facing name of ``conflict resolve``).

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
    actor_option,
    checkpoint_policy,
    checkpoint_policy_options,
    dry_run_option,
    idempotency_option,
    request_option,
    target_field_option,
    to_json_text,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option as _json

#: Events listed by name in the text summary of a pull (all of them are in ``--json``).
SUMMARY_EVENTS = 10


def _emit(data: object) -> None:
    click.echo(to_json_text(data))


@click.group("remote")
def remote_group() -> None:
    """Manage the ledger's remotes (kept in the git config, as `git remote` does)."""


@remote_group.command("add")
@click.argument("name")
@click.argument("url")
@_json
def remote_add(name: str, url: str, json_flag: bool) -> None:
    """Add remote NAME at URL (a path, file://, git://, ssh://, http(s)://)."""
    ctx = _ctx(json_flag)
    from perfledger.ledger.remotes import add_remote  # noqa: PLC0415 (dulwich via perfledger.ledger.remotes)

    ledger = ctx.open()
    try:
        remote = add_remote(ledger.store.repo, name, url)
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit({"name": remote.name, "url": remote.url})
    else:
        click.echo(f"remote {remote.name} -> {remote.url}")


@remote_group.command("list")
@_json
def remote_list(json_flag: bool) -> None:
    """List the remotes with the last ledger head seen from each."""
    ctx = _ctx(json_flag)
    from perfledger.ledger.remotes import list_remotes, tracking_ref  # noqa: PLC0415 (dulwich via perfledger.ledger.remotes)

    ledger = ctx.open()
    try:
        repo = ledger.store.repo
        rows = []
        for name, url in list_remotes(repo).items():
            ref = tracking_ref(name)
            seen = repo.refs[ref].decode() if ref in repo.refs else None
            rows.append({"name": name, "url": url, "last_seen": seen})
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit({"remotes": rows})
        return
    for row in rows:
        seen = row["last_seen"][:12] if row["last_seen"] else "(never pulled)"
        click.echo(f"{row['name']}\t{row['url']}\t{seen}")


@remote_group.command("remove")
@click.argument("name")
@_json
def remote_remove(name: str, json_flag: bool) -> None:
    """Remove remote NAME and its tracking ref (the ledger's events stay)."""
    ctx = _ctx(json_flag)
    from perfledger.ledger.remotes import remove_remote  # noqa: PLC0415 (dulwich via perfledger.ledger.remotes)

    ledger = ctx.open()
    try:
        remove_remote(ledger.store.repo, name)
    finally:
        ledger.close()
    if ctx.json_mode:
        _emit({"removed": name})
    else:
        click.echo(f"removed remote {name}")


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
    ledger = ctx.open()
    try:
        path, result, conflicts = pull_ledger(ledger, remote, policy=policy)
    finally:
        ledger.close()
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
    ledger = ctx.open()
    try:
        path, result = push_ledger(ledger, remote)
    finally:
        ledger.close()
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
    ledger = ctx.open()
    try:
        path, result, conflicts = sync_ledger(ledger, remote, policy=policy)
    finally:
        ledger.close()
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
def resolve(
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
    from perfledger.commands.cli.workflow import read_request, submit  # noqa: PLC0415 (off `perfledger remote list`'s start-up path)

    body = read_request(request_source)
    fields = {"target_id": target_id, "conflict_id": conflict_id, "keep": keep, "reason": reason}
    body.update({k: v for k, v in fields.items() if v is not None})
    submit(ctx, "conflict.resolve", body, actor=actor, idempotency_key=idempotency_key,
           dry_run=dry_run)  # fmt: skip


__all__ = ["clone", "pull", "push", "remote_group", "resolve", "sync"]
