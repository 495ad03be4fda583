"""Rule versions that can only rise (SPEC.md section 2; the versioned rules of
:data:`perfledger.events.workflow.SCHEMA_VERSIONS`).

An event's ``schema`` tells the auditor which version of its rule to re-decide it by (a
``ChampionSelected`` of schema 1 is not blocked by an owed reconciliation, R14; a
``SamplesRecorded`` of schema 2 need not be bound to its raw table, R5). The schema is inside the
hashed envelope, but someone who rewrites history recomputes the hashes: lowering it would make
the auditor apply the older, weaker rule to a forged decision.

No honest writer lowers it. An append always records its kind's current version, and a
perfledger that meets an event of a version newer than it knows refuses to read the ledger
(:func:`perfledger.events.kinds.upcast`), so it cannot decide anything after it. Hence, along
every path of the DAG, the code that wrote an event is at least as new as the code that wrote
each of its ancestors, and an event of kind ``K`` recorded under schema ``v`` shows that its
writer recorded every kind at least at the version that kind had in *every* perfledger release
that knew ``K`` at ``v`` (:data:`IMPLIES`). An event whose schema is below what its ancestors
show is a finding naming the ancestor that shows it.

Limit: a versioned event with no versioned event before it (the first ``ReadinessRecorded`` of
a ledger, say) shows nothing to compare with; lowering its version is not detectable here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: (kind, schema) -> the smallest version of each other kind in every perfledger commit whose
#: code records ``kind`` at ``schema`` (the element-wise minimum over all those commits, so the
#: table holds whatever order parallel branches merged in). Generated from the repository's
#: history of ``events/workflow.py`` by ``python tools/schema_implies.py``: run it after bumping
#: a version and paste its output here; ``tests/audit/test_schema_implies_history.py`` fails
#: when a row asks more than the history shows or a version has no row.
IMPLIES: dict[tuple[str, int], dict[str, int]] = {
    ("ActivityExplained", 2): {"ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 8, "VerdictRecorded": 4},
    ("ActivityExplained", 3): {"ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 7, "ReadinessRecorded": 4, "ResolutionEstimated": 3, "SamplesRecorded": 11, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 6},
    ("BaselineRecorded", 2): {"ActivityExplained": 3, "ChampionSelected": 7, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("BaselineRecorded", 3): {"ActivityExplained": 3, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 14, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "TargetSuperseded": 4, "VerdictRecorded": 11},
    ("ChampionSelected", 2): {"ExperimentCreated": 2, "FinalAuditRecorded": 2, "SamplesRecorded": 2, "VerdictRecorded": 2},
    ("ChampionSelected", 3): {"ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 7, "VerdictRecorded": 4},
    ("ChampionSelected", 4): {"ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 8, "VerdictRecorded": 4},
    ("ChampionSelected", 5): {"ActivityExplained": 3, "ExperimentCreated": 7, "FinalAuditRecorded": 8, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 12, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("ChampionSelected", 6): {"ActivityExplained": 3, "ExperimentCreated": 8, "FinalAuditRecorded": 9, "FormalRunStarted": 2, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("ChampionSelected", 7): {"ActivityExplained": 3, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("ChampionSelected", 8): {"ActivityExplained": 3, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 2, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("ExperimentCreated", 2): {"ChampionSelected": 2, "FinalAuditRecorded": 2, "SamplesRecorded": 2, "VerdictRecorded": 2},
    ("ExperimentCreated", 3): {"ChampionSelected": 2, "FinalAuditRecorded": 2, "SamplesRecorded": 2, "VerdictRecorded": 2},
    ("ExperimentCreated", 4): {"ChampionSelected": 2, "FinalAuditRecorded": 4, "ReadinessRecorded": 2, "SamplesRecorded": 6, "VerdictRecorded": 3},
    ("ExperimentCreated", 5): {"ActivityExplained": 2, "ChampionSelected": 4, "FinalAuditRecorded": 6, "HandoffRecorded": 2, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 2, "SamplesRecorded": 11, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 4},
    ("ExperimentCreated", 6): {"ActivityExplained": 2, "ChampionSelected": 4, "FinalAuditRecorded": 6, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("ExperimentCreated", 7): {"ActivityExplained": 2, "ChampionSelected": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("ExperimentCreated", 8): {"ActivityExplained": 3, "ChampionSelected": 6, "FinalAuditRecorded": 9, "FormalRunStarted": 2, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("FinalAuditRecorded", 2): {"SamplesRecorded": 2, "VerdictRecorded": 2},
    ("FinalAuditRecorded", 3): {"ChampionSelected": 2, "ExperimentCreated": 3, "SamplesRecorded": 2, "VerdictRecorded": 3},
    ("FinalAuditRecorded", 4): {"ChampionSelected": 2, "ExperimentCreated": 3, "ReadinessRecorded": 2, "SamplesRecorded": 4, "VerdictRecorded": 3},
    ("FinalAuditRecorded", 5): {"ChampionSelected": 2, "ExperimentCreated": 4, "ReadinessRecorded": 4, "SamplesRecorded": 6, "VerdictRecorded": 4},
    ("FinalAuditRecorded", 6): {"ChampionSelected": 3, "ExperimentCreated": 4, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 7, "VerdictRecorded": 4},
    ("FinalAuditRecorded", 7): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "ReadinessRecorded": 4, "ResolutionEstimated": 3, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 6},
    ("FinalAuditRecorded", 8): {"ActivityExplained": 3, "ChampionSelected": 5, "ExperimentCreated": 7, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 12, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("FinalAuditRecorded", 9): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FormalRunStarted": 2, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("FinalAuditRecorded", 10): {"ActivityExplained": 3, "ChampionSelected": 4, "ExperimentCreated": 7, "HandoffRecorded": 4, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 12, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("FinalAuditRecorded", 11): {"ActivityExplained": 3, "ChampionSelected": 7, "ExperimentCreated": 8, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("FinalAuditRecorded", 12): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("FinalAuditRecorded", 13): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "TargetSuperseded": 4, "VerdictRecorded": 10},
    ("FinalAuditRecorded", 14): {"ActivityExplained": 3, "BaselineRecorded": 3, "ChampionSelected": 8, "ExperimentCreated": 8, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "TargetSuperseded": 4, "VerdictRecorded": 11},
    ("FormalRunStarted", 2): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FinalAuditRecorded": 9, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("HandoffRecorded", 2): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 5, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 2, "SamplesRecorded": 11, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 4},
    ("HandoffRecorded", 3): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 6, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("HandoffRecorded", 4): {"ActivityExplained": 3, "ChampionSelected": 4, "ExperimentCreated": 7, "FinalAuditRecorded": 7, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 12, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("ReadinessRecorded", 2): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 2, "SamplesRecorded": 2, "VerdictRecorded": 2},
    ("ReadinessRecorded", 3): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 4, "SamplesRecorded": 5, "VerdictRecorded": 3},
    ("ReadinessRecorded", 4): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "SamplesRecorded": 6, "VerdictRecorded": 4},
    ("ReadinessRecorded", 5): {"ActivityExplained": 3, "ChampionSelected": 5, "ExperimentCreated": 7, "FinalAuditRecorded": 8, "HandoffRecorded": 3, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 12, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("ReadinessRecorded", 6): {"ActivityExplained": 3, "ChampionSelected": 7, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("ReconciliationRecorded", 2): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 5, "FinalAuditRecorded": 6, "HandoffRecorded": 2, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 11, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 4},
    ("ResolutionEstimated", 2): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "SamplesRecorded": 6, "VerdictRecorded": 4},
    ("ResolutionEstimated", 3): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 7, "ReadinessRecorded": 4, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 6},
    ("ResolutionEstimated", 4): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FinalAuditRecorded": 10, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 5, "ReconciliationRecorded": 2, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("ReviewRecorded", 2): {"ActivityExplained": 3, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("ReviewRecorded", 3): {"ActivityExplained": 3, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "SamplesRecorded": 14, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("SamplesRecorded", 2): {"FinalAuditRecorded": 2, "VerdictRecorded": 2},
    ("SamplesRecorded", 3): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 2, "VerdictRecorded": 2},
    ("SamplesRecorded", 4): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 3, "ReadinessRecorded": 2, "VerdictRecorded": 3},
    ("SamplesRecorded", 5): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 4, "ReadinessRecorded": 2, "VerdictRecorded": 3},
    ("SamplesRecorded", 6): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 4, "ReadinessRecorded": 2, "VerdictRecorded": 3},
    ("SamplesRecorded", 7): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "VerdictRecorded": 4},
    ("SamplesRecorded", 8): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "VerdictRecorded": 4},
    ("SamplesRecorded", 9): {"ChampionSelected": 3, "ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "VerdictRecorded": 4},
    ("SamplesRecorded", 10): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("SamplesRecorded", 11): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "TargetFrozen": 2, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("SamplesRecorded", 12): {"ActivityExplained": 3, "ChampionSelected": 4, "ExperimentCreated": 7, "FinalAuditRecorded": 7, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 7},
    ("SamplesRecorded", 13): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FinalAuditRecorded": 9, "FormalRunStarted": 2, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("SamplesRecorded", 14): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FinalAuditRecorded": 10, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 5, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 8},
    ("SamplesRecorded", 15): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 12, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "TargetFrozen": 3, "TargetSuperseded": 3, "VerdictRecorded": 9},
    ("TargetFrozen", 2): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 7, "TargetSuperseded": 2, "VerdictRecorded": 4},
    ("TargetFrozen", 3): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 5, "FinalAuditRecorded": 6, "HandoffRecorded": 2, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 2, "SamplesRecorded": 11, "TargetSuperseded": 3, "VerdictRecorded": 4},
    ("TargetFrozen", 4): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 12, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetSuperseded": 4, "VerdictRecorded": 9},
    ("TargetSuperseded", 2): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 7, "TargetFrozen": 2, "VerdictRecorded": 4},
    ("TargetSuperseded", 3): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 5, "FinalAuditRecorded": 6, "HandoffRecorded": 2, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 2, "SamplesRecorded": 11, "TargetFrozen": 3, "VerdictRecorded": 4},
    ("TargetSuperseded", 4): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 12, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "VerdictRecorded": 9},
    ("VerdictRecorded", 2): {"FinalAuditRecorded": 2, "SamplesRecorded": 2},
    ("VerdictRecorded", 3): {"ChampionSelected": 2, "ExperimentCreated": 3, "FinalAuditRecorded": 3, "SamplesRecorded": 2},
    ("VerdictRecorded", 4): {"ChampionSelected": 2, "ExperimentCreated": 4, "FinalAuditRecorded": 5, "ReadinessRecorded": 4, "SamplesRecorded": 6},
    ("VerdictRecorded", 6): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 7, "ReadinessRecorded": 4, "ResolutionEstimated": 3, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2},
    ("VerdictRecorded", 7): {"ActivityExplained": 2, "ChampionSelected": 4, "ExperimentCreated": 4, "FinalAuditRecorded": 6, "ReadinessRecorded": 4, "ResolutionEstimated": 2, "SamplesRecorded": 10, "TargetFrozen": 2, "TargetSuperseded": 2},
    ("VerdictRecorded", 8): {"ActivityExplained": 3, "ChampionSelected": 6, "ExperimentCreated": 8, "FinalAuditRecorded": 9, "FormalRunStarted": 2, "HandoffRecorded": 3, "ReadinessRecorded": 4, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3},
    ("VerdictRecorded", 9): {"ActivityExplained": 3, "ChampionSelected": 7, "ExperimentCreated": 8, "FinalAuditRecorded": 11, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 3, "SamplesRecorded": 13, "TargetFrozen": 3, "TargetSuperseded": 3},
    ("VerdictRecorded", 10): {"ActivityExplained": 3, "BaselineRecorded": 2, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 13, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "TargetSuperseded": 4},
    ("VerdictRecorded", 11): {"ActivityExplained": 3, "BaselineRecorded": 3, "ChampionSelected": 8, "ExperimentCreated": 8, "FinalAuditRecorded": 14, "FormalRunStarted": 2, "HandoffRecorded": 4, "ReadinessRecorded": 6, "ReconciliationRecorded": 2, "ResolutionEstimated": 4, "ReviewRecorded": 3, "SamplesRecorded": 15, "TargetFrozen": 4, "TargetSuperseded": 4},
}  # fmt: skip


@dataclass(frozen=True)
class Shown:
    """What an ancestor shows of its writer's code: ``version`` of some kind at least, because
    event ``event_id`` (of ``kind``, recorded under ``schema``) was written by it."""

    version: int
    event_id: str
    kind: str
    schema: int


#: kind -> the highest version the events up to some point show (the shared empty floor).
Floor = dict[str, Shown]
EMPTY: Floor = {}


def merge(floors: Iterable[Floor]) -> Floor:
    """The element-wise highest of ``floors`` (an event's parents'); shares the object when
    one holds them all (a linear history costs no copy)."""
    merged: Floor | None = None
    for floor in floors:
        if merged is None:
            merged = floor
            continue
        if floor is merged:
            continue
        higher = {k: s for k, s in floor.items() if s.version > merged.get(k, _NONE).version}
        if higher:
            merged = {**merged, **higher}
    return EMPTY if merged is None else merged


def check(floor: Floor, kind: str, schema: int) -> Shown | None:
    """The ancestor showing that ``kind`` should be recorded under a version above ``schema``,
    or None when ``schema`` is at or above what ``floor`` shows."""
    shown = floor.get(kind)
    return shown if shown is not None and schema < shown.version else None


def after(floor: Floor, event_id: str, kind: str, schema: int) -> Floor:
    """The floor of the events descending from ``event_id`` (``kind`` recorded under
    ``schema``), given ``floor``, its ancestors'. Unchanged (the same object) when it shows
    nothing new."""
    if schema <= 1:
        return floor
    implied = {kind: schema, **IMPLIES.get((kind, schema), {})}
    higher = {
        k: Shown(v, event_id, kind, schema)
        for k, v in implied.items()
        if v > floor.get(k, _NONE).version
    }
    return {**floor, **higher} if higher else floor


_NONE = Shown(1, "", "", 1)
