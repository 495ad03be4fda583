"""Commands for agents and the people who follow them (SPEC.md section 6): ``status`` (where a
session stands, one screen), ``mcp`` (the MCP server over stdio) and ``artifact list|get``
(``skill install DIR`` / ``skill --print``: :mod:`perfledger.commands.cli.skill`).

The MCP server (its SDK) is imported only by ``perfledger mcp``.
"""

from __future__ import annotations

import sys

import click
import msgspec

from perfledger.app.event_lookup import ArtifactGet, artifacts_of, get_artifact
from perfledger.app.status import session_status_with_commands as session_status
from perfledger.commands.cli.common import actor_option
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import emit_json as _emit
from perfledger.commands.cli.common import json_option as _json
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.cli.status import render


@click.command("status")
@click.option("--target", "target_id", default=None, help="Only this Target.")
@_json
def status_command(target_id: str | None, json_flag: bool) -> None:
    """Where the session stands, on one screen: each current Target, its readiness chain, the
    champion and its final audit, open experiments and their stage, obligations (reconciliations
    owed, conflicts, stale results) and the next decisions the rules accept now (each run dry
    through its decider; nothing is appended)."""
    ctx = _ctx(json_flag)

    status = ctx.read(session_status, target_id)
    if ctx.json_mode:
        _emit(status)
    else:
        render(status)


@click.command("mcp")
@actor_option
def mcp_command(actor: str | None) -> None:
    """Serve perfledger over MCP on stdin/stdout (needs `pip install 'perfledger[mcp]'`): one
    tool per write operation (input schema: the request's JSON Schema; result: the CLI's JSON
    answer; a refusal is a tool error with its rule and hint), the read models (status, state,
    claims, champion, handoff, schema) and `cli` (any other command, e.g. measure workload) as
    tools. The ledger is --ledger, else $PERFLEDGER_DIR, else the enclosing repository."""
    from perfledger.commands.mcp import serve  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    ctx = _ctx(False)
    root = click.get_current_context().find_root().command  # the cli tool's commands
    assert isinstance(root, click.Group)
    serve(ctx.ledger_path, _actor(actor), root)
    sys.exit(0)


@click.group("artifact")
def artifact_group() -> None:
    """List or get the files attached to an event (raw sample tables, code snapshots,
    profiler reports); each is checked against its blake3 and size on the way out."""


@artifact_group.command("list")
@click.argument("event")
@_json
def artifact_list(event: str, json_flag: bool) -> None:
    """List EVENT's artifacts (EVENT: HEAD, an event id or a unique prefix): name, size in
    bytes, media type, blake3."""
    ctx = _ctx(json_flag)
    done = ctx.read(artifacts_of, event)
    rows = msgspec.to_builtins(done.artifacts)
    if ctx.json_mode:
        _emit({"event_id": done.event_id, "artifacts": rows})
        return
    if not rows:
        click.echo(f"event {done.event_id[:12]} has no artifacts")
    for row in rows:
        click.echo(f"{row['name']}  {row['size']:,} bytes  {row['media_type']}")


@artifact_group.command("get")
@click.argument("event")
@click.argument("name")
@click.option("-o", "--output", "output", metavar="FILE", default=None,
              help="Write to FILE (default: stdout).")  # fmt: skip
@_json
def artifact_get(event: str, name: str, output: str | None, json_flag: bool) -> None:
    """Write artifact NAME of EVENT (HEAD, an event id or a unique prefix) to stdout or to
    FILE, after checking its blake3 and size (exit 5 on a mismatch). With --json (and -o):
    ``{"event_id", "name", "path", "size"}``."""
    ctx = _ctx(json_flag)
    request = ArtifactGet(event=event, name=name, output=output, json=ctx.json_mode)
    done = get_artifact(request, open_ledger=ctx.open)
    if done.data is not None:
        out = click.get_binary_stream("stdout")
        out.write(done.data)
        out.flush()
    elif ctx.json_mode:
        _emit({"event_id": done.event_id, "name": name, "path": output, "size": done.size})
    else:
        click.echo(f"wrote {output} ({done.size:,} bytes, artifact {name} of {done.event_id[:12]})")


__all__ = ["artifact_group", "mcp_command", "status_command"]
