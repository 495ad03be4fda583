"""Closed requests: one msgspec Struct per write operation (SPEC.md section 6).

Every model forbids unknown fields (``forbid_unknown_fields``), refuses NaN and ±Infinity (every
number is bounded by the largest finite double, which NaN fails), is strict about types (``"5"``
is not a number, ``true`` is not ``1``) and bounds every string, list and object, so a bad request
is a :class:`~perfledger.errors.BadRequest` (exit 2) before any rule runs. Range checks
that a *rule* owns (coverage in (0, 1] is R7, at least 5 pairs per case is R2/R12, ...) are left to
the deciders, so that a refusal names its rule (exit 3).

Every numeric field has a range (SPEC.md section 6, "Ranges"). Bounds that held since a field
first existed are ``Meta`` constraints, checked as the request is decoded. Bounds added later are
declared with :func:`ranged`: they show in the JSON Schema like the others, but decoding ignores
them (an auditor re-decodes every recorded request through these models, and a request recorded
before a bound existed must decode as it did); :mod:`perfledger.commands.workflow.ranges` checks
them before the decider, from the schema version of the kind that introduced them on.

Field names match the payload Structs of :mod:`perfledger.events.workflow`, which the deciders
build from :func:`dump` plus derived fields. ``perfledger schema OPERATION`` prints a model's
JSON Schema; ``schemas/*.json`` holds the committed copies.

msgspec rather than pydantic: a workflow decision through the CLI is one process, and importing
pydantic and building one model's validator cost ~0.35 s of each call on the development machine;
msgspec (already the event codec) validates the same closed shapes in microseconds.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

#: Patterns end in ``(?!\n)$``: Python's ``$`` (which msgspec uses) also matches before a final
#: newline, so ``"t1\n"`` would pass a plain ``...$``; the look-ahead refuses it, in Python and
#: in the JSON Schema's ECMA regex alike.
#: Caller-chosen ids (targets, experiments, samples, evidence, ...).
Id = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(?!\n)$", max_length=128)]
#: Content hashes: ``algo:hex`` or plain hex, 8-200 characters.
Hash = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9:+._-]{7,199}(?!\n)$")]
#: What each pattern means, in words (:func:`perfledger.commands.registry.operations.condense` says this
#: instead of the regular expression).
PATTERN_WORDS = {
    "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(?!\\n)$": "an id: 1-128 characters of A-Z a-z 0-9 . _ : -, "
    "starting with a letter or digit (no spaces, no newline)",
    "^[A-Za-z0-9][A-Za-z0-9:+._-]{7,199}(?!\\n)$": "a content hash such as sha256:<hex>: 8-200 "
    "characters of A-Z a-z 0-9 : + . _ - (no spaces, no newline)",
    "^k[0-9]{1,6}(?!\\n)$": "a kernel key: k and 1-6 digits",
}
#: Short text: a name, unit, label.
Name = Annotated[str, Meta(min_length=1, max_length=200)]
#: Free text (Markdown allowed).
Text = Annotated[str, Meta(min_length=1, max_length=20_000)]
OptText = Annotated[str, Meta(max_length=20_000)]
#: The largest finite double: the bound that makes every number field refuse NaN and ±Infinity.
MAX_FINITE = 1.7976931348623157e308
#: A finite number (NaN and ±Infinity are refused).
Number = Annotated[float, Meta(ge=-MAX_FINITE, le=MAX_FINITE)]
#: A finite number >= 0.
NonNegative = Annotated[float, Meta(ge=0.0, le=MAX_FINITE)]
#: A finite number > 0.
Positive = Annotated[float, Meta(gt=0.0, le=MAX_FINITE)]
Direction = Literal["lower_is_better", "higher_is_better"]
Statistic = Literal["mean", "median", "p95", "p99", "throughput"]
Scope = Literal["implementation", "integration", "mechanism"]
ComponentKind = Literal["kernel", "communication_primitive", "backend_adapter"]

_MAX_ITEMS = 1_000


class Range(msgspec.Struct, frozen=True):
    """A declared range of a numeric field (see :func:`ranged`): ``low`` .. ``high``, each end
    open or closed, in the field's unit; ``low_rule``/``high_rule``: the workflow rule that
    refuses a value beyond that end itself (exit 3 naming it), so the generic check leaves it."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    low_rule: str | None = None
    high_rule: str | None = None

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies within the ends this range checks itself (not a rule's)."""
        if self.low_rule is None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (
            self.high_rule is None and (value >= self.high if self.high_open else value > self.high)
        )

    def words(self) -> str:
        """The range in interval notation: ``[0, 31622400]``, ``(0, 1]``."""
        low, high = _number_words(self.low), _number_words(self.high)
        return f"{'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"


def _number_words(value: float) -> str:
    """``value`` as a person reads it: an integral one in full (``31622400``), else ``%g``."""
    if float(value).is_integer() and abs(value) <= 2**53:
        return str(int(value))
    return f"{value:.15g}"


def ranged(
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
    low_rule: str | None = None,
    high_rule: str | None = None,
) -> Meta:
    """A ``Meta`` declaring the range ``low`` .. ``high`` of a numeric field, added after the
    field first existed: the JSON Schema shows it (``minimum``/``exclusiveMinimum``,
    ``maximum``/``exclusiveMaximum``); decoding does not check it; the range check does, from
    the schema version of the kind that introduced it (:mod:`perfledger.commands.workflow.ranges`).
    ``low_rule``/``high_rule``: the rule that refuses beyond that end (R7 for coverage)."""
    bounds = Range(low, high, low_open, high_open, low_rule, high_rule)
    schema = {
        "exclusiveMinimum" if low_open else "minimum": low,
        "exclusiveMaximum" if high_open else "maximum": high,
    }
    return Meta(extra_json_schema=schema, extra={"range": bounds})


#: Seconds in 366 days: the largest wall-clock budget (a Target is work of days to months).
MAX_BUDGET_WALL_S = 366 * 86_400.0
#: The largest GPU-time budget, seconds (about 317 GPU-years: a fleet's year).
MAX_BUDGET_GPU_S = 1e10
#: The largest ratio a regression allowance, a gain threshold or an added cost may be (100 =
#: 100 times the reference: far beyond any real one, near enough to refuse a typo's 1e30).
MAX_RATIO = 100.0
#: The largest local speedup, Amdahl bound or predicted improvement a claim may state.
MAX_SPEEDUP = 1e6
#: The longest wall time of one call, seconds (11.6 days; a measured call runs at most a day).
MAX_CALL_WALL_S = 1e6
_MAX_PAIRS = 100_000
_MAX_VALUES = 100_000


class Request(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every request: closed (unknown fields refused), strict, finite numbers only."""


def dump(request: Struct) -> dict[str, Any]:
    """A request as JSON builtins (nested Structs as dicts), e.g. to build an event payload."""
    out: dict[str, Any] = msgspec.to_builtins(request)
    return out


# ------------------------------------------------------------------------------- targets


class MetricSpec(Request, kw_only=True):
    """A metric: name, unit (``ms``, ``tokens/s``), direction and statistic; for a rate, the
    metric counting its work (the wall-clock check turns the rate into time with it, R12)."""

    name: Name
    unit: Name
    direction: Direction
    statistic: Statistic = "median"
    work_metric: Name | msgspec.UnsetType = msgspec.UNSET


class Guardrail(Request, kw_only=True):
    """A constraint: ``metric`` may regress at most ``allowed_regression`` (a ratio in [0, 100])."""

    metric: Name
    unit: Name
    direction: Direction
    allowed_regression: Annotated[NonNegative, ranged(0.0, MAX_RATIO)]
    work_metric: Name | msgspec.UnsetType = msgspec.UNSET


class Secondary(Request, kw_only=True):
    """A pre-declared secondary metric; ``threshold``: improvement ratio that counts as a gain
    (in (0, 100])."""

    name: Name
    unit: Name
    direction: Direction
    threshold: Annotated[Positive, ranged(0.0, MAX_RATIO, low_open=True)]
    work_metric: Name | msgspec.UnsetType = msgspec.UNSET


class Budget(Request, kw_only=True):
    """Wall-clock seconds (0 .. 366 days) and GPU seconds (0 .. 1e10)."""

    wall_s: Annotated[NonNegative, ranged(0.0, MAX_BUDGET_WALL_S)]
    gpu_s: Annotated[NonNegative, ranged(0.0, MAX_BUDGET_GPU_S)]


class TargetFreeze(Request, kw_only=True):
    """``target.freeze`` (R1): freeze a Target. ``min_effect`` is a ratio (0.05 = 5 %); ``scope``
    are path globs; ``host_advice_only`` defaults to yes (R16)."""

    target_id: Id
    title: Text
    primary: MetricSpec
    min_effect: Annotated[float, Meta(gt=0.0, le=100.0)]
    guardrails: Annotated[list[Guardrail], Meta(max_length=_MAX_ITEMS)] = []
    secondaries: Annotated[list[Secondary], Meta(max_length=_MAX_ITEMS)] = []
    scope: Annotated[list[Name], Meta(min_length=1, max_length=_MAX_ITEMS)]
    risk_boundary: Text
    budget: Budget
    host_advice_only: bool = True
    diagnostic: bool = False
    #: R12: the widest plausible candidate/reference ratio of the primary, either way (> 1;
    #: absent: 10)
    plausible_ratio: Annotated[float, Meta(gt=1.0, le=1e6)] | msgspec.UnsetType = msgspec.UNSET


class TargetSupersede(Request, kw_only=True):
    """``target.supersede`` (R1): freeze ``new_target`` in place of ``target_id``."""

    target_id: Id
    reason: Text
    new_target: TargetFreeze


# ------------------------------------------------------------------------------- readiness


class FileEntry(Request, kw_only=True):
    """One file of a snapshot (R11): blake3 hex of its bytes, size in bytes, git-style mode."""

    blake3: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")]
    size: Annotated[int, Meta(ge=0, le=2**53)]
    mode: Literal["100644", "100755", "120000"]


class GitState(Request, kw_only=True):
    """The subject's git work tree: HEAD's commit (None before any), dirty flag, path in it."""

    commit: Annotated[str, Meta(pattern=r"^[0-9a-f]{40,64}(?!\n)$")] | None
    dirty: bool
    path: Annotated[str, Meta(max_length=4_000)] = ""


_Path = Annotated[str, Meta(min_length=1, max_length=4_000)]


class SubjectSnapshot(Request, kw_only=True):
    """A measured subject's snapshot (R11, :mod:`perfledger.events.identity`): the subject put in
    the driver's ``{subject}`` place, the exact argv, the files (path -> entry), the driver's
    files outside the subject, the tree digest and the git state. Taken by ``perfledger``
    (``measure workload``, ``readiness record`` with ``original.subject``), not typed."""

    subject: _Path
    argv: Annotated[
        list[Annotated[str, Meta(max_length=4_000)]], Meta(min_length=1, max_length=_MAX_ITEMS)
    ]
    files: Annotated[dict[_Path, FileEntry], Meta(max_length=20_000)]
    driver: Annotated[dict[_Path, FileEntry], Meta(max_length=_MAX_ITEMS)] = {}
    digest: Hash
    git: GitState | None = None
    #: ``subject``: every file under the subject (R11); absent in snapshots recorded before.
    coverage: Literal["subject"] | msgspec.UnsetType = msgspec.UNSET


class Original(Request, kw_only=True):
    """The original's content hash and label; ``snapshot`` where the readiness driver declares
    a ``{subject}`` place (R11)."""

    content_hash: Hash
    label: OptText = ""
    snapshot: SubjectSnapshot | msgspec.UnsetType = msgspec.UNSET
    #: why the code cannot be snapshotted, where the driver declares no ``{subject}`` place (R11)
    unsnapshotted: Text | msgspec.UnsetType = msgspec.UNSET


class TestSet(Request, kw_only=True):
    """The user's real test set (R2): hash, case count, optional case names."""

    hash: Hash
    case_count: Annotated[int, Meta(ge=1, le=10_000_000)]
    supplied_by: Literal["user"] = "user"
    cases: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []


class Driver(Request, kw_only=True):
    """The driver command (argv), extra environment and working directory."""

    argv: Annotated[
        list[Annotated[str, Meta(max_length=4_000)]], Meta(min_length=1, max_length=_MAX_ITEMS)
    ]
    env: Annotated[
        dict[Name, Annotated[str, Meta(max_length=4_000)]], Meta(max_length=_MAX_ITEMS)
    ] = {}
    cwd: OptText | None = None


class Environment(Request, kw_only=True):
    """Environment identity; leave a field out, null, or ``unknown`` when it is not known (R2)."""

    gpu: Name | None = None
    driver: Name | None = None
    cuda: Name | None = None
    toolkit: Name | None = None
    container_base: Name | None = None
    container_overlay: Name | None = None
    container_runtime: Name | None = None


class Statistics(Request, kw_only=True):
    """Statistical requirements: valid pairs per case (R2/R12: at least 5), CI, resamples."""

    min_pairs_per_case: Annotated[int, Meta(ge=0, le=100_000)] = 5
    confidence: Annotated[float, Meta(gt=0.5, lt=1.0)] = 0.95
    resamples: Annotated[int, Meta(ge=1_000, le=200_000)] = 10_000
    #: how the primary verdict aggregates the cases (R12): geometric mean of per-case ratios,
    #: the test set's total, or every case must pass
    aggregation: Literal["geomean", "total", "every_case"] = "geomean"
    #: a case whose CI lies wholly on the losing side may coexist with a pass (R12)
    allow_case_regression: bool = False
    #: formal stages (target, final audit) may use samples recorded from outside (R5)
    allow_outside_samples: bool = False
    #: ignored (R17, ``VerdictRecorded`` 11 and ``FinalAuditRecorded`` 14 on: only a review by
    #: another actor lifts the 20 % foreign-activity limit); decided verdicts recorded before
    allow_explained_foreign_activity: bool = False


class Accuracy(Request, kw_only=True):
    """How the measuring process judges a workload's outputs (R5): ``exact``, ``allclose``
    (``rtol``, ``atol``) or ``self_reported`` (outputs cannot be compared)."""

    compare: Literal["exact", "allclose", "self_reported"]
    rtol: Annotated[float, Meta(ge=0.0, le=1.0)] = 0.0
    atol: Annotated[float, Meta(ge=0.0, le=MAX_FINITE)] = 0.0


class ReadinessRecord(Request, kw_only=True):
    """``readiness.record`` (R2): what formal samples of a Target need."""

    target_id: Id
    original: Original
    test_set: TestSet | None = None
    accuracy_rule: Text | None = None
    driver: Driver | None = None
    environment: Environment
    statistics: Statistics = Statistics()
    reports: Annotated[list[Id], Meta(max_length=_MAX_ITEMS)] = []
    accuracy: Accuracy | msgspec.UnsetType = msgspec.UNSET


class MetricAuditRecord(Request, kw_only=True):
    """``metric-audit.record`` (R3): how a metric is computed, and whether it matches."""

    target_id: Id
    metric: Name
    numerator: Text
    denominator: Text
    unit: Name
    source: Text
    reconstructed: bool
    matches_target: bool
    notes: OptText = ""


class BaselineRecord(Request, kw_only=True):
    """``baseline.record`` (R4): repeated samples of the original's primary metric; without
    the raw table ``perfledger measure baseline`` attaches, recorded as declared (it decides
    nothing)."""

    target_id: Id
    original_hash: Hash
    metric: Name
    unit: Name
    values: Annotated[list[Number], Meta(min_length=1, max_length=_MAX_VALUES)]
    call_ids: Annotated[list[Name], Meta(max_length=_MAX_VALUES)] = []
    environment_id: Hash
    #: the test case of each value (same length as ``values``), for a baseline per case (R4)
    cases: Annotated[list[Name], Meta(max_length=_MAX_VALUES)] = []
    #: the attached raw per-call table of the original (``perfledger measure baseline``
    #: attaches ``baseline.json``) the values are re-derived from (R4); without one the
    #: baseline is recorded as declared and decides nothing
    raw_table: Annotated[str, Meta(max_length=200)] = ""


class ResolutionRecord(Request, kw_only=True):
    """``resolution.record`` (R4): the measured resolution (ratio) from repeated original samples
    (an A/A comparison)."""

    target_id: Id
    method: Name = "aa_comparison"
    resolution: Annotated[float, Meta(ge=0.0, le=100.0)]
    repeats: Annotated[int, Meta(ge=0, le=10_000_000)]
    notes: OptText = ""
    #: per test case: its own resolution (ratio); ``resolution`` should be their maximum
    per_case: Annotated[
        dict[Name, Annotated[float, Meta(ge=0.0, le=100.0)]], Meta(max_length=_MAX_ITEMS)
    ] = {}
    #: the attached A/A raw table (``perfledger measure aa --record`` attaches
    #: ``resolution.json``) the figures are re-derived from (R4); without one the resolution is
    #: recorded as declared and decides nothing
    raw_table: Annotated[str, Meta(max_length=200)] = ""


# ------------------------------------------------------------------------------- evidence


class Tool(Request, kw_only=True):
    """The tool and its version (R6: an unknown version is refused)."""

    name: Name
    version: Name


class Fact(Request, kw_only=True):
    """A fact: name, value (null when not reported) and unit (R6: unit required)."""

    name: Name
    value: Number | None
    unit: Name
    note: OptText = ""


class KernelBoundary(Request, kw_only=True):
    """A kernel a report measured (R6): key (``k0``), name, launches, shapes, streams."""

    key: Annotated[str, Meta(pattern=r"^k[0-9]{1,6}(?!\n)$")]
    name: Text
    launches: Annotated[int, Meta(ge=0, le=10**12)]
    grids: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []
    blocks: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []
    streams: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []


class Boundary(Request, kw_only=True):
    """The boundary evidence measured: kernels, shapes, CUDA graph or not (R6)."""

    kernels: Annotated[list[KernelBoundary], Meta(max_length=_MAX_ITEMS)] = []
    shapes: OptText = ""
    graph: bool | None = None


class Capture(Request, kw_only=True):
    """Where a parsed report came from: capture command and exit status, or source file; the
    raw report's hash, its layout and the digit grouping accepted; the parsers' version."""

    command: Annotated[list[OptText], Meta(max_length=_MAX_ITEMS)] = []
    exit_status: Annotated[int, Meta(ge=-255, le=255)] | None = None
    source_file: OptText = ""
    source_hash: OptText = ""
    layout: OptText = ""
    grouping: OptText = ""
    parser: OptText = ""


class EvidenceAdd(Request, kw_only=True):
    """``evidence.add`` (R6, R16): profiler/compiler facts with their layer and, for parsed
    reports, applicability, boundary and capture."""

    evidence_id: Id
    layer: Literal["kernel", "workload", "service"]
    tool: Tool
    facts: Annotated[list[Fact], Meta(max_length=10_000)] = []
    limitations: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []
    target_id: Id | None = None
    description: OptText = ""
    report_hash: Hash | None = None
    applicability: Literal["same_boundary", "conservative_upper_bound", "diagnostic"] | None = None
    boundary: Boundary | None = None
    capture: Capture | None = None


class Source(Request, kw_only=True):
    """A source consulted: name, URL, version (or commit)."""

    name: Name
    url: OptText = ""
    version: Name


class UpstreamCheckRecord(Request, kw_only=True):
    """``upstream-check.record`` (R10): does an equivalent exist upstream?"""

    check_id: Id
    target_id: Id | None = None
    component: Text
    component_kind: ComponentKind
    sources: Annotated[list[Source], Meta(min_length=1, max_length=_MAX_ITEMS)]
    equivalent_exists: bool
    equivalent: OptText | None = None
    blocker: OptText | None = None


# ------------------------------------------------------------------------------- experiments


class ClaimEvidence(Request, kw_only=True):
    """An evidence input of a claim (R6): id, applicability, use."""

    evidence_id: Id
    applicability: Literal["same_boundary", "conservative_upper_bound", "diagnostic"]
    used_for: Literal["coverage", "local_speedup", "added_cost", "exposure", "context"]


class CandidateScope(Request, kw_only=True):
    """Replaced region, real shapes, execution form (R7)."""

    replaced_region: Text
    shapes: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []
    execution_form: Text


class Exposure(Request, kw_only=True):
    """Exposure reasoning of a tail claim: affected share (ratio) and critical path (R7)."""

    affected_share: Annotated[float, Meta(gt=0.0, le=1.0)]
    critical_path: Text


class ImprovementInterval(Request, kw_only=True):
    """Predicted end-to-end improvement ``[low, high]`` (ratios in (-1, 1e6]; R14 refuses an
    interval that is no prediction, e.g. one reaching -1)."""

    low: Annotated[Number, ranged(-1.0, MAX_SPEEDUP, low_open=True, low_rule="R14")]
    high: Annotated[Number, ranged(-1.0, MAX_SPEEDUP, low_open=True, low_rule="R14")]


#: Coverage ``f`` (R7 refuses one outside (0, 1]), local speedup ``s`` (> 0: R7) and added
#: cost ``c`` (>= 0: R7), ratios.
_Coverage = Annotated[Number, ranged(0.0, 1.0, low_open=True, low_rule="R7", high_rule="R7")]
_LocalSpeedup = Annotated[Number, ranged(0.0, MAX_SPEEDUP, low_open=True, low_rule="R7")]
_AddedCost = Annotated[Number, ranged(0.0, MAX_RATIO, low_rule="R7")]
_Share = Annotated[Number, ranged(0.0, 1.0, low_open=True, low_rule="R7", high_rule="R7")]


class OpportunityClaim(Request, kw_only=True):
    """The opportunity claim (R7): coverage ``f``, local speedup ``s``, added cost ``c`` (ratios),
    the stated bound ``1/((1-f)+f/s+c)``, or exposure reasoning for a tail primary."""

    evidence: Annotated[list[ClaimEvidence], Meta(max_length=_MAX_ITEMS)]
    scope: CandidateScope
    replacement_boundary: Text
    coverage: _Coverage | None = None
    local_speedup: _LocalSpeedup | None = None
    added_cost: _AddedCost = 0.0
    stated_bound: Annotated[
        Annotated[Number, ranged(0.0, MAX_SPEEDUP, low_open=True, low_rule="R7")] | None,
        Meta(
            description=(
                "The end-to-end Amdahl bound 1/((1-f)+f/s+c) (speedup ratio in (0, 1e6]). Optional: "
                "the tool computes it from coverage, local_speedup and added_cost and records "
                "it (R7); a stated one must lie within a relative 1e-6 of that value (a wrong "
                "one is refused with the value in the hint). Must be omitted for a tail "
                "(p95, p99) primary."
            )
        ),
    ] = None
    exposure: Exposure | None = None
    expected_improvement: Annotated[
        ImprovementInterval | None,
        Meta(
            description=(
                "The expected end-to-end improvement [low, high] as the verdict measures it "
                "(R12): the fraction of time saved for a lower-is-better primary (0.2 = 1.25x), "
                "the relative gain for a higher-is-better one (0.25 = 1.25x); high at most the "
                "bound's (1 - 1/bound for lower-is-better). Required (R14): a target "
                "result outside it, or a failed screen when low is at or above the minimum "
                "effect, owes a reconciliation that blocks new experiments and champion "
                "selection on the Target."
            )
        ),
    ] = None


class Preregistration(Request, kw_only=True):
    """What a failure would reject (R9) and, for ``mechanism``, the discriminating evidence."""

    rejects: Scope
    discriminating_evidence: OptText | None = None


class Candidate(Request, kw_only=True):
    """The candidate (R11). On a Target bound to code (its driver declares a ``{subject}``
    place), the caller names the candidate's directory (``subject``, which ``experiment create``
    replaces by its ``snapshot``): perfledger computes the content hash and changed paths, and a
    typed ``content_hash`` is at most checked against the computed one. On a Target without a
    subject directory, ``content_hash`` and ``changed_paths`` (inside the Target's scope) are
    typed and recorded as declared."""

    content_hash: Hash | msgspec.UnsetType = msgspec.UNSET
    label: OptText = ""
    changed_paths: (
        Annotated[list[Name], Meta(min_length=1, max_length=_MAX_ITEMS)] | msgspec.UnsetType
    ) = msgspec.UNSET
    snapshot: SubjectSnapshot | msgspec.UnsetType = msgspec.UNSET


class NewComponent(Request, kw_only=True):
    """A new non-trivial kernel, communication primitive or backend adapter (R10)."""

    component_kind: ComponentKind
    description: Text
    upstream_check_id: Id | None = None


class ExperimentCreate(Request, kw_only=True):
    """``experiment.create`` (R7-R10, R14): an experiment with its frozen opportunity claim."""

    experiment_id: Id
    target_id: Id
    title: Text
    candidate: Candidate
    approach: Literal["new", "reuse", "backport", "adapter"] = "new"
    new_component: NewComponent | None = None
    claim: OpportunityClaim
    preregistration: Preregistration | None = None
    serves_secondary: Name | None = None
    merge_plan: OptText | None = None


# ------------------------------------------------------------------------------- samples


class Monitor(Request, kw_only=True):
    """The monitor's observations of the call's window (R17)."""

    observed: bool
    foreign_activity: bool = False
    explained: OptText | None = None
    flags: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] = []


class OutputCheck(Request, kw_only=True):
    """A call's output as the measuring process judged it (R5), written by ``measure
    workload``: the call is ``correct`` only when ``self_correct`` and ``ok`` both hold."""

    method: Name
    compare: Literal["exact", "allclose"]
    self_correct: bool
    blake3: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}(?!\n)$")] | None = None
    size: Annotated[int, Meta(ge=0, le=2**53)] | None = None
    ok: bool
    reason: OptText = ""


