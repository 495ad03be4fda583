"""``perfledger knowledge``: the offline knowledge query (the edge: files in, answer out).

- ``knowledge query [--env ENV.json] [--phenomenon P]... [--mechanism M]... [--dtype D]
  [--library NAME=VERSION]... [--cards DIR]... [--record EVIDENCE_ID]`` lists every card the
  terms select as ``compatible``, ``related`` or ``incompatible`` with the exact differences from
  the environment (:mod:`perfledger.knowledge.matching`). It never decides; an empty result
  blocks nothing and says so. With ``--record`` the answer is appended as diagnostic evidence
  (``EvidenceRecorded``, applicability ``diagnostic``, R6) with the answer attached as the
  artifact ``knowledge-query.json``.
- ``knowledge check [DIR]...`` validates cards (the shipped ones and each DIR).
- ``knowledge show ID`` prints one card.

The cards are read and matched, and an answer recorded, by :mod:`perfledger.app.knowledge`;
this module parses the options and renders the answer.
"""

from __future__ import annotations

from typing import Any

import click

from perfledger.app.knowledge import KnowledgeQuery, card_of, load_cards, query_knowledge
from perfledger.commands.cli.common import actor_option, json_option, to_json_text
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import resolve_actor as _actor


def render_text(data: dict[str, Any]) -> str:
    """The answer for people: one block per card, then the counts and the standing note."""
    lines = []
    env = data["environment"]
    if env is None:
        lines.append("environment: not given (--env): every stated condition is unchecked")
    else:
        libs = ", ".join(f"{k} {v}" for k, v in sorted(env["libraries"].items())) or "none"
        sm = f"sm_{env['sm']}" if env["sm"] is not None else "unknown"
        lines.append(
            f"environment: {env['gpu'] or 'GPU unknown'}, {sm}, CUDA {env['cuda'] or 'unknown'}, "
            f"toolkit {env['toolkit'] or 'unknown'}, driver {env['driver'] or 'unknown'}; "
            f"libraries: {libs}"
        )
    for r in data["results"]:
        lines.append(f"{r['status']:12s} {r['id']}: {r['title']}")
        lines += [f"    - {text}" for text in r["differences"]]
        lines += [f"    - {text}" for text in r["notes"]]
        lines += [f"    source: {s['title']} <{s['url']}>" for s in r["sources"]]
    c = data["counts"]
    if not data["results"]:
        lines.append(
            f"no card matched ({data['cards_searched']} searched): this blocks nothing and says "
            "nothing about whether the mechanism works here."
        )
    else:
        lines.append(
            f"{len(data['results'])} of {data['cards_searched']} cards: {c['compatible']} "
            f"compatible, {c['related']} related, {c['incompatible']} incompatible."
        )
    lines.append(data["note"])
    return "\n".join(lines) + "\n"


@click.group("knowledge")
def knowledge() -> None:
    """Offline knowledge cards: query them against an environment (never decides)."""


@knowledge.command("query")
@click.option(
    "--env",
    "env_path",
    default=None,
    metavar="ENV.json|-",
    help="The environment identity: what `perfledger env --json` prints.",
)
@click.option(
    "--phenomenon",
    "phenomena",
    multiple=True,
    help="A phenomenon observed (memory_bound, launch_overhead, ...); repeatable, all must match.",
)
@click.option(
    "--mechanism",
    "mechanisms",
    multiple=True,
    help="A mechanism (tma, cuda_graphs, memory.async_copy, ...); repeatable, all must match.",
)
@click.option("--dtype", default=None, help="The data type of the work (fp16, bf16, fp8_e4m3...).")
@click.option(
    "--library",
    "libraries",
    multiple=True,
    metavar="NAME=VERSION",
    help="A library version of the environment (triton=3.1.0); repeatable.",
)
@click.option(
    "--cards",
    "card_dirs",
    multiple=True,
    metavar="DIR",
    help="A directory of your own cards (*.toml); repeatable.",
)
@click.option("--no-shipped", is_flag=True, help="Leave the cards shipped with perfledger out.")
@click.option(
    "--record",
    "evidence_id",
    default=None,
    metavar="EVIDENCE_ID",
    help="Record the answer as diagnostic evidence with this id (R6).",
)
@click.option(
    "--layer",
    type=click.Choice(["kernel", "workload", "service"]),
    default="kernel",
    help="With --record: the layer the question was about (default kernel).",
)
@click.option("--target", "target_id", default=None, help="With --record: the Target id.")
@actor_option
@json_option
def query(env_path: str | None, phenomena: tuple[str, ...], mechanisms: tuple[str, ...],
          dtype: str | None, libraries: tuple[str, ...], card_dirs: tuple[str, ...],
          no_shipped: bool, evidence_id: str | None, layer: str, target_id: str | None,
          actor: str | None, json_flag: bool) -> None:  # fmt: skip
    """List the cards matching the terms as compatible, related or incompatible with the
    environment, with the exact differences. It never decides, and an empty result blocks
    nothing."""

    ctx = _ctx(json_flag)
    request = KnowledgeQuery(
        env_path=env_path, phenomena=list(phenomena), mechanisms=list(mechanisms), dtype=dtype,
        libraries=list(libraries), card_dirs=list(card_dirs), shipped=not no_shipped,
        evidence_id=evidence_id, layer=layer, target_id=target_id,
    )  # fmt: skip
    done = query_knowledge(request, open_ledger=ctx.open, actor=lambda: _actor(actor))
    data, recorded = done.data, done.recorded
    if ctx.json_mode:
        click.echo(to_json_text({**data, "recorded": recorded}))
        return
    click.echo(render_text(data), nl=False)
    if recorded:
        click.echo(f"recorded as diagnostic evidence {evidence_id} (event {recorded['event_id']})")


@knowledge.command("check")
@click.argument("directories", nargs=-1)
@json_option
def check(directories: tuple[str, ...], json_flag: bool) -> None:
    """Validate the shipped cards and those of each DIRECTORY (exit 2 naming a bad card's file
    and field)."""

    ctx = _ctx(json_flag)
    cards, digest = load_cards(directories)
    if ctx.json_mode:
        click.echo(to_json_text({"cards": len(cards), "cards_digest": digest, "ok": True}))
    else:
        click.echo(f"{len(cards)} cards valid (digest {digest})")


@knowledge.command("show")
@click.argument("card_id")
@click.option("--cards", "card_dirs", multiple=True, metavar="DIR", help="More cards (repeatable).")
@json_option
def show(card_id: str, card_dirs: tuple[str, ...], json_flag: bool) -> None:
    """Print one card (TOML fields as JSON) and where it was read from."""

    ctx = _ctx(json_flag)
    data = card_of(card_id, card_dirs)
    click.echo(to_json_text(data, indent=0 if ctx.json_mode else 2))
