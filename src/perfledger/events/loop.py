"""The event vocabulary of the kernel-iteration loop (SPEC.md sections 3-4, rules R19-R25).

An NCU-guided loop over one standalone kernel: ``RunSetUp`` (environment, method catalog, the
baseline/reference/dims contract, baseline correctness and timing), ``ProfileRecorded`` (one
profile of one kernel, keyed by (run, iteration, attempt, role): the *input* profile an iteration
starts from and each *candidate*'s profile are separate events, never overwritten),
``AttemptRecorded`` (a candidate that failed its correctness check, R25), ``IterationClosed``
(the methods chosen per axis with the skipped higher-priority ones, the analysis, the paired
timing against the current best and the derived verdict) and ``RunFinalized``.

Kernels and references travel as their source text in the request, and every ``content_hash``
here is *derived* (``blake3:<hex>`` of the UTF-8 source) by the deciders, so the lineage of
kernels is verifiable from the ledger alone. Times are milliseconds (``_ms``); ratios are plain
floats. The method catalog is stored whole in ``RunSetUp`` (with the blake3 of its TOML text), so
re-deciding an iteration on replay needs no file outside the ledger.

Importing this module registers the kinds; :mod:`perfledger.events.workflow` imports it.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from perfledger.events.kindspec import KindSpec, register_kind
from perfledger.events.workflow import DerivedVerdict

#: The three axes of the loop, in the order a selection lists them (R19).
AXES: tuple[str, ...] = ("compute", "memory", "latency")
Axis = Literal["compute", "memory", "latency"]
Comparison = Literal["<", "<=", ">", ">="]
#: Why a higher-priority method was not chosen (R24).
SkipReason = Literal[
    "already_selected",
    "arch_incompatible",
    "feature_unavailable",
    "skip_condition",
    "no_trigger",
    "ineffective",
    "coupled_group",
]
ProfileRole = Literal["input", "candidate"]
SubjectKind = Literal["cuda", "workload"]
IterationStatus = Literal["improved", "not_improved", "failed_correctness"]


class _Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of the nested parts of loop payloads."""


class _Payload(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    kw_only=True,
    tag_field="kind",
    tag=True,
):
    """Base of the loop payloads: tagged by kind name in the field ``kind``."""


# ------------------------------------------------------------------------------ catalog


class Condition(_Part, kw_only=True):
    """``metric op threshold`` on a profile's metrics (values in the profile's units)."""

    metric: str
    op: Comparison
    threshold: float


class DerivedMetric(_Part, kw_only=True):
    """A metric computed from two recorded ones: ``numerator / denominator`` (None when the
    denominator is zero or either is missing)."""

    name: str
    numerator: str
    denominator: str
    description: str = ""


class CatalogMethod(_Part, kw_only=True):
    """One optimization method of the catalog.

    Attributes:
        id: ``axis.name`` (``memory.coalescing``).
        axis: its axis; priority: 1 is tried first, unique within the axis (R19).
        description: one line.
        triggers: ncu conditions that indicate the method, any of them (``no_trigger`` claims
            that none holds on the iteration's input profile).
        skips: ncu conditions under which the method does not apply, any of them
            (``skip_condition`` claims that one holds).
        requires: SM features the method needs (R23), names of the catalog's feature map.
        group: a coupled group: at most one method per group per iteration (R22).
    """

    id: str
    axis: Axis
    priority: int
    description: str
    triggers: tuple[Condition, ...] = ()
    skips: tuple[Condition, ...] = ()
    requires: tuple[str, ...] = ()
    group: str | None = None


class Catalog(_Part, kw_only=True):
    """A method catalog (validated by :mod:`perfledger.events.catalog`).

    Attributes:
        catalog_id, version: its identity.
        features: feature name -> description.
        architectures: ``sm_XX`` -> the features that architecture has, listed explicitly (an
            architecture never inherits features from a number comparison).
        groups: coupled group name -> description (R22).
        derived: metrics derived from recorded ones.
        bottleneck_change_min: the relative change of a metric that counts as a changed
            bottleneck when reusing an ineffective method (R21), e.g. ``0.2``.
        axis_metrics: axis -> metric names, most telling first: the per-axis digest of a
            profile keeps the first ``ncu_num`` of them that were recorded.
        methods: every method, per axis in strict priority order.
    """

    catalog_id: str
    version: str
    features: dict[str, str]
    architectures: dict[str, tuple[str, ...]]
    groups: dict[str, str] = {}
    derived: tuple[DerivedMetric, ...] = ()
    bottleneck_change_min: float = 0.2
    axis_metrics: dict[str, tuple[str, ...]] = {}
    methods: tuple[CatalogMethod, ...]


