"""Closed requests of the kernel-iteration loop (R19-R25), one msgspec Struct per operation.

Like :mod:`perfledger.commands.workflow.requests`: unknown fields refused, strict types, finite numbers,
bounded strings and lists. Kernels and references travel as source text (their content hashes are
derived by the deciders); measured results (correctness, paired samples, profiler metrics) travel
as numbers, so that an auditor re-decides every request without a GPU. The CLI (``perfledger
loop ...``) builds these requests from files and measurements; ``perfledger schema loop.setup``
prints each schema.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from perfledger.commands.workflow.requests import (
    MAX_FINITE,
    Hash,
    Id,
    Name,
    Number,
    OptText,
    Request,
    ranged,
)

#: Kernel, reference and analysis texts (bytes of UTF-8, at most 1 MiB each).
SourceBody = Annotated[str, Meta(min_length=1, max_length=1024 * 1024)]
Axis = Literal["compute", "memory", "latency"]
SkipReason = Literal[
    "already_selected",
    "arch_incompatible",
    "feature_unavailable",
    "skip_condition",
    "no_trigger",
    "ineffective",
    "coupled_group",
]
_MAX_SAMPLES = 100_000
#: The longest timed sample, ms (11.6 days: :data:`~perfledger.commands.workflow.requests.
#: MAX_CALL_WALL_S`).
MAX_SAMPLE_MS = 1e9
#: A positive, finite time in ms, at most :data:`MAX_SAMPLE_MS` (a declared range: loop kinds'
#: schema 2, SPEC.md section 6, "Ranges").
PositiveMs = Annotated[
    float, Meta(gt=0.0, le=MAX_FINITE), ranged(0.0, MAX_SAMPLE_MS, low_open=True)
]
#: The most iterations a run plans (``LoopSetup.iterations``), hence its iteration numbers.
MAX_ITERATIONS = 100
#: Iteration number (1-based), at most :data:`MAX_ITERATIONS`.
Iteration = Annotated[int, Meta(ge=1), ranged(1, MAX_ITERATIONS)]
#: The largest attempt number and trial count a request may hold.
MAX_ATTEMPT = 1_000
MAX_TRIALS = 10**9
#: The largest problem dimension (an exact integer in a double).
MAX_DIM = 2**53
_MAX_ITEMS = 1_000


class SourceText(Request, kw_only=True):
    """A source file: its name (``transpose_v1.cu``) and its full text."""

    name: Name
    text: SourceBody


class ParamModel(Request, kw_only=True):
    """A parsed kernel parameter: name, C type, and whether it is a scalar integer."""

    name: Name
    ctype: Name
    integer: bool


class CorrectnessModel(Request, kw_only=True):
    """A correctness check's outcome: correct or not, trials, largest error, tolerance, detail."""

    correct: bool
    trials: Annotated[int, Meta(ge=0), ranged(0, MAX_TRIALS)]
    max_error: Number | None = None
    tolerance: Number | None = None
    detail: OptText = ""


class TimingModel(Request, kw_only=True):
    """One subject's timing: samples in ms (positive) and why sampling stopped."""

    samples_ms: Annotated[list[PositiveMs], Meta(min_length=1, max_length=_MAX_SAMPLES)]
    stop_reason: OptText = ""


class PairModel(Request, kw_only=True):
    """One paired, interleaved block: the current best's samples (``ref_ms``) and the
    candidate's (``cand_ms``), in ms."""

    ref_ms: Annotated[list[PositiveMs], Meta(min_length=1, max_length=_MAX_SAMPLES)]
    cand_ms: Annotated[list[PositiveMs], Meta(min_length=1, max_length=_MAX_SAMPLES)]


class SkippedModel(Request, kw_only=True):
    """A higher-priority method not chosen, with its reason code (R24) and a detail."""

    method: Name
    reason: SkipReason
    detail: OptText = ""


