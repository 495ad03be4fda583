"""The event vocabulary of the optimization workflow (SPEC.md section 3, rules R1-R18).

Every kind is a frozen msgspec Struct (``forbid_unknown_fields``) tagged with its kind name in the
field ``kind``; :data:`WorkflowPayload` is the tagged union of them all, and each is registered
with :func:`perfledger.events.kinds.register_kind` at import time (``perfledger.events`` imports
this module, so the kinds are always known).

Conventions: ratios are plain floats (``0.05`` = 5 %); times carry their unit in the name
(``wall_s``); metric values are in the unit the Target declares for that metric. Fields described
as *derived* are computed by the deciders (``perfledger.commands``) from the request and the state,
never supplied by a caller; an auditor re-derives them on replay.

The kernel-iteration kinds (R19-R25: ``RunSetUp``, ``IterationClosed``, ``RunFinalized``) are not
part of this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import msgspec

from perfledger.events.identity import SamplesIdentity, Snapshot
from perfledger.events.kindspec import KindSpec, register_kind

Direction = Literal["lower_is_better", "higher_is_better"]
#: The primary metric's statistic; ``p95``/``p99`` are tail statistics (R7: no numeric bound).
Statistic = Literal["mean", "median", "p95", "p99", "throughput"]
#: Applicability of evidence to a candidate's replacement boundary (R6).
Applicability = Literal["same_boundary", "conservative_upper_bound", "diagnostic"]
#: What an input of an opportunity claim is used for (R6: only non-diagnostic inputs may bound).
EvidenceUse = Literal["coverage", "local_speedup", "added_cost", "exposure", "context"]
Layer = Literal["kernel", "workload", "service"]
#: Formal stages after the baseline (R11): ``screen`` -> ``target`` -> ``final_audit``.
Stage = Literal["screen", "target", "final_audit"]
#: Stages whose samples can pass a verdict and support a champion (R11, R13).
FORMAL_STAGES = ("target", "final_audit")
#: What a failure or rejection closes (R9, R15), from narrowest to widest.
Scope = Literal["implementation", "integration", "mechanism"]
#: The premise a reconciliation corrects (R14).
Premise = Literal["applicability", "scope", "coverage", "exposure", "cost"]
Approach = Literal["new", "reuse", "backport", "adapter"]
ComponentKind = Literal["kernel", "communication_primitive", "backend_adapter"]
Status = Literal["pass", "fail", "inconclusive"]
HostCategory = Literal[
    "driver", "counter_permissions", "clocks", "power", "services", "container_runtime", "other"
]

#: Tail statistics: an opportunity claim states exposure reasoning instead of a bound (R7).
TAIL_STATISTICS = frozenset({"p95", "p99"})
#: Environment identity fields; ``None`` or ``"unknown"`` marks missing lineage (R2).
ENVIRONMENT_FIELDS = (
    "gpu",
    "driver",
    "cuda",
    "toolkit",
    "container_base",
    "container_overlay",
    "container_runtime",
)
#: ``ChampionSelected.previous`` / handoff ``champion`` value meaning "no champion: the original".
ORIGINAL = "original"


class _Part(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Base of the nested parts of payloads."""


class _Payload(
    msgspec.Struct,
    frozen=True,
    forbid_unknown_fields=True,
    kw_only=True,
    tag_field="kind",
    tag=True,
):
    """Base of the workflow payloads: tagged by kind name in the field ``kind``."""


# --------------------------------------------------------------------------- targets (R1)


class MetricSpec(_Part, kw_only=True):
    """A metric: ``name``, ``unit`` (e.g. ``ms``, ``tokens/s``), ``direction`` and ``statistic``."""

    name: str
    unit: str
    direction: Direction
    statistic: Statistic = "median"
    #: for a rate (``tokens/s``): the metric, reported with every call, counting its work
    #: (``tokens``); the wall-clock check turns the rate into time with it (R12)
    #: (absent when none: payloads recorded before it encode as they did)
    work_metric: str | msgspec.UnsetType = msgspec.UNSET


class Guardrail(_Part, kw_only=True):
    """A constraint: ``metric`` may regress at most ``allowed_regression`` (ratio, >= 0) (R12)."""

    metric: str
    unit: str
    direction: Direction
    allowed_regression: float
    work_metric: str | msgspec.UnsetType = msgspec.UNSET  # as MetricSpec.work_metric


class Secondary(_Part, kw_only=True):
    """A pre-declared secondary metric and the improvement ``threshold`` (ratio) that counts as a
    gain on it (R13: a secondary-only gain is a local result, never a champion)."""

    name: str
    unit: str
    direction: Direction
    threshold: float
    work_metric: str | msgspec.UnsetType = msgspec.UNSET  # as MetricSpec.work_metric


class Budget(_Part, kw_only=True):
    """A budget or its use: wall-clock seconds and GPU seconds."""

    wall_s: float
    gpu_s: float


class TargetDefinition(_Part, kw_only=True):
    """What a Target freezes (R1). A frozen Target never changes; a new one supersedes it.

    Attributes:
        target_id: the Target's id (unique in the ledger).
        title: one-line description.
        primary: the primary metric; it alone decides candidates and completion.
        min_effect: minimum relative effect on the primary (ratio, > 0; 0.05 = 5 %).
        guardrails: constraints with allowed regressions.
        secondaries: pre-declared secondary metrics with thresholds.
        scope: allowed modification scope, as path globs (``src/kernels/**``).
        risk_boundary: what must not be risked (text).
        budget: wall and GPU seconds allowed.
        host_advice_only: host changes are advice only (R16; default yes).
        diagnostic: a diagnostic Target binds reports only, never a workload claim (R2).
        plausible_ratio: the widest candidate/reference ratio of the primary (a ratio > 1,
            either way: 10 flags a case measured more than 10x faster or slower) that is
            plausible (R12); a case beyond it is flagged on its samples and blocks champion
            selection until another actor's review explains it. Absent (not null) when not
            declared: :data:`DEFAULT_PLAUSIBLE_RATIO`.
    """

    target_id: str
    title: str
    primary: MetricSpec
    min_effect: float
    guardrails: tuple[Guardrail, ...] = ()
    secondaries: tuple[Secondary, ...] = ()
    scope: tuple[str, ...]
    risk_boundary: str
    budget: Budget
    host_advice_only: bool = True
    diagnostic: bool = False
    plausible_ratio: float | msgspec.UnsetType = msgspec.UNSET


#: The plausible bound of a measured ratio when the Target declares none (R12): 10x either way.
DEFAULT_PLAUSIBLE_RATIO = 10.0


class TargetFrozen(_Payload, kw_only=True):
    """A Target is frozen (R1)."""

    target: TargetDefinition


class TargetSuperseded(_Payload, kw_only=True):
    """Target ``target_id`` is superseded by ``new_target`` (frozen by this same event) (R1)."""

    target_id: str
    reason: str
    new_target: TargetDefinition


# --------------------------------------------------------------------------- readiness (R2)


class Original(_Part, kw_only=True):
    """The original's identity: ``content_hash`` (e.g. ``sha256:...`` of its source tree) and,
    where the driver declares a ``{subject}`` place, its ``snapshot`` (R11; absent, not null,
    otherwise, so readiness recorded before snapshots existed encodes as it did)."""

    content_hash: str
    label: str = ""
    snapshot: Snapshot | msgspec.UnsetType = msgspec.UNSET
    #: why the original's code cannot be snapshotted (a driver without a ``{subject}`` place,
    #: from :data:`R11_SUBJECT_OWED`): results are not bound to code, and claims say so
    unsnapshotted: str | msgspec.UnsetType = msgspec.UNSET


class TestSet(_Part, kw_only=True):
    """The real test set, supplied by the user (R2): its hash and case count."""

    hash: str
    case_count: int
    supplied_by: Literal["user"] = "user"
    cases: tuple[str, ...] = ()


class Driver(_Part, kw_only=True):
    """The driver command: argv, extra environment, working directory."""

    argv: tuple[str, ...]
    env: dict[str, str] = {}
    cwd: str | None = None


class Environment(_Part, kw_only=True):
    """The environment identity (R2); ``None`` or ``"unknown"`` marks a missing field."""

    gpu: str | None = None
    driver: str | None = None
    cuda: str | None = None
    toolkit: str | None = None
    container_base: str | None = None
    container_overlay: str | None = None
    container_runtime: str | None = None


#: How a primary verdict aggregates its test cases (R12): the geometric mean of per-case ratios,
#: the test set's total (sum of the per-case statistics), or every case must pass on its own.
Aggregation = Literal["geomean", "total", "every_case"]


class Statistics(_Part, kw_only=True):
    """Statistical requirements (R2, R5, R12): valid pairs per case (>= 5), CI level, resamples;
    how the primary verdict aggregates the cases (``aggregation``), whether a case whose CI lies
    wholly on the losing side may coexist with a pass (``allow_case_regression``), whether
    formal stages may use samples recorded from outside perfledger (``allow_outside_samples``)
    and ``allow_explained_foreign_activity`` (R17), which decided whether formal stages may pass
    with explained foreign activity on more than 20 % of their pairs only for verdicts and final
    audits recorded before :data:`R17_FOREIGN_SHARE_BY_REVIEW_VERDICT`: from it the flag decides
    nothing (a review by another actor does; :mod:`perfledger.commands.workflow.foreign_share`),
    and a readiness that sets it is recorded with a warning."""

    min_pairs_per_case: int = 5
    confidence: float = 0.95
    resamples: int = 10_000
    aggregation: Aggregation = "geomean"
    allow_case_regression: bool = False
    allow_outside_samples: bool = False
    allow_explained_foreign_activity: bool = False


class Accuracy(_Part, kw_only=True):
    """How a workload's outputs are judged (R5; SPEC.md section 5, "Workload driver"):
    ``compare`` ``exact`` or ``allclose`` (the measuring process compares each candidate output
    with the reference's of the same pair: ``|cand - ref| <= atol + rtol * |ref|``, NaN never
    equal; :mod:`perfledger.kernels.workload.outputs`), or ``self_reported`` (outputs cannot be compared:
    the subject's own ``correct`` is all there is). ``rtol``: a ratio; ``atol``: in the output's
    units."""

    compare: Literal["exact", "allclose", "self_reported"]
    rtol: float = 0.0
    atol: float = 0.0