class SubjectSample(Request, kw_only=True):
    """One subject in one driver call: correctness and values (metric -> samples, in its unit);
    ``wall_s``: the workload driver's wall time of the call (seconds), checked against
    self-reported times; ``output``: how the driver judged its output."""

    call_id: Name
    correct: bool
    values: Annotated[dict[Name, list[Number]], Meta(max_length=_MAX_ITEMS)]
    environment_id: Hash
    wall_s: Annotated[Positive, ranged(0.0, MAX_CALL_WALL_S, low_open=True)] | None = None
    output: OutputCheck | msgspec.UnsetType = msgspec.UNSET


class PairRecord(Request, kw_only=True):
    """One paired call of a test case (R11)."""

    case: Name
    ref: SubjectSample
    cand: SubjectSample
    same_process: bool = True
    monitor: Monitor | None = None


class Reference(Request, kw_only=True):
    """The reference: the original or a champion (experiment id)."""

    kind: Literal["original", "champion"]
    content_hash: Hash
    experiment_id: Id | None = None


class SamplesIdentity(Request, kw_only=True):
    """Both subjects' snapshots (R11), taken by ``perfledger measure workload``."""

    reference: SubjectSnapshot
    candidate: SubjectSnapshot


class Provenance(Request, kw_only=True):
    """Where samples come from (R5): ``perfledger`` (``perfledger measure``: its protocol,
    settings and the attached raw per-call table, by artifact name) or ``outside``."""

    source: Literal["perfledger", "outside"]
    protocol: OptText = ""
    settings: Annotated[dict[Name, Any], Meta(max_length=_MAX_ITEMS)] = {}
    raw_table: OptText = ""


