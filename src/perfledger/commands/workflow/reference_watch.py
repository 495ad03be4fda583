"""The reference watched too (SPEC.md R11; issue 34): in a formal stage of a workload Target
whose reference is the original, the reference's measured figure of each case is compared with
the original's recorded baseline of that case. A reference slower than its baseline by more
than the bound (the largest of the case's A/A resolution, the prediction bound of one more
baseline call and the Target's minimum effect) makes the comparison invalid: something made the
reference slower (the candidate's side effect, a cache it poisoned, a background process it
left), and a candidate measured against a slowed reference looks faster than it is.

A slowed reference invalidates only what its slowing could have made: a case is flagged only
where the candidate's own figure does not clear the threshold (the larger of the minimum effect
and the case's resolution) against the reference's baseline either. The baseline's calls run in
a row and a formal stage interleaves the subjects, so an honest reference drifts from its
baseline (14 % on a quiet 2-core host in the CPU session's final audit); a candidate that beats
the baseline itself by more than the threshold owes its pass to no slowing.

Why the minimum effect is a floor: the baseline comes from the original's calls in a row, the
formal stage interleaves the two subjects, and that interference alone moves the reference (an
honest control here measured its reference 4.5 % above a 7-call baseline whose own bound was
3.2 %); a slowing below the minimum effect cannot by itself turn a candidate without a gain into
a pass, one above it can.

What is compared: per case, the median over the samples' pairs of the reference's per-pair
median of the primary, against the baseline's median of that case (``per_case_median``). The
two may come from different settings (the baseline's calls per case against the formal run's
pairs; the baseline driver against the formal protocol); the bound allows for the baseline's own
call-to-call spread, and a case the baseline did not measure (or a baseline recorded without
cases) is not compared. A kernel Target, and a reference that is a champion (no baseline of its
own), are not compared.

Pure functions; the samples decider records the flags (``SamplesRecorded`` schema
:data:`~perfledger.events.workflow.R11_REFERENCE_WATCHED`), the verdict and final-audit
deciders judge them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from perfledger.events.workflow import FORMAL_STAGES
from perfledger.projections.target_kind import target_kind
from perfledger.projections.verdicts import median
from perfledger.projections.workflow import TargetView


def baseline_bound(values: Iterable[float]) -> float:
    """The 95 % prediction bound of one more baseline call about the baseline's median, as a
    ratio distance from 1 (:func:`~perfledger.derive.stats.aa_prediction_bound` of the calls'
    log ratios to their median); 0.0 with fewer than 2 values."""
    calls = [float(v) for v in values]
    if len(calls) < 2:
        return 0.0
    from perfledger.derive.stats import aa_prediction_bound  # noqa: PLC0415 (numpy, scipy: off the start-up path of decisions that compare nothing)

    middle = median(calls)
    return aa_prediction_bound([math.log(v / middle) for v in calls])  # type: ignore[arg-type]


def reference_slowed(
    target: TargetView,
    stage: str,
    reference_kind: str,
    pairs: Iterable[Any],
    *,
    against_aa: bool = False,
) -> dict[str, dict[str, float]]:
    """The cases of formal-stage ``pairs`` whose reference (the original) was slower than the
    original's baseline by more than the bound: case -> ``reference`` and ``baseline`` (the
    primary's medians, in its unit), ``slower_by`` (relative: ``ref/base - 1`` for a
    lower-is-better primary, ``base/ref - 1`` for a higher-is-better one) and ``bound`` (the
    largest of the case's A/A resolution, :func:`baseline_bound` and the minimum effect).
    ``against_aa`` (``SamplesRecorded`` schema
    :data:`~perfledger.events.workflow.R11_WATCHED_AGAINST_AA_SAMPLES` on): each case is also
    compared with the A/A's median of that case (the resolution's ``per_case_median``) instead
    of the baseline, bound the larger of the case's resolution and the minimum effect; a case
    slower than it is flagged with ``reference``, ``aa_median``, ``aa_slower_by`` and
    ``aa_bound``; a case the A/A did not measure is compared with the baseline. Empty where nothing is compared (a screen, a champion reference, a kernel
    Target, no per-case baseline nor A/A median)."""
    baseline = target.baseline
    resolution = target.resolution_in_force
    if (
        stage not in FORMAL_STAGES
        or reference_kind != "original"
        or baseline is None
        or resolution is None
        or target_kind(target) == "kernel"
    ):
        return {}
    aa_medians = getattr(resolution, "per_case_median", None) if against_aa else None
    aa_medians = aa_medians if isinstance(aa_medians, dict) else {}
    if not baseline.per_case_median and not aa_medians:
        return {}
    primary = target.definition.primary
    per_case: dict[str, list[float]] = {}
    for pair in pairs:
        values = pair.ref.values.get(primary.name)
        if values:
            per_case.setdefault(pair.case, []).append(median(list(values)))
    calls: dict[str, list[float]] = {}
    for case, value in zip(baseline.cases, baseline.values, strict=False):
        calls.setdefault(case, []).append(value)
    cand_per_case: dict[str, list[float]] = {}
    for pair in pairs:
        values = pair.cand.values.get(primary.name)
        if values:
            cand_per_case.setdefault(pair.case, []).append(median(list(values)))
    flagged: dict[str, dict[str, float]] = {}
    for case, medians in sorted(per_case.items()):
        ref = float(median(medians))
        cands = cand_per_case.get(case)
        cand = float(median(cands)) if cands else None
        case_resolution = resolution.per_case.get(case, resolution.resolution)
        # a slowed reference invalidates only what its slowing could have made: a candidate
        # whose own figure does not clear the threshold against the yardstick either
        threshold = max(target.definition.min_effect, case_resolution)
        found: dict[str, float] = {}
        aa = aa_medians.get(case)
        has_aa = isinstance(aa, int | float) and aa > 0
        # the A/A, where it measured the case, is the yardstick instead of the baseline: it runs
        # the original as a formal stage does (interleaved workers), while the baseline's calls
        # run in a row, in place, and move with the host (an honest reference measured 2x its
        # baseline on a loaded host) or with a load the agent made while measuring it
        base = None if has_aa else (baseline.per_case_median or {}).get(case)
        if base is not None and base > 0:
            bound = max(case_resolution, baseline_bound(calls.get(case, [])),
                        target.definition.min_effect)  # fmt: skip
            slower_by = _slower_by(ref, base, primary.direction)
            if slower_by > bound and not _beats(cand, base, threshold, primary.direction):
                found = {"reference": ref, "baseline": float(base),
                         "slower_by": slower_by, "bound": bound}  # fmt: skip
        if has_aa:
            bound = max(case_resolution, target.definition.min_effect)
            slower_by = _slower_by(ref, float(aa), primary.direction)
            if slower_by > bound and not _beats(cand, float(aa), threshold, primary.direction):
                found = {**found, "reference": ref, "aa_median": float(aa),
                         "aa_slower_by": slower_by, "aa_bound": bound}  # fmt: skip
        if found:
            flagged[case] = found
    return flagged


def _slower_by(ref: float, yardstick: float, direction: str) -> float:
    """How much slower ``ref`` is than ``yardstick`` (relative; negative: faster)."""
    if direction == "higher_is_better":
        return yardstick / ref - 1.0 if ref > 0 else math.inf
    return ref / yardstick - 1.0


def _beats(cand: float | None, yardstick: float, threshold: float, direction: str) -> bool:
    """Whether the candidate's figure ``cand`` beats ``yardstick`` by more than ``threshold``."""
    if cand is None:
        return False
    if direction == "higher_is_better":
        gain = 1.0 - yardstick / cand if cand > 0 else -math.inf
    else:
        gain = 1.0 - cand / yardstick
    return gain > threshold