class ReadinessRecorded(_Payload, kw_only=True):
    """Readiness of a Target (R2).

    Attributes:
        environment_id: derived: blake3 hex of the canonical environment identity; compared
            samples must carry it (R11).
        missing_lineage: derived: environment fields that are missing or ``unknown`` (claims are
            narrowed to what is known).
        reports: evidence ids a diagnostic Target binds instead of a workload.
        accuracy: how the measuring process judges the outputs (absent, not null, where the
            readiness declares none, so readiness recorded before encodes as it did).
    """

    target_id: str
    original: Original
    test_set: TestSet | None = None
    accuracy_rule: str | None = None
    driver: Driver | None = None
    environment: Environment
    statistics: Statistics
    reports: tuple[str, ...] = ()
    environment_id: str
    missing_lineage: tuple[str, ...] = ()
    accuracy: Accuracy | msgspec.UnsetType = msgspec.UNSET


class MetricAuditRecorded(_Payload, kw_only=True):
    """The audit of how a metric is computed (R3); ``matches_target`` False makes results of the
    Target diagnostic only."""

    target_id: str
    metric: str
    numerator: str
    denominator: str
    unit: str
    source: str
    reconstructed: bool
    matches_target: bool
    notes: str = ""


class BaselineRecorded(_Payload, kw_only=True):
    """The original's baseline (R4): repeated samples of the primary, their median (derived)."""

    target_id: str
    original_hash: str
    metric: str
    unit: str
    values: tuple[float, ...]
    call_ids: tuple[str, ...] = ()
    environment_id: str
    median: float
    #: the test case of each value, where given
    cases: tuple[str, ...] = ()
    #: derived: the median of each case's values (metric units), where cases are given
    per_case_median: dict[str, float] = {}
    #: derived (schema :data:`R4_MEASURED_BASELINE` on): ``perfledger`` when the values were
    #: re-derived from the original's raw per-call table attached as ``raw_table`` (``perfledger
    #: measure baseline``), ``declared`` when typed (recorded, deciding nothing: the Target's
    #: baseline stays the latest measured one); unset (not encoded, so older states hash as
    #: before) for a baseline recorded before, which keeps its meaning
    source: str | msgspec.UnsetType = msgspec.UNSET
    #: the attached raw table the values were re-derived from (``source == "perfledger"``)
    raw_table: str | msgspec.UnsetType = msgspec.UNSET


class ResolutionEstimated(_Payload, kw_only=True):
    """The measurement resolution (R4): the smallest relative effect (ratio) an A/A comparison
    of the original against itself can tell from noise."""

    target_id: str
    method: str
    resolution: float
    repeats: int
    notes: str = ""
    #: per test case: the case's own resolution (ratio); ``resolution`` is their maximum
    per_case: dict[str, float] = {}
    #: derived (schema :data:`R4_MEASURED_RESOLUTION` on): ``perfledger`` when the figures were
    #: re-derived from the A/A raw table attached as ``raw_table``, ``declared`` when typed
    #: (recorded, deciding nothing); unset (not encoded, so older states hash as before) for a
    #: resolution recorded before, which keeps its meaning
    source: str | msgspec.UnsetType = msgspec.UNSET
    #: the attached A/A raw table the figures were re-derived from (``source == "perfledger"``)
    raw_table: str | msgspec.UnsetType = msgspec.UNSET
    #: derived (schema :data:`R11_WATCHED_AGAINST_AA` on, workload A/A tables): test case ->
    #: the median of the A/A's per-call medians of the primary (both sides, its unit): the
    #: reference's interleaved figure that the reference watch compares formal stages with;
    #: unset (not encoded) before, or for a kernel A/A
    per_case_median: dict[str, float] | msgspec.UnsetType = msgspec.UNSET


# --------------------------------------------------------------------------- evidence (R6, R10)


class Tool(_Part, kw_only=True):
    """The tool that produced evidence and its version (unknown versions are refused, R6)."""

    name: str
    version: str


class Fact(_Part, kw_only=True):
    """One fact: ``name``, ``value`` in ``unit`` (``None`` when the tool reported none)."""

    name: str
    value: float | None
    unit: str
    note: str = ""


class KernelBoundary(_Part, kw_only=True):
    """One kernel a report measured: ``key`` (``k0``) prefixes its facts' names; ``grids`` and
    ``blocks`` are ``"(x, y, z)"`` launch shapes; ``streams`` the stream ids."""

    key: str
    name: str
    launches: int
    grids: tuple[str, ...] = ()
    blocks: tuple[str, ...] = ()
    streams: tuple[str, ...] = ()


class Boundary(_Part, kw_only=True):
    """The boundary evidence measured (R6): kernels, the shapes it ran (free text) and whether
    the work ran inside a CUDA graph (``None``: not known)."""

    kernels: tuple[KernelBoundary, ...] = ()
    shapes: str = ""
    graph: bool | None = None


class Capture(_Part, kw_only=True):
    """Where a parsed report came from: the capture ``command`` and its ``exit_status`` (for
    ``evidence ncu``), or the imported ``source_file``; ``source_hash`` is the blake3 of the raw
    report (stored as the event's artifact ``report``); ``layout`` the recognised format and
    ``grouping`` the digit grouping accepted (``none`` under ``LC_ALL=C``); ``parser`` the
    version of perfledger's parsers that derived the facts ("" before it was recorded), which
    ``audit`` re-derives them with."""

    command: tuple[str, ...] = ()
    exit_status: int | None = None
    source_file: str = ""
    source_hash: str = ""
    layout: str = ""
    grouping: str = ""
    parser: str = ""


class EvidenceRecorded(_Payload, kw_only=True):
    """Profiler or compiler facts (R6), with their layer; ``limitations`` records what the tool
    could not measure (R16: ``ERR_NVGPUCTRPERM`` is a limitation, never zero metrics).
    ``applicability`` to a replacement boundary, the measured ``boundary`` and the ``capture``
    are set by parsed reports (``evidence add --kind``, ``evidence ncu``); ``None`` on evidence
    recorded before they existed."""

    evidence_id: str
    layer: Layer
    tool: Tool
    facts: tuple[Fact, ...] = ()
    limitations: tuple[str, ...] = ()
    target_id: str | None = None
    description: str = ""
    report_hash: str | None = None
    applicability: Applicability | None = None
    boundary: Boundary | None = None
    capture: Capture | None = None


class Source(_Part, kw_only=True):
    """A source consulted by an upstream check: name, URL, version or commit."""

    name: str
    url: str = ""
    version: str


class UpstreamCheckRecorded(_Payload, kw_only=True):
    """An upstream check before a new kernel, primitive or adapter (R10)."""

    check_id: str
    target_id: str | None = None
    component: str
    component_kind: ComponentKind
    sources: tuple[Source, ...]
    equivalent_exists: bool
    equivalent: str | None = None
    blocker: str | None = None


# --------------------------------------------------------------------------- experiments (R7-R11)


class ClaimEvidence(_Part, kw_only=True):
    """One evidence input of a claim: its id, applicability and what it is used for (R6)."""

    evidence_id: str
    applicability: Applicability
    used_for: EvidenceUse


class CandidateScope(_Part, kw_only=True):
    """The candidate's scope: replaced region, real shapes, execution form after lowering, graph,
    dispatch, fallback and overlap (R7)."""

    replaced_region: str
    shapes: tuple[str, ...] = ()
    execution_form: str


class Exposure(_Part, kw_only=True):
    """Exposure reasoning of a tail-primary claim (R7): affected share of requests (ratio) and
    the critical path."""

    affected_share: float
    critical_path: str


class ImprovementInterval(_Part, kw_only=True):
    """A predicted end-to-end improvement of the primary: ``[low, high]`` (ratios) (R14)."""

    low: float
    high: float


class OpportunityClaim(_Part, kw_only=True):
    """The opportunity claim an experiment freezes (R7).

    Attributes:
        coverage: ``f``, share of the primary exposed on the critical path in the replaced
            component (ratio in (0, 1]); None for a tail primary.
        local_speedup: ``s``, expected local speedup of the component (ratio > 0).
        added_cost: added cost elsewhere, as a share of the original (ratio >= 0).
        stated_bound: the caller's end-to-end Amdahl bound ``1/((1-f)+f/s+c)``, checked.
        exposure: exposure reasoning, instead of a bound, for a tail primary.
        expected_improvement: the predicted end-to-end improvement of the primary, in the
            verdict's units (R12): ``(ref - cand)/ref`` for a lower-is-better primary (the
            fraction of time saved: 0.2 = 1.25x), ``(cand - ref)/ref`` for a higher-is-better one
            (from :data:`R14_ONE_IMPROVEMENT` on; claims recorded before state it in the bound's
            units, speedup - 1, converted as ``g/(1+g)`` for a lower-is-better primary when a
            result is compared with it). Required from :data:`R14_STATED_INTERVAL` on (claims
            recorded before it default to ``[min(0, bound - 1), bound - 1]``). A target result
            whose CI lies outside it must be reconciled (R14).
    """

    evidence: tuple[ClaimEvidence, ...]
    scope: CandidateScope
    replacement_boundary: str
    coverage: float | None = None
    local_speedup: float | None = None
    added_cost: float = 0.0
    stated_bound: float | None = None
    exposure: Exposure | None = None
    expected_improvement: ImprovementInterval | None = None


class Preregistration(_Part, kw_only=True):
    """What a failure would reject (R9); ``mechanism`` needs the discriminating evidence."""

    rejects: Scope
    discriminating_evidence: str | None = None


