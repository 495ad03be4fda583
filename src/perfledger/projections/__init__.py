"""Projections: pure folds of events into read models (SPEC.md section 1).

Projections take events, not a store: they import neither ``ledger`` nor ``commands`` nor
``kernels``.
"""

from perfledger.projections.base import DEFAULT_PROJECTION, Projection, fold
from perfledger.projections.ledger_state import LedgerState, state_hash

__all__ = ["DEFAULT_PROJECTION", "LedgerState", "Projection", "fold", "state_hash"]
