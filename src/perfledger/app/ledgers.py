"""Creating a ledger (``perfledger init``, the MCP server's ``cli ["init"]``; SPEC.md
section 6)."""

from __future__ import annotations

import os

import msgspec

from perfledger.api import LEDGER_ENV, Ledger, find_ledger_path
from perfledger.errors import PerfledgerError


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


def found_ledger(ledger_path: str | None) -> str | None:
    """The real path of the ledger later commands find from ``ledger_path`` (``--ledger``;
    None: ``$PERFLEDGER_DIR``, else the git repository around the current directory), or None
    where none is found."""
    try:
        return os.path.realpath(find_ledger_path(ledger_path))
    except PerfledgerError:
        return None


def use_hint(path: str, ledger_path: str | None) -> list[str]:
    """How later commands find the ledger just made at ``path``, when a plain ``perfledger
    status`` run here would not (``ledger_path``: the ``--ledger`` given, else
    ``$PERFLEDGER_DIR``, else the repository around the current directory does not name it);
    then what to run first. Lines for people."""
    if found_ledger(ledger_path) == os.path.realpath(path):
        return ["next: `perfledger status`"]
    return [
        f"use it: export {LEDGER_ENV}={os.path.abspath(path)}  (or pass --ledger {path} "
        "before each command)",
        "next: `perfledger status`",
    ]


def init_message(path: str, mine: str | None) -> str:
    """What ``init`` made of ``path`` and whether a server acting on the ledger at ``mine``
    (its real path, :func:`found_ledger`) acts on it: an agent saw only hashes and could not
    tell a ledger from a work tree."""
    bare = os.path.isfile(os.path.join(path, "HEAD")) and not os.path.exists(
        os.path.join(path, ".git")
    )
    what = (
        "a bare git repository (no work tree: keep code and files elsewhere)"
        if bare
        else "the git repository there"
    )
    text = f"made {path} a perfledger ledger: {what}, its events on branch `ledger`"
    if mine == os.path.realpath(path):
        return text + "; this server's tools act on it: call `status` next"
    return text + (
        f"; this server acts on {mine or 'no ledger'}: start it with "
        f"`perfledger --ledger {path} mcp` to use this one"
    )


def init_tool_hint(ledger_path: str | None) -> str:
    """The hint of an MCP client's ``not_a_ledger``: the ``cli`` tool's ``init`` that makes
    the ledger (``ledger_path``: the server's ``--ledger``); ``init`` refuses a directory that
    is not empty, so there it names a new directory inside."""
    if ledger_path is not None or not os.listdir(os.getcwd()):
        return 'create it with the `cli` tool, args ["init"]'
    return (
        'create one with the `cli` tool, args ["init", "ledger"] (a new '
        "directory: this one is not empty); this server then acts on it"
    )


__all__ = [
    "Initialised",
    "found_ledger",
    "init_ledger",
    "init_message",
    "init_tool_hint",
    "ledger_location",
    "use_hint",
]
