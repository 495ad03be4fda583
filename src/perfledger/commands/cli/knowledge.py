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

Card files are read here; the shipped cards are package data (``perfledger/knowledge/cards``).
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import blake3
import click
import msgspec

from perfledger._version import __version__
from perfledger.commands.cli.common import actor_option, json_option, to_json_text
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import resolve_actor as _actor
from perfledger.commands.registry import operations
from perfledger.errors import BadRequest
from perfledger.knowledge import matching
from perfledger.knowledge.cards import check_unique, parse_card
from perfledger.knowledge.matching import EMPTY_BLOCKS_NOTHING, STATUS_ORDER
from perfledger.ledger.base import Artifact

#: The artifact a recorded query attaches.
ARTIFACT = "knowledge-query.json"
#: Largest card or environment file read (bytes).
MAX_FILE_BYTES = 1024 * 1024


def _read_text(path: Path, what: str) -> str:
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadRequest(
            f"cannot read {what} {str(path)!r}: {exc.strerror}",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise BadRequest(
            f"{what} {str(path)!r} is larger than {MAX_FILE_BYTES} bytes",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(
            f"{what} {str(path)!r} is not UTF-8 text",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        ) from None


def shipped_card_texts() -> list[tuple[str, str]]:
    """``(origin, TOML text)`` of every shipped card, sorted by file name; origin is
    ``perfledger:cards/NAME.toml``."""
    root = resources.files("perfledger.knowledge").joinpath("cards")
    return [
        (f"perfledger:cards/{entry.name}", entry.read_text(encoding="utf-8"))
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    ]


def user_card_texts(directory: str) -> list[tuple[str, str]]:
    """``(path, TOML text)`` of every ``*.toml`` under ``directory`` (recursively, sorted).

    Raises: BadRequest when ``directory`` is not a directory or holds no card."""
    root = Path(directory)
    if not root.is_dir():
        raise BadRequest(
            f"--cards {directory!r} is not a directory",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        )
    paths = sorted(p for p in root.rglob("*.toml") if p.is_file())
    if not paths:
        raise BadRequest(
            f"--cards {directory!r} holds no card (*.toml)",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        )
    return [(str(p), _read_text(p, "card")) for p in paths]


def load_cards(directories: tuple[str, ...], *, shipped: bool = True) -> tuple[list[Any], str]:
    """Parse the shipped cards (unless ``shipped`` is False) and those of ``directories``.

    Returns: ``([(origin, Card)], digest)`` where digest is the blake3 (16 hex) of every card's
        origin and text, naming the card set a recorded answer came from.
    Raises: CardError for a bad card (naming the file and field) or a repeated id; BadRequest
        for a missing directory.
    """

    texts = shipped_card_texts() if shipped else []
    for directory in directories:
        texts += user_card_texts(directory)
    cards = [(origin, parse_card(text, origin)) for origin, text in texts]
    check_unique(cards)
    digest = blake3.blake3()
    for origin, text in texts:
        digest.update(origin.encode() + b"\0" + text.encode() + b"\0")
    return cards, digest.hexdigest()[:16]


def read_env(path: str) -> dict[str, Any]:
    """Read ``perfledger env --json``'s object from ``path`` (``-``: stdin).

    Raises: BadRequest when it is not readable, not JSON or not an object."""

    text = sys.stdin.read(MAX_FILE_BYTES + 1) if path == "-" else _read_text(Path(path), "--env")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadRequest(
            f"--env {path!r} is not valid JSON: {exc}",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        ) from None
    if not isinstance(data, dict):
        raise BadRequest(
            f"--env {path!r} must be the JSON object `perfledger env --json` prints, "
            f"got {type(data).__name__}",
            hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
        )
    return data


def _libraries(items: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, version = item.partition("=")
        if not sep or not name.strip() or not version.strip():
            raise BadRequest(
                f"--library {item!r} is not NAME=VERSION (e.g. triton=3.1.0)",
                hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
            )
        out[name.strip().lower()] = version.strip()
    return out


def answer(
    matches: list[Any],
    env: Any,
    *,
    searched: int,
    query: dict[str, Any],
    digest: str,
) -> dict[str, Any]:
    """The query's answer as JSON builtins: query, environment facts, counts, results, note."""

    results = []
    for m in matches:
        card = msgspec.to_builtins(m.card)
        results.append(
            {
                "id": m.card.id, "title": m.card.title, "kind": m.card.kind, "status": m.status,
                "differences": [d.text for d in m.differences],
                "difference_details": msgspec.to_builtins(m.differences),
                "notes": list(m.notes), "matched_on": list(m.matched_on), "origin": m.origin,
                "statement": m.card.statement, "mechanisms": card["mechanisms"],
                "phenomena": card["phenomena"], "catalog_methods": card["catalog_methods"],
                "conditions": card["conditions"], "sources": card["sources"],
            }
        )  # fmt: skip
    counts = {s: sum(1 for m in matches if m.status == s) for s in STATUS_ORDER}
    return {
        "query": query,
        "environment": msgspec.to_builtins(env) if env is not None else None,
        "cards_searched": searched,
        "cards_digest": digest,
        "counts": counts,
        "results": results,
        "note": EMPTY_BLOCKS_NOTHING,
    }


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


def _record(data: dict[str, Any], *, evidence_id: str, layer: str, target_id: str | None,
            actor: str | None, json_mode: bool) -> dict[str, Any]:  # fmt: skip
    """Append the answer as diagnostic evidence (R6); returns the event summary."""

    raw = (json.dumps(data, sort_keys=True, indent=2) + "\n").encode()
    q = data["query"]
    terms = ", ".join(
        [f"phenomenon {p}" for p in q["phenomena"]] + [f"mechanism {m}" for m in q["mechanisms"]]
    )
    body = {
        "evidence_id": evidence_id,
        "layer": layer,
        "tool": {"name": "perfledger-knowledge",
                 "version": f"{__version__}+cards.{data['cards_digest']}"},
        "facts": [
            {"name": "cards_searched", "value": float(data["cards_searched"]), "unit": "count"},
            {"name": "cards_matched", "value": float(len(data["results"])), "unit": "count"},
            *({"name": f"cards_{s}", "value": float(n), "unit": "count"}
              for s, n in data["counts"].items()),
        ],
        "description": f"knowledge query ({terms or 'all cards'}): "
        + (", ".join(f"{r['id']} {r['status']}" for r in data["results"]) or "no card matched")
        + ". Context only: it decides nothing.",
        "report_hash": "blake3:" + blake3.blake3(raw).hexdigest(),
        "applicability": "diagnostic",
        "target_id": target_id,
    }  # fmt: skip
    ledger = _ctx(json_mode).open()
    try:
        envelopes = operations.execute(
            ledger, "evidence.add", body, actor=_actor(actor),
            artifacts={ARTIFACT: Artifact(raw, "application/json")},
        )  # fmt: skip
    finally:
        ledger.close()
    return {"event_id": envelopes[0].id, "evidence_id": evidence_id, "artifact": ARTIFACT}


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
    libs = _libraries(libraries)
    env = None
    if env_path is not None:
        try:
            env = matching.env_facts(read_env(env_path), libs)
        except ValueError as exc:
            raise BadRequest(
                f"--env {env_path!r}: {exc}",
                hint="`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs",
            ) from None
    elif libs:
        env = matching.EnvFacts(libraries=libs)
    cards, digest = load_cards(card_dirs, shipped=not no_shipped)
    matches = matching.query(cards, env, phenomena=phenomena, mechanisms=mechanisms, dtype=dtype)
    data = answer(
        matches, env, searched=len(cards), digest=digest,
        query={"phenomena": list(phenomena), "mechanisms": list(mechanisms), "dtype": dtype,
               "libraries": libs, "cards": list(card_dirs), "shipped": not no_shipped,
               "env": env_path},
    )  # fmt: skip
    recorded = None
    if evidence_id is not None:
        recorded = _record(data, evidence_id=evidence_id, layer=layer, target_id=target_id,
                           actor=actor, json_mode=ctx.json_mode)  # fmt: skip
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
    cards, _ = load_cards(card_dirs)
    for origin, card in cards:
        if card.id == card_id:
            data = {"origin": origin, "card": msgspec.to_builtins(card)}
            click.echo(to_json_text(data, indent=0 if ctx.json_mode else 2))
            return
    raise BadRequest(f"no card {card_id!r}", hint="`perfledger knowledge query` lists them")