class SamplesRecord(Request, kw_only=True):
    """``samples.record`` (R2-R5, R8, R11, R17): paired samples of one stage of an experiment.
    ``units``: metric name -> unit of its values."""

    samples_id: Id
    target_id: Id
    experiment_id: Id
    stage: Literal["screen", "target", "final_audit"]
    reference: Reference
    candidate_hash: Hash
    test_set_hash: Hash
    environment_id: Hash
    units: Annotated[dict[Name, Name], Meta(min_length=1, max_length=_MAX_ITEMS)]
    pairs: Annotated[list[PairRecord], Meta(min_length=1, max_length=_MAX_PAIRS)]
    identity: SamplesIdentity | msgspec.UnsetType = msgspec.UNSET
    #: absent: recorded from outside perfledger (R5)
    provenance: Provenance | None = None


# ------------------------------------------------------------------------------- decisions


class VerdictRecord(Request, kw_only=True):
    """``verdict.record`` (R12): derive the verdict of ``samples_id``; a ``claimed_status`` that
    differs from the derivation is refused."""

    samples_id: Id
    claimed_status: Literal["pass", "fail", "inconclusive"] | None = None


class LocalResultRecord(Request, kw_only=True):
    """``local-result.record`` (R13): a secondary-only gain with its scenario."""

    result_id: Id
    samples_id: Id
    metric: Name
    scenario: Text