class AxisSelectionModel(Request, kw_only=True):
    """One axis of methods.json: the chosen method, every higher-priority method skipped with
    its reason, and ``reuse_metric``: when re-selecting a method recorded ineffective, the
    metric whose change between the input profiles shows the bottleneck changed (R21)."""

    chosen: Name
    skipped: Annotated[list[SkippedModel], Meta(max_length=_MAX_ITEMS)] = msgspec.field(
        default_factory=list
    )
    reuse_metric: Name | None = None


class LoopSetup(Request, kw_only=True):
    """``loop.setup``: a run's contract, environment, catalog and baseline measurements."""

    run_id: Id
    subject_kind: Literal["cuda", "workload"]
    baseline: SourceText
    reference: SourceText
    entry: Name
    params: Annotated[list[ParamModel], Meta(max_length=256)]
    dims: dict[Name, Annotated[int, ranged(0, MAX_DIM)]]
    launch: dict[Name, Name] = msgspec.field(default_factory=dict)
    iterations: Annotated[int, Meta(ge=1, le=MAX_ITERATIONS)]
    ncu_num: Annotated[int, Meta(ge=1, le=50)]
    min_effect: Annotated[float, Meta(gt=0.0, lt=1.0)]
    sm_arch: Name
    environment: dict[Name, Name | None]
    catalog_toml: SourceBody
    baseline_check: CorrectnessModel
    baseline_timing: TimingModel
    reference_timing: TimingModel | None = None
    driver: Annotated[list[Name], Meta(max_length=256)] = msgspec.field(default_factory=list)
    limitations: Annotated[list[OptText], Meta(max_length=_MAX_ITEMS)] = msgspec.field(
        default_factory=list
    )


class LoopProfile(Request, kw_only=True):
    """``loop.profile``: one profile of one kernel, keyed by (run, iteration, attempt, role)."""

    run_id: Id
    iteration: Iteration
    attempt: Annotated[int, Meta(ge=0), ranged(0, MAX_ATTEMPT)]
    role: Literal["input", "candidate"]
    kernel_hash: Hash
    tool: Name
    tool_version: Name
    metrics: Annotated[dict[Name, Number], Meta(max_length=100_000)] = msgspec.field(
        default_factory=dict
    )
    units: Annotated[dict[Name, Name], Meta(max_length=100_000)] = msgspec.field(
        default_factory=dict
    )
    limitations: Annotated[list[OptText], Meta(max_length=_MAX_ITEMS)] = msgspec.field(
        default_factory=list
    )


class LoopAttempt(Request, kw_only=True):
    """``loop.attempt``: a candidate that failed its correctness check (R25)."""

    run_id: Id
    iteration: Iteration
    attempt: Annotated[int, Meta(ge=1), ranged(1, MAX_ATTEMPT)]
    kernel: SourceText
    selection: dict[Axis, AxisSelectionModel]
    analysis: SourceBody
    correctness: CorrectnessModel


class LoopCloseIter(Request, kw_only=True):
    """``loop.close-iter``: a correct candidate, its selection and analysis, and its paired
    interleaved timing against the current best (R19-R25)."""

    run_id: Id
    iteration: Iteration
    attempt: Annotated[int, Meta(ge=1), ranged(1, MAX_ATTEMPT)]
    kernel: SourceText
    selection: dict[Axis, AxisSelectionModel]
    analysis: SourceBody
    correctness: CorrectnessModel
    pairs: Annotated[list[PairModel], Meta(max_length=_MAX_SAMPLES)]


class LoopFinalize(Request, kw_only=True):
    """``loop.finalize``: the final paired comparison baseline (``ref_ms``) vs best
    (``cand_ms``), empty when the baseline is still the best, and why the run stops."""

    run_id: Id
    pairs: Annotated[list[PairModel], Meta(max_length=_MAX_SAMPLES)] = msgspec.field(
        default_factory=list
    )
    stop_reason: OptText = ""


__all__ = [
    "AxisSelectionModel",
    "CorrectnessModel",
    "Hash",
    "LoopAttempt",
    "LoopCloseIter",
    "LoopFinalize",
    "LoopProfile",
    "LoopSetup",
    "PairModel",
    "ParamModel",
    "SkippedModel",
    "SourceText",
    "TimingModel",
]