class Candidate(_Part, kw_only=True):
    """The candidate's identity and the paths it changes (each inside the Target's scope, R11).

    Attributes:
        content_hash: from ``ExperimentCreated`` schema :data:`R11_CANDIDATE_SNAPSHOT` on a
            Target bound to code, computed: ``blake3:`` and the snapshot's tree digest; else the
            typed value (``content_hash_source`` ``declared``).
        changed_paths: typed (old rule), or computed against the reference at creation.
        snapshot: the candidate directory's snapshot, taken at ``experiment create`` (schema
            :data:`R11_CANDIDATE_SNAPSHOT` on a Target bound to code); absent otherwise.
        content_hash_source: ``computed`` (from the snapshot) or ``declared`` (typed, proving
            nothing); absent on experiments created before schema :data:`R11_CANDIDATE_SNAPSHOT`.
    """

    content_hash: str
    label: str = ""
    changed_paths: tuple[str, ...] = ()
    snapshot: Snapshot | msgspec.UnsetType = msgspec.UNSET
    content_hash_source: Literal["computed", "declared"] | msgspec.UnsetType = msgspec.UNSET


class NewComponent(_Part, kw_only=True):
    """A new non-trivial kernel, communication primitive or backend adapter (R10)."""

    component_kind: ComponentKind
    description: str
    upstream_check_id: str | None = None


class ClaimFigures(_Part, kw_only=True):
    """Derived from a claim by the R7 arithmetic (:mod:`perfledger.projections.amdahl`).

    Attributes:
        bound: end-to-end speedup bound (ratio, 1.0 = none); None for a tail primary.
        s_min: local speedup needed to cross the minimum effect; None when impossible (or tail).
        r_min: fraction of the component's time that must be cut; None when impossible.
        reachable: whether any local speedup can cross the minimum effect.
        below_min_effect: the bound is below ``1 + min_effect`` (R8).
        below_resolution: the bound is below ``1 + resolution`` (R8).
        predicted_low, predicted_high: the predicted improvement interval (ratios) (R14), in the
            claim's units: the verdict's from :data:`R14_ONE_IMPROVEMENT` on, speedup - 1 before.
    """

    bound: float | None
    s_min: float | None
    r_min: float | None
    reachable: bool
    below_min_effect: bool
    below_resolution: bool
    predicted_low: float
    predicted_high: float


class ExperimentCreated(_Payload, kw_only=True):
    """An experiment with its frozen opportunity claim and preregistration (R7-R10)."""

    experiment_id: str
    target_id: str
    title: str
    candidate: Candidate
    approach: Approach = "new"
    new_component: NewComponent | None = None
    claim: OpportunityClaim
    preregistration: Preregistration
    serves_secondary: str | None = None
    merge_plan: str | None = None
    figures: ClaimFigures


# --------------------------------------------------------------------------- samples (R5, R11, R17)


class Monitor(_Part, kw_only=True):
    """The monitor's time-aligned observations of a call's window (R17).

    Attributes:
        observed: the monitor was running for the whole window.
        foreign_activity: other processes, utilization or clock/power events above threshold.
        explained: why the foreign activity does not matter, or None (unexplained).
        flags: observation labels (``clock_event:HW_SLOWDOWN``, ``foreign_pid``, ...).
    """

    observed: bool
    foreign_activity: bool = False
    explained: str | None = None
    flags: tuple[str, ...] = ()


class OutputCheck(_Part, kw_only=True):
    """A call's output as the measuring process judged it (R5; :mod:`perfledger.derive.outputs`).

    Attributes:
        method: the rule's version (``outputs_v2``; ``outputs_v1`` before dtypes were held
            under ``allclose``); compare: ``exact`` or ``allclose``.
        self_correct: what the subject's own check said.
        blake3: hex digest of the output file (None when there was none, or unreadable);
            size: its bytes.
        ok: the reference's output was usable; the candidate's matched the reference's of the
            same pair. The call's ``correct`` is ``self_correct and ok``.
        reason: why not ``ok`` ('' when ok).
    """

    method: str
    compare: str
    self_correct: bool
    blake3: str | None = None
    size: int | None = None
    ok: bool
    reason: str = ""


class SubjectSample(_Part, kw_only=True):
    """One subject's result in one driver call: correctness and performance come from the same
    call (R11). ``values``: metric name -> samples in the metric's unit. ``wall_s``: the
    workload driver's own wall time of the call (seconds), against which self-reported times
    are checked (:class:`WallCheck`); None where no driver timed the call. ``output``: where
    the driver judged the call's output (absent otherwise: correctness judged by the subject)."""

    call_id: str
    correct: bool
    values: dict[str, tuple[float, ...]]
    environment_id: str
    wall_s: float | None = None
    output: OutputCheck | msgspec.UnsetType = msgspec.UNSET


class PairRecord(_Part, kw_only=True):
    """One paired call of a case; ``same_process`` comparisons record both subjects from one
    call (equal ``call_id``) (R11)."""

    case: str
    ref: SubjectSample
    cand: SubjectSample
    same_process: bool = True
    monitor: Monitor | None = None


class Reference(_Part, kw_only=True):
    """What the candidate is compared with: the original or a champion (experiment id)."""

    kind: Literal["original", "champion"]
    content_hash: str
    experiment_id: str | None = None


class WallCheckCase(_Part, kw_only=True):
    """The wall-clock check of one time-like metric on one test case (R5, R12; rule in
    :mod:`perfledger.derive.wall_check`). All figures in seconds per call, medians over the
    case's valid pairs.

    Attributes:
        metric, case: what was checked; n_pairs: valid pairs with a driver wall time.
        reported_saving_s: reference minus candidate reported total (sum of a call's values).
        wall_saving_s: reference minus candidate driver wall time.
        excess_s: reported saving minus wall saving, the part of the saving the wall clock did
            not see (in the candidate's favour when positive); excess_low_s: its one-sided
            lower confidence bound (an order statistic of the pairs' excesses).
        resolution_s: the smallest excess the wall clock resolves on these pairs.
        tolerance_s: the excess allowed: ``rel * |reported_saving_s| + resolution_s``.
        status: ``flagged`` (excess beyond tolerance), ``unresolved`` (the reported saving is
            below what the wall clock resolves: not verifiable at this resolution) or
            ``consistent``.
    """

    metric: str
    case: str
    n_pairs: int
    reported_saving_s: float
    wall_saving_s: float
    excess_s: float
    excess_low_s: float
    resolution_s: float
    tolerance_s: float
    status: Literal["consistent", "unresolved", "flagged"]


class WallCheck(_Part, kw_only=True):
    """Self-reported times checked against the workload driver's wall clock (SPEC.md section 5).

    Attributes:
        method: the rule's version (``wall_v1``, ``wall_v2``); old samples are re-checked by
            their own.
        flagged: a case was flagged or a call reported more time than it took; a flagged
            formal stage cannot pass (R12) nor support a champion (R13).
        reasons: one line per flag, for people.
        cases: per metric and case.
        over_wall_calls: calls whose reported total exceeds their own wall time.
    """

    method: str
    flagged: bool
    reasons: tuple[str, ...] = ()
    cases: tuple[WallCheckCase, ...] = ()
    over_wall_calls: tuple[str, ...] = ()


class Provenance(_Part, kw_only=True):
    """Where paired samples come from (R5): ``perfledger`` (measured by ``perfledger measure``:
    the ``protocol``, its ``settings`` and the attached raw per-call table ``raw_table``) or
    ``outside`` (a pairs table written by hand or by another tool, recorded through
    ``samples record``)."""

    source: Literal["perfledger", "outside"]
    protocol: str = ""
    settings: dict[str, Any] = {}
    raw_table: str = ""


class SamplesRecorded(_Payload, kw_only=True):
    """Paired samples of one stage of an experiment (R5, R11, R17).

    Attributes:
        units: metric name -> unit of the values.
        ref_failures: derived: pairs whose reference failed its accuracy check (R11: the
            reference's failure, never the candidate's).
        cand_failures: derived: pairs whose candidate failed its accuracy check (R5).
        unexplained_activity: derived: pairs overlapping unexplained foreign activity (R17).
        identity: both subjects' snapshots and the derived changed paths (R11); absent on
            samples of a Target whose driver declares no ``{subject}`` place.
        wall_check: derived: self-reported times against the driver's wall clock, where the
            pairs carry the driver's wall times (None otherwise, and for samples recorded
            before the check existed).
        implausible: derived (schema :data:`R12_PLAUSIBLE_RATIO` on): test case -> the median
            per-pair candidate/reference ratio of the primary, for each case beyond the
            Target's plausible ratio either way; absent when none is.
    """

    samples_id: str
    target_id: str
    experiment_id: str
    stage: Stage
    reference: Reference
    candidate_hash: str
    test_set_hash: str
    environment_id: str
    units: dict[str, str]
    pairs: tuple[PairRecord, ...]
    ref_failures: int
    cand_failures: int
    unexplained_activity: int
    identity: SamplesIdentity | msgspec.UnsetType = msgspec.UNSET
    wall_check: WallCheck | None = None

    #: None only in samples recorded before provenance was kept (schema 1)
    provenance: Provenance | None = None
    implausible: dict[str, float] | msgspec.UnsetType = msgspec.UNSET
    #: derived (schema :data:`R11_REFERENCE_WATCHED` on): test case -> ``reference``,
    #: ``baseline`` (the primary's medians, its unit), ``slower_by`` and ``bound`` (relative),
    #: for each case of a formal stage whose reference (the original) ran slower than its
    #: baseline by more than the bound; unset (not encoded, so older events hash as before)
    #: when none did
    reference_slowed: dict[str, dict[str, float]] | msgspec.UnsetType = msgspec.UNSET


# --------------------------------------------------------------------------- verdicts (R12)


class DerivedCase(_Part, kw_only=True):
    """One test case's figures in a per-case derivation (R12).

    Attributes:
        case: the case; n_pairs: its valid pairs; n_values: per-call values per subject used.
        ref, ref_low, ref_high: the reference's statistic (the Target's: median, mean, p95, ...)
            over the case's calls and its bootstrap CI, in the metric's unit (absolute, per call).
        cand, cand_low, cand_high: the same for the candidate.
        estimate, ci_low, ci_high: the case's improvement (ratio; positive is better) and CI.
        resolution: the case's measured resolution (ratio).
        status: the case judged alone against the minimum effect and its resolution.
        regressed: the case's CI lies wholly on the losing side beyond its resolution.
    """

    case: str
    n_pairs: int
    n_values: int
    ref: float | None
    ref_low: float | None
    ref_high: float | None
    cand: float | None
    cand_low: float | None
    cand_high: float | None
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    resolution: float
    status: Status
    regressed: bool