class Reject(Request, kw_only=True):
    """``reject`` (R15): close an implementation, integration or mechanism."""

    experiment_id: Id
    closes: Scope
    reason: Text
    samples_ids: Annotated[list[Id], Meta(max_length=_MAX_ITEMS)] = []
    evidence_ids: Annotated[list[Id], Meta(max_length=_MAX_ITEMS)] = []
    local_proxy: bool = False
    discriminating_evidence_ids: Annotated[list[Id], Meta(max_length=_MAX_ITEMS)] = []


class CorrectedModel(Request, kw_only=True):
    """The corrected model (R14); numeric inputs are re-checked by the R7 arithmetic."""

    description: Text
    coverage: _Coverage | None = None
    local_speedup: _LocalSpeedup | None = None
    added_cost: _AddedCost | None = None
    affected_share: _Share | None = None


class Reconcile(Request, kw_only=True):
    """``reconcile`` (R14): the corrected premise and model after a contradicted prediction."""

    experiment_id: Id
    premise: Literal["applicability", "scope", "coverage", "exposure", "cost"]
    corrected_model: CorrectedModel
    explanation: Text


class ChampionSelect(Request, kw_only=True):
    """``champion.select`` (R13): choose a champion from a passed target-stage result, or
    ``restore_original`` after a failed final audit; ``expected_current`` is the champion the
    caller saw (experiment id or ``original``): a compare-and-swap."""

    target_id: Id
    decision: Literal["select", "restore_original"] = "select"
    samples_id: Id | None = None
    expected_current: Id
    reason: OptText = ""


