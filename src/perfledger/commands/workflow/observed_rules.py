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
  (:func:`observing`);
- a figure a subject reports is secondary only (``ReadinessRecorded`` schema
  :data:`~perfledger.events.workflow.R5_OBSERVED_PRIMARY_READINESS`, :func:`check_readiness`):
  a workload Target whose primary is not observed is not made ready.

Imports: events, the Target's kind (projections) and the commands' rules (a workflow module;
no ledger, no kernels).
"""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow.rules import refuse
from perfledger.commands.workflow.serving_record import metric_kind
from perfledger.events.workflow import OBSERVED_METRICS, OBSERVED_UNITS, OBSERVING_PROTOCOLS
from perfledger.projections.target_kind import driver_kind

#: A unit suffix a metric's name may carry (``ttft_ms``).
_SUFFIXES = ("_ms", "_us", "_ns", "_s")


def serving_primary(name: str) -> bool:
    """True when ``name`` names a metric perfledger's serving client observes of every request
    or window (``ttft``, ``tpot``, ``e2e``, ``output_tokens_per_s``, ``requests_per_s``, a unit
    suffix aside). A bare ``latency`` is not one: any workload reports a latency of its own (a
    serving Target names its end-to-end latency ``e2e_ms``)."""
    base = name.lower()
    for suffix in _SUFFIXES:
        if base.endswith(suffix) and metric_kind(base[: -len(suffix)], {}) is not None:
            base = base[: -len(suffix)]
            break
    return base != "latency" and metric_kind(name, {}) is not None


def check_readiness(definition: Any, req: Any) -> None:
    """R5 at readiness (from ``ReadinessRecorded`` schema
    :data:`~perfledger.events.workflow.R5_OBSERVED_PRIMARY_READINESS`): a readiness whose driver
    is a workload driver (not the kernel harness, whose parent process times every batch, and
    not a serving Target's, whose client times every request) for a Target whose primary is not
    an observed metric is refused: that primary is a figure the subject reports, and a figure a
    subject reports never decides a verdict or a champion; so is an observed primary in a unit
    that is not a time (a rate or a count under perfledger's name). A diagnostic Target (it
    binds reports, never decides) and a readiness without a driver are not checked here.

    Args:
        definition: the Target's definition; req: the ``readiness.record`` request.
    Raises: RuleRefused (R5) naming the primary, the observed metrics and what to do.
    """
    primary, unit = definition.primary.name, definition.primary.unit
    if definition.diagnostic:
        return
    if primary in OBSERVED_METRICS and unit not in OBSERVED_UNITS:
        raise refuse(
            "R5",
            f"Target {definition.target_id!r}'s primary {primary!r} is observed time; its unit "
            f"{unit!r} is not one of {list(OBSERVED_UNITS)}: perfledger's clock gives no other",
            f"supersede the Target with {primary!r} in one of {list(OBSERVED_UNITS)} "
            "(`perfledger target supersede --request FILE`)",
        )
    driver = getattr(req, "driver", None)
    if driver is None or driver_kind(driver.argv) == "kernel":
        return
    if primary in OBSERVED_METRICS or serving_primary(primary):
        return
    raise refuse(
        "R5",
        f"Target {definition.target_id!r}'s primary {primary!r} is a figure the workload "
        "reports itself; only what perfledger observes of every call decides a verdict or a "
        f"champion (observed metrics: {sorted(OBSERVED_METRICS)}: its own clock and the "
        "kernel's CPU accounting of the subject's processes)",
        'freeze a Target whose primary is `wall_time` or `cpu_time` (e.g. {"name": "wall_time", '
        '"unit": "ms", ...}; `perfledger target supersede --request FILE`), and record the '
        f"subject's own figures ({primary!r}) as secondary metrics: shown, labelled reported",
    )


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


__all__ = ["check_readiness", "check_samples", "observing", "serving_primary"]