class DerivedVerdict(_Part, kw_only=True):
    """A verdict as derived by :func:`perfledger.projections.verdicts.derive_verdict` (R12).

    Attributes:
        status: ``pass``, ``fail`` or ``inconclusive``; reason: why, in one sentence.
        direction: the metric's direction.
        estimate, ci_low, ci_high: median improvement and its bootstrap CI (ratios); None
            without enough pairs.
        min_effect: the Target's minimum effect; resolution: the measured resolution (ratios).
        n_pairs: valid pairs used; n_excluded: pairs excluded for a failed accuracy check (R5);
        pairs_per_case: valid pairs per test case.
        degenerate: zero-width CI (identical values); clear_loss: the CI is wholly below zero.
        wilcoxon_p: two-sided Wilcoxon signed-rank p-value, for information only.
        resamples, confidence, seed: the bootstrap's parameters.
        method: ``None`` for the pooled median of per-pair improvements (schema 1 verdicts);
            ``per_case/v1`` or ``per_case/v2`` for the per-case derivation of
            :mod:`perfledger.projections.verdict_cases`.
        statistic, aggregation: what the per-case derivation computed (the Target's).
        cases: per-case figures; blocking: cases whose regression blocked ``pass`` (and, under
            ``per_case/v2``, cases that lost more than the minimum effect).
    """

    status: Status
    reason: str
    direction: Direction
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    min_effect: float
    resolution: float
    n_pairs: int
    n_excluded: int
    pairs_per_case: dict[str, int]
    degenerate: bool
    clear_loss: bool
    wilcoxon_p: float | None
    resamples: int
    confidence: float
    seed: int
    method: str | None = None
    statistic: str | None = None
    aggregation: str | None = None
    cases: tuple[DerivedCase, ...] = ()
    blocking: tuple[str, ...] = ()


class DerivedGuardrail(_Part, kw_only=True):
    """A guardrail's derived verdict (R12): the signed regression (ratio, positive is worse), its
    CI against ``allowed_regression``, the valid pairs used and whether the CI is degenerate.
    Per-case derivations (``method`` set) also judge every case (``cases``: the case's
    improvement figures; a case's regression is ``-estimate``)."""

    metric: str
    status: Status
    reason: str
    regression: float | None
    ci_low: float | None
    ci_high: float | None
    allowed_regression: float
    n_pairs: int
    degenerate: bool
    method: str | None = None
    cases: tuple[DerivedCase, ...] = ()


class SecondaryVerdict(_Part, kw_only=True):
    """The verdict of a pre-declared secondary against its threshold (as its minimum effect)."""

    name: str
    verdict: DerivedVerdict


class VerdictRecorded(_Payload, kw_only=True):
    """A verdict derived from samples (R12), with the stage rules applied (R11, R17).

    Attributes:
        status: the decision status: the primary's, except ``inconclusive`` when the monitor saw
            unexplained activity (R17), a screen that would pass (R11: screens never pass), or a
            stale reference (R11).
        stale: the reference is no longer the current champion (R11).
        contradicts_claim: the primary's CI lies outside the claim's predicted interval, or (for
            claims recorded under :data:`R14_STATED_INTERVAL`) a failed screen of a claim whose
            interval lies at or above the minimum effect: a reconciliation is owed (R14).
        diagnostic_only: the metric audit found the metric does not match the Target (R3).
        notes: why the status differs from the primary's derived status, if it does; foreign
            activity explained after the samples (R17, ``ActivityExplained``); a reconciliation
            owed (R14, claims recorded under :data:`R14_STATED_INTERVAL`).
    """

    samples_id: str
    experiment_id: str
    target_id: str
    stage: Stage
    status: Status
    primary: DerivedVerdict
    guardrails: tuple[DerivedGuardrail, ...] = ()
    secondaries: tuple[SecondaryVerdict, ...] = ()
    stale: bool = False
    contradicts_claim: bool = False
    diagnostic_only: bool = False
    notes: tuple[str, ...] = ()
    #: the samples' provenance (R5): ``perfledger`` or ``outside``; None before schema 2
    samples_provenance: str | None = None
    #: the primary's unit (the per-case figures' unit); None before schema 2
    unit: str | None = None


class LocalResultRecorded(_Payload, kw_only=True):
    """A secondary-only gain, kept with its scenario; never a champion (R13)."""

    result_id: str
    target_id: str
    experiment_id: str
    samples_id: str
    metric: str
    scenario: str
    estimate: float
    ci_low: float
    ci_high: float


class CandidateRejected(_Payload, kw_only=True):
    """A rejection and what it closes (R15)."""

    experiment_id: str
    target_id: str
    closes: Scope
    reason: str
    samples_ids: tuple[str, ...] = ()
    evidence_ids: tuple[str, ...] = ()
    local_proxy: bool = False
    discriminating_evidence_ids: tuple[str, ...] = ()


class CorrectedModel(_Part, kw_only=True):
    """The corrected model of a reconciliation; numeric inputs are re-checked by R7 arithmetic."""

    description: str
    coverage: float | None = None
    local_speedup: float | None = None
    added_cost: float | None = None
    affected_share: float | None = None
    bound: float | None = None


class ReconciliationRecorded(_Payload, kw_only=True):
    """A prediction-error reconciliation (R14): the corrected premise and model."""

    target_id: str
    experiment_id: str
    premise: Premise
    corrected_model: CorrectedModel
    explanation: str


class ChampionSelected(_Payload, kw_only=True):
    """An explicit champion decision (R13): compare-and-swap against ``previous`` (what the
    caller saw: an experiment id or ``original``)."""

    target_id: str
    decision: Literal["select", "restore_original"]
    experiment_id: str | None = None
    samples_id: str | None = None
    candidate_hash: str | None = None
    previous: str
    reason: str = ""


class FinalAuditRecorded(_Payload, kw_only=True):
    """The final audit: the champion against the original (R13), derived from final-audit
    samples (R12)."""

    target_id: str
    samples_id: str
    champion: str
    status: Status
    primary: DerivedVerdict
    guardrails: tuple[DerivedGuardrail, ...] = ()
    notes: tuple[str, ...] = ()
    #: the samples' provenance (R5): ``perfledger`` or ``outside``; None before schema 2
    samples_provenance: str | None = None
    #: the primary's unit (the per-case figures' unit); None before schema 2
    unit: str | None = None
    #: R14 (schema :data:`R14_FINAL_AUDIT_OWES` on): the primary's CI lies wholly outside the
    #: champion's claimed interval, and a reconciliation is owed; unset (not encoded, so older
    #: states hash as before) before that schema
    contradicts_claim: bool | msgspec.UnsetType = msgspec.UNSET


class HostAdviceRecorded(_Payload, kw_only=True):
    """Host-change advice; never applied by the tool (R16)."""

    advice_id: str
    target_id: str | None = None
    category: HostCategory
    advice: str
    reason: str = ""
    limitation: str | None = None
    applied: Literal[False] = False


class RejectedDirection(_Part, kw_only=True):
    """A rejected direction and the scope it closes (R18)."""

    experiment_id: str
    closes: Scope


class GainFigure(_Part, kw_only=True):
    """A figure of the champion's gain on the primary as its verdict (or final audit) recorded
    it (R18; ratios of improvement; ``unit``: the primary's)."""

    experiment_id: str
    samples_id: str
    stage: str
    status: str
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    unit: str | None = None


class HandoffRecorded(_Payload, kw_only=True):
    """A handoff (R18). From schema :data:`R18_LEDGER_FILLED` on, everything the ledger knows
    is filled by the decider from the state, and a stated list must agree with it: ``champion``,
    ``primary_achieved``, ``local_results``, ``rejected``, ``prediction_corrections``; the
    champion's gain ``figures`` with their CIs, the ``owed`` obligations and the
    ``open_experiments`` are derived (absent before); ``gains``, ``unresolved_questions``,
    ``stop_reason``, ``resume_needs`` and ``feedback`` are the agent's free text (no figures)."""

    target_id: str
    primary_achieved: bool
    champion: str
    key_evidence: tuple[str, ...]
    gains: tuple[str, ...]
    local_results: tuple[str, ...]
    rejected: tuple[RejectedDirection, ...]
    prediction_corrections: tuple[str, ...]
    unresolved_questions: tuple[str, ...]
    stop_reason: str
    budget_used: Budget
    budget_left: Budget
    resume_needs: tuple[str, ...]
    feedback: str
    figures: tuple[GainFigure, ...] | msgspec.UnsetType = msgspec.UNSET
    owed: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET
    open_experiments: tuple[str, ...] | msgspec.UnsetType = msgspec.UNSET


class ActivityExplained(_Payload, kw_only=True):
    """Foreign activity in formal sample windows, explained after the samples were recorded
    (R17): verdicts and final audits of ``samples_id`` no longer count these windows as
    unexplained, and show the explanation where the verdict is.

    Attributes:
        samples_id, target_id, experiment_id: the samples whose windows are explained.
        pairs: indices (0-based, into the samples' pairs) of the windows explained; each
            overlapped foreign activity that was unexplained when the samples were recorded.
        explanation: why the activity does not matter to the performance attribution.
        explained_by: who explains it (the request's, else the deciding actor; from schema
            :data:`R17_EXPLAINED_BY_REVIEW`, derived: the actor who appended the review).
        review_id: the ``ReviewRecorded`` that is the evidence (schema
            :data:`R17_EXPLAINED_BY_REVIEW` on; absent before).
    """

    samples_id: str
    target_id: str
    experiment_id: str
    pairs: tuple[int, ...]
    explanation: str
    explained_by: str
    review_id: str | msgspec.UnsetType = msgspec.UNSET