class FinalAuditRecord(Request, kw_only=True):
    """``final-audit.record`` (R13): derive the final audit from final-audit samples (the
    champion against the original)."""

    target_id: Id
    samples_id: Id
    claimed_status: Literal["pass", "fail", "inconclusive"] | None = None


class HostAdviceRecord(Request, kw_only=True):
    """``host-advice.record`` (R16): advice on a host change; ``applied`` must stay false."""

    advice_id: Id
    target_id: Id | None = None
    category: Literal[
        "driver", "counter_permissions", "clocks", "power", "services", "container_runtime", "other"
    ]
    advice: Text
    reason: OptText = ""
    limitation: Name | None = None
    applied: bool = False


class RejectedDirection(Request, kw_only=True):
    """A rejected direction with the scope it closes."""

    experiment_id: Id
    closes: Scope


#: A stated gain figure (an improvement ratio): checked against the recorded verdict, so any
#: figure a verdict can derive (a regression of a lower-is-better primary goes below -1).
_GainRatio = Annotated[Number, ranged(-MAX_SPEEDUP, MAX_SPEEDUP)]


class GainFigure(Request, kw_only=True):
    """A figure of the champion's gain as stated by the caller: checked against the recorded
    verdict (or final audit) of ``samples_id`` (R18; improvement ratios, 0.2 = 20 %)."""

    samples_id: Id
    estimate: _GainRatio | None = None
    ci_low: _GainRatio | None = None
    ci_high: _GainRatio | None = None


