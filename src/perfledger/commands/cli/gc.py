"""``perfledger gc``: remove what killed writers and pulls left in the ledger's git directory.

A thin skin over :func:`perfledger.app.gc.collect_garbage`. Only click is imported at load time.
"""

from __future__ import annotations

import click

from perfledger.app.gc import collect_garbage
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option, to_json_text


@click.command("gc")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@json_option
def gc(dry_run: bool, json_flag: bool) -> None:
    """Remove the garbage of killed writers and pulls (temporary objects and packs, a pack
    without its index, a pull's spooled pack), never a file a live writer is writing. Lock
    files are listed, never removed (a git process may hold one)."""

    ctx = _ctx(json_flag)
    report = collect_garbage(ctx.ledger_path, dry_run=dry_run)
    if ctx.json_mode:
        click.echo(to_json_text({"dry_run": dry_run, **report.to_json()}))
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(report.removed)} files ({report.removed_bytes} bytes)")
    for removed in report.removed:
        click.echo(f"  {removed}")
    for kept, why in report.kept:
        click.echo(f"kept {kept}: {why}")


__all__ = ["gc"]
