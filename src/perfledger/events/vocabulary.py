"""Every event kind perfledger records: importing this module registers the workflow's kinds
(:mod:`perfledger.events.workflow`), the kernel-iteration loop's (R19-R25,
:mod:`perfledger.events.loop`) and the review records (:mod:`perfledger.events.review`).
"""

from __future__ import annotations

from perfledger.events import review as _review  # noqa: F401  (registers on import)
from perfledger.events.loop import LOOP_DECISION_KINDS
from perfledger.events.workflow import WORKFLOW_DECISION_KINDS

#: Kinds that record a decision: appended only through their operation's decider
#: (:mod:`perfledger.commands.registry.operations`), never through the raw ``Ledger.append``.
DECISION_KINDS = WORKFLOW_DECISION_KINDS | LOOP_DECISION_KINDS | {"ReviewRecorded"}

__all__ = ["DECISION_KINDS"]