_Ids = Annotated[list[Id], Meta(max_length=_MAX_ITEMS)]
_Texts = Annotated[list[Text], Meta(max_length=_MAX_ITEMS)]


class HandoffRecord(Request, kw_only=True):
    """``handoff.record`` (R18). What the ledger knows is filled by perfledger when left out
    (``champion``, ``primary_achieved``, ``key_evidence``, ``local_results``, ``rejected``,
    ``prediction_corrections``, ``figures``, ``budget_left``, ``resume_needs``) and checked
    against the ledger when stated; ``gains``, ``unresolved_questions``, ``stop_reason`` and
    ``feedback`` (may be ``none``) are what only the caller knows, free text without figures.
    Minimal request: ``target_id``, ``budget_used``, ``stop_reason``, ``feedback``."""

    target_id: Id
    primary_achieved: bool | msgspec.UnsetType = msgspec.UNSET
    champion: Id | msgspec.UnsetType = msgspec.UNSET
    key_evidence: Annotated[list[Name], Meta(max_length=_MAX_ITEMS)] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    gains: _Texts = []
    figures: Annotated[list[GainFigure], Meta(max_length=_MAX_ITEMS)] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    local_results: _Ids | msgspec.UnsetType = msgspec.UNSET
    rejected: Annotated[list[RejectedDirection], Meta(max_length=_MAX_ITEMS)] | (
        msgspec.UnsetType
    ) = msgspec.UNSET
    prediction_corrections: _Ids | msgspec.UnsetType = msgspec.UNSET
    unresolved_questions: _Texts = []
    stop_reason: Text
    budget_used: Budget
    budget_left: Budget | msgspec.UnsetType = msgspec.UNSET
    resume_needs: _Texts | msgspec.UnsetType = msgspec.UNSET
    feedback: Text