class FormalRunStarted(_Payload, kw_only=True):
    """A formal-stage measurement is about to start (R14): appended before anything of a target
    or final-audit stage is measured, so that a run which never records its samples (killed,
    crashed, abandoned after a look at its figures) stays in the ledger and counts as failed.

    Attributes:
        target_id, experiment_id: the experiment measured.
        stage: ``target`` or ``final_audit`` (:data:`FORMAL_STAGES`).
        samples_id: the samples the run will record; no other run or samples may take it.
        protocol: the measuring protocol (``workload_abba``, ``kernel_harness_abba``,
            ``serving``, ...), as its samples' provenance will name it.
    """

    target_id: str
    experiment_id: str
    stage: Stage
    samples_id: str
    protocol: str


class ConflictResolved(_Payload, kw_only=True):
    """An explicit resolution of a conflict between concurrent decisions (SPEC.md section 2)."""

    target_id: str
    conflict_id: str
    keep: str
    reason: str


#: The tagged union of every workflow payload (tag field ``kind``).
WorkflowPayload = (
    TargetFrozen
    | TargetSuperseded
    | ReadinessRecorded
    | MetricAuditRecorded
    | BaselineRecorded
    | ResolutionEstimated
    | EvidenceRecorded
    | UpstreamCheckRecorded
    | ExperimentCreated
    | SamplesRecorded
    | VerdictRecorded
    | LocalResultRecorded
    | CandidateRejected
    | ReconciliationRecorded
    | ChampionSelected
    | FinalAuditRecorded
    | HostAdviceRecorded
    | HandoffRecorded
    | ConflictResolved
    | ActivityExplained
    | FormalRunStarted
)

_SUMMARIES = {
    TargetFrozen: lambda p: (
        f"{p.target.target_id}: {p.target.primary.name} "
        f"({p.target.primary.statistic}, min effect {p.target.min_effect * 100:g} %)"
    ),
    TargetSuperseded: lambda p: f"{p.target_id} -> {p.new_target.target_id}",
    ReadinessRecorded: lambda p: f"{p.target_id} (env {p.environment_id[:12]})",
    MetricAuditRecorded: lambda p: f"{p.target_id}/{p.metric} matches={p.matches_target}",
    BaselineRecorded: lambda p: (
        f"{p.target_id}: {p.metric} median {p.median:g} {p.unit}"
        + (" (declared: typed, decides nothing)" if p.source == "declared" else "")
    ),
    ResolutionEstimated: lambda p: f"{p.target_id}: resolution {p.resolution:g}",
    EvidenceRecorded: lambda p: f"{p.evidence_id} ({p.layer}, {p.tool.name} {p.tool.version})",
    UpstreamCheckRecorded: lambda p: f"{p.check_id}: equivalent={p.equivalent_exists}",
    ExperimentCreated: lambda p: f"{p.experiment_id} on {p.target_id}",
    SamplesRecorded: lambda p: f"{p.samples_id} ({p.stage}, {len(p.pairs)} pairs)",
    VerdictRecorded: lambda p: f"{p.samples_id}: {p.status}",
    LocalResultRecorded: lambda p: f"{p.result_id}: {p.metric}",
    CandidateRejected: lambda p: f"{p.experiment_id} closes {p.closes}",
    ReconciliationRecorded: lambda p: f"{p.experiment_id}: {p.premise}",
    ChampionSelected: lambda p: f"{p.target_id}: {p.experiment_id or ORIGINAL} ({p.decision})",
    FinalAuditRecorded: lambda p: f"{p.target_id}: {p.champion} {p.status}",
    HostAdviceRecorded: lambda p: f"{p.advice_id} ({p.category})",
    HandoffRecorded: lambda p: f"{p.target_id}: achieved={p.primary_achieved}",
    ConflictResolved: lambda p: f"{p.target_id}/{p.conflict_id}: keep {p.keep}",
    ActivityExplained: lambda p: f"{p.samples_id}: pairs {list(p.pairs)} explained",
    FormalRunStarted: lambda p: f"{p.samples_id} ({p.stage} of {p.experiment_id}) started",
}