def _case_text(case: str, f: dict[str, float], unit: str) -> str:
    parts = []
    if "baseline" in f:
        parts.append(
            f"against its baseline {f['baseline']:.4g} {unit}, {f['slower_by'] * 100:.1f} % "
            f"slower (bound {f['bound'] * 100:.1f} %)"
        )
    if "aa_median" in f:
        parts.append(
            f"against its A/A {f['aa_median']:.4g} {unit}, {f['aa_slower_by'] * 100:.1f} % "
            f"slower (bound {f['aa_bound'] * 100:.1f} %)"
        )
    return f"{case}: reference {f['reference']:.4g} {unit} " + " and ".join(parts)


def invalid_note(flagged: dict[str, dict[str, float]], unit: str) -> str:
    """The verdict's (or final audit's) note on flagged samples, with the figures."""
    cases = "; ".join(_case_text(case, f, unit) for case, f in sorted(flagged.items()))
    return (
        "R11: the comparison is invalid: the reference ran slower than its own baseline or A/A "
        "by more than the bound (the largest of the A/A resolution, the baseline's prediction "
        f"bound and the minimum effect) ({cases}); something made it slower (a side effect of the "
        "candidate, a background process, a loaded host): it cannot pass"
    )


def judge(flagged: Any, status: str, notes: list[str], unit: str) -> str:
    """``status`` after the reference watch: a pass on flagged samples is ``inconclusive``,
    and the note with the figures is added to ``notes`` whatever the status."""
    if not flagged:
        return status
    notes.append(invalid_note(flagged, unit))
    return "inconclusive" if status == "pass" else status
