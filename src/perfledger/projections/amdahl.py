"""Opportunity-claim arithmetic of SPEC.md R7: the Amdahl bound and what it takes to cross the
minimum effect. Pure functions on ratios; the tool checks the arithmetic and explicit
contradictions only, semantic judgment stays with the agent.

Notation (all ratios, all relative to the original's primary metric):

- ``f``: coverage, the share of the primary metric exposed on the critical path in the replaced
  component, ``0 < f <= 1``;
- ``s``: expected local speedup of that component (``s > 0``; ``s = 1.25`` is 25 % faster);
- ``c``: added cost that the change introduces elsewhere, as a share of the original (``c >= 0``);
- ``m``: the Target's minimum effect, as an end-to-end speedup ratio minus one (``m = 0.05``);
  a Target states it in the verdict's units (R12), converted by :func:`improvement_to_gain`
  for claims from ``ExperimentCreated`` schema 7 on (claims recorded before read it as stated).

End-to-end bound: ``S = 1 / ((1 - f) + f / s + c)``. Crossing the minimum effect (``S >= 1 + m``)
needs the component's time cut by ``r = 1 - 1/s`` of at least
``r_min = (m / (1 + m) + c) / f`` (SPEC.md's ``m / (f (1 + m))`` when ``c = 0``); it is impossible
when ``r_min > 1``, i.e. ``f <= m / (1 + m) + c``. A local gain ``g`` (``s = 1 + g``) converts as
``r = g / (1 + g)``.
"""

from __future__ import annotations

import math

#: Relative tolerance when checking a stated bound against its inputs (R7): a stated bound ``B``
#: follows from ``f``, ``s``, ``c`` when ``|B - 1/((1-f)+f/s+c)| <= 1e-6 * 1/((1-f)+f/s+c)``.
#: Stating the bound is optional (the tool computes it); a value rounded to 7 significant
#: digits is accepted.
STATED_BOUND_REL_TOLERANCE = 1e-6
#: The tolerance of claims recorded before the bound became optional (``ExperimentCreated``
#: schema versions 1 and 2): the stated bound was required, within a relative 1e-9.
LEGACY_STATED_BOUND_REL_TOLERANCE = 1e-9
#: The former name of :data:`LEGACY_STATED_BOUND_REL_TOLERANCE`.
BOUND_TOLERANCE = LEGACY_STATED_BOUND_REL_TOLERANCE


def amdahl_bound(coverage: float, local_speedup: float, added_cost: float = 0.0) -> float:
    """Return the end-to-end speedup bound ``1 / ((1 - f) + f / s + c)`` (a ratio, 1.0 = none).

    Raises: ValueError for coverage outside (0, 1], a non-positive speedup or a negative cost.
    """
    check_inputs(coverage, local_speedup, added_cost)
    return 1.0 / ((1.0 - coverage) + coverage / local_speedup + added_cost)


def check_inputs(coverage: float, local_speedup: float, added_cost: float) -> None:
    """Raise ValueError naming the first input that is out of range or not finite."""
    for name, value in (
        ("coverage", coverage),
        ("local_speedup", local_speedup),
        ("added_cost", added_cost),
    ):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if not 0.0 < coverage <= 1.0:
        raise ValueError(f"coverage f must lie in (0, 1], got {coverage}")
    if local_speedup <= 0.0:
        raise ValueError(f"local speedup s must be > 0, got {local_speedup}")
    if added_cost < 0.0:
        raise ValueError(f"added cost must be >= 0, got {added_cost}")


def improvement_to_gain(improvement: float, direction: str) -> float:
    """Convert an end-to-end improvement in the verdict's units (R12: ``(ref - cand)/ref`` for a
    lower-is-better metric, the fraction of time saved; ``(cand - ref)/ref`` for higher-is-better)
    into the bound's units, end-to-end speedup - 1: ``g/(1-g)`` for lower-is-better (``math.inf``
    for ``g >= 1``: the candidate would take no time), ``g`` itself for higher-is-better."""
    if direction != "lower_is_better":
        return improvement
    return math.inf if improvement >= 1.0 else improvement / (1.0 - improvement)


def gain_to_improvement(gain: float, direction: str) -> float:
    """The inverse of :func:`improvement_to_gain`: end-to-end speedup - 1 into the verdict's
    units, ``g/(1+g)`` for a lower-is-better metric (a speedup S cuts the time by ``1 - 1/S``),
    ``g`` itself for higher-is-better."""
    return gain / (1.0 + gain) if direction == "lower_is_better" else gain


def gain_to_cut(gain: float) -> float:
    """Convert a local gain ``g`` (speedup ratio minus one) into the cut fraction ``g / (1 + g)``."""
    return gain / (1.0 + gain)


def required_cut(coverage: float, min_effect: float, added_cost: float = 0.0) -> float | None:
    """Return ``r_min``, the fraction of the component's time that must be cut to reach ``1 + m``
    end to end; None when no cut can reach it (``r_min > 1``, or an infinite ``m``: a Target's
    minimum effect of all of the time saved)."""
    if math.isinf(min_effect):
        return None
    r_min = (min_effect / (1.0 + min_effect) + added_cost) / coverage
    return None if r_min > 1.0 else r_min


def required_local_speedup(
    coverage: float, min_effect: float, added_cost: float = 0.0
) -> float | None:
    """Return ``s_min = 1 / (1 - r_min)``: the local speedup needed to cross the minimum effect;
    ``math.inf`` when the whole component must vanish, None when even that is not enough."""
    r_min = required_cut(coverage, min_effect, added_cost)
    if r_min is None:
        return None
    return math.inf if r_min >= 1.0 else 1.0 / (1.0 - r_min)


def bound_matches(
    stated: float, computed: float, tolerance: float = STATED_BOUND_REL_TOLERANCE
) -> bool:
    """True when a stated bound equals the computed one within ``tolerance`` (relative; default
    :data:`STATED_BOUND_REL_TOLERANCE`)."""
    return math.isclose(stated, computed, rel_tol=tolerance, abs_tol=0.0)
