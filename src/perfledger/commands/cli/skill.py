"""``perfledger skill install DIR`` / ``skill --print``: the Agent Skill shipped with perfledger
(:mod:`perfledger.skill`: SKILL.md and references/); loaded only for ``perfledger skill``.
"""

from __future__ import annotations

import click

from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.skill import install, read


@click.group("skill", invoke_without_command=True)
@click.option("--print", "print_flag", is_flag=True, help="Print SKILL.md on stdout.")
@click.pass_context
def skill_group(click_ctx: click.Context, print_flag: bool) -> None:
    """perfledger's Agent Skill (SKILL.md and references/): print it, or install it where an
    agent looks (e.g. `perfledger skill install ~/.claude/skills`)."""
    if click_ctx.invoked_subcommand is not None:
        return
    if not print_flag:
        click.echo(click_ctx.get_help())
        return
    click.echo(read(), nl=False)


@skill_group.command("install")
@click.argument("directory", type=click.Path(file_okay=False))
@_json
def skill_install(directory: str, json_flag: bool) -> None:
    """Write the skill to DIRECTORY/perfledger/ (SKILL.md and references/), replacing an earlier
    copy of its files."""
    ctx = _ctx(json_flag)
    written = install(directory)
    if ctx.json_mode:
        _emit({"installed": [str(p) for p in written]})
        return
    for path in written:
        click.echo(f"wrote {path}")


__all__ = ["skill_group"]
