"""Closed requests of the kernel-iteration loop (R19-R25), one pydantic model per operation.

Like :mod:`perfledger.commands.requests`: unknown fields refused, strict types, finite numbers,
bounded strings and lists. Kernels and references travel as source text (their content hashes are
derived by the deciders); measured results (correctness, paired samples, profiler metrics) travel
as numbers, so that an auditor re-decides every request without a GPU. The CLI (``perfledger
loop ...``) builds these requests from files and measurements; ``perfledger schema loop.setup``
prints each schema.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from perfledger.commands.requests import Hash, Id, Name, Number, OptText, Request

#: Kernel, reference and analysis texts (bytes of UTF-8, at most 1 MiB each).
SourceBody = Annotated[str, StringConstraints(min_length=1, max_length=1024 * 1024)]
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
_MAX_ITEMS = 1_000


class SourceText(Request):
    """A source file: its name (``transpose_v1.cu``) and its full text."""

    name: Name
    text: SourceBody


class ParamModel(Request):
    """A parsed kernel parameter: name, C type, and whether it is a scalar integer."""

    name: Name
    ctype: Name
    integer: bool


class CorrectnessModel(Request):
    """A correctness check's outcome: correct or not, trials, largest error, tolerance, detail."""

    correct: bool
    trials: int = Field(ge=0)
    max_error: Number | None = None
    tolerance: Number | None = None
    detail: OptText = ""


class TimingModel(Request):
    """One subject's timing: samples in ms (positive) and why sampling stopped."""

    samples_ms: list[Annotated[Number, Field(gt=0.0)]] = Field(
        min_length=1, max_length=_MAX_SAMPLES
    )
    stop_reason: OptText = ""


class PairModel(Request):
    """One paired, interleaved block: the current best's samples (``ref_ms``) and the
    candidate's (``cand_ms``), in ms."""

    ref_ms: list[Annotated[Number, Field(gt=0.0)]] = Field(min_length=1, max_length=_MAX_SAMPLES)
    cand_ms: list[Annotated[Number, Field(gt=0.0)]] = Field(min_length=1, max_length=_MAX_SAMPLES)


class SkippedModel(Request):
    """A higher-priority method not chosen, with its reason code (R24) and a detail."""

    method: Name
    reason: SkipReason
    detail: OptText = ""


class AxisSelectionModel(Request):
    """One axis of methods.json: the chosen method, every higher-priority method skipped with
    its reason, and ``reuse_metric``: when re-selecting a method recorded ineffective, the
    metric whose change between the input profiles shows the bottleneck changed (R21)."""

    chosen: Name
    skipped: list[SkippedModel] = Field(default=[], max_length=_MAX_ITEMS)
    reuse_metric: Name | None = None


class LoopSetup(Request):
    """``loop.setup``: a run's contract, environment, catalog and baseline measurements."""

    run_id: Id
    subject_kind: Literal["cuda", "workload"]
    baseline: SourceText
    reference: SourceText
    entry: Name
    params: list[ParamModel] = Field(max_length=256)
    dims: dict[Name, int]
    launch: dict[Name, Name] = Field(default={})
    iterations: int = Field(ge=1, le=100)
    ncu_num: int = Field(ge=1, le=50)
    min_effect: Number = Field(gt=0.0, lt=1.0)
    sm_arch: Name
    environment: dict[Name, Name | None]
    catalog_toml: SourceBody
    baseline_check: CorrectnessModel
    baseline_timing: TimingModel
    reference_timing: TimingModel | None = None
    driver: list[Name] = Field(default=[], max_length=256)
    limitations: list[OptText] = Field(default=[], max_length=_MAX_ITEMS)


class LoopProfile(Request):
    """``loop.profile``: one profile of one kernel, keyed by (run, iteration, attempt, role)."""

    run_id: Id
    iteration: int = Field(ge=1)
    attempt: int = Field(ge=0)
    role: Literal["input", "candidate"]
    kernel_hash: Hash
    tool: Name
    tool_version: Name
    metrics: dict[Name, Number] = Field(default={}, max_length=100_000)
    units: dict[Name, Name] = Field(default={}, max_length=100_000)
    limitations: list[OptText] = Field(default=[], max_length=_MAX_ITEMS)


class LoopAttempt(Request):
    """``loop.attempt``: a candidate that failed its correctness check (R25)."""

    run_id: Id
    iteration: int = Field(ge=1)
    attempt: int = Field(ge=1)
    kernel: SourceText
    selection: dict[Axis, AxisSelectionModel]
    analysis: SourceBody
    correctness: CorrectnessModel


class LoopCloseIter(Request):
    """``loop.close-iter``: a correct candidate, its selection and analysis, and its paired
    interleaved timing against the current best (R19-R25)."""

    run_id: Id
    iteration: int = Field(ge=1)
    attempt: int = Field(ge=1)
    kernel: SourceText
    selection: dict[Axis, AxisSelectionModel]
    analysis: SourceBody
    correctness: CorrectnessModel
    pairs: list[PairModel] = Field(max_length=_MAX_SAMPLES)


class LoopFinalize(Request):
    """``loop.finalize``: the final paired comparison baseline (``ref_ms``) vs best
    (``cand_ms``), empty when the baseline is still the best, and why the run stops."""

    run_id: Id
    pairs: list[PairModel] = Field(default=[], max_length=_MAX_SAMPLES)
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
