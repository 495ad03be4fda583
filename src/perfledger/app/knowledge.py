"""The offline knowledge query (SPEC.md section 6; R6): card files in, an answer out.

:func:`query_knowledge` lists every card the terms select as ``compatible``, ``related`` or
``incompatible`` with the exact differences from the environment
(:mod:`perfledger.knowledge.matching`); it never decides, and an empty result blocks nothing.
With ``evidence_id`` the answer is appended as diagnostic evidence (``EvidenceRecorded``,
applicability ``diagnostic``, R6) with the answer attached as the artifact
``knowledge-query.json``. :func:`load_cards` reads the shipped cards (package data,
``perfledger/knowledge/cards``) and a user's ``--cards DIR``; :func:`card_of` finds one card.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import blake3
import msgspec

from perfledger._version import __version__
from perfledger.commands.registry import operations
from perfledger.errors import BadRequest
from perfledger.knowledge import matching
from perfledger.knowledge.cards import check_unique, parse_card
from perfledger.knowledge.matching import EMPTY_BLOCKS_NOTHING, STATUS_ORDER
from perfledger.ledger.base import Artifact

#: The hint of every refusal here.
HINT = (
    "`perfledger knowledge --help` gives the options; docs/knowledge.md the cards and their inputs"
)

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
            hint=HINT,
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise BadRequest(
            f"{what} {str(path)!r} is larger than {MAX_FILE_BYTES} bytes",
            hint=HINT,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(
            f"{what} {str(path)!r} is not UTF-8 text",
            hint=HINT,
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
            hint=HINT,
        )
    paths = sorted(p for p in root.rglob("*.toml") if p.is_file())
    if not paths:
        raise BadRequest(
            f"--cards {directory!r} holds no card (*.toml)",
            hint=HINT,
        )
    return [(str(p), _read_text(p, "card")) for p in paths]


def load_cards(directories: Sequence[str], *, shipped: bool = True) -> tuple[list[Any], str]:
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


def read_env(path: str, stdin: str | None = None) -> dict[str, Any]:
    """Read ``perfledger env --json``'s object from ``path`` (``-``: stdin: ``stdin``'s text
    where the caller gives it, as the MCP server's ``cli`` tool does, else this process's).

    Raises: BadRequest when it is not readable, not JSON or not an object."""

    if path == "-":
        text = sys.stdin.read(MAX_FILE_BYTES + 1) if stdin is None else stdin[: MAX_FILE_BYTES + 1]
    else:
        text = _read_text(Path(path), "--env")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BadRequest(
            f"--env {path!r} is not valid JSON: {exc}",
            hint=HINT,
        ) from None
    if not isinstance(data, dict):
        raise BadRequest(
            f"--env {path!r} must be the JSON object `perfledger env --json` prints, "
            f"got {type(data).__name__}",
            hint=HINT,
        )
    return data


def libraries_of(items: Sequence[str]) -> dict[str, str]:
    """``--library NAME=VERSION`` items as ``{name (lower case): version}``.
    Raises: BadRequest for an item that is not NAME=VERSION."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, version = item.partition("=")
        if not sep or not name.strip() or not version.strip():
            raise BadRequest(
                f"--library {item!r} is not NAME=VERSION (e.g. triton=3.1.0)",
                hint=HINT,
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


def record_answer(
    data: dict[str, Any],
    *,
    evidence_id: str,
    layer: str,
    target_id: str | None,
    open_ledger: Callable[[], Any],
    actor: Callable[[], str],
) -> dict[str, Any]:
    """Append the answer ``data`` as diagnostic evidence ``evidence_id`` (R6) with the answer
    attached (:data:`ARTIFACT`); returns ``{"event_id", "evidence_id", "artifact"}``.
    Raises: RuleRefused (exit 3), ConcurrentAppend (exit 4)."""

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
    ledger = open_ledger()
    try:
        envelopes = operations.execute(
            ledger, "evidence.add", body, actor=actor(),
            artifacts={ARTIFACT: Artifact(raw, "application/json")},
        )  # fmt: skip
    finally:
        ledger.close()
    return {"event_id": envelopes[0].id, "evidence_id": evidence_id, "artifact": ARTIFACT}


class KnowledgeQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A knowledge query: ``env_path`` (``perfledger env --json``'s object; ``-``: stdin; None:
    no environment), the ``phenomena`` and ``mechanisms`` that must all match, ``dtype``,
    ``libraries`` (``NAME=VERSION`` items), ``card_dirs`` (a user's card directories) and
    ``shipped`` (the shipped cards too); with ``evidence_id`` the answer is recorded as
    diagnostic evidence of ``layer`` (``kernel``, ``workload``, ``service``) on ``target_id``;
    ``stdin``: the text ``-`` reads where the caller gives it (else this process's stdin)."""

    env_path: str | None = None
    phenomena: list[str] = []
    mechanisms: list[str] = []
    dtype: str | None = None
    libraries: list[str] = []
    card_dirs: list[str] = []
    shipped: bool = True
    evidence_id: str | None = None
    layer: str = "kernel"
    target_id: str | None = None
    stdin: str | None = None


class KnowledgeAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """The answer of :func:`query_knowledge`: ``data`` (:func:`answer`'s JSON builtins) and,
    where it was recorded, ``recorded`` (``{"event_id", "evidence_id", "artifact"}``)."""

    data: dict[str, Any]
    recorded: dict[str, Any] | None = None


def query_knowledge(
    request: KnowledgeQuery,
    *,
    open_ledger: Callable[[], Any],
    actor: Callable[[], str],
) -> KnowledgeAnswer:
    """Match the cards against the environment (R6: context, never a refusal) and, with
    ``request.evidence_id``, record the answer (the ledger opened, then ``actor()`` asked who
    records, only then). Raises: BadRequest for an unreadable or malformed ``--env``, a bad
    ``--library`` or ``--cards``; CardError for a bad card; RuleRefused (exit 3) and
    ConcurrentAppend (exit 4) when recording."""
    libs = libraries_of(request.libraries)
    env = None
    if request.env_path is not None:
        try:
            env = matching.env_facts(read_env(request.env_path, request.stdin), libs)
        except ValueError as exc:
            raise BadRequest(f"--env {request.env_path!r}: {exc}", hint=HINT) from None
    elif libs:
        env = matching.EnvFacts(libraries=libs)
    cards, digest = load_cards(request.card_dirs, shipped=request.shipped)
    matches = matching.query(
        cards, env, phenomena=request.phenomena, mechanisms=request.mechanisms,
        dtype=request.dtype,
    )  # fmt: skip
    data = answer(
        matches, env, searched=len(cards), digest=digest,
        query={"phenomena": list(request.phenomena), "mechanisms": list(request.mechanisms),
               "dtype": request.dtype, "libraries": libs, "cards": list(request.card_dirs),
               "shipped": request.shipped, "env": request.env_path},
    )  # fmt: skip
    if request.evidence_id is None:
        return KnowledgeAnswer(data=data)
    recorded = record_answer(
        data, evidence_id=request.evidence_id, layer=request.layer,
        target_id=request.target_id, open_ledger=open_ledger, actor=actor,
    )  # fmt: skip
    return KnowledgeAnswer(data=data, recorded=recorded)


def card_of(card_id: str, card_dirs: Sequence[str]) -> dict[str, Any]:
    """``{"origin", "card"}`` (the card's TOML fields as builtins) of card ``card_id`` among the
    shipped cards and those of ``card_dirs``. Raises: BadRequest for no such card; CardError
    for a bad card."""
    cards, _ = load_cards(card_dirs)
    for origin, card in cards:
        if card.id == card_id:
            return {"origin": origin, "card": msgspec.to_builtins(card)}
    raise BadRequest(f"no card {card_id!r}", hint="`perfledger knowledge query` lists them")


__all__ = [
    "ARTIFACT",
    "HINT",
    "MAX_FILE_BYTES",
    "KnowledgeAnswer",
    "KnowledgeQuery",
    "answer",
    "card_of",
    "libraries_of",
    "load_cards",
    "query_knowledge",
    "read_env",
    "record_answer",
    "shipped_card_texts",
    "user_card_texts",
]
