"""Who acts (SPEC.md section 2: every event records who decided it): the name a command or a
tool call records as its actor, from what it was given and where it runs.

Light by design (``os`` and the errors; the store only when the clone's remembered name is
asked for), so that every adapter can import it at its top.
"""

from __future__ import annotations

import os

from perfledger.errors import BadRequest, PerfledgerError


def refuse_empty_actor(actor: str | None) -> None:
    """Refuse an ``--actor`` given empty (or blank): it would silently mean someone else.
    Raises: BadRequest (exit 2)."""
    if actor is not None and not actor.strip():
        raise BadRequest("--actor is empty", hint="name who decides, or leave --actor out")


def resolve_actor(actor: str | None, ledger_path: str | None) -> str:
    """Who a command acts as: ``actor`` (``--actor``), else ``$PERFLEDGER_ACTOR``, else the
    ``perfledger.actor`` that ``init --actor`` remembered in the clone of the ledger at
    ``ledger_path`` (None: ``$PERFLEDGER_DIR`` or the repository around the current directory),
    else ``$USER``, else ``$LOGNAME``, else the operating system's name of this process's user.
    Never a made-up name: every event records who decided it.
    Raises: BadRequest for an empty ``actor`` (:func:`refuse_empty_actor`), and when none of
    these names anyone."""
    refuse_empty_actor(actor)
    found = (
        actor
        or os.environ.get("PERFLEDGER_ACTOR", "").strip()
        or _remembered_actor(ledger_path)
        or os.environ.get("USER", "").strip()
        or os.environ.get("LOGNAME", "").strip()
        or _os_user()
    )
    if not found:
        raise BadRequest(
            "who decides is not known: no --actor, $PERFLEDGER_ACTOR, perfledger.actor, $USER "
            "or $LOGNAME, and this process's user has no name",
            hint="pass --actor NAME, or export PERFLEDGER_ACTOR=NAME (or `git config "
            "perfledger.actor NAME` in the ledger)",
        )
    return found


def _os_user() -> str | None:
    """The login name of this process's user from the system's user database, or None (a
    container user without a passwd entry)."""
    try:
        import pwd  # noqa: PLC0415 (pwd: imported where its failure is caught)

        return pwd.getpwuid(os.getuid()).pw_name or None
    except (ImportError, KeyError, OSError):
        return None


def _remembered_actor(ledger_path: str | None) -> str | None:
    """The ``perfledger.actor`` git config of the ledger at ``ledger_path`` (written by ``init
    --actor``; local to the clone, like git's ``user.name``), or None."""
    from perfledger.api import find_ledger_path  # noqa: PLC0415 (off `perfledger --version`'s start-up path)
    from perfledger.ledger.gitdir import find_controldir, read_section  # noqa: PLC0415 (off `perfledger --version`'s start-up path)

    try:
        location = find_controldir(find_ledger_path(ledger_path))
    except (PerfledgerError, OSError):
        return None
    section = read_section(location.controldir, b"perfledger") if location else None
    value = (section or {}).get(b"actor")
    return value.decode("utf-8", "replace") if value else None


__all__ = ["refuse_empty_actor", "resolve_actor"]
