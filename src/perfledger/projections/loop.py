"""The kernel-iteration loop's projection: the run state that replaces a hand-kept ``state.json``.

A pure fold (linear use, like :mod:`perfledger.projections.workflow`, which keeps a
:class:`LoopState` in its ``loop`` field): per run, the setup, the current best kernel, the next
iteration to close, every profile by its key ``"<iteration>/<attempt>/<role>"`` (never
overwritten), failed attempts, closed iterations, the methods *selected* (adopted into the best
kernel's lineage, R20), the methods recorded *ineffective* with the iteration that found them so
(R21), every method tried, and the lineage of kernels by content hash.

The fold never refuses: an event it cannot place (an unknown run, a duplicate key, written around
the deciders) is noted in ``anomalies`` and otherwise ignored.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from perfledger.events.kinds import RecordedEvent
from perfledger.events.loop import (
    AttemptRecorded,
    IterationClosed,
    ProfileRecorded,
    RunFinalized,
    RunSetUp,
)

#: Bumped whenever the meaning of the loop state changes.
LOOP_PROJECTION_VERSION = 1
#: The baseline's iteration number in the lineage.
BASELINE_ITERATION = 0


class KernelNode(msgspec.Struct, kw_only=True):
    """One kernel of a run's lineage: its name, the iteration (0 = baseline) and attempt that
    produced it, the best kernel it was derived from, and how it fared (``baseline``,
    ``improved``, ``not_improved``, ``incorrect``)."""

    content_hash: str
    name: str
    iteration: int
    attempt: int
    parent: str | None
    outcome: str


class IterationView(msgspec.Struct, kw_only=True):
    """One iteration: ``open`` until closed; its failed attempts (R25), the highest attempt
    number used, the profile keys, and the closing event's payload."""

    iteration: int
    status: Literal["open", "improved", "not_improved", "failed_correctness"] = "open"
    failed_attempts: list[int] = msgspec.field(default_factory=list)
    last_attempt: int = 0
    input_profile: str | None = None
    candidate_profiles: list[str] = msgspec.field(default_factory=list)
    closed: IterationClosed | None = None
    closed_event: str | None = None


class RunView(msgspec.Struct, kw_only=True):
    """One run of the loop.

    Attributes:
        setup, setup_event: the ``RunSetUp`` payload and event id.
        best_hash, best_iteration, best_median_ms: the current best kernel (the baseline until
            an iteration improves), where it came from and its median time (ms).
        current_iteration: the next iteration to close (1-based); ``> setup.iterations`` when
            every planned iteration is closed.
        iterations: ``"<i>"`` -> the iteration's view.
        profiles: ``"<i>/<attempt>/<role>"`` -> the profile.
        selected: methods adopted into the best kernel's lineage, in order (R20).
        ineffective: method -> the iteration whose closing recorded it ineffective (R21).
        tried: every method of every closed iteration, in order, with repeats.
        kernels: content hash -> lineage node.
        finalized, finalized_event: the ``RunFinalized`` payload and event id.
    """

    setup: RunSetUp
    setup_event: str
    best_hash: str
    best_iteration: int = BASELINE_ITERATION
    best_median_ms: float
    current_iteration: int = 1
    iterations: dict[str, IterationView] = msgspec.field(default_factory=dict)
    profiles: dict[str, ProfileRecorded] = msgspec.field(default_factory=dict)
    selected: list[str] = msgspec.field(default_factory=list)
    ineffective: dict[str, int] = msgspec.field(default_factory=dict)
    tried: list[str] = msgspec.field(default_factory=list)
    kernels: dict[str, KernelNode] = msgspec.field(default_factory=dict)
    finalized: RunFinalized | None = None
    finalized_event: str | None = None


class LoopState(msgspec.Struct, kw_only=True):
    """Every run of the loop in a ledger, by run id, and what the fold could not place."""

    runs: dict[str, RunView] = msgspec.field(default_factory=dict)
    anomalies: list[str] = msgspec.field(default_factory=list)


def initial_state() -> LoopState:
    """Return the loop state of a ledger without runs."""
    return LoopState()


def profile_key(iteration: int, attempt: int, role: str) -> str:
    """The key of a profile within its run: ``"<iteration>/<attempt>/<role>"``."""
    return f"{iteration}/{attempt}/{role}"


def iteration_view(run: RunView, iteration: int) -> IterationView:
    """Return the view of ``iteration`` (created open when first touched)."""
    key = str(iteration)
    view = run.iterations.get(key)
    if view is None:
        view = run.iterations[key] = IterationView(iteration=iteration)
    return view


def _anomaly(state: LoopState, event: RecordedEvent, what: str) -> None:
    state.anomalies.append(f"{event.id[:16]} {event.kind}: {what}")


