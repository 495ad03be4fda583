"""Deciders of the kernel-iteration loop: pure ``decide(state, request, ctx) -> [EventDraft]``.

Each reads the folded :class:`~perfledger.projections.workflow.WorkflowState` (its ``loop`` runs),
a validated request of :mod:`perfledger.commands.loop.requests` and the
:class:`~perfledger.commands.workflow.deciders.DecisionContext`; it refuses with the rule of
:mod:`perfledger.commands.loop.rules` (R19-R25) or BadRequest, and never reads the clock or a
file. Derived fields (content hashes, the environment id, the catalog and its hash, medians,
ratios, the verdict, the profile digest) are computed here, never taken from the caller.

"Improved" is a derived verdict (:func:`perfledger.projections.verdicts.derive_verdict`, R12's
statistics): the per-pair improvement of the candidate over the current best, its bootstrap CI,
``pass`` only when the CI's lower end clears the run's minimum effect.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import blake3
import msgspec

from perfledger.commands.loop import requests as lrq
from perfledger.commands.loop import rules as loop_rules
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.commands.workflow.requests import dump
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events import catalog as cat
from perfledger.events.canonical import canonical_bytes
from perfledger.events.loop import (
    MAX_CORRECTNESS_ATTEMPTS,
    AttemptRecorded,
    Correctness,
    IterationClosed,
    LoopPair,
    Param,
    ProfileRecorded,
    RunFinalized,
    RunSetUp,
    SourceFile,
    Timing,
)
from perfledger.ledger.base import EventDraft
from perfledger.projections import verdicts
from perfledger.projections.loop import RunView, failed_attempts, next_attempt
from perfledger.projections.workflow import WorkflowState

#: Domain prefix of a loop run's environment identity hash.
LOOP_ENVIRONMENT_DOMAIN = b"perfledger/loop-environment/v1\x00"
#: The test case name of the loop's paired samples (one kernel, one shape).
LOOP_CASE = "dims"
#: Limitation texts that mean the profiler could not read performance counters (R16).
COUNTER_PERMISSION_MARKERS = ("ERR_NVGPUCTRPERM", "counter permission")


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "docs/loop.md describes the loop's steps and what each records, in order (`perfledger loop --help`)"


def _emit(ctx: DecisionContext, *payloads: msgspec.Struct) -> list[EventDraft]:
    return [
        EventDraft(
            type(payload).__name__,
            payload,
            ctx.actor,
            request=ctx.request,
            idempotency_key=ctx.idempotency_key if index == 0 else None,
            ts=ctx.ts,
        )
        for index, payload in enumerate(payloads)
    ]


def _round(value: float) -> float:
    return float(f"{value:.12g}")


def _median(values: Sequence[float]) -> float:
    # the projections' plain median, not the statistics module (with fractions and decimal,
    # ~10 ms of every decision's start-up: the operations' write path imports these deciders)
    return _round(verdicts.median(values))


def source_file(source: lrq.SourceText) -> SourceFile:
    """The payload part of a source: its name and derived ``blake3:<hex>`` content hash."""
    return SourceFile(name=source.name, content_hash=cat.content_hash(source.text))


def loop_environment_id(environment: dict[str, str | None]) -> str:
    """blake3 hex over a domain prefix and the canonical environment (missing items None)."""
    return blake3.blake3(LOOP_ENVIRONMENT_DOMAIN + canonical_bytes(environment)).hexdigest()


def _run(state: WorkflowState, run_id: str, *, open_only: bool = True) -> RunView:
    run = state.loop.runs.get(run_id)
    if run is None:
        raise BadRequest(f"no loop run {run_id!r}", hint="start one with `perfledger loop setup`")
    if open_only and run.finalized is not None:
        raise BadRequest(
            f"run {run_id!r} is finalized; nothing more can be recorded in it", hint=_HINT
        )
    return run


def _open_iteration(run: RunView, iteration: int) -> None:
    if iteration > run.setup.iterations:
        raise BadRequest(
            f"run {run.setup.run_id} plans {run.setup.iterations} iteration(s); there is no "
            f"iteration {iteration}",
            hint="finalize the run",
        )
    if iteration != run.current_iteration:
        view = run.iterations.get(str(iteration))
        if view is not None and view.status == "failed_correctness":
            loop_rules.r25_attempts_left(run, iteration)
        raise BadRequest(
            f"iteration {iteration} is not the open one; the next iteration to close is "
            f"{run.current_iteration}",
            hint=_HINT,
        )


def _correctness(model: lrq.CorrectnessModel) -> Correctness:
    return msgspec.convert(dump(model), Correctness)


# ----------------------------------------------------------------------------- setup


def decide_loop_setup(
    state: WorkflowState, req: lrq.LoopSetup, ctx: DecisionContext
) -> list[EventDraft]:
    """``loop.setup``: check the baseline/reference/dims contract, parse and validate the
    catalog, require a correct baseline, and append ``RunSetUp`` with derived hashes, the
    environment id and the baseline's median time (ms).

    Raises: BadRequest for a run id in use, a catalog that does not validate, an integer
        parameter without a dim, a dim for no parameter of the entry point that is not
        positive, an incorrect baseline; RuleRefused R23 when the device's architecture is not
        in the catalog's feature map.
    """
    if req.run_id in state.loop.runs:
        raise BadRequest(f"loop run {req.run_id!r} already exists", hint="choose a new --run id")
    catalog, catalog_hash = cat.parse_catalog(req.catalog_toml)
    if req.sm_arch not in catalog.architectures:
        raise refuse(
            "R23",
            f"the device's architecture {req.sm_arch} is not in catalog {catalog.catalog_id}'s "
            "feature map, so no method's compatibility can be checked",
            hint="add it under [architectures] in a user catalog (--catalog)",
        )
    names = [p.name for p in req.params]
    if len(set(names)) != len(names):
        raise BadRequest(
            f"preflight: the entry point {req.entry} repeats a parameter name", hint=_HINT
        )
    missing = [p.name for p in req.params if p.integer and p.name not in req.dims]
    if missing:
        raise BadRequest(
            f"preflight: integer parameter(s) {', '.join(missing)} of {req.entry} have no value "
            "in dims",
            hint="give every integer parameter in --dims",
        )
    bad_dims = sorted(k for k, v in req.dims.items() if v <= 0)
    if bad_dims:
        raise BadRequest(
            f"preflight: dims must be positive integers: {', '.join(bad_dims)}", hint=_HINT
        )
    if not req.baseline_check.correct:
        raise BadRequest(
            f"the baseline fails its correctness check: {req.baseline_check.detail}",
            hint="fix the baseline/reference contract before iterating",
        )
    environment = dict(req.environment)
    payload = RunSetUp(
        run_id=req.run_id,
        subject_kind=req.subject_kind,
        baseline=source_file(req.baseline),
        reference=source_file(req.reference),
        entry=req.entry,
        params=tuple(Param(name=p.name, ctype=p.ctype, integer=p.integer) for p in req.params),
        dims=dict(req.dims),
        launch=dict(req.launch),
        iterations=req.iterations,
        ncu_num=req.ncu_num,
        min_effect=req.min_effect,
        sm_arch=req.sm_arch,
        environment=environment,
        environment_id=loop_environment_id(environment),
        catalog=catalog,
        catalog_hash=catalog_hash,
        baseline_check=_correctness(req.baseline_check),
        baseline_timing=_timing(req.baseline_timing),
        reference_timing=_timing(req.reference_timing) if req.reference_timing else None,
        driver=tuple(req.driver),
        limitations=tuple(req.limitations),
    )
    return _emit(ctx, payload)


def _timing(model: lrq.TimingModel) -> Timing:
    return Timing(
        samples_ms=tuple(model.samples_ms),
        median_ms=_median(model.samples_ms),
        stop_reason=model.stop_reason,
    )


# ----------------------------------------------------------------------------- profile


def decide_loop_profile(
    state: WorkflowState, req: lrq.LoopProfile, ctx: DecisionContext
) -> list[EventDraft]:
    """``loop.profile``: append one ``ProfileRecorded`` keyed by (run, iteration, attempt, role).

    An input profile (attempt 0) is of the current best kernel at the open iteration; a
    candidate profile is of a new attempt of the open iteration. Keys are never reused (a
    profile is never overwritten). Every metric needs its unit. A counter-permission failure is
    a limitation with no metrics (R16), never zeros. The per-axis digest (``top``) is derived
    from the run's catalog and ``ncu_num``.

    Raises: BadRequest for a wrong run, iteration, attempt or kernel, a reused key or a metric
        without unit; RuleRefused R16 for metrics recorded beside a counter-permission failure.
    """
    run = _run(state, req.run_id)
    _open_iteration(run, req.iteration)
    key = f"{req.iteration}/{req.attempt}/{req.role}"
    if key in run.profiles:
        raise BadRequest(
            f"profile {key} of run {req.run_id} is already recorded (never overwritten)", hint=_HINT
        )
    if req.role == "input":
        if req.attempt != 0:
            raise BadRequest("an input profile has attempt 0", hint=_HINT)
        if req.kernel_hash != run.best_hash:
            raise BadRequest(
                f"the input profile of iteration {req.iteration} must be of the current best "
                f"kernel {run.best_hash}, not {req.kernel_hash}",
                hint=_HINT,
            )
    else:
        expected = next_attempt(run, req.iteration)
        if req.attempt != expected:
            raise BadRequest(
                f"the next attempt of iteration {req.iteration} is {expected}", hint=_HINT
            )
        loop_rules.r25_attempts_left(run, req.iteration)
    no_unit = sorted(set(req.metrics) - set(req.units))
    if no_unit:
        raise BadRequest(f"metric(s) without a unit: {', '.join(no_unit[:5])}", hint=_HINT)
    if req.metrics and any(
        marker.lower() in text.lower()
        for text in req.limitations
        for marker in COUNTER_PERMISSION_MARKERS
    ):
        raise refuse(
            "R16",
            "the profiler could not read performance counters (ERR_NVGPUCTRPERM), so its metrics "
            "are not measurements: record the limitation without metrics",
            "drop the metrics from the request and keep the limitation, or re-run the profiler with counter access (NVreg_RestrictProfilingToAdminUsers=0 or root)",
        )
    catalog = run.setup.catalog
    payload = ProfileRecorded(
        run_id=req.run_id,
        iteration=req.iteration,
        attempt=req.attempt,
        role=req.role,
        kernel_hash=req.kernel_hash,
        tool=req.tool,
        tool_version=req.tool_version,
        metrics=dict(req.metrics),
        units={k: v for k, v in req.units.items() if k in req.metrics},
        top=cat.digest(catalog, req.metrics, run.setup.ncu_num),
        limitations=tuple(req.limitations),
    )
    return _emit(ctx, payload)


# ----------------------------------------------------------------------------- attempts


def decide_loop_attempt(
    state: WorkflowState, req: lrq.LoopAttempt, ctx: DecisionContext
) -> list[EventDraft]:
    """``loop.attempt``: record a candidate that failed its correctness check (R25). The
    selection is checked as for closing (R19-R24). The attempt that uses up the last of
    :data:`~perfledger.events.loop.MAX_CORRECTNESS_ATTEMPTS` also closes the iteration as
    ``failed_correctness`` (the best kernel stays).

    Raises: BadRequest for a correct candidate, a wrong run/iteration/attempt; RuleRefused
        R19-R25.
    """
    run = _run(state, req.run_id)
    _open_iteration(run, req.iteration)
    if req.correctness.correct:
        raise BadRequest(
            "loop.attempt records an incorrect candidate; this one is correct", hint=_HINT
        )
    failed = loop_rules.r25_attempts_left(run, req.iteration)
    _check_attempt(run, req.iteration, req.attempt)
    selection = loop_rules.check_selection(run, req.iteration, req.selection, req.analysis)
    kernel = source_file(req.kernel)
    correctness = _correctness(req.correctness)
    attempt = AttemptRecorded(
        run_id=req.run_id,
        iteration=req.iteration,
        attempt=req.attempt,
        kernel=kernel,
        selection=selection,
        correctness=correctness,
    )
    if failed + 1 < MAX_CORRECTNESS_ATTEMPTS:
        return _emit(ctx, attempt)
    closed = IterationClosed(
        run_id=req.run_id,
        iteration=req.iteration,
        attempt=req.attempt,
        status="failed_correctness",
        kernel=kernel,
        parent_hash=run.best_hash,
        selection=selection,
        analysis_hash=cat.content_hash(req.analysis),
        correctness=correctness,
        best_hash=run.best_hash,
    )
    return _emit(ctx, attempt, closed)


# ----------------------------------------------------------------------------- close


def _pairs(models: Sequence[lrq.PairModel]) -> tuple[LoopPair, ...]:
    return tuple(LoopPair(ref_ms=tuple(p.ref_ms), cand_ms=tuple(p.cand_ms)) for p in models)


def derive_improvement(pairs: Sequence[LoopPair], min_effect: float) -> Any:
    """The derived verdict of candidate vs reference (R12 statistics, lower time is better)
    against ``min_effect``: :func:`perfledger.projections.verdicts.derive_verdict` on the pairs
    as one test case."""
    return verdicts.derive_verdict(
        [verdicts.Pair(case=LOOP_CASE, ref=p.ref_ms, cand=p.cand_ms) for p in pairs],
        direction="lower_is_better",
        min_effect=min_effect,
    )


def decide_loop_close_iter(
    state: WorkflowState, req: lrq.LoopCloseIter, ctx: DecisionContext
) -> list[EventDraft]:
    """``loop.close-iter``: check the selection (R19-R24) and attempts (R25), derive the
    verdict of the candidate against the current best from the paired samples, and append
    ``IterationClosed``: ``improved`` when the verdict passes (the candidate becomes the best
    and its methods are selected, R20), else ``not_improved`` (its methods are recorded
    ineffective, R21).

    Raises: BadRequest for an incorrect candidate (use ``loop.attempt``), a candidate equal to
        the best kernel, a wrong run/iteration/attempt; RuleRefused R19-R25.
    """
    run = _run(state, req.run_id)
    _open_iteration(run, req.iteration)
    if not req.correctness.correct:
        raise BadRequest(
            "the candidate failed its correctness check: record it with loop.attempt", hint=_HINT
        )
    loop_rules.r25_attempts_left(run, req.iteration)
    _check_attempt(run, req.iteration, req.attempt)
    selection = loop_rules.check_selection(run, req.iteration, req.selection, req.analysis)
    kernel = source_file(req.kernel)
    if kernel.content_hash == run.best_hash:
        raise BadRequest(
            "the candidate is the current best kernel itself; change it first", hint=_HINT
        )
    pairs = _pairs(req.pairs)
    verdict = derive_improvement(pairs, run.setup.min_effect)
    best_ms = _median([v for p in pairs for v in p.ref_ms]) if pairs else None
    cand_ms = _median([v for p in pairs for v in p.cand_ms]) if pairs else None
    reference = run.setup.reference_timing
    payload = IterationClosed(
        run_id=req.run_id,
        iteration=req.iteration,
        attempt=req.attempt,
        status="improved" if verdict.status == "pass" else "not_improved",
        kernel=kernel,
        parent_hash=run.best_hash,
        selection=selection,
        analysis_hash=cat.content_hash(req.analysis),
        correctness=_correctness(req.correctness),
        pairs=pairs,
        verdict=verdict,
        best_median_ms=best_ms,
        cand_median_ms=cand_ms,
        ratio_to_best=_round(cand_ms / best_ms) if cand_ms and best_ms else None,
        ratio_to_reference=(
            _round(cand_ms / reference.median_ms) if cand_ms and reference is not None else None
        ),
        best_hash=kernel.content_hash if verdict.status == "pass" else run.best_hash,
    )
    return _emit(ctx, payload)


def _check_attempt(run: RunView, iteration: int, attempt: int) -> None:
    """The attempt a request names is the next one, or the last one when only its candidate
    profile was recorded (profiled, then checked or timed)."""
    expected = next_attempt(run, iteration)
    view = run.iterations.get(str(iteration))
    profiled_only = (
        view is not None
        and attempt == expected - 1
        and attempt not in view.failed_attempts
        and f"{iteration}/{attempt}/candidate" in run.profiles
    )
    if attempt != expected and not profiled_only:
        raise BadRequest(
            f"the next attempt of iteration {iteration} is {expected}, not {attempt}", hint=_HINT
        )


# ----------------------------------------------------------------------------- finalize


def decide_loop_finalize(
    state: WorkflowState, req: lrq.LoopFinalize, ctx: DecisionContext
) -> list[EventDraft]:
    """``loop.finalize``: append ``RunFinalized`` with the headline: the derived verdict of the
    best kernel against the baseline from the final paired comparison (none when the baseline
    is still the best). A run stopped before its planned iterations needs a stop reason.

    Raises: BadRequest for an unknown or finalized run, missing pairs when the best differs
        from the baseline, a missing stop reason for an early stop.
    """
    run = _run(state, req.run_id)
    planned_done = run.current_iteration > run.setup.iterations
    if not planned_done and not req.stop_reason.strip():
        raise BadRequest(
            f"run {req.run_id} closed {run.current_iteration - 1} of {run.setup.iterations} "
            "iterations: say why it stops (--stop-reason)",
            hint=_HINT,
        )
    pairs = _pairs(req.pairs)
    headline = None
    baseline_ms = best_ms = None
    if run.best_hash != run.setup.baseline.content_hash:
        if not pairs:
            raise BadRequest(
                "the best kernel differs from the baseline: give the final pairs", hint=_HINT
            )
        headline = derive_improvement(pairs, run.setup.min_effect)
        baseline_ms = _median([v for p in pairs for v in p.ref_ms])
        best_ms = _median([v for p in pairs for v in p.cand_ms])
    elif pairs:
        raise BadRequest("the baseline is still the best: there is nothing to compare", hint=_HINT)
    stop = req.stop_reason.strip() or f"planned iterations done ({run.setup.iterations})"
    payload = RunFinalized(
        run_id=req.run_id,
        best_hash=run.best_hash,
        best_iteration=run.best_iteration,
        pairs=pairs,
        headline=headline,
        baseline_median_ms=baseline_ms,
        best_median_ms=best_ms,
        stop_reason=stop,
    )
    return _emit(ctx, payload)


__all__ = [
    "decide_loop_attempt",
    "decide_loop_close_iter",
    "decide_loop_finalize",
    "decide_loop_profile",
    "decide_loop_setup",
    "derive_improvement",
    "failed_attempts",
    "loop_environment_id",
    "source_file",
]