class ActivityExplain(Request, kw_only=True):
    """``activity.explain`` (R17): explain foreign activity found in formal sample windows
    after the samples were recorded, before their verdict or final audit: ``pairs`` (0-based
    indices into the samples' pairs, each a window with unexplained foreign activity), why it
    does not matter (``explanation``) and who says so (``explained_by``, default the actor)."""

    samples_id: Id
    pairs: Annotated[
        list[Annotated[int, Meta(ge=0, le=_MAX_PAIRS)]], Meta(min_length=1, max_length=_MAX_PAIRS)
    ]
    explanation: Text
    explained_by: Name | None = None
    #: R17 (ActivityExplained schema 2): the review by another actor that is the evidence
    review_id: Id | None = None


class FormalRunStart(Request, kw_only=True):
    """``formal-run.start`` (R14): a formal-stage (``target``, ``final_audit``) measurement of
    ``experiment_id`` is about to record ``samples_id`` with ``protocol``; appended by
    ``perfledger measure`` before anything is measured (a formal stage has no dry run)."""

    experiment_id: Id
    stage: Literal["target", "final_audit"]
    samples_id: Id
    protocol: Name


class ConflictResolve(Request, kw_only=True):
    """``conflict.resolve``: keep one side of a conflict (SPEC.md section 2)."""

    target_id: Id
    conflict_id: Id
    keep: Id
    reason: Text


