"""The units of a Target's metrics, as the measuring use cases record them with samples (R12's
wall-clock check of rates; SPEC.md section 5)."""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.deciders import work_metrics
from perfledger.derive.units import work_unit


def target_units(target: Any) -> dict[str, str]:
    """The Target's metrics with their units: the primary, then guardrails and secondaries
    (the first unit named wins)."""
    d = target.definition
    units = {d.primary.name: d.primary.unit}
    for g in d.guardrails:
        units.setdefault(g.metric, g.unit)
    for s in d.secondaries:
        units.setdefault(s.name, s.unit)
    return units


def work_units(target: Any) -> dict[str, str]:
    """The work metrics the Target's rates name (R12's wall-clock check of rates), each in the
    rate's work unit (``tokens`` of ``tokens/s``): recorded with the samples so the check (and
    the auditor) can turn each rate into time."""

    units = target_units(target)
    return {
        work: work_unit(units[rate]) or units[rate]
        for rate, work in work_metrics(target.definition).items()
    }


__all__ = ["target_units", "work_units"]
