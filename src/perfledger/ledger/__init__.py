"""Storage: the git-backed event store, its in-memory twin, order, verification and cache.

Knows nothing of the workflow's rules (SPEC.md section 1).
"""

from perfledger.ledger.base import Artifact, EventDraft, EventStore, HeadView
from perfledger.ledger.store import FORMAT_VERSION, LEDGER_REF, GitStore

__all__ = [
    "FORMAT_VERSION",
    "LEDGER_REF",
    "Artifact",
    "EventDraft",
    "EventStore",
    "GitStore",
    "HeadView",
]