# ------------------------------------------------------------------------------- reviews


class ReviewFlag(Request, kw_only=True):
    """A flag a review explains (R12), as the samples payload records it: the samples id, the
    flag's kind (``implausible``) and its test case."""

    samples_id: Id
    flag: Literal["implausible"]
    case: Name


class ReviewRecord(Request, kw_only=True):
    """``review.record``: a reviewer's challenge to a claim, a rejection or a Target's stop
    (``subject_event``: the reviewed event's full id), the response, and whether dissent
    remains; ``resolves`` names earlier reviews whose dissent this one settles; ``explains``
    names the flags of the reviewed samples it explains (R12: only a review naming a flag
    clears it); ``signature`` is the reviewer's SSH signature of the rest (R12, R17: an auditor
    checks whose key made it). Recorded, never judged."""

    review_id: Id
    reviewer: Name
    model_family: Name
    subject: Literal["claim", "rejection", "stop", "other"]
    subject_event: Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$")]
    challenge: Text
    response: Text
    dissent_remains: bool
    resolves: Annotated[list[Id], Meta(max_length=_MAX_ITEMS)] = []
    #: R12: the flags this review explains (each a flag the reviewed samples record); only a
    #: settled review by another actor naming a flag clears it
    explains: Annotated[list[ReviewFlag], Meta(max_length=_MAX_ITEMS)] = []
    #: R12, R17: the reviewer's armored SSH signature (``ssh-keygen -Y sign -n
    #: perfledger-review``) over the review's canonical content (every other field:
    #: :func:`perfledger.commands.workflow.review_signature.signed_content`)
    signature: Annotated[str, Meta(min_length=1, max_length=8_000)] | None = None
