"""The A/A resolution's rules at the application edge (R4, R12; docs/measurement.md): the
warnings a resolution gets, the refusal of one that no verdict could pass against, and a kernel
spec's minimum of valid A/A comparisons. Used by ``measure aa`` (and any adapter that records a
resolution)."""

from __future__ import annotations

import math
import os
from typing import Any

from perfledger.commands.workflow import rules
from perfledger.derive.units import UNITS_PER_SECOND


def resolution_warnings(resolution: float, target: Any, record: bool) -> list[str]:
    """Warnings about an A/A resolution (R4, R12) for ``target`` (a TargetView): a resolution at
    or above the Target's minimum effect lets no verdict pass (the threshold is
    max(minimum effect, resolution)); a recorded resolution supersedes the one recorded before.
    ``resolution`` is a ratio. Returns: the warning lines (possibly none)."""
    out: list[str] = []
    min_effect = target.definition.min_effect
    if resolution >= min_effect:
        out.append(
            f"resolution {100 * resolution:.2f} % >= the Target's minimum effect "
            f"{100 * min_effect:.2f} %: no verdict can pass against it (a pass needs the CI's "
            "lower end above max(minimum effect, resolution)); "
            + (
                "recorded as asked (--accept-resolution): a new `measure aa --record` with more "
                "--runs, or on a quieter machine, replaces it"
                if record
                else "measure with more --runs or on a quieter machine before recording it"
            )
        )
    previous = target.resolution
    if previous is not None:
        verb = "supersedes" if record else "would supersede (with --record)"
        out.append(
            f"this resolution {verb} the one recorded earlier for Target "
            f"{target.definition.target_id!r}: {100 * previous.resolution:.2f} % from "
            f"{previous.repeats} repeats; verdicts use the latest recorded resolution"
        )
    return out


#: The 1-minute load average per CPU at or above which R4's refusal calls the host loaded.
LOADED_HOST = 0.5


def kernel_aa_pairs_check(figures_by_case: dict[str, dict[str, float]], record: bool) -> list[str]:
    """R4: a kernel spec's resolution is not recorded from fewer than two valid A/A comparisons
    in any case: each comparison is one pair of workers, whose own bias only the spread of
    several pairs bounds (:func:`perfledger.kernels.harness.harness.resolution_from_aa`).

    Args:
        figures_by_case: case -> :func:`~perfledger.kernels.harness.harness.resolution_from_aa`'s
            figures (``repeats``: valid comparisons, ``excluded``: invalid ones).
        record: ``--record`` was asked (else the short cases are only noted).
    Returns: a note per short case (nothing recorded: the resolution's bound is missing).
    Raises: RuleRefused (R4, exit 3) when recording with a short case; nothing is appended.
    """
    short = sorted(c for c, f in figures_by_case.items() if f["repeats"] < 2)
    if record and short:
        invalid = {c: int(figures_by_case[c]["excluded"]) for c in short}
        raise rules.refuse(
            "R4",
            "a kernel spec's A/A resolution needs at least 2 valid A/A comparisons per case "
            f"(one valid in case(s) {short}; invalid: {invalid}): each runs on a fresh pair of "
            "worker processes, whose own bias one comparison's CI does not show; the "
            "resolution bounds the next pair's from the spread of several",
            hint="measure again (`--runs 5`, the default, or more) on an idle GPU (an invalid "
            "comparison's flags say what went wrong: docs/kernel-harness.md); nothing was recorded",
        )
    return [
        f"case {c}: one valid A/A comparison: the bias of a pair of workers (R4's prediction "
        "bound) is unmeasured; run `measure aa --runs 5` or more"
        for c in short
    ]


#: The most ``--runs`` a resolution refusal suggests (beyond it, a quieter machine or a
#: load-immune metric is the better advice).
MAX_SUGGESTED_RUNS = 1000


def resolution_refusal(
    resolution: float,
    per_case: dict[str, float],
    target: Any,
    accept: bool,
    *,
    runs: int | None = None,
    workload: bool = True,
    load_per_cpu: float | None = None,
) -> None:
    """R4, R12: refuse to record a resolution at or above the Target's minimum effect (no
    verdict could then pass) unless ``accept`` (``--accept-resolution``); the message carries
    the figures (ratios, shown in percent and as the ratio recorded in ``resolution``).
    ``runs``: the ``--runs`` used (None: the default); ``workload``: a ``--cmd`` A/A (else a
    kernel spec's); ``load_per_cpu``: the host's 1-minute load average per CPU (None: read
    now). Raises: RuleRefused (exit 3)."""
    min_effect = float(target.definition.min_effect)
    if accept or resolution < min_effect:
        return
    cases = ", ".join(f"{c} {100 * r:.2f} % (ratio {r:.4f})" for c, r in sorted(per_case.items()))
    # what a "run" is, and its default, so the hint can be followed without reading --help
    if workload:
        what = (
            "--runs N (A/A ABBA pairs per case; default: a stopping rule from 10, more until "
            f"the resolution is half the minimum effect, at most 60; this A/A used {runs or 10})"
        )
    else:
        what = f"--runs N (A/A harness comparisons per case; default 5, this A/A used {runs or 5})"
    used = runs or (10 if workload else 5)
    # a CI's width falls about as 1/sqrt(runs): the runs that would bring this one to half the
    # minimum effect (a guess from one A/A's spread, never a promise)
    suggested = min(MAX_SUGGESTED_RUNS, math.ceil(used * (resolution / (0.5 * min_effect)) ** 2))
    hint = (
        f"measure again with more {what}: about --runs {max(suggested, used + 1)} would bring "
        "this spread to half the minimum effect; or on a quieter machine, or pass "
        "--accept-resolution to record it anyway (no verdict could pass against it)"
    )
    primary = target.definition.primary
    if load_per_cpu is None:
        load_per_cpu = os.getloadavg()[0] / (os.cpu_count() or 1)
    wall_clock = primary.unit in UNITS_PER_SECOND and "cpu" not in primary.name.lower()
    if workload and wall_clock and load_per_cpu >= LOADED_HOST:
        # a wall-clock primary on a busy host: more runs rarely help, a load-immune metric does
        hint += (
            f"; the primary {primary.name!r} ({primary.unit}) is a wall-clock time and this host "
            f"is loaded ({load_per_cpu:.2f} load per CPU): a metric the host's load cannot move, "
            "such as the process's own CPU time (cpu_time, which perfledger observes), on a "
            "new Target (target supersede), resolves far smaller effects"
        )
    raise rules.refuse(
        "R4",
        f"the A/A resolution {100 * resolution:.2f} % (ratio {resolution:.4f}; per case: "
        f"{cases or 'n/a'}) is at or above the Target's minimum effect {100 * min_effect:.2f} % "
        f"(ratio {min_effect:.4f}): an effect of the minimum size could never pass (R12 needs "
        "the CI's lower end above both); nothing was recorded",
        hint,
    )


__all__ = ["kernel_aa_pairs_check", "resolution_refusal", "resolution_warnings"]