#: The ``ExperimentCreated`` schema version from which every claim states its expected
#: improvement interval and a failed screen of a claim predicting at least the minimum effect
#: owes a reconciliation (R14); experiments recorded under version 1 keep the old rule (an
#: interval defaulting to ``[min(0, bound - 1), bound - 1]``, screens owing nothing).
R14_STATED_INTERVAL = 2
#: The ``ChampionSelected`` schema version from which an owed reconciliation blocks champion
#: selection (R14); selections recorded under version 1 were not blocked.
R14_BLOCKS_CHAMPION = 2
#: The ``ExperimentCreated`` schema version from which a claim may not cite evidence with a
#: stronger applicability than the evidence recorded (R6): diagnostic evidence cited as
#: ``same_boundary`` entered the bound before it.
R6_RECORDED_APPLICABILITY = 3
#: The ``ExperimentCreated`` schema version from which a claim may leave ``stated_bound`` out
#: (the tool computes and records the bound in ``figures.bound``) and a stated one is accepted
#: within a relative :data:`perfledger.projections.amdahl.STATED_BOUND_REL_TOLERANCE` (1e-6);
#: claims recorded under versions 1 and 2 keep the old rule (required, within 1e-9) (R7).
R7_COMPUTED_BOUND = 3
#: The ``ExperimentCreated`` schema version from which a claim's interval must be informative
#: (R14, :func:`perfledger.commands.workflow.rules.r14_interval_informative`): a claim predicting
#: a gain may not include a loss (``low >= 0``), and its upper end's speedup is at most
#: :data:`R14_MAX_SPAN` times its lower end's; claims recorded under versions 1-3 keep the
#: earlier rule (any non-empty interval up to the bound).
R14_INFORMATIVE_INTERVAL = 4
#: The ``ExperimentCreated`` schema version from which, on a Target bound to code (its readiness
#: recorded the original's snapshot), the candidate's directory is named at creation
#: (``candidate.subject``) and snapshotted there: its content hash is computed (``blake3:`` and
#: the tree digest; a typed one must equal it), it must differ from the reference's code, its
#: changed paths lie inside the scope, and every later samples event measures that snapshot. On
#: a Target without a subject directory the typed hash is recorded as ``declared`` (R11).
#: Experiments created before keep the typed hash.
R11_CANDIDATE_SNAPSHOT = 6
#: The ``HandoffRecorded`` schema version from which the decider fills what the ledger knows
#: (champion, achieved, gain figures with CIs, local results, rejections, reconciliations, owed
#: obligations, open experiments) and refuses a handoff whose lists contradict it, or whose free
#: text states a figure (R18); handoffs recorded before keep the old checks.
R18_LEDGER_FILLED = 3
#: The ``HandoffRecorded`` schema version from which a ``stop_reason`` whose words say the
#: primary was (or was not) achieved must agree with the ledger's ``primary_achieved`` (R18);
#: handoffs recorded before keep their free text unchecked.
R18_STOP_REASON_AGREES = 4
#: Widest accepted interval (R14): ``(1 + high) / (1 + low)`` at most this (a ratio of speedups).
R14_MAX_SPAN = 4.0
#: The ``ExperimentCreated`` schema version from which "improvement" has one meaning (R7, R12,
#: R14): a claim's ``expected_improvement`` is in the verdict's units, ``(ref - cand)/ref`` for a
#: lower-is-better primary (the fraction of time saved) and ``(cand - ref)/ref`` for a
#: higher-is-better one, and the claim's figures read the Target's minimum effect and resolution
#: in those units too (``r_min = (m + c)/f`` for a lower-is-better primary). Claims recorded under
#: earlier versions keep their meaning at audit: the interval in the bound's units (end-to-end
#: speedup - 1), converted to the verdict's units when a result is compared with it.
R14_ONE_IMPROVEMENT = 7
#: The ``ReadinessRecorded`` schema version from which the original's snapshot must cover every
#: file under the subject directory (R11, ``Snapshot.coverage``); readiness recorded under
#: version 1 snapshotted the files inside the Target's scope only.
R11_WHOLE_SUBJECT = 2
#: The ``ReadinessRecorded`` schema version from which a readiness whose formal stages take only
#: samples perfledger measured (not diagnostic, ``allow_outside_samples`` false) must declare the
#: driver's ``{subject}`` place, or say why the code cannot be snapshotted
#: (``original.unsnapshotted``, shown as narrowing the claims); readiness recorded before keeps
#: the old rule (typed ``changed_paths``, R11).
R11_SUBJECT_OWED = 3
#: The ``SamplesRecorded`` schema version from which measured samples must match their raw table
#: re-derived and bound to them (samples id, stage, ...; R5, :mod:`perfledger.commands.workflow.raw_table`).
R5_BOUND_RAW_TABLE = 3
#: The ``SamplesRecorded`` schema version from which a call whose output the driver judged is
#: correct only when its own check and the output comparison hold, and workload samples of a
#: Target whose readiness compares outputs must carry every call's output check (R5,
#: :mod:`perfledger.commands.workflow.output_rules`).
R5_JUDGED_OUTPUTS = 4
#: The ``SamplesRecorded`` schema version from which the wall-clock check (``wall_v2``) flags a
#: case where the two calls of a pair report different numbers of values of a time-like metric
#: (R12: padding with values that never ran moves the statistic, not the reported total);
#: samples recorded before are re-checked by ``wall_v1``.
R12_WALL_VALUE_COUNTS = 5
#: The ``SamplesRecorded`` schema version from which measured samples must also agree with what
#: their raw table's settings declare (R5, :mod:`perfledger.commands.workflow.raw_table`): the
#: table's kind is its protocol's, the provenance's settings are the table's, every call's
#: ``wall_s`` is carried (so the wall-clock check runs on it) and equals its row's, and each
#: pair's monitor verdict is its window's; samples recorded before are checked as before.
R5_DECLARED_CHECKS = 6
#: The ``SamplesRecorded`` schema version from which observed metrics are perfledger's alone
#: (R5, R12; SPEC.md section 5, "Workload worker protocol"): samples of a Target whose primary
#: is an observed metric (:data:`OBSERVED_METRICS`) must be measured by an observing protocol
#: (:data:`OBSERVING_PROTOCOLS`: perfledger's clock and the kernel's CPU accounting of every
#: call, every output judged); samples measured otherwise carry no value of an observed metric
#: (a subject cannot report one); an observed metric's unit is a time unit; and samples of an
#: observing protocol carry no wall-clock check (their values are the clock). Samples recorded
#: before are checked as before.
R5_OBSERVED_METRICS = 7
#: The ``TargetFrozen`` and ``TargetSuperseded`` schema version from which every metric of a
#: Target is in a unit of the closed vocabulary (:mod:`perfledger.events.units`; R1): an
#: unknown spelling of a time unit took the metric out of the wall-clock check (R12). Targets
#: frozen before are checked as before.
R1_KNOWN_UNITS = 2
#: The ``TargetFrozen`` and ``TargetSuperseded`` schema version from which a metric named after
#: one of perfledger's observed figures (:data:`OBSERVED_METRICS`: a call's elapsed time and its
#: CPU time), as primary, guardrail or secondary, is ``lower_is_better`` in a time unit (R1): a
#: declared ``higher_is_better`` turned every slowdown of an observed time into an
#: "improvement". Targets frozen before are checked as before.
R1_OBSERVED_DIRECTION = 4
#: Observed metrics (name -> the per-call figure of the raw table, seconds): perfledger's own
#: monotonic clock of the call and the kernel's CPU accounting of the subject's process tree.
OBSERVED_METRICS = {"wall_time": "wall_s", "cpu_time": "cpu_s"}
#: The units an observed metric may be recorded in (times).
OBSERVED_UNITS = ("s", "ms", "us", "µs", "ns")
#: Provenance protocols in which perfledger observes every call (``perfledger measure workload
#: --protocol worker|command``).
OBSERVING_PROTOCOLS = ("worker/v1", "command/v1")
#: The ``SamplesRecorded`` schema version from which samples the workload driver measured for a
#: Target bound to code carry, in their provenance's settings, the snapshot digests of the
#: read-only copies every call ran from (equal to the samples' snapshots) and both subjects'
#: full call environments (every variable's name and its value's hash), which must be equal
#: (R11, :func:`perfledger.commands.workflow.identity.r11_calls_from_copies`); samples recorded
#: before are decided without it.
R11_CALLS_FROM_COPIES = 8
#: The ``FinalAuditRecorded`` schema version from which a champion that failed its accuracy
#: check on any call of its final audit fails it (R5, R13: a correctness failure of the candidate
#: in a formal stage is disqualifying); final audits recorded before are re-derived without it.
R5_FINAL_AUDIT_ACCURACY = 4
#: The ``VerdictRecorded`` and ``FinalAuditRecorded`` schema version from which verdicts are
#: derived by ``per_case/v2`` (a case that lost more than the minimum effect cannot be outvoted,
#: R12) and foreign activity on more than a share of a formal stage's pairs keeps it from
#: passing even when explained (R17); events recorded under version 2 are re-derived by
#: ``per_case/v1`` and the earlier R17 rule.
PER_CASE_V2 = 3
#: The ``VerdictRecorded`` schema version (:data:`R12_EVERY_CASE_FINAL_AUDIT` for
#: ``FinalAuditRecorded``) from which a formal stage (target, final audit) whose samples leave out
#: a case of the Target's test set, or measured a test set the readiness no longer names, cannot
#: pass (R12: a case that was not measured cannot be outvoted either); events recorded before
#: are re-derived without it.
R12_EVERY_CASE = 4
R12_EVERY_CASE_FINAL_AUDIT = 5
#: The ``VerdictRecorded`` schema version from which R14's note on a verdict that owes a
#: reconciliation says what is true of its figures: a target-stage CI wholly below or above the
#: predicted interval, or a screen that failed although the claim predicted at least the
#: minimum effect (its pooled CI may lie inside the interval); verdicts recorded before keep
#: the earlier text ("the result contradicts the claim (...)") when re-derived. The rule itself
#: (when a reconciliation is owed) is unchanged.
R14_TRUE_NOTE = 7
#: The ``ReadinessRecorded`` schema version from which a readiness may not change the Target's
#: statistical requirements or test set once samples of the Target are recorded (R2, R12: the
#: rules a verdict is judged by are declared before the data is seen); readiness recorded before
#: is re-checked without it.
R2_STATISTICS_FROZEN = 4
#: The ``ResolutionEstimated`` schema version from which a resolution recorded once samples of
#: the Target exist may not be lower than the one in force, for the Target or any case, unless
#: it comes from a longer A/A (more repeats; R4: the same A/A re-run after seeing a CI until it
#: comes out small is not a measurement); resolutions recorded before are re-checked without it.
R4_RESOLUTION_NOT_LOWERED = 2
#: The ``SamplesRecorded`` schema version from which R14 applies to what was measured, not to
#: what was recorded: formal-stage samples measured by perfledger must be those of a
#: ``FormalRunStarted`` (a formal stage has no dry run), and an experiment's formal-stage samples
#: (or started run) of a stage must have their verdict (target) or final audit before it records
#: another of that stage (:func:`perfledger.commands.workflow.formal_runs.r14_judged_before_next`);
#: samples recorded before are re-checked without it.
R14_MEASURED_OBLIGATION = 9
#: The ``ChampionSelected`` schema version from which no champion is selected on a Target while
#: a target-stage result of it (samples, or a started run that never recorded them) has no
#: verdict (R14), nor an experiment whose champion a failed final audit demoted (R13);
#: selections recorded before are re-checked without it.
R14_UNJUDGED_BLOCKS_CHAMPION = 3
#: The ``FinalAuditRecorded`` schema version from which a failed final audit demotes its
#: champion: the champion before it (or the original) is current again, and the demoted
#: experiment never becomes champion again (R13); final audits recorded before leave the
#: champion in place (a later passing audit replaced a failed one).
R13_FAILED_AUDIT_DEMOTES = 6
#: The ``SamplesRecorded`` schema version from which samples carry ``implausible`` (R12): the
#: cases whose measured candidate/reference ratio of the primary lies beyond the Target's
#: plausible ratio (default :data:`DEFAULT_PLAUSIBLE_RATIO`) either way.
R12_PLAUSIBLE_RATIO = 10
#: The ``ChampionSelected`` schema version from which a result resting on implausible samples
#: (:data:`R12_PLAUSIBLE_RATIO`) is not selected until a review by an actor other than the
#: experiment's creator and the samples' recorder, on the samples' event, explains it (R12).
R12_IMPLAUSIBLE_BLOCKS_CHAMPION = 4
#: The ``ReviewRecorded`` schema version from which a review may name the flags it explains
#: (``explains``: the samples id, the flag's kind and case, as the samples payload records
#: them; each checked against the reviewed samples), and the ``ChampionSelected`` one
#: (:data:`R12_NAMED_REVIEW_CLEARS`) from which a plausibility flag is cleared only by a settled
#: review by another actor naming it: a review of the samples that names another flag, or
#: none, clears nothing. Selections recorded before are re-decided by the earlier rule (any
#: settled review of the samples' event by another actor).
R12_REVIEW_NAMES_FLAG = 2
R12_NAMED_REVIEW_CLEARS = 8
#: The ``ReviewRecorded`` schema version from which a review may carry its reviewer's SSH
#: signature (``signature``, namespace ``perfledger-review``) over its canonical content
#: (:func:`perfledger.commands.workflow.review_signature.signed_content`): checked to be a good
#: signature of that content by the key it carries when recorded, the key and its fingerprint
#: recorded (derived). ``perfledger audit --allowed-signers FILE`` checks each signed review's
#: key against the auditor's file (its principal must be the review's appender, and not the
#: appender of the reviewed event), and fails on a review without a good signature that cleared
#: a flag or allowed a champion (R12, R17). Reviews recorded before carry no signature.
R12_SIGNED_REVIEW = 3
#: The ``ActivityExplained`` schema version from which foreign activity is explained only by
#: evidence (R17): a ``ReviewRecorded`` on the samples' event, dissent settled, appended by an
#: actor other than the experiment's creator, the samples' recorder and the one explaining;
#: explanations recorded before keep their typed meaning.
R17_EXPLAINED_BY_REVIEW = 2
#: Request ranges (SPEC.md section 6, "Ranges"): the schema version of each kind from which
#: every numeric field of its request lies within the range its model declares with
#: :func:`perfledger.commands.workflow.requests.ranged` (a budget of at most 366 days, a
#: regression allowance of at most 100, a call of at most 1e6 s, ...); a value outside is a bad
#: request (exit 2). Requests recorded before are re-decided without these ranges (their
#: models decode them as before: the ranges are not decode constraints).
RANGES_TARGET_FROZEN = 3
RANGES_TARGET_SUPERSEDED = 3
RANGES_EXPERIMENT = 5
RANGES_HANDOFF = 2
RANGES_RECONCILIATION = 2
#: ``SamplesRecorded`` is numbered by another branch too: this number may be renumbered at the
#: merge (a gap is fine; the rows of ``schema_floor.IMPLIES`` follow it).
RANGES_SAMPLES = 11
#: kind -> the schema version from which its request's declared ranges are checked.
RANGED_FROM: dict[str, int] = {
    "TargetFrozen": RANGES_TARGET_FROZEN,
    "TargetSuperseded": RANGES_TARGET_SUPERSEDED,
    "ExperimentCreated": RANGES_EXPERIMENT,
    "HandoffRecorded": RANGES_HANDOFF,
    "ReconciliationRecorded": RANGES_RECONCILIATION,
    "SamplesRecorded": RANGES_SAMPLES,
}
#: The ``ResolutionEstimated`` schema version from which a resolution decides verdicts only when
#: perfledger measured it (R4): its figures are re-derived from the A/A raw table attached to
#: the event, at record time and at audit; a typed one is recorded as ``declared`` and decides
#: nothing. Resolutions recorded before keep their meaning.
R4_MEASURED_RESOLUTION = 3
#: The ``VerdictRecorded`` (and :data:`R4_MEASURED_RESOLUTION_FINAL_AUDIT` for
#: ``FinalAuditRecorded``) schema version from which a verdict judged against a declared
#: resolution cannot pass (R4, R12); events recorded before are re-derived without it.
R4_MEASURED_RESOLUTION_VERDICT = 6
R4_MEASURED_RESOLUTION_FINAL_AUDIT = 7
#: The ``FinalAuditRecorded`` schema version from which a final audit whose primary CI lies
#: wholly outside the champion's claimed interval (below or above) owes a reconciliation, as a
#: target-stage result does (R14): a prediction wrong either way is reconciled. Only where the
#: claim and the audit measure the same thing: the champion's target stage was measured
#: against the original. Final audits recorded before owe nothing.
R14_FINAL_AUDIT_OWES = 10
#: The ``SamplesRecorded`` schema version (``ActivityExplained`` :data:`R17_NO_TYPED_EXPLANATION`;
#: ``VerdictRecorded`` and ``FinalAuditRecorded`` from :data:`R4_MEASURED_RESOLUTION_VERDICT` and
#: :data:`R4_MEASURED_RESOLUTION_FINAL_AUDIT`) from which an ``explained`` text typed into a
#: pair's monitor record explains nothing (R17): the samples count that pair's foreign activity
#: as unexplained, a verdict or final audit sees it so, and ``activity explain`` (a review by
#: another actor) may explain it. Events recorded before keep the typed explanation's meaning.
R17_SAMPLES_TYPED_EXPLANATION_IGNORED = 12
R17_NO_TYPED_EXPLANATION = 3
#: The ``ChampionSelected`` schema version from which a champion comes only from target-stage
#: samples perfledger measured (R5, R13; provenance ``perfledger`` with its raw table): samples
#: recorded from outside (``allow_outside_samples``, or no provenance) are recorded and shown,
#: labelled as outside, and never make a champion; selections recorded before are re-checked
#: without it.
R5_MEASURED_CHAMPION = 5
#: The ``FinalAuditRecorded`` schema version from which a final audit on samples recorded from
#: outside cannot pass (R5, R13): a pass is recorded ``inconclusive`` with a note naming the
#: measuring command; final audits recorded before are re-derived without it.
R5_MEASURED_FINAL_AUDIT = 8
#: The ``ReadinessRecorded`` schema version from which readiness refuses a Target any of whose
#: declared metrics (primary, guardrails, secondaries) is in a unit outside the closed
#: vocabulary (R1, :mod:`perfledger.events.units`; a Target frozen before
#: :data:`R1_KNOWN_UNITS` may hold one), listing the known units; readiness recorded before is
#: re-checked without it.
R1_KNOWN_UNITS_READINESS = 5
#: No optional stopping (R13, R14): the evidence for a champion accounts for every formal
#: result of its code. From ``FormalRunStarted`` schema 2 and ``SamplesRecorded`` schema 13 an
#: experiment has one formal result per stage (a second target-stage run only re-measures a
#: passed result whose reference is no longer current; a champion gets one final audit), a
#: started run that never recorded samples counting as its failed result
#: (:func:`perfledger.commands.workflow.formal_runs.r14_one_result_per_stage`); from
#: ``ExperimentCreated`` schema 8 a candidate whose code (content hash) already had a formal
#: result other than a pass on its Target is refused; from ``ChampionSelected`` schema 6 no
#: champion is selected while its code has such a result anywhere in the (merged) history, and
#: a selection synced in from another clone that had not seen one is a conflict
#: (``unaccounted_champion``); from ``FinalAuditRecorded`` schema 9 a champion's second final
#: audit (only a sync makes one) is refused, and when synced in, the worse status stands.
#: Events recorded before are re-decided without these rules.
R14_ONE_FORMAL_RUN = 2
R14_ONE_RESULT_SAMPLES = 13
R14_CODE_RESULTS_EXPERIMENT = 8
R14_CODE_RESULTS_CHAMPION = 6
R13_ONE_FINAL_AUDIT = 9
#: The ``SamplesRecorded`` schema version (``VerdictRecorded`` :data:`R11_REFERENCE_WATCHED_VERDICT`,
#: ``FinalAuditRecorded`` :data:`R13_ONE_FINAL_AUDIT`) from which the reference is watched
#: too (R11): in a formal stage whose reference is the original, each case's reference figure
#: is compared with the original's measured baseline; a reference slower than its baseline by
#: more than the A/A and baseline prediction bound is flagged on the samples
#: (``reference_slowed``), and a verdict or final audit of flagged samples is ``inconclusive``
#: (the comparison is invalid: something made the reference slower) with the figures in its
#: reason. Events recorded before are decided without it.
R11_REFERENCE_WATCHED = 13
#: The ``ResolutionEstimated`` schema version from which a measured workload resolution records
#: its A/A's per-case medians of the primary (``per_case_median``, re-derived from the A/A raw
#: table), and the ``SamplesRecorded`` one (:data:`R11_WATCHED_AGAINST_AA_SAMPLES`) from which the
#: reference watch compares each formal-stage case with them too, not only with the baseline:
#: the A/A interleaves two workers of the original as a formal stage does, so an honest
#: reference matches it closely, and a baseline inflated when it was measured (its calls run in a
#: row, in place) no longer switches the watch off. The bound against the A/A is the larger of
#: the case's resolution and the minimum effect. Events recorded before are decided without it.
R11_WATCHED_AGAINST_AA = 4
R11_WATCHED_AGAINST_AA_SAMPLES = 14
#: The ``SamplesRecorded`` schema version from which the copies rule
#: (:data:`R11_CALLS_FROM_COPIES`: every call ran from read-only copies of the samples' own
#: snapshots, both subjects' call environments equal) applies to samples of the protocols in
#: which perfledger observes every call (:data:`OBSERVING_PROTOCOLS`), not only to the
#: self-timed driver's; samples recorded before are decided without it.
R11_OBSERVED_CALLS_FROM_COPIES = 15
R11_REFERENCE_WATCHED_VERDICT = 8
R11_REFERENCE_WATCHED_FINAL_AUDIT = 9
#: The ``VerdictRecorded`` schema version from which a target-stage result that did not pass,
#: of the current champion's code, folded after its selection (only a sync orders one so) is an
#: ``unaccounted_champion`` conflict (R14, :data:`R14_CODE_RESULTS_CHAMPION`).
R14_UNACCOUNTED_VERDICT = 8

