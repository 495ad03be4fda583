"""The A/A's environment against a formal stage's (R11: the reference watch's yardstick).

The reference watch compares each formal-stage case of the original with the A/A's per-case
medians (``ResolutionEstimated`` schema 4). Those medians are a yardstick only for runs made
under the same settings: an A/A measured with a variable that slows every Python process
(``PYTHONTRACEMALLOC=25`` made it 20x slower in a hostile review) reads slow, and a reference
slowed on purpose in a later stage then stays under it. :func:`check_aa_environment` refuses a
formal stage whose measuring process's influencing variables
(:func:`perfledger.kernels.workload.subject_env.influencing_environment`: the Python start-up,
the dynamic loader, threading and GPU libraries' settings) differ from those the A/A's raw
table recorded, naming them, before anything runs. An A/A whose table records none (typed, or
measured by an older perfledger) is not compared.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from perfledger.commands.workflow import rules
from perfledger.events.workflow import FORMAL_STAGES
from perfledger.kernels.workload.subject_env import influencing_environment

#: How many differing variables a refusal names.
NAMED_VARIABLES = 5


def _aa_table(ledger: Any, target: Any) -> dict[str, Any] | None:
    """The raw table of the Target's measured resolution (its A/A), or None."""
    resolution = target.measured_resolution
    name = getattr(resolution, "raw_table", msgspec.UNSET)
    if resolution is None or not isinstance(name, str) or not name:
        return None
    event_id = None
    for event in ledger.events():
        if event.kind == "ResolutionEstimated" and event.payload == resolution:
            event_id = event.envelope.id
    if event_id is None:
        return None
    try:
        table = json.loads(ledger.artifact(event_id, name))
    except (ValueError, KeyError, OSError):
        return None
    return table if isinstance(table, dict) else None


def environment_difference(recorded: dict[str, Any], now: dict[str, str]) -> list[str]:
    """The variables set differently in ``recorded`` (the A/A's) and ``now``, as
    ``NAME (A/A: value, now: value)`` (``unset`` where a side lacks it), sorted by name."""
    differ = []
    for name in sorted(set(recorded) | set(now)):
        before, after = recorded.get(name), now.get(name)
        if before != after:
            differ.append(f"{name} (A/A: {before if before is not None else 'unset'}, "
                          f"now: {after if after is not None else 'unset'})")  # fmt: skip
    return differ


def check_aa_environment(ledger: Any, target: Any, stage: str) -> None:
    """R11: a formal ``stage`` is measured under the influencing variables its Target's A/A was
    measured under (module docstring). Screens, Targets without a measured A/A, and A/A
    tables that record no environment are not concerned.
    Raises: RuleRefused (R11) naming the variables that differ."""
    if stage not in FORMAL_STAGES:
        return
    table = _aa_table(ledger, target)
    settings = table.get("settings") if table is not None else None
    recorded = settings.get("environment") if isinstance(settings, dict) else None
    if not isinstance(recorded, dict):
        return
    differ = environment_difference(recorded, influencing_environment())
    if not differ:
        return
    more = f" and {len(differ) - NAMED_VARIABLES} more" if len(differ) > NAMED_VARIABLES else ""
    raise rules.refuse(
        "R11",
        "this formal stage would run under other settings than the A/A whose medians are the "
        "reference watch's yardstick: "
        + "; ".join(differ[:NAMED_VARIABLES])
        + more
        + "; nothing was measured",
        "measure with the A/A's settings, or measure the A/A again under these "
        "(`perfledger measure aa --record`)",
    )


__all__ = ["check_aa_environment", "environment_difference"]
