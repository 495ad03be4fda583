"""``perfledger checkout``: a recorded subject's files written back byte for byte (R11); the
work is :func:`perfledger.app.identity.checkout`."""

from __future__ import annotations

import shlex

import click

from perfledger.app.identity import checkout
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option, to_json_text


@click.command("checkout")
@click.argument("snapshot")
@click.argument("directory")
@json_option
def checkout_command(snapshot: str, directory: str, json_flag: bool) -> None:
    """Write a recorded subject's files (SNAPSHOT: a tree digest or prefix, SAMPLES[:reference],
    TARGET:original, or an experiment id) into DIRECTORY, byte for byte (R11)."""

    ctx = _ctx(json_flag)
    done = ctx.read(checkout, snapshot, directory)
    if ctx.json_mode:
        click.echo(to_json_text(done))
        return
    click.echo(f"{done['files']} files of {done['snapshot']} ({done['digest']}) in {directory}")
    git = done["git"]
    if git:
        state = "dirty" if git["dirty"] else "clean"
        click.echo(f"git commit {git['commit']} ({state}) at {git['path'] or '.'}")
    click.echo("ran: " + shlex.join(done["argv"]))
    if done["driver_files"]:
        click.echo(
            "driver files outside the subject (not written): " + ", ".join(done["driver_files"])
        )