#: Self-reported figures are secondary only (R5, issue 34: perfledger observes; nothing a subject
#: declares decides anything). From ``ReadinessRecorded`` schema 6 a readiness whose driver is a
#: workload driver (not the kernel harness, not a serving Target's) for a Target whose primary
#: is not an observed metric (:data:`OBSERVED_METRICS`) is refused: only what perfledger observes
#: can decide, and a subject's own figures are recorded as secondary metrics. From
#: ``VerdictRecorded`` schema 9 and ``FinalAuditRecorded`` schema 11 samples of a self-timed
#: protocol (:data:`SELF_TIMED_PROTOCOLS`: the driver's calls report their own times) are marked
#: ``reported``; from ``ChampionSelected`` schema 7 they never make a champion, and from
#: ``FinalAuditRecorded`` schema 11 a final audit on them cannot pass (as samples recorded from
#: outside). Events recorded before are re-decided without these rules.
R5_OBSERVED_PRIMARY_READINESS = 6
R5_REPORTED_VERDICT = 9
R5_REPORTED_CHAMPION = 7
R5_REPORTED_FINAL_AUDIT = 11
#: The ``FinalAuditRecorded`` schema version from which a final audit on samples with a
#: plausibility flag (R12: a ratio beyond the Target's plausible bound) that no review by
#: another actor names is not a pass (``inconclusive``, its note naming the cases): the
#: champion's own audit needs what its selection needed. Final audits recorded before are
#: re-derived without it.
R12_IMPLAUSIBLE_FINAL_AUDIT = 12
#: Provenance protocols whose samples are figures the subject reports (its own timer).
SELF_TIMED_PROTOCOLS = ("workload_abba",)
#: The ``BaselineRecorded`` schema version from which a baseline decides only when perfledger
#: measured it (R4, issue 34: baselines, like resolutions, come only from measured runs): its
#: values, median and per-case medians are re-derived from the original's raw per-call table
#: attached to the event (``perfledger measure baseline`` attaches ``baseline.json``), at
#: record time and at audit; a typed one is recorded as ``declared`` and decides nothing (the
#: reference watch R11, the R4 precondition, reports and read models use the latest measured
#: baseline, and where none is recorded behave as if no baseline were). Baselines recorded
#: before keep their meaning.
R4_MEASURED_BASELINE = 2
#: The ``VerdictRecorded`` and ``FinalAuditRecorded`` schema versions from which a formal
#: stage (target or final audit) is derived with the resolution in force when its
#: ``FormalRunStarted`` was appended (R4, R14: the threshold is committed before anything is
#: measured), not with one recorded between that event and the verdict: a longer A/A recorded
#: after a look at the stage's CI no longer lowers the bar it is judged against
#: (:func:`perfledger.projections.workflow.run_resolution`). Verdicts and final audits recorded
#: before are re-derived with the resolution in force when they were recorded.
R4_RESOLUTION_AT_RUN_VERDICT = 10
R4_RESOLUTION_AT_RUN_FINAL_AUDIT = 13
#: The ``VerdictRecorded`` and ``FinalAuditRecorded`` schema versions from which the readiness's
#: ``statistics.allow_explained_foreign_activity`` decides nothing (R17, issue 34: foreign
#: activity is explained only by evidence, never by a value the agent who wants the result
#: types): a formal stage whose samples saw foreign activity in more than 20 % of their pairs
#: (:data:`perfledger.commands.workflow.foreign_share.FOREIGN_SHARE_LIMIT`) may pass only where a
#: ``ReviewRecorded`` on those samples' event, its dissent settled, was appended by an actor
#: other than the experiment's creator, the samples' recorder and the one deciding; a set flag is
#: noted as ignored. Verdicts and final audits recorded before are re-derived with the flag.
R17_FOREIGN_SHARE_BY_REVIEW_VERDICT = 11
R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT = 14
#: The ``BaselineRecorded`` schema version from which the decider re-judges the monitor windows
#: of a measured baseline's attached raw table (``monitor.windows`` of ``baseline.json``; R17):
#: foreign activity in more than 20 % of them refuses the baseline, at record time and at audit,
#: whatever the readiness declares. Baselines recorded before are not re-judged.
R17_BASELINE_WINDOWS = 3


