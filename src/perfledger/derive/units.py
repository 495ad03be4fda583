"""Units of time-like metrics, rates and times per unit of work: the tables every check that
turns a recorded value into seconds uses (R12's wall check, the raw table, the measurement
rules).

Imports: standard library only.
"""

from __future__ import annotations

#: Units of a time-like metric per second (``value_in_unit = seconds * UNITS_PER_SECOND[unit]``).
UNITS_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}
#: Seconds per unit of a time-like metric.
SECONDS_PER_UNIT = {unit: 1.0 / per_s for unit, per_s in UNITS_PER_SECOND.items()}


def rate_seconds(unit: str) -> float | None:
    """Seconds per unit of a rate's time denominator: ``tokens/s`` -> 1.0, ``items/ms`` ->
    0.001; None when ``unit`` is not ``<work>/<s|ms|us|µs|ns>``."""
    work, sep, per = unit.rpartition("/")
    if not sep or not work.strip():
        return None
    return SECONDS_PER_UNIT.get(per.strip())


def time_per_work_seconds(unit: str) -> float | None:
    """Seconds per unit of the time numerator of a time per unit of work (the inverse of a
    rate): ``ms/token`` -> 0.001; None when ``unit`` is not ``<s|ms|us|µs|ns>/<work>`` (a time
    over a time is a ratio)."""
    per, sep, work = unit.partition("/")
    work = work.strip()
    if not sep or not work or work in SECONDS_PER_UNIT:
        return None
    return SECONDS_PER_UNIT.get(per.strip())


def work_unit(unit: str) -> str | None:
    """The work of a rate or a time per work: ``tokens/s`` and ``ms/tokens`` -> ``tokens``;
    None for any other unit."""
    if rate_seconds(unit) is not None:
        return unit.rpartition("/")[0].strip()
    if time_per_work_seconds(unit) is not None:
        return unit.partition("/")[2].strip()
    return None


__all__ = [
    "SECONDS_PER_UNIT",
    "UNITS_PER_SECOND",
    "rate_seconds",
    "time_per_work_seconds",
    "work_unit",
]
