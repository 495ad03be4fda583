"""Plausibility of a measured ratio (SPEC.md R12, :data:`~perfledger.events.workflow.R12_PLAUSIBLE_RATIO`).

A candidate measured 50 times faster than its reference is more often a measurement that went
wrong (work skipped, a cache, a unit) than an optimization. Samples flag every test case whose
median per-pair candidate/reference ratio of the primary lies beyond the Target's plausible
ratio (``plausible_ratio``, default 10) either way; the flag is derived, so an auditor
re-derives it. A result resting on flagged samples is not selected as champion until a review
(``ReviewRecorded`` on the samples' event, dissent settled) by an actor other than the one who
created the experiment and the one who recorded the samples explains it: never by a string from
the agent that wants the result. From ``ChampionSelected`` schema
:data:`~perfledger.events.workflow.R12_NAMED_REVIEW_CLEARS` a flag is cleared only by such a
review that names it (``explains``: the samples id, ``implausible`` and the case); a review of
the samples about something else clears nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from perfledger.commands.workflow.review_evidence import settling_review
from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import DEFAULT_PLAUSIBLE_RATIO, TargetDefinition
from perfledger.projections.reviews import ReviewView
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


def naming_reviews(
    state: WorkflowState,
    samples: SamplesView,
    case: str,
    interested: set[str],
    actor_of: Callable[[str], str] | None,
) -> list[ReviewView]:
    """The reviews that clear the ``implausible`` flag of ``case`` on ``samples`` (R12, schema
    :data:`~perfledger.events.workflow.R12_NAMED_REVIEW_CLEARS` on): settled, appended by an
    actor outside ``interested``, naming that flag in ``explains``; empty when the appenders
    cannot be known (``actor_of`` None)."""
    if actor_of is None:
        return []
    found = []
    for view in state.reviews.reviews.values():
        review = view.review
        named = () if isinstance(review.explains, msgspec.UnsetType) else review.explains
        if review.dissent_remains or review.subject_event != samples.event_id:
            continue
        if not any(f.samples_id == samples.samples_id and f.flag == "implausible"
                   and f.case == case for f in named):  # fmt: skip
            continue
        if actor_of(view.event_id) not in interested:
            found.append(view)
    return found


def clearing_reviews(
    state: WorkflowState,
    samples: SamplesView,
    interested: set[str],
    actor_of: Callable[[str], str] | None,
    *,
    named: bool,
) -> list[ReviewView] | None:
    """The reviews that clear every plausibility flag of ``samples`` (R12): with ``named``
    (:data:`~perfledger.events.workflow.R12_NAMED_REVIEW_CLEARS` on) the reviews naming each
    flagged case (:func:`naming_reviews`), else the first settled review of the samples' event
    by an actor outside ``interested``. Returns: [] when nothing is flagged, None when a flag
    stays uncleared."""
    cases = flagged(samples)
    if not cases:
        return []
    if not named:
        view = settling_review(state, samples.event_id, interested, actor_of)
        return None if view is None else [view]
    out: list[ReviewView] = []
    for case in cases:
        found = naming_reviews(state, samples, case, interested, actor_of)
        if not found:
            return None
        out += [view for view in found if view not in out]
    return out


def r12_plausible_or_reviewed(
    state: WorkflowState,
    samples: SamplesView,
    interested: set[str],
    actor_of: Callable[[str], str] | None,
    *,
    named: bool = False,
) -> None:
    """R12: samples with an implausible ratio support a champion only once a review by an
    actor outside ``interested`` (the experiment's creator, the samples' recorder) on the
    samples' event, its dissent settled, explains them; with ``named`` (schema
    :data:`~perfledger.events.workflow.R12_NAMED_REVIEW_CLEARS` on) only reviews naming each
    flagged case in ``explains`` clear it. Raises: RuleRefused (R12)."""
    cases = flagged(samples)
    if clearing_reviews(state, samples, interested, actor_of, named=named) is not None:
        return
    if named:
        uncleared = [
            case for case in cases
            if not naming_reviews(state, samples, case, interested, actor_of)
        ]  # fmt: skip
    else:
        uncleared = list(cases)
    shown = ", ".join(f"{case} {cases[case]:.4g}x" for case in uncleared)
    explains = ", ".join(
        f'{{"samples_id": "{samples.samples_id}", "flag": "implausible", "case": "{case}"}}'
        for case in uncleared
    )
    named_hint = f' and "explains": [{explains}] (a review clears only the flags it names)'
    raise refuse(
        "R12",
        f"samples {samples.samples_id!r} measured candidate/reference ratio(s) beyond the "
        f"Target's plausible bound ({shown}): a measurement that went wrong is likelier than "
        "such a gain; no champion rests on them until another actor's review explains them",
        f"a reviewer other than {sorted(interested)} records `perfledger review record` with "
        f'"subject": "other", "subject_event": "{samples.event_id}", '
        f'"dissent_remains": false{named_hint if named else ""} (--actor NAME --sign-with '
        "KEY: the reviewer signs it with its own SSH key)",
    )