def _same_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """Upcaster of a version whose payload shape did not change, only the rule it answers to
    (the envelope's ``schema`` tells an auditor which rule to re-check it by)."""
    return payload


#: Kinds whose decision rule changed, by their current schema version: version 2 of
#: ``SamplesRecorded`` keeps the samples' provenance (R5); version 2 of ``VerdictRecorded`` and
#: ``FinalAuditRecorded`` derives per case (R12). An auditor re-decides a version-1 event by the
#: rule of version 1 (:attr:`perfledger.commands.workflow.deciders.DecisionContext.schema`).
#: Version 2 of ``ExperimentCreated`` and ``ChampionSelected`` carries R14's obligations
#: (:data:`R14_STATED_INTERVAL`, :data:`R14_BLOCKS_CHAMPION`); version 3 of ``ExperimentCreated``
#: checks cited applicability against the recorded one (:data:`R6_RECORDED_APPLICABILITY`) and
#: computes the bound a claim may leave out (:data:`R7_COMPUTED_BOUND`); version 4 requires an
#: informative interval (:data:`R14_INFORMATIVE_INTERVAL`); version 6 snapshots the candidate's
#: directory at creation (:data:`R11_CANDIDATE_SNAPSHOT`). Version 3 of ``HandoffRecorded`` is
#: filled and checked from the ledger (:data:`R18_LEDGER_FILLED`); version 7 of
#: ``ExperimentCreated`` states the claim in the verdict's units (:data:`R14_ONE_IMPROVEMENT`).
#: Version 2 of ``ReadinessRecorded`` snapshots the whole subject (:data:`R11_WHOLE_SUBJECT`);
#: version 3 owes the ``{subject}`` place (:data:`R11_SUBJECT_OWED`).
#: Version 9 of ``SamplesRecorded`` and 3 of ``ChampionSelected`` make R14 apply to what was
#: measured (:data:`R14_MEASURED_OBLIGATION`, :data:`R14_UNJUDGED_BLOCKS_CHAMPION`); version 6
#: of ``FinalAuditRecorded`` demotes a champion whose final audit failed
#: (:data:`R13_FAILED_AUDIT_DEMOTES`). Version 10 of ``SamplesRecorded`` and 4 of
#: ``ChampionSelected`` flag and block implausible ratios (:data:`R12_PLAUSIBLE_RATIO`,
#: :data:`R12_IMPLAUSIBLE_BLOCKS_CHAMPION`). Version 2 of ``ActivityExplained`` takes a review
#: by another actor as its evidence (:data:`R17_EXPLAINED_BY_REVIEW`). Version 3 of
#: ``TargetFrozen``/``TargetSuperseded``, 5 of ``ExperimentCreated``, 2 of ``HandoffRecorded``
#: and ``ReconciliationRecorded`` and 11 of ``SamplesRecorded`` check the requests' declared
#: ranges (:data:`RANGED_FROM`). Version 3 of
#: ``ResolutionEstimated``, 6 of ``VerdictRecorded`` and 7 of ``FinalAuditRecorded`` take only
#: a measured resolution (:data:`R4_MEASURED_RESOLUTION`); with version 12 of
#: ``SamplesRecorded`` and 3 of ``ActivityExplained``, a typed explanation in samples explains
#: nothing (:data:`R17_SAMPLES_TYPED_EXPLANATION_IGNORED`). Version 5 of ``ChampionSelected``
#: and 8 of ``FinalAuditRecorded`` take only samples perfledger measured
#: (:data:`R5_MEASURED_CHAMPION`, :data:`R5_MEASURED_FINAL_AUDIT`); version 5 of
#: ``ReadinessRecorded`` refuses a Target with a unit outside the vocabulary
#: (:data:`R1_KNOWN_UNITS_READINESS`). Version 6 of ``ReadinessRecorded``, 9 of
#: ``VerdictRecorded``, 7 of ``ChampionSelected`` and 11 of ``FinalAuditRecorded`` keep
#: self-reported figures secondary (:data:`R5_OBSERVED_PRIMARY_READINESS`). Version 2 of
#: ``ReviewRecorded`` and 8 of ``ChampionSelected`` clear a plausibility flag only by a review
#: naming it (:data:`R12_REVIEW_NAMES_FLAG`; ``ReviewRecorded`` is registered by
#: :mod:`perfledger.events.review` with this version); version 3 of ``ReviewRecorded`` carries
#: the reviewer's SSH signature (:data:`R12_SIGNED_REVIEW`). Version 2 of
#: ``BaselineRecorded`` takes only a measured baseline (:data:`R4_MEASURED_BASELINE`). Version 10
#: of ``VerdictRecorded`` and 13 of ``FinalAuditRecorded`` judge a formal stage with the
#: resolution in force when its run started (:data:`R4_RESOLUTION_AT_RUN_VERDICT`). Version 11
#: of ``VerdictRecorded`` and 14 of ``FinalAuditRecorded`` lift R17's 20 % limit only by a
#: review by another actor (:data:`R17_FOREIGN_SHARE_BY_REVIEW_VERDICT`); version 3 of
#: ``BaselineRecorded`` re-judges its monitor windows (:data:`R17_BASELINE_WINDOWS`).
SCHEMA_VERSIONS = {
    "SamplesRecorded": max(
        R12_WALL_VALUE_COUNTS,
        R5_DECLARED_CHECKS,
        R5_OBSERVED_METRICS,
        R11_CALLS_FROM_COPIES,
        R14_MEASURED_OBLIGATION,
        R12_PLAUSIBLE_RATIO,
        RANGES_SAMPLES,
        R17_SAMPLES_TYPED_EXPLANATION_IGNORED,
        R14_ONE_RESULT_SAMPLES,
        R11_REFERENCE_WATCHED,
        R11_WATCHED_AGAINST_AA_SAMPLES,
        R11_OBSERVED_CALLS_FROM_COPIES,
    ),
    "VerdictRecorded": max(
        R12_EVERY_CASE,
        R14_TRUE_NOTE,
        R4_MEASURED_RESOLUTION_VERDICT,
        R11_REFERENCE_WATCHED_VERDICT,
        R14_UNACCOUNTED_VERDICT,
        R5_REPORTED_VERDICT,
        R4_RESOLUTION_AT_RUN_VERDICT,
        R17_FOREIGN_SHARE_BY_REVIEW_VERDICT,
    ),
    "FinalAuditRecorded": max(
        R12_EVERY_CASE_FINAL_AUDIT,
        R13_FAILED_AUDIT_DEMOTES,
        R4_MEASURED_RESOLUTION_FINAL_AUDIT,
        R5_MEASURED_FINAL_AUDIT,
        R13_ONE_FINAL_AUDIT,
        R14_FINAL_AUDIT_OWES,
        R5_REPORTED_FINAL_AUDIT,
        R12_IMPLAUSIBLE_FINAL_AUDIT,
        R4_RESOLUTION_AT_RUN_FINAL_AUDIT,
        R17_FOREIGN_SHARE_BY_REVIEW_FINAL_AUDIT,
    ),
    "ExperimentCreated": max(
        R6_RECORDED_APPLICABILITY,
        R7_COMPUTED_BOUND,
        R14_INFORMATIVE_INTERVAL,
        R11_CANDIDATE_SNAPSHOT,
        RANGES_EXPERIMENT,
        R14_ONE_IMPROVEMENT,
        R14_CODE_RESULTS_EXPERIMENT,
    ),
    "HandoffRecorded": max(R18_LEDGER_FILLED, RANGES_HANDOFF, R18_STOP_REASON_AGREES),
    "ChampionSelected": max(
        R14_BLOCKS_CHAMPION,
        R14_UNJUDGED_BLOCKS_CHAMPION,
        R12_IMPLAUSIBLE_BLOCKS_CHAMPION,
        R5_MEASURED_CHAMPION,
        R14_CODE_RESULTS_CHAMPION,
        R5_REPORTED_CHAMPION,
        R12_NAMED_REVIEW_CLEARS,
    ),
    "ReviewRecorded": max(R12_REVIEW_NAMES_FLAG, R12_SIGNED_REVIEW),
    "FormalRunStarted": R14_ONE_FORMAL_RUN,
    "ReadinessRecorded": max(
        R2_STATISTICS_FROZEN, R1_KNOWN_UNITS_READINESS, R5_OBSERVED_PRIMARY_READINESS
    ),
    "ResolutionEstimated": max(
        R4_RESOLUTION_NOT_LOWERED, R4_MEASURED_RESOLUTION, R11_WATCHED_AGAINST_AA
    ),
    "TargetFrozen": max(R1_KNOWN_UNITS, RANGES_TARGET_FROZEN, R1_OBSERVED_DIRECTION),
    "TargetSuperseded": max(R1_KNOWN_UNITS, RANGES_TARGET_SUPERSEDED, R1_OBSERVED_DIRECTION),
    "ActivityExplained": max(R17_EXPLAINED_BY_REVIEW, R17_NO_TYPED_EXPLANATION),
    "ReconciliationRecorded": RANGES_RECONCILIATION,
    "BaselineRecorded": max(R4_MEASURED_BASELINE, R17_BASELINE_WINDOWS),
}

#: Commit subjects earlier versions wrote (``verify`` binds a subject to its event's payload).
_LEGACY_SUMMARIES: dict[type, tuple[Callable[[Any], str], ...]] = {
    TargetFrozen: (
        lambda p: (
            f"{p.target.target_id}: {p.target.primary.name} "
            f"({p.target.primary.statistic}, min effect {p.target.min_effect:g})"
        ),
    ),
}

for _type, _summary in _SUMMARIES.items():
    _version = SCHEMA_VERSIONS.get(_type.__name__, 1)
    _upcasters = {v: _same_payload for v in range(1, _version)}
    register_kind(KindSpec(_type.__name__, _version, _type, _upcasters, summary=_summary,
                           legacy_summaries=_LEGACY_SUMMARIES.get(_type, ())))  # fmt: skip

#: The workflow's kinds that record a decision (all of them, with the loop's and the review's:
#: :data:`perfledger.events.vocabulary.DECISION_KINDS`).
WORKFLOW_DECISION_KINDS = frozenset(_type.__name__ for _type in _SUMMARIES)
