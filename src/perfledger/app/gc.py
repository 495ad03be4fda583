"""``perfledger gc``'s use case: remove the garbage of killed writers and pulls from a ledger's
git directory (:func:`perfledger.ledger.gc.collect`)."""

from __future__ import annotations

from perfledger.api import find_ledger_path
from perfledger.errors import NotALedger
from perfledger.ledger.gc import GcReport, collect
from perfledger.ledger.gitdir import find_controldir


def collect_garbage(ledger_path: str | None, *, dry_run: bool = False) -> GcReport:
    """Remove (``dry_run``: only list) the temporary objects and packs, packs without their
    index and spooled pulls of the ledger at ``ledger_path`` (else ``$PERFLEDGER_DIR``, else the
    enclosing repository), never a file a live writer is writing; lock files are listed, never
    removed.

    Raises: NotALedger (exit 2) when the place is not a git repository."""
    path = find_ledger_path(ledger_path)
    location = find_controldir(path)
    if location is None:
        raise NotALedger(
            f"{path} is not a ledger (not a git repository)",
            hint="`perfledger init DIR` makes a ledger; `--ledger PATH` names one",
        )
    return collect(location.controldir, dry_run=dry_run)


__all__ = ["collect_garbage"]
