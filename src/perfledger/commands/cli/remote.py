"""``perfledger remote add|list|remove``: the ledger's remotes, kept in the git config as `git
remote` does (:mod:`perfledger.ledger.remotes`); loaded only for ``perfledger remote``.
"""

from __future__ import annotations

import click

from perfledger.app.sync import remote_rows
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.ledger.remotes import add_remote, remove_remote


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
    remote = ctx.read(lambda ledger: add_remote(ledger.store.repo, name, url))
    if ctx.json_mode:
        _emit({"name": remote.name, "url": remote.url})
    else:
        click.echo(f"remote {remote.name} -> {remote.url}")


@remote_group.command("list")
@_json
def remote_list(json_flag: bool) -> None:
    """List the remotes with the last ledger head seen from each."""
    ctx = _ctx(json_flag)
    ledger = ctx.open()
    try:
        rows = remote_rows(ledger)
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
    ctx.read(lambda ledger: remove_remote(ledger.store.repo, name))
    if ctx.json_mode:
        _emit({"removed": name})
    else:
        click.echo(f"removed remote {name}")


__all__ = ["remote_group"]
