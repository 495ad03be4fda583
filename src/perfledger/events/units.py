"""The closed vocabulary of metric units (R1; from ``TargetFrozen`` and ``TargetSuperseded``
schema :data:`~perfledger.events.workflow.R1_KNOWN_UNITS`).

A unit perfledger has no entry for cannot be checked: a spelling of milliseconds it did not know
(``msec``) silently took a time metric out of the wall-clock check (R12). So a Target's metrics
are in one of these units, and an unknown one is refused when the Target is frozen, with the
list:

- a time: ``s``, ``ms``, ``us``, ``µs``, ``ns``;
- a quantity: a count of work (``tokens``, ``items``, ...), bytes (``byte``, ``MB``, ``GiB``,
  ...), floating-point operations, energy and power, or a dimensionless ratio (``ratio``,
  ``%``, ``1``, ``x``);
- a rate, ``<quantity>/<time>`` (``tokens/s``, ``GB/s``), or a time per unit of work,
  ``<time>/<quantity>`` (``ms/token``).

Imports: the standard library only.
"""

from __future__ import annotations

#: Units of time.
TIME_UNITS = ("s", "ms", "us", "µs", "ns")
#: Dimensionless units.
RATIO_UNITS = ("ratio", "%", "1", "x")
#: Units of a quantity of work, memory, operations or energy.
QUANTITY_UNITS = (
    "count", "calls", "call", "items", "item", "elements", "element", "rows", "row",
    "samples", "sample", "tokens", "token", "requests", "request", "queries", "query",
    "images", "image", "frames", "frame", "steps", "step", "iterations", "iteration",
    "batches", "batch", "sequences", "sequence", "instructions", "cycles",
    "byte", "bytes", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
    "flop", "FLOP", "GFLOP", "TFLOP", "PFLOP", "J", "mJ", "kJ", "Wh", "W", "mW", "kW",
    "MHz", "GHz", "degC",
)  # fmt: skip


def known_unit(unit: str) -> bool:
    """True when ``unit`` is in the vocabulary (module docstring)."""
    if unit in TIME_UNITS or unit in RATIO_UNITS or unit in QUANTITY_UNITS:
        return True
    top, sep, bottom = unit.partition("/")
    if not sep:
        return False
    return (top in QUANTITY_UNITS and bottom in TIME_UNITS) or (
        top in TIME_UNITS and bottom in QUANTITY_UNITS
    )


def vocabulary() -> str:
    """The vocabulary in one line, for a refusal's message."""
    return (
        f"times {', '.join(TIME_UNITS)}; ratios {', '.join(RATIO_UNITS)}; quantities "
        f"{', '.join(QUANTITY_UNITS)}; rates <quantity>/<time> (tokens/s) and times per work "
        "<time>/<quantity> (ms/token)"
    )


__all__ = ["QUANTITY_UNITS", "RATIO_UNITS", "TIME_UNITS", "known_unit", "vocabulary"]