def evolve(state: LoopState, event: RecordedEvent) -> LoopState:
    """Fold one event into ``state`` (updated in place and returned); ignores other kinds."""
    p = event.payload
    if isinstance(p, RunSetUp):
        if p.run_id in state.runs:
            _anomaly(state, event, f"duplicate run {p.run_id!r}")
            return state
        run = RunView(
            setup=p,
            setup_event=event.id,
            best_hash=p.baseline.content_hash,
            best_median_ms=p.baseline_timing.median_ms,
        )
        run.kernels[p.baseline.content_hash] = KernelNode(
            content_hash=p.baseline.content_hash,
            name=p.baseline.name,
            iteration=BASELINE_ITERATION,
            attempt=0,
            parent=None,
            outcome="baseline",
        )
        state.runs[p.run_id] = run
        return state
    if not isinstance(p, ProfileRecorded | AttemptRecorded | IterationClosed | RunFinalized):
        return state
    run = state.runs.get(p.run_id)
    if run is None:
        _anomaly(state, event, f"unknown run {p.run_id!r}")
        return state
    if isinstance(p, ProfileRecorded):
        key = profile_key(p.iteration, p.attempt, p.role)
        if key in run.profiles:
            _anomaly(state, event, f"duplicate profile {key}")
            return state
        run.profiles[key] = p
        view = iteration_view(run, p.iteration)
        if p.role == "input":
            view.input_profile = key
        else:
            view.candidate_profiles.append(key)
            view.last_attempt = max(view.last_attempt, p.attempt)
    elif isinstance(p, AttemptRecorded):
        view = iteration_view(run, p.iteration)
        view.failed_attempts.append(p.attempt)
        view.last_attempt = max(view.last_attempt, p.attempt)
        run.kernels.setdefault(
            p.kernel.content_hash,
            KernelNode(
                content_hash=p.kernel.content_hash,
                name=p.kernel.name,
                iteration=p.iteration,
                attempt=p.attempt,
                parent=run.best_hash,
                outcome="incorrect",
            ),
        )
    elif isinstance(p, IterationClosed):
        _on_closed(state, event, run, p)
    else:
        run.finalized = p
        run.finalized_event = event.id
    return state


def _on_closed(state: LoopState, event: RecordedEvent, run: RunView, p: IterationClosed) -> None:
    view = iteration_view(run, p.iteration)
    if view.closed is not None:
        _anomaly(state, event, f"iteration {p.iteration} closed twice")
        return
    view.closed = p
    view.closed_event = event.id
    view.status = p.status
    view.last_attempt = max(view.last_attempt, p.attempt)
    methods = [selection.chosen for _, selection in sorted(p.selection.items())]
    run.tried.extend(methods)
    outcome = {"failed_correctness": "incorrect"}.get(p.status, p.status)
    run.kernels.setdefault(
        p.kernel.content_hash,
        KernelNode(
            content_hash=p.kernel.content_hash,
            name=p.kernel.name,
            iteration=p.iteration,
            attempt=p.attempt,
            parent=p.parent_hash,
            outcome=outcome,
        ),
    )
    if p.status == "improved":
        run.selected.extend(m for m in methods if m not in run.selected)
        for m in methods:
            run.ineffective.pop(m, None)
        run.best_hash = p.kernel.content_hash
        run.best_iteration = p.iteration
        if p.cand_median_ms is not None:
            run.best_median_ms = p.cand_median_ms
    elif p.status == "not_improved":
        for m in methods:
            run.ineffective[m] = p.iteration
    run.current_iteration = max(run.current_iteration, p.iteration + 1)


def input_profile(run: RunView, iteration: int) -> ProfileRecorded | None:
    """Return the input profile of ``iteration`` (attempt 0), or None when none was recorded."""
    return run.profiles.get(profile_key(iteration, 0, "input"))


def failed_attempts(run: RunView, iteration: int) -> int:
    """Return how many attempts of ``iteration`` failed their correctness check (R25)."""
    view = run.iterations.get(str(iteration))
    return len(view.failed_attempts) if view is not None else 0


def next_attempt(run: RunView, iteration: int) -> int:
    """Return the attempt number the next candidate of ``iteration`` gets (1-based)."""
    view = run.iterations.get(str(iteration))
    return (view.last_attempt if view is not None else 0) + 1


def lineage(run: RunView) -> list[KernelNode]:
    """Return the chain of best kernels, baseline first, by following parents from the best."""
    chain: list[KernelNode] = []
    current: str | None = run.best_hash
    seen: set[str] = set()
    while current is not None and current in run.kernels and current not in seen:
        seen.add(current)
        node = run.kernels[current]
        chain.append(node)
        current = node.parent
    return list(reversed(chain))