# ------------------------------------------------------------------------------ parts


class SourceFile(_Part, kw_only=True):
    """A source file by name and derived content hash (``blake3:<hex>`` of its UTF-8 text)."""

    name: str
    content_hash: str


class Param(_Part, kw_only=True):
    """A kernel parameter as parsed from the entry point: name and C type (``int``,
    ``const float*``); ``integer`` marks a scalar integer that dims must give."""

    name: str
    ctype: str
    integer: bool


class Correctness(_Part, kw_only=True):
    """A correctness check: ``correct``, the number of trials, the largest error seen (relative
    L2 or absolute, per ``detail``), the tolerance and a one-line detail."""

    correct: bool
    trials: int
    max_error: float | None = None
    tolerance: float | None = None
    detail: str = ""


class Timing(_Part, kw_only=True):
    """Timing of one subject: its samples (ms), their median (derived) and why sampling stopped."""

    samples_ms: tuple[float, ...]
    median_ms: float
    stop_reason: str = ""


class LoopPair(_Part, kw_only=True):
    """One paired, interleaved measurement: the current best's and the candidate's samples (ms)
    from one block (ABBA order)."""

    ref_ms: tuple[float, ...]
    cand_ms: tuple[float, ...]


class Skipped(_Part, kw_only=True):
    """A higher-priority method that was not chosen and why (R24); ``detail`` for people."""

    method: str
    reason: SkipReason
    detail: str = ""


class BottleneckEvidence(_Part, kw_only=True):
    """Evidence that the bottleneck changed since a method was found ineffective (R21): the
    metric, and its values in the input profile of the iteration that found it ineffective and
    of this iteration (derived from the recorded profiles)."""

    metric: str
    before: float
    after: float
    relative_change: float


class AxisSelection(_Part, kw_only=True):
    """One axis of a selection: the chosen method, the skipped higher-priority ones, and (only
    when reusing an ineffective method) the evidence that the bottleneck changed (R21)."""

    chosen: str
    skipped: tuple[Skipped, ...] = ()
    reuse_evidence: BottleneckEvidence | None = None


# ------------------------------------------------------------------------------ payloads


class RunSetUp(_Payload, kw_only=True):
    """A loop run is set up.

    Attributes:
        run_id: the run's id.
        subject_kind: ``cuda`` (a ``.cu`` kernel timed by the CuPy harness) or ``workload`` (a
            command printing one JSON object, the CPU stand-in).
        baseline, reference: the baseline kernel and the reference, by derived content hash.
        entry: the kernel's entry point; params: its parsed parameters.
        dims: integer dimensions (every integer parameter is given one).
        launch: launch configuration as given (``grid``/``block`` expressions), may be empty.
        iterations: planned iterations; ncu_num: top metrics kept per axis.
        min_effect: the run's minimum effect (ratio): "improved" needs the CI's lower end above it.
        sm_arch: the device's architecture (``sm_90``), the key of the catalog's feature map.
        environment: the environment identity (missing items are ``None``); environment_id:
            blake3 of its canonical form (derived).
        catalog, catalog_hash: the method catalog and the blake3 of its TOML text (derived).
        baseline_check: the baseline's correctness; baseline_timing: its timing (ms).
        reference_timing: the reference's timing (ms), when it could be timed.
        driver: the workload driver's argv template (workload subjects).
        limitations: what could not be measured (R16: ``ERR_NVGPUCTRPERM``, no ncu, ...).
    """

    run_id: str
    subject_kind: SubjectKind
    baseline: SourceFile
    reference: SourceFile
    entry: str
    params: tuple[Param, ...]
    dims: dict[str, int]
    launch: dict[str, str] = {}
    iterations: int
    ncu_num: int
    min_effect: float
    sm_arch: str
    environment: dict[str, str | None]
    environment_id: str
    catalog: Catalog
    catalog_hash: str
    baseline_check: Correctness
    baseline_timing: Timing
    reference_timing: Timing | None = None
    driver: tuple[str, ...] = ()
    limitations: tuple[str, ...] = ()


class ProfileRecorded(_Payload, kw_only=True):
    """One profile of one kernel, keyed by (run, iteration, attempt, role).

    Attributes:
        role: ``input`` (the kernel an iteration starts from, attempt 0) or ``candidate`` (an
            attempt's kernel, attempt >= 1).
        kernel_hash: the profiled kernel's content hash.
        tool, tool_version: the profiler (``ncu``) and its version.
        metrics: metric name -> value in ``units[name]``; empty when the tool could not read
            counters (R16: a limitation, never zeros).
        top: axis -> up to ``ncu_num`` metric names, most telling first (the digest).
        limitations: what the tool could not measure (``ERR_NVGPUCTRPERM``, ...).
    """

    run_id: str
    iteration: int
    attempt: int
    role: ProfileRole
    kernel_hash: str
    tool: str
    tool_version: str
    metrics: dict[str, float] = {}
    units: dict[str, str] = {}
    top: dict[str, tuple[str, ...]] = {}
    limitations: tuple[str, ...] = ()


