"""Creating a ledger (``perfledger init``, the MCP server's ``cli ["init"]``; SPEC.md
section 6)."""

from __future__ import annotations

import os

import msgspec

from perfledger.api import LEDGER_ENV, Ledger


class Initialised(msgspec.Struct, frozen=True):
    """A ledger just made: ``path`` (absolute), its ``head`` commit and the ``root`` event's id
    (the answer of ``perfledger init --json``)."""

    path: str
    head: str
    root: str


def ledger_location(path: str | None, ledger_path: str | None) -> str:
    """Where ``init`` makes the ledger: ``path``, else the ``--ledger`` given (``ledger_path``),
    else ``$PERFLEDGER_DIR``, else the current directory."""
    return path or ledger_path or os.environ.get(LEDGER_ENV) or os.getcwd()


def init_ledger(
    path: str, *, name: str | None = None, actor: str, remember_actor: bool = False
) -> Initialised:
    """Create a ledger at ``path`` (a new bare git repository, or an existing one) with its root
    event recorded by ``actor``; ``remember_actor`` writes ``actor`` to the clone's git config
    (``perfledger.actor``). Raises: BadRequest (a directory that is not empty and not a git
    repository, ...) as :meth:`perfledger.api.Ledger.init` does."""
    ledger = Ledger.init(path, name=name, actor=actor, remember_actor=remember_actor)
    try:
        root = next(iter(ledger.log(1)))
        return Initialised(os.path.abspath(path), ledger.head(), root.event_id)
    finally:
        ledger.close()


__all__ = ["Initialised", "init_ledger", "ledger_location"]
