"""Rules that keep a formal stage's verdict honest about what it judged (R12, R2).

- **Every case of the test set** (R12, from ``VerdictRecorded`` schema
  :data:`~perfledger.events.workflow.R12_EVERY_CASE` and ``FinalAuditRecorded`` schema
  :data:`~perfledger.events.workflow.R12_EVERY_CASE_FINAL_AUDIT`): a formal stage (target, final
  audit) whose samples leave out a case of the Target's test set cannot pass. A per-case verdict
  aggregates the cases it was given; a candidate that is faster on one case and slower on
  another would otherwise pass by measuring only the first. Samples of another test set than
  the readiness's current one (re-recorded after them, narrowed to the winning case) cannot
  pass either.
- **Statistics and test set declared before the data** (R2, from ``ReadinessRecorded`` schema
  :data:`~perfledger.events.workflow.R2_STATISTICS_FROZEN`): once samples of a Target are
  recorded, a new readiness may not change its statistical requirements (pairs per case,
  confidence, resamples, aggregation, per-case regressions, outside samples, explained foreign
  activity) or its test set (hash, case count, case names). A verdict reads the readiness
  current when it is derived; without this rule an agent could look at its samples, then allow
  the per-case regression that blocked its pass, or drop the case it lost from the test set.
- **The resolution committed at the run's start** (R4, R14, from ``VerdictRecorded`` schema
  :data:`~perfledger.events.workflow.R4_RESOLUTION_AT_RUN_VERDICT`): a formal stage is judged
  with the resolution in force when its ``FormalRunStarted`` was appended, not with one recorded
  after it (:func:`r4_stage_resolution`).
- **No resolution lowered after the data** (R4, from ``ResolutionEstimated`` schema
  :data:`~perfledger.events.workflow.R4_RESOLUTION_NOT_LOWERED`): once samples of a Target are
  recorded, a new resolution may not be lower than the one in force (the Target's or any
  case's) unless it comes from a longer A/A (more repeats). A verdict judges against the latest
  resolution; without this rule a CI just below the measured resolution became a pass by
  recording a smaller one (by hand, or by re-running `measure aa` until one came out small).

Imports: events and the workflow projection's state (a commands helper).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from perfledger.commands.workflow.rules import refuse
from perfledger.events.workflow import (
    FORMAL_STAGES,
    ResolutionEstimated,
    SamplesRecorded,
    Statistics,
    TestSet,
)
from perfledger.projections.verdict_explain import MISSING_CASES
from perfledger.projections.workflow import TargetView, WorkflowState, run_resolution


def missing_cases(
    test_set: TestSet, measured: Iterable[str], known: Iterable[str] = ()
) -> list[str]:
    """The test set's cases that ``measured`` (the samples' case names) leaves out (R12).

    Where the test set names its cases, the names not measured, sorted. Where it names none,
    the ``known`` names (the cases the Target's A/A and baseline measured) not measured, then
    ``"<N unnamed case(s)>"`` for what still falls short of ``case_count`` distinct cases. A
    test set without names cannot tell a case measured twice under two names from two cases:
    the known names are what binds them. Empty when every case is measured."""
    seen = set(measured)
    if test_set.cases:
        return sorted(c for c in test_set.cases if c not in seen)
    named = sorted(set(known) - seen)
    short = test_set.case_count - len(seen) - len(named)
    return named + ([f"<{short} unnamed case(s)>"] if short > 0 else [])


def r12_every_case(
    target: TargetView, samples: SamplesRecorded, status: str, notes: list[str]
) -> str:
    """R12: a formal stage whose samples leave out a case of the Target's test set, or measured
    another test set than the readiness's current one, cannot pass: ``pass`` becomes
    ``inconclusive``, and why is noted whatever the status (screens are not held to it: they
    may measure a subset and never pass anyway). Returns: the status."""
    readiness = target.readiness
    if samples.stage not in FORMAL_STAGES or readiness is None or readiness.test_set is None:
        return status
    if samples.test_set_hash != readiness.test_set.hash:
        # the readiness was re-recorded with another test set after these samples: they were
        # measured on a test set the Target no longer names (a narrowed one hides a case)
        notes.append(
            f"{MISSING_CASES}: these {samples.stage} samples measured another test set "
            f"({samples.test_set_hash}) than the Target's current one "
            f"({readiness.test_set.hash}): they cannot pass"
        )
        return "inconclusive" if status == "pass" else status
    # an unnamed test set's cases are the ones the Target's A/A and baseline measured (R4)
    known = set(target.resolution.per_case) if target.resolution is not None else set()
    if target.baseline is not None:
        known |= set(target.baseline.per_case_median)
    missing = missing_cases(readiness.test_set, (p.case for p in samples.pairs), known)
    if not missing:
        return status
    notes.append(
        f"{MISSING_CASES}: the samples leave out test case(s) {missing} of its "
        f"{readiness.test_set.case_count}; a {samples.stage} stage that did not measure every "
        "case cannot pass (measure them all: `perfledger measure workload` without --case)"
    )
    return "inconclusive" if status == "pass" else status


def _samples_of(state: WorkflowState, target: TargetView) -> list[str]:
    """The ids of the samples recorded for ``target``, sorted."""
    target_id = target.definition.target_id
    return sorted(s.samples_id for s in state.samples.values() if s.target_id == target_id)


def _named(ids: list[str]) -> str:
    return ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")


def r4_resolution_not_lowered(
    state: WorkflowState,
    target: TargetView,
    resolution: float,
    per_case: Mapping[str, float],
    repeats: int,
) -> None:
    """R4: once samples of ``target`` are recorded, a new resolution (``resolution`` and
    ``per_case``, ratios) may not be lower than the one in force, neither the Target's nor any
    case's (a case it leaves out would fall back to the Target's own, so it counts at that),
    unless it comes from a longer A/A (more ``repeats`` than the one in force: more pairs
    tighten an A/A honestly; the same A/A run again until it comes out small does not).
    Raising it stays allowed (it can only make a pass harder).

    Raises: RuleRefused (R4) with the figures and the samples already recorded."""
    current = target.measured_resolution  # a declared one decides nothing, nor blocks (R4)
    recorded = _samples_of(state, target)
    if current is None or not recorded or repeats > current.repeats:
        return
    lowered = []
    if resolution < current.resolution:
        lowered.append(f"the Target's {100 * current.resolution:.2f} % -> {100 * resolution:.2f} %")
    for case, old in sorted(current.per_case.items()):
        new = per_case.get(case, resolution)
        if new < old:
            lowered.append(f"case {case} {100 * old:.2f} % -> {100 * new:.2f} %")
    if lowered:
        raise refuse(
            "R4",
            f"Target {target.definition.target_id!r} already has samples ({_named(recorded)}); "
            f"a resolution recorded after them from an A/A no longer than the one in force "
            f"({current.repeats} repeats; this one {repeats}) cannot be lower "
            f"({'; '.join(lowered)}): the same A/A re-run until it comes out small is not a "
            "measurement",
            f"measure a longer A/A (`measure aa --runs` giving more than {current.repeats} "
            "repeats), keep the resolution in force, or freeze a new Target (`perfledger target "
            "supersede`)",
        )


def r2_declared_before_data(
    state: WorkflowState,
    target: TargetView,
    statistics: Mapping[str, Any],
    test_set: Mapping[str, Any] | None,
) -> None:
    """R2: once samples of ``target`` are recorded, a readiness may not change its statistical
    requirements or its test set from those in force (``statistics`` and ``test_set``: the new
    readiness's, as JSON builtins; the test set's hash alone is a string the user supplies, so
    its case names and count are compared too).

    Raises: RuleRefused (R2) naming the changed fields and the samples already recorded."""
    current = target.readiness
    if current is None:
        return
    recorded = _samples_of(state, target)
    if not recorded:
        return
    changed: list[str] = []
    for name, old_part, new_part in (
        ("statistics", current.statistics, msgspec.convert(dict(statistics), Statistics)),
        (
            "test_set",
            current.test_set,
            None if test_set is None else msgspec.convert(dict(test_set), TestSet),
        ),
    ):
        old = msgspec.to_builtins(old_part) if old_part is not None else {}
        new = msgspec.to_builtins(new_part) if new_part is not None else {}
        changed += [
            f"{name}.{k}: {old.get(k)!r} -> {new.get(k)!r}"
            for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k)
        ]
    if changed:
        raise refuse(
            "R2",
            f"Target {target.definition.target_id!r} already has samples ({_named(recorded)}); "
            "its statistical requirements and test set are declared before the data is seen and "
            f"cannot change ({', '.join(changed)})",
            "record the readiness with the statistics and test set in force, or freeze a new "
            "Target (`perfledger target supersede`) whose readiness declares the new ones",
        )


#: Why a verdict judged against a declared resolution cannot pass (R4), and what to run.
DECLARED_RESOLUTION = "R4: declared resolution"


def r4_declared_resolution(target: TargetView, status: str, notes: list[str]) -> str:
    """R4 (``VerdictRecorded`` schema 6, ``FinalAuditRecorded`` schema 7 on): a verdict judged
    against a resolution that was typed, not measured by perfledger (``source == "declared"``,
    no measured one in force), cannot pass: ``pass`` becomes ``inconclusive``, and why is noted whatever the status.
    Returns: the status."""
    resolution = target.resolution
    if resolution is None or target.measured_resolution is not None:
        return status  # a measured one is in force (a declared one after it decides nothing)
    notes.append(
        f"{DECLARED_RESOLUTION}: the resolution in force on Target "
        f"{target.definition.target_id!r} ({100 * resolution.resolution:.2f} %) was typed, not "
        "measured by perfledger, and decides nothing: no verdict can pass until `perfledger "
        f"measure aa --target {target.definition.target_id} --cmd CMD --record` records a "
        "measured one"
    )
    return "inconclusive" if status == "pass" else status


def r4_stage_resolution(
    state: WorkflowState, target: TargetView, samples_id: str, notes: list[str]
) -> ResolutionEstimated | None:
    """R4, R14 (``VerdictRecorded`` schema
    :data:`~perfledger.events.workflow.R4_RESOLUTION_AT_RUN_VERDICT`, ``FinalAuditRecorded``
    schema :data:`~perfledger.events.workflow.R4_RESOLUTION_AT_RUN_FINAL_AUDIT` on): the
    resolution a formal stage is judged with is the one in force when its ``FormalRunStarted``
    was appended, committed before anything was measured. A resolution recorded between that
    event and the verdict (a longer A/A after a look at the stage's CI) decides later stages
    only; that it was left aside is noted.

    Returns: the resolution kept at the run's start, or None when none was recorded since (the
    one in force now is that one)."""
    kept = run_resolution(state, samples_id)
    if kept is None:
        return None
    now = target.resolution_in_force
    if now is not None and now != kept:
        notes.append(
            f"R4: judged with the resolution {100 * kept.resolution:.2f} % in force when the "
            f"formal run of {samples_id!r} started; the {100 * now.resolution:.2f} % recorded "
            "after it decides only stages started after it"
        )
    return kept


def r4_declared_stage_resolution(
    target: TargetView, used: ResolutionEstimated, status: str, notes: list[str]
) -> str:
    """R4: a stage judged with a kept resolution (:func:`r4_stage_resolution`) that was typed,
    not measured (``source == "declared"``), cannot pass, as :func:`r4_declared_resolution`.
    Returns: the status."""
    if used.source != "declared":
        return status
    notes.append(
        f"{DECLARED_RESOLUTION}: the resolution in force on Target "
        f"{target.definition.target_id!r} when this run started "
        f"({100 * used.resolution:.2f} %) was typed, not measured by perfledger, and decides "
        "nothing: this stage cannot pass"
    )
    return "inconclusive" if status == "pass" else status
