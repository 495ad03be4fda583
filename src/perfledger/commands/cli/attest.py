"""``perfledger attest`` and ``perfledger verify-attestation``: an in-toto attestation of a
champion in a DSSE envelope, and its check against a ledger (docs/attestations.md). A thin skin
over :mod:`perfledger.app.attest`."""

from __future__ import annotations

import json

import click

from perfledger.app.attest import attest, verify_attestation, write_attestation
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json
from perfledger.commands.cli.common import json_option as _json


@click.command("attest")
@click.argument("experiment")
@click.option("--key", "key_path", required=True, type=click.Path(dir_okay=False),
              help="The ed25519 OpenSSH private key file that signs (ssh-keygen -t ed25519).")  # fmt: skip
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Write the envelope to FILE (default: standard output).")  # fmt: skip
@_json
def attest_command(experiment: str, key_path: str, out: str | None, json_flag: bool) -> None:
    """Write an in-toto Statement v1 in a DSSE envelope for champion EXPERIMENT: its code
    snapshot's files as subjects, the ledger's case for it as predicate, signed with an ed25519
    SSH key (docs/attestations.md). Exit 3 for an experiment that is not a champion, or a
    champion without a code snapshot or resting on samples measured outside perfledger."""
    ctx = _ctx(json_flag)

    envelope = ctx.read(attest, experiment, key_path)
    if out is None:
        click.echo(json.dumps(envelope, indent=2) + "\n", nl=False)
        return
    data = write_attestation(envelope, out, experiment)
    if ctx.json_mode:
        emit_json(data)
    else:
        click.echo(f"attestation of champion {experiment} written to {out} "
                   f"(signed by {data['keyid']})")  # fmt: skip


@click.command("verify-attestation")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--signers", "signers_file", required=True, type=click.Path(dir_okay=False),
              help="An allowed-signers file (git's format) or an ssh-ed25519 .pub file.")  # fmt: skip
@_json
def verify_attestation_command(file: str, signers_file: str, json_flag: bool) -> None:
    """Check the attestation FILE: its DSSE signature with a key of --signers, then that this
    ledger (a clone of the attested one) re-derives the same statement. Exit 5 naming what
    differs (the signature, a subject, a predicate field)."""
    ctx = _ctx(json_flag)

    done = ctx.read(verify_attestation, file, signers_file)
    if ctx.json_mode:
        emit_json({"ok": True, **done})
    else:
        click.echo(f"attestation of champion {done['experiment']} verified: signed by "
                   f"{', '.join(done['signers'])}; {done['subjects']} subjects re-derived at "
                   f"{done['head'][:12]}")  # fmt: skip


__all__ = ["attest_command", "verify_attestation_command"]