class AttemptRecorded(_Payload, kw_only=True):
    """A candidate that failed its correctness check (R25: at most
    :data:`MAX_CORRECTNESS_ATTEMPTS` per iteration), with the selection it implemented."""

    run_id: str
    iteration: int
    attempt: int
    kernel: SourceFile
    selection: dict[str, AxisSelection]
    correctness: Correctness


class IterationClosed(_Payload, kw_only=True):
    """An iteration is closed.

    Attributes:
        status: ``improved`` (the verdict passed: the candidate becomes the best),
            ``not_improved`` (its methods are recorded ineffective, R21) or
            ``failed_correctness`` (every attempt failed, R25).
        attempt: the attempt that closed it.
        kernel: the candidate (the last failed one for ``failed_correctness``).
        parent_hash: the best kernel the iteration started from.
        selection: axis -> the chosen method and the skipped higher-priority ones (R19-R24).
        analysis_hash: blake3 of the analysis text (the text is in the request).
        correctness: the candidate's correctness.
        pairs: paired interleaved timing, best (``ref_ms``) vs candidate (``cand_ms``).
        verdict: derived from the pairs against the run's minimum effect (R12 statistics).
        best_median_ms, cand_median_ms: medians of all samples per subject (derived).
        ratio_to_best: candidate / previous best median time (< 1 is faster) (derived).
        ratio_to_reference: candidate / reference median time, when the reference was timed.
        best_hash: the best kernel after this iteration (derived).
    """

    run_id: str
    iteration: int
    attempt: int
    status: IterationStatus
    kernel: SourceFile
    parent_hash: str
    selection: dict[str, AxisSelection]
    analysis_hash: str
    correctness: Correctness
    pairs: tuple[LoopPair, ...] = ()
    verdict: DerivedVerdict | None = None
    best_median_ms: float | None = None
    cand_median_ms: float | None = None
    ratio_to_best: float | None = None
    ratio_to_reference: float | None = None
    best_hash: str


class RunFinalized(_Payload, kw_only=True):
    """A run is finalized: the best kernel, and the baseline-vs-best headline derived from a
    final paired comparison (``None`` when the baseline stayed the best)."""

    run_id: str
    best_hash: str
    best_iteration: int
    pairs: tuple[LoopPair, ...] = ()
    headline: DerivedVerdict | None = None
    baseline_median_ms: float | None = None
    best_median_ms: float | None = None
    stop_reason: str


#: At most this many correctness-checked attempts per iteration (R25: the first try and at most
#: two retries, which satisfies SPEC.md's "retried at most 3 times"); after the last failure the
#: iteration closes as ``failed_correctness``.
MAX_CORRECTNESS_ATTEMPTS = 3

LOOP_SUMMARIES = {
    RunSetUp: lambda p: f"{p.run_id}: {p.baseline.name} on {p.sm_arch}, {p.iterations} iterations",
    ProfileRecorded: lambda p: f"{p.run_id} iter {p.iteration} attempt {p.attempt} {p.role}",
    AttemptRecorded: lambda p: f"{p.run_id} iter {p.iteration} attempt {p.attempt} incorrect",
    IterationClosed: lambda p: f"{p.run_id} iter {p.iteration}: {p.status}",
    RunFinalized: lambda p: f"{p.run_id}: best {p.best_hash[:19]} (iteration {p.best_iteration})",
}

#: The schema version of every loop kind from which its request's declared ranges are checked
#: (SPEC.md section 6, "Ranges": iteration and attempt numbers, trials, dimensions, sample
#: times); requests recorded under version 1 are re-decided without them.
RANGES_LOOP = 2
#: kind -> the schema version from which its request's declared ranges are checked.
LOOP_RANGED_FROM = {_type.__name__: RANGES_LOOP for _type in LOOP_SUMMARIES}


def _same_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Upcaster of a version whose payload did not change, only its request's checks."""
    return payload


for _type, _summary in LOOP_SUMMARIES.items():
    register_kind(KindSpec(_type.__name__, RANGES_LOOP, _type, {1: _same_payload},
                           summary=_summary))  # fmt: skip

#: The loop's decision kinds: appended only through their operations' deciders.
LOOP_DECISION_KINDS = frozenset(_type.__name__ for _type in LOOP_SUMMARIES)
