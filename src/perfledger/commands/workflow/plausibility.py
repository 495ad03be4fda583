"""Plausibility of a measured ratio (SPEC.md R12, :data:`~perfledger.events.workflow.R12_PLAUSIBLE_RATIO`).

A candidate measured 50 times faster than its reference is more often a measurement that went
wrong (work skipped, a cache, a unit) than an optimization. Samples flag every test case whose
median per-pair candidate/reference ratio of the primary lies beyond the Target's plausible
ratio (``plausible_ratio``, default 10) either way; the flag is derived, so an auditor
re-derives it. A result resting on flagged samples is not selected as champion until a review
(``ReviewRecorded`` on the samples' event, dissent settled) by an actor other than the one who
created the experiment and the one who recorded the samples explains it: never by a string from
the agent that wants the result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from perfledger.commands.workflow.review_evidence import settling_review
from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import DEFAULT_PLAUSIBLE_RATIO, TargetDefinition
from perfledger.projections.workflow import SamplesView, WorkflowState


def _median(values: list[float] | tuple[float, ...]) -> float:
    """The median (the middle value, or the mean of the two middle ones), without the standard
    library's ``statistics`` (whose import is off the write commands' start-up path).
    Raises: ValueError for no values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def plausible_ratio(definition: TargetDefinition) -> float:
    """The Target's plausible ratio (> 1, either way), or :data:`DEFAULT_PLAUSIBLE_RATIO`."""
    ratio = definition.plausible_ratio
    return DEFAULT_PLAUSIBLE_RATIO if isinstance(ratio, msgspec.UnsetType) else ratio


def implausible_cases(definition: TargetDefinition, pairs: Iterable[Any]) -> dict[str, float]:
    """Test case -> the median over its pairs of (candidate median / reference median) of the
    primary, for each case beyond :func:`plausible_ratio` either way (empty when none is).
    ``pairs``: request or event pair records (``case``, ``ref.values``, ``cand.values``)."""
    name = definition.primary.name
    ratios: dict[str, list[float]] = {}
    for pair in pairs:
        ref, cand = pair.ref.values.get(name), pair.cand.values.get(name)
        if ref and cand:
            ratios.setdefault(pair.case, []).append(_median(cand) / _median(ref))
    bound = plausible_ratio(definition)
    out = {}
    for case, values in sorted(ratios.items()):
        ratio = _median(values)
        if ratio > bound or ratio < 1.0 / bound:
            out[case] = ratio
    return out


def flagged(samples: SamplesView) -> dict[str, float]:
    """The implausible cases of recorded samples (empty when none, or recorded before)."""
    found = samples.implausible
    return {} if isinstance(found, msgspec.UnsetType) else found


def r12_plausible_or_reviewed(
    state: WorkflowState,
    samples: SamplesView,
    interested: set[str],
    actor_of: Callable[[str], str] | None,
) -> None:
    """R12: samples with an implausible ratio support a champion only once a review by an
    actor outside ``interested`` (the experiment's creator, the samples' recorder) on the
    samples' event, its dissent settled, explains them. Raises: RuleRefused (R12)."""
    cases = flagged(samples)
    if not cases or settling_review(state, samples.event_id, interested, actor_of) is not None:
        return
    shown = ", ".join(f"{case} {ratio:.4g}x" for case, ratio in cases.items())
    raise refuse(
        "R12",
        f"samples {samples.samples_id!r} measured candidate/reference ratio(s) beyond the "
        f"Target's plausible bound ({shown}): a measurement that went wrong is likelier than "
        "such a gain; no champion rests on them until another actor's review explains them",
        f"a reviewer other than {sorted(interested)} records `perfledger review record` with "
        f'"subject": "other", "subject_event": "{samples.event_id}" and '
        '"dissent_remains": false (--actor NAME)',
    )
