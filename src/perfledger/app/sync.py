"""The sync use cases (``perfledger clone``, ``pull``, ``push``, ``sync``; SPEC.md section 2,
docs/sync.md): each verifies every event it brings in (:mod:`perfledger.ledger.sync` through
:class:`perfledger.api.Ledger`) and names the conflicts a merge made, with what each blocks and
the command that resolves it."""

from __future__ import annotations

import os
from typing import Any

import msgspec

from perfledger.api import Ledger
from perfledger.errors import PerfledgerError
from perfledger.ledger.remotes import list_remotes, tracking_ref

#: Exit code of a ``pull`` or ``sync`` that succeeded but joined concurrent decisions the rules
#: forbid together: the ledger now holds an unresolved conflict that blocks decisions until
#: ``perfledger resolve`` (0 done, 1-5 the errors of SPEC.md section 6).
CONFLICT_EXIT = 6

#: What each kind of conflict blocks until it is resolved.
CONFLICT_BLOCKS = {
    "champion": "champion selection, final audits and restores on its Target (R13)",
    "supersession": "every decision on the superseded Target (R1)",
    "reconciliation": "new experiments and champion selections on its Target (R14)",
    "duplicate_id": "decisions about the id both machines chose",
}


def remote_rows(ledger: Any) -> list[dict[str, Any]]:
    """``perfledger remote list``'s rows: each remote's ``name``, ``url`` and ``last_seen``
    (the ledger head its tracking ref holds, hex; None before a first pull)."""
    repo = ledger.store.repo
    rows = []
    for name, url in list_remotes(repo).items():
        ref = tracking_ref(name)
        seen = repo.refs[ref].decode() if ref in repo.refs else None
        rows.append({"name": name, "url": url, "last_seen": seen})
    return rows


def open_conflicts(ledger: Any) -> dict[str, Any]:
    """The ledger's unresolved conflicts by id (read from its folded state)."""
    state = ledger.state()
    conflicts = getattr(state, "conflicts", {})
    return {cid: c for cid, c in conflicts.items() if c.resolved_by is None}


def new_conflicts(before: dict[str, Any], ledger: Any) -> list[dict[str, Any]]:
    """The unresolved conflicts that were not there ``before`` (a pull's merge made them), each
    with what it blocks and the command that resolves it."""
    out = []
    for cid, c in open_conflicts(ledger).items():
        if cid in before:
            continue
        out.append(
            {
                "conflict_id": cid,
                "target_id": c.target_id,
                "kind": c.kind,
                "options": list(c.options),
                "event_ids": list(c.event_ids),
                "blocks": CONFLICT_BLOCKS.get(c.kind, "decisions on its Target"),
                "resolve": f"perfledger resolve --target {c.target_id} --conflict {cid} "
                f"--keep KEEP --reason TEXT  (KEEP: one of {', '.join(sorted(c.options))})",
            }
        )
    return out


class Cloned(msgspec.Struct, frozen=True):
    """A clone made: its absolute ``path`` and the pull-like ``result`` (new events, head)."""

    path: str
    result: Any


def default_clone_path(url: str) -> str:
    """Where ``clone URL`` puts the ledger without a PATH: the URL's last part, ``.git`` added
    (``ledger.git`` for a URL without one)."""
    base = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return base if base.endswith(".git") else (base or "ledger") + ".git"


def clone_ledger(
    url: str, path: str | None, *, remote: str = "origin", policy: Any = None
) -> Cloned:
    """Clone the ledger at ``url`` into ``path`` (default :func:`default_clone_path`), every event
    verified (and the checkpoint ``policy``'s checks passed) before the ledger ref is written.
    Raises: IntegrityError (a tampered or rewritten remote), BadRequest."""
    path = path if path is not None else default_clone_path(url)
    ledger, result = Ledger.clone(url, path, remote=remote, policy=policy)
    ledger.close()
    return Cloned(os.path.abspath(path), result)


def pull_ledger(
    ledger: Any, remote: str | None, *, policy: Any = None
) -> tuple[str, Any, list[dict[str, Any]]]:
    """Fetch ``remote``'s ledger (default origin) into the open ``ledger``, verify every new
    event and join it. Returns ``(the ledger's absolute path, the pull's result, the conflicts
    the merge made)`` (:func:`new_conflicts`). Raises: IntegrityError (nothing changes locally)."""
    before = open_conflicts(ledger)
    result = ledger.pull(remote, policy=policy)
    conflicts = new_conflicts(before, ledger) if result.new_events else []
    return os.path.abspath(ledger.path), result, conflicts


def push_ledger(ledger: Any, remote: str | None) -> tuple[str, Any]:
    """Push the open ``ledger`` to ``remote`` (default origin), fast-forward only. Returns
    ``(the ledger's absolute path, the push's result)``. Raises: ConcurrentAppend (exit 4: the
    remote has events this ledger has not seen; pull first)."""
    result = ledger.push(remote)
    return os.path.abspath(ledger.path), result


def sync_ledger(
    ledger: Any, remote: str | None, *, policy: Any = None
) -> tuple[str, Any, list[dict[str, Any]]]:
    """Pull then push ``remote`` (again when another machine pushed in between). Returns
    ``(the ledger's absolute path, the sync's result, the conflicts its pull made)``."""
    before = open_conflicts(ledger)
    result = ledger.sync(remote, policy=policy)
    conflicts = new_conflicts(before, ledger) if result.pull.new_events else []
    return os.path.abspath(ledger.path), result, conflicts


class ConflictsJoined(PerfledgerError):
    """A ``pull`` or ``sync`` that succeeded but joined concurrent decisions the rules forbid
    together (exit :data:`CONFLICT_EXIT`): each conflict named with what it blocks."""

    code = "conflicts_joined"
    exit_code = CONFLICT_EXIT


def raise_joined_conflicts(conflicts: list[dict[str, Any]]) -> None:
    """Raise :class:`ConflictsJoined` naming ``conflicts`` (what a pull joined), if any: the
    ``cli`` tool's answer to a pull whose CLI exits 6. Raises: ConflictsJoined."""
    if not conflicts:
        return
    listed = "; ".join(
        f"{c['kind']} {c['conflict_id']} on Target {c['target_id']}: the two machines chose "
        f"{' and '.join(c['options'])} (blocks: {c['blocks']})"
        for c in conflicts
    )
    raise ConflictsJoined(
        f"the pull joined {len(conflicts)} conflict(s): {listed}",
        hint="; ".join(c["resolve"] for c in conflicts),
    )


__all__ = [
    "CONFLICT_BLOCKS",
    "CONFLICT_EXIT",
    "Cloned",
    "ConflictsJoined",
    "clone_ledger",
    "default_clone_path",
    "new_conflicts",
    "open_conflicts",
    "pull_ledger",
    "push_ledger",
    "raise_joined_conflicts",
    "sync_ledger",
]
