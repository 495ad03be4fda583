"""``perfledger checkpoint``: sign the ledger's head, co-sign a checkpoint as a witness, list
the checkpoints (docs/checkpoints.md). A thin skin over :mod:`perfledger.app.checkpoints`."""

from __future__ import annotations

import os
from typing import Any

import click

from perfledger.app.checkpoints import (
    listed_json,
    sign_checkpoint,
    signed_json,
    verify,
    witness_checkpoint,
    witnessed_json,
)
from perfledger.commands.cli.common import (
    actor_option,
    checkpoint_policy,
    checkpoint_policy_options,
    checkpoints_text,
    emit_json,
    exit_verify_failure,
    resolve_actor,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import json_option as _json

_KEY = click.option(
    "--key", "key_path", required=True, type=click.Path(dir_okay=False),
    help="The private SSH key file that signs (ssh-keygen -t ed25519 makes one).",
)  # fmt: skip


@click.group("checkpoint")
def checkpoint_group() -> None:
    """Sign checkpoints of the ledger with SSH keys and co-sign them as a witness; git verify-tag
    checks each (docs/checkpoints.md)."""


@checkpoint_group.command("sign")
@_KEY
@click.option("--signers", "signers_file", type=click.Path(dir_okay=False), default=None,
              help="Check the existing checkpoints' signatures against this allowed-signers file.")  # fmt: skip
@actor_option
@_json
def sign(key_path: str, signers_file: str | None, actor: str | None, json_flag: bool) -> None:
    """Verify the ledger and sign a checkpoint of its head (event count, event digest) as an
    SSH-signed git tag under refs/perfledger/checkpoints/. Exit 5 when the ledger or an existing
    checkpoint fails verification."""
    ctx = _ctx(json_flag)

    ledger = ctx.open()
    try:
        tag = sign_checkpoint(
            ledger, key_path, actor=resolve_actor(actor), signers_file=signers_file
        )
    finally:
        ledger.close()
    data = signed_json(tag)
    if ctx.json_mode:
        emit_json(data)
    else:
        click.echo(f"checkpoint {tag.sha}: {tag.count} events at {tag.head}")
        click.echo(f"digest {tag.digest}")
        click.echo(f"check it: git verify-tag {tag.sha} (gpg.format=ssh, an allowed-signers file)")


@checkpoint_group.command("witness")
@click.argument("checkpoint", required=False)
@_KEY
@click.option(
    "--signers",
    "signers_file",
    required=True,
    type=click.Path(dir_okay=False),
    help="The allowed-signers file the checkpoints' signatures are checked against.",
)
@click.option("--copy", "copy_dir", required=True, type=click.Path(file_okay=False),
              help="The witness's own directory: the tags it signed are kept there, and the "
              "ledger must extend every checkpoint it holds.")  # fmt: skip
@actor_option
@_json
def witness(
    checkpoint: str | None,
    key_path: str,
    signers_file: str,
    copy_dir: str,
    actor: str | None,
    json_flag: bool,
) -> None:
    """Verify the ledger and its checkpoints, then co-sign CHECKPOINT (a tag sha or prefix;
    default: the last) with the witness's key: a signed tag pointing at the checkpoint's tag,
    kept in --copy DIR too. Exit 5 when anything fails verification."""
    ctx = _ctx(json_flag)

    ledger = ctx.open()
    try:
        target, tag, paths = witness_checkpoint(
            ledger, key_path, signers_file=signers_file, copy_dir=copy_dir,
            actor=resolve_actor(actor), checkpoint=checkpoint,
        )  # fmt: skip
    finally:
        ledger.close()
    data = witnessed_json(target, tag, paths)
    if ctx.json_mode:
        emit_json(data)
    else:
        click.echo(f"witnessed checkpoint {target.sha} ({target.count} events at {target.head})")
        click.echo(f"witness tag {tag.sha}; copies kept in {os.path.abspath(copy_dir)}")


@checkpoint_group.command("list")
@checkpoint_policy_options
@_json
def list_checkpoints(checkpoint_options: tuple[Any, ...], json_flag: bool) -> None:
    """Verify the ledger and list its checkpoints in the order they extend each other, with who
    signed and witnessed each (with --signers). Exit 5 as `perfledger verify`."""
    ctx = _ctx(json_flag)
    policy = checkpoint_policy(checkpoint_options)

    report = ctx.read(verify, policy)
    if not report.ok:
        exit_verify_failure(ctx, report)
    found = listed_json(report)
    if ctx.json_mode:
        emit_json(found)
        return
    for row in found["checkpoints"]:
        signers = ", ".join(row["signers"]) or "-"
        click.echo(f"{row['tag'][:12]}  {row['events']:>8}  {row['head'][:12]}  {signers}")
    click.echo(checkpoints_text(found))


__all__ = ["checkpoint_group"]
