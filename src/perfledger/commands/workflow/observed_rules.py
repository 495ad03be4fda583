"""Observed metrics are perfledger's alone (R5, R12; SPEC.md section 5, "Workload worker
protocol"; from ``SamplesRecorded`` schema
:data:`~perfledger.events.workflow.R5_OBSERVED_METRICS`).

``wall_time`` and ``cpu_time`` (:data:`~perfledger.events.workflow.OBSERVED_METRICS`) are what
perfledger itself observes of every call under the worker or command protocol: its own
monotonic clock and the kernel's CPU accounting of the subject's process tree. So:

- samples of a Target whose primary is an observed metric come from an observing protocol
  (:data:`~perfledger.events.workflow.OBSERVING_PROTOCOLS`), never from a subject's own timer,
  a typed table or the self-timed driver;
- samples measured any other way carry no value of an observed metric: a subject cannot report
  one;
- an observed metric's unit is a time unit;
- samples of an observing protocol need no wall-clock check: their values are the clock
  (:func:`observing`).

Imports: events and the commands' rules (a workflow module; no ledger, no kernels).
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import OBSERVED_METRICS, OBSERVED_UNITS, OBSERVING_PROTOCOLS


def observing(req: Any) -> bool:
    """True when the samples ``req`` name an observing protocol in their provenance."""
    provenance = getattr(req, "provenance", None)
    return (
        provenance is not None
        and provenance.source == "perfledger"
        and provenance.protocol in OBSERVING_PROTOCOLS
    )


def check_samples(definition: Any, req: Any) -> None:
    """The rules of the module docstring on a ``samples.record`` request ``req`` of a Target
    whose definition is ``definition``. Raises: RuleRefused (R5)."""
    for name, unit in req.units.items():
        if name in OBSERVED_METRICS and unit not in OBSERVED_UNITS:
            raise refuse(
                "R5",
                f"{name!r} is observed time; its unit {unit!r} is not one of {list(OBSERVED_UNITS)}",
                f"record it in one of {list(OBSERVED_UNITS)}",
            )
    if observing(req):
        return
    protocol = req.provenance.protocol if req.provenance is not None else "outside"
    primary = definition.primary.name
    if primary in OBSERVED_METRICS:
        raise refuse(
            "R5",
            f"the Target's primary {primary!r} is observed by perfledger (its own clock and the "
            "kernel's CPU accounting of every call); these samples were not measured by an "
            f"observing protocol ({protocol or 'none'}; observing: {list(OBSERVING_PROTOCOLS)})",
            "measure with `perfledger measure workload --protocol worker` (or `command`)",
        )
    reported = sorted(
        {
            name
            for pair in req.pairs
            for side in (pair.ref, pair.cand)
            for name in side.values
            if name in OBSERVED_METRICS
        }
    )
    if reported:
        raise refuse(
            "R5",
            f"values of {reported}, which only perfledger observes, in samples not measured by "
            f"an observing protocol ({protocol or 'none'}): a subject cannot report them",
            "report your own figures under another name; they stay self-reported",
        )


__all__ = ["check_samples", "observing"]
