"""The kernel benchmark harness (SPEC.md section 5): correctness before timing, cold-cache timing
with CUDA events, the stopping rule, paired ABBA comparison and plausibility, designed against the
known reward hacks of GUIDE.md.

A :class:`Problem` says how to make inputs (host NumPy arrays from a seeded generator), how to
compute the reference (a Python function on CuPy or NumPy arrays, given float64 copies of the
inputs when ``reference_float64``), the outputs' shapes and dtypes, and the bytes and FLOPs one
call moves and performs. A *subject* is either

- a :class:`RawKernelSubject`: CUDA source compiled by CuPy (``cupy.RawModule``), an entry point,
  a launch configuration and an argument list built from the input and output arrays; or
- a :class:`CallableSubject`: a Python callable ``fn(inputs, outputs)`` on CuPy arrays.

Either launches its work on the *current* CuPy stream and writes every output it is given.

What the harness does, each step against a known way of gaming a benchmark:

1. Correctness (:meth:`Harness.check`), every run, before any timing: ``trials`` (>= 5) input sets
   from a hidden seed (drawn by :mod:`secrets`, recorded only afterwards); outputs poisoned (NaN)
   before each call, so a kernel that writes nothing or relies on an earlier output fails; the
   CuPy memory pool scrubbed with poison before each call, so a kernel that reads uninitialized
   memory cannot find an earlier answer there; input hashes before/after (writing an input
   fails); once the stream under test has completed, the device is checked for work still
   pending on other streams (unsynchronised side-stream work fails); tolerance by the declared
   output dtype (never the output's own) on the relative L2 error against the float64
   reference; NaN never passes.
2. Timing (:meth:`Harness.measure`): a non-blocking stream of its own; warm-up of at least
   ``warmup_min`` calls and ``warmup_min_s`` seconds; each sample flushes L2 (>= 2x its size)
   before the start event, times the call with CUDA events and synchronizes the whole device
   before reading them; host wall time is compared with event time (side work flagged). Under
   the second protocol (the default; ``docs/kernel-harness.md``) every pair of calls gets fresh
   inputs from the hidden seed (pooled sets, outputs poisoned before every call, when
   ``make_inputs`` is slow) and whether a call is re-checked (inputs regenerated and compared,
   outputs against the reference) is drawn from the hidden seed after the call, so a subject
   can neither tell checked calls apart nor profit from remembering inputs; the first protocol
   rotated four input sets and poisoned and re-checked every ``recheck_every``-th call.
3. Stopping: :mod:`perfledger.kernels.harness.stopping` (>= 10 samples and 0.5 s GPU time; relative stdev
   < 0.5 % or settled noise; 15 s cap per subject); the reason is recorded.
4. Paired comparison (:meth:`Harness.compare`): both subjects in one process, interleaved ABBA
   (pair ``k`` runs the reference first when ``k`` is even), both on the same input set within a
   pair, output buffers swapped between the subjects at every pair; statistic: the log ratio of
   each ABBA block (two pairs: order and buffer placement cancel, :func:`abba_blocks`); median ratio with a seeded bootstrap CI and a Wilcoxon
   p-value (:mod:`perfledger.derive.stats`). An A/A comparison (:meth:`Harness.aa`) of a subject
   against itself gives the measurement resolution.
5. Plausibility: achieved bandwidth / FLOP rate above the measured ceiling (the FLOP ceiling of
   the unit the problem declares, ``Problem.flops_unit``) is refused
   (:class:`~perfledger.errors.MeasurementError`); a speedup above 10x is flagged for review.

:meth:`Harness.compare` runs both subjects in the calling process: the library path and the
benchmarks' baseline, *not* isolated (a Python subject can read and patch the harness there).
``perfledger measure kernel`` runs each subject's calls through this same harness inside a
worker process of its own (:mod:`perfledger.kernels.isolation.subject_worker`) and compares them from a
process that never runs subject code (:mod:`perfledger.kernels.isolation.isolated`, property 3).

Every setting is a field of :class:`HarnessConfig` and is returned in the results' ``settings``.
Needs CuPy and a CUDA GPU (imported on use). Times are seconds.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from perfledger.derive.stats import (
    PairedStats,
    aa_comparisons_resolution,
    aa_prediction_bound,
    paired_stats,
)
from perfledger.errors import MeasurementError
from perfledger.kernels.cuda.ceilings import FLOP_UNITS, REVIEW_SPEEDUP, Ceilings, check_plausible
from perfledger.kernels.cuda.timing import HOLD_MAX_S, EventTimer, L2Flusher
from perfledger.kernels.harness import correctness
from perfledger.kernels.harness.stopping import Stopper, StoppingRule

Arrays = dict[str, Any]


def require_cupy() -> Any:
    """Import CuPy and check that a CUDA device is usable.

    Returns: the ``cupy`` module. Raises: MeasurementError naming what is missing.
    """
    try:
        import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)
    except ImportError as exc:
        raise MeasurementError(
            f"the kernel harness needs CuPy: {exc}", hint="pip install 'perfledger[gpu]'"
        ) from None
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise MeasurementError("no CUDA device is visible")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        raise MeasurementError(f"no usable CUDA device: {exc}") from None
    return cupy


# --------------------------------------------------------------------------- problem, subjects


@dataclass(frozen=True)
class Problem:
    """What is computed, independent of how (see the module docstring).

    Attributes:
        name: a label.
        make_inputs: ``seed -> {name: array}`` (NumPy or CuPy arrays; e.g. from
            ``cupy.random.default_rng(seed)``); the seed (an int) is derived from the harness's
            hidden seed, so each trial and input set differs and the subject cannot know it.
        reference: ``inputs -> {name: array}`` (CuPy or NumPy), the expected outputs.
        outputs: ``{name: (shape, dtype)}`` of the outputs the subject must write.
        bytes_per_call: bytes one call must read + write (declared; None = not declared).
        flops_per_call: floating-point operations per call (declared; None = not declared).
        tolerances: per-output relative-L2 tolerance overriding the dtype default.
        reference_float64: give the reference float64 copies of floating inputs.
        flops_unit: the unit that does the declared FLOPs (one of
            :data:`~perfledger.kernels.cuda.ceilings.FLOP_UNITS`, e.g. ``cuda_fp32`` for CUDA-core
            float32 arithmetic, ``tensor_fp16`` for a tensor-core matrix product); the FLOP
            rate is checked against that unit's measured ceiling. None: against the fastest
            unit measured (the check of the first protocol).

    ``make_inputs`` must be deterministic in its seed: timing gives every pair fresh inputs and
    regenerates them from the seed to check a call afterwards.

    Raises: ValueError for an unknown ``flops_unit``.
    """

    name: str
    make_inputs: Callable[[int], dict[str, Any]]
    reference: Callable[[Arrays], Arrays]
    outputs: Mapping[str, tuple[tuple[int, ...], str]]
    bytes_per_call: int | None = None
    flops_per_call: int | None = None
    tolerances: Mapping[str, float] = field(default_factory=dict)
    reference_float64: bool = True
    flops_unit: str | None = None

    def __post_init__(self) -> None:
        if self.flops_unit is not None and self.flops_unit not in FLOP_UNITS:
            raise ValueError(
                f"problem {self.name!r}: unknown flops_unit {self.flops_unit!r} "
                f"(one of {', '.join(FLOP_UNITS)})"
            )


class Subject:
    """Base of the harness's subjects: ``subject(inputs, outputs)`` launches on the current
    stream. ``name`` labels it; :meth:`content_hash` identifies what it runs."""

    name: str

    def __call__(self, inputs: Arrays, outputs: Arrays) -> None:
        raise NotImplementedError

    def content_hash(self) -> str:
        """``sha256:<hex>`` of what the subject runs (source text where known)."""
        raise NotImplementedError


@dataclass
class CallableSubject(Subject):
    """A Python callable ``fn(inputs, outputs)`` on CuPy arrays (launches on the current
    stream, writes every output)."""

    name: str
    fn: Callable[[Arrays, Arrays], None]

    def __call__(self, inputs: Arrays, outputs: Arrays) -> None:
        self.fn(inputs, outputs)

    def content_hash(self) -> str:
        try:
            text = inspect.getsource(self.fn)
        except (OSError, TypeError):
            text = repr(self.fn)
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass
class RawKernelSubject(Subject):
    """CUDA C++ ``source`` compiled by ``cupy.RawModule``; ``entry`` launched with ``grid`` and
    ``block`` (tuples, or callables of ``(inputs, outputs)``) and the argument tuple
    ``args(inputs, outputs)``; ``options`` are NVRTC options, ``shared_mem`` bytes of dynamic
    shared memory."""

    name: str
    source: str
    entry: str
    grid: tuple[int, ...] | Callable[[Arrays, Arrays], tuple[int, ...]]
    block: tuple[int, ...] | Callable[[Arrays, Arrays], tuple[int, ...]]
    args: Callable[[Arrays, Arrays], tuple[Any, ...]]
    options: tuple[str, ...] = ("-std=c++17",)
    shared_mem: int = 0
    _kernel: Any = field(default=None, init=False, repr=False)

    def kernel(self) -> Any:
        """The compiled kernel (compiled once, on first use)."""
        if self._kernel is None:
            import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

            module = cupy.RawModule(code=self.source, options=self.options)
            self._kernel = module.get_function(self.entry)
        return self._kernel

    def __call__(self, inputs: Arrays, outputs: Arrays) -> None:
        grid = self.grid(inputs, outputs) if callable(self.grid) else self.grid
        block = self.block(inputs, outputs) if callable(self.block) else self.block
        self.kernel()(grid, block, self.args(inputs, outputs), shared_mem=self.shared_mem)

    def content_hash(self) -> str:
        text = "\x00".join([self.source, self.entry, *self.options])
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class HarnessConfig:
    """The protocol's settings (defaults of SPEC.md section 5; each recorded).

    Attributes:
        trials: correctness trials with fresh inputs (>= 5).
        input_sets: rotated input sets during timing.
        warmup_min: warm-up calls at least (>= 3).
        warmup_min_s: warm-up seconds at least (0.2).
        flush_l2: flush L2 before each sample (cold samples).
        flush_factor: flush size as a multiple of L2 (>= 2).
        stopping: the stopping rule.
        protocol: 2 (default): every pair of calls gets a fresh input set (``fresh_inputs``;
            pooled sets and every call's outputs poisoned when ``make_inputs`` is slow), and a
            call is re-checked when a draw from the hidden seed, made after the call, says so
            (``recheck_share``), so nothing before or during a call differs between a checked
            and an unchecked one. Every input ``make_inputs`` returns must vary with the seed
            (an input fixed across seeds is one a subject can remember results of). 1: the
            first protocol (input sets rotated, every ``recheck_every``-th call poisoned and
            re-checked), kept to measure what the defences cost.
        recheck_share: protocol 2: the probability that a timed call is re-checked (its inputs
            compared with a regeneration from their seed, its outputs with the reference).
        fresh_inputs: protocol 2: a new input set from the hidden seed for every pair (a
            subject never sees content it saw before); False: a pool of ``input_sets`` sets,
            one drawn at random from the hidden seed per pair.
        fresh_inputs_max_s: protocol 2: fresh inputs only while the problem's ``make_inputs``
            takes at most this long (seconds, median over the correctness trials); slower
            (inputs made on the host): pooled sets, recorded as ``inputs: pooled`` in the
            settings (remembering a pooled set's answer is then possible: make inputs on the
            device for the full property).
        poison_every_call: protocol 2: poison every timed call's outputs before its start event
            (always done with pooled inputs). Off by default: with fresh inputs an
            output buffer before a call holds the answer to other inputs (the buffers swap
            every pair), so a call that skips work is wrong all the same, and poisoning a large
            output costs a memory-bound write per call.
        recheck_every: protocol 1: poison and re-check the outputs of every n-th timed call.
        batch: samples (or pairs) between two stopping checks.
        pending_work_s: after the stream under test completed, a device-wide synchronize taking
            longer than this (seconds) means work was left on another stream ...
        pending_trials: ... when it happens in at least this many trials (one slow synchronize
            can be a host hiccup).
        side_work_s: median host wall time per sample beyond the calibrated overhead, by more than
            this (seconds) or ``side_work_share`` of the event time, flags side work.
        side_work_share: see ``side_work_s``.
        scrub_pool: poison the CuPy memory pool's free memory before each correctness call.
        hold_stream: hold the stream under test from the flush to the start event while the
            call is queued, at most ``HOLD_MAX_S`` a call
            (:class:`~perfledger.kernels.cuda.timing.StreamHold`): the host's launch latency stays
            out of the event time, and no other stream's kernel runs before the start event.
            Recorded in the settings as ``stream_hold`` (``on`` or why not),
            ``stream_hold_counts`` and ``stream_hold_max_s``.
        resamples, confidence: bootstrap settings of the paired statistics.
        seed: the hidden seed (None: drawn from :mod:`secrets`; recorded in the results).
        plausibility_margin: allowed excess over a ceiling (ratio).
    """

    trials: int = 5
    input_sets: int = 4
    warmup_min: int = 3
    warmup_min_s: float = 0.2
    flush_l2: bool = True
    flush_factor: float = 2.0
    stopping: StoppingRule = field(default_factory=StoppingRule)
    recheck_every: int = 97
    protocol: int = 2
    recheck_share: float = 0.1
    fresh_inputs: bool = True
    poison_every_call: bool = False
    fresh_inputs_max_s: float = 0.005
    batch: int = 16
    pending_work_s: float = 50e-6
    pending_trials: int = 2
    side_work_s: float = 50e-6
    side_work_share: float = 0.5
    scrub_pool: bool = True
    hold_stream: bool = True
    resamples: int = 10_000
    confidence: float = 0.95
    seed: int | None = None
    plausibility_margin: float = 0.05

    def __post_init__(self) -> None:
        if self.trials < 5:
            raise ValueError("correctness needs at least 5 trials (SPEC.md section 5)")
        if self.warmup_min < 3 or self.warmup_min_s < 0.2:
            raise ValueError("warm-up needs at least 3 runs and 0.2 s (SPEC.md section 5)")
        if self.flush_factor < 2.0:
            raise ValueError("the L2 flush must be at least twice the L2 size")
        if self.input_sets < 1 or self.recheck_every < 1 or self.batch < 1:
            raise ValueError("input_sets, recheck_every and batch must be >= 1")
        if self.protocol not in (1, 2):
            raise ValueError(f"protocol must be 1 or 2, not {self.protocol!r}")
        if not 0.0 < self.recheck_share <= 1.0:
            raise ValueError("recheck_share must be in (0, 1]")

    def to_json(self) -> dict[str, Any]:
        """JSON builtins (the seed as drawn, when known)."""
        return asdict(self)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class TrialResult:
    """One correctness trial of one subject.

    Attributes:
        trial: index.
        ok: passed.
        reasons: why not (``output:<name>:<reason>``, ``input_written:<name>``,
            ``pending_side_work``, ``raised:<error>``).
        errors: output name -> relative L2 error (None when not computable).
        pending_s: device-wide synchronize time after the stream under test completed (s).
    """

    trial: int
    ok: bool
    reasons: tuple[str, ...]
    errors: dict[str, float | None]
    pending_s: float


@dataclass(frozen=True)
class CorrectnessReport:
    """Correctness of one subject: every trial, and whether all passed."""

    subject: str
    ok: bool
    trials: tuple[TrialResult, ...]

    @property
    def reasons(self) -> list[str]:
        """The distinct failure reasons over all trials."""
        seen: list[str] = []
        for t in self.trials:
            for r in t.reasons:
                if r not in seen:
                    seen.append(r)
        return seen


@dataclass
class SubjectTiming:
    """Timing of one subject: samples (seconds), stop reason and derived figures.
    ``input_sets`` holds each call's input set (protocol 1: the rotated set's index; protocol 2:
    the stream id its seed was derived from); ``checked_calls`` the indices of the timed calls
    that were re-checked."""

    subject: str
    samples_s: list[float]
    wall_s: list[float]
    span_s: list[float]
    input_sets: list[int]
    gpu_s: float
    recheck_failures: list[str]
    side_work: bool
    median_s: float = math.nan
    figures: dict[str, float | None] = field(default_factory=dict)
    checked_calls: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON builtins."""
        return asdict(self)


@dataclass
class Measurement:
    """Result of :meth:`Harness.measure`: correctness, timing, stop reason, figures, flags."""

    correctness: CorrectnessReport
    timing: SubjectTiming | None
    stop_reason: str | None
    flags: list[str]
    settings: dict[str, Any]

    @property
    def ok(self) -> bool:
        """Correct, re-checks passed and nothing flagged as side work."""
        return (
            self.correctness.ok
            and self.timing is not None
            and not self.timing.recheck_failures
            and not self.timing.side_work
        )


@dataclass
class Comparison:
    """Result of :meth:`Harness.compare` (or :meth:`Harness.aa`).

    Attributes:
        ref, cand: each subject's correctness and timing (pairs in order).
        pair_orders: ``"AB"`` or ``"BA"`` per pair.
        stats: paired statistics (None when no timing happened).
        stop_reason: why sampling stopped.
        flags: ``review_speedup``, ``side_work:<subject>``, ``recheck:<subject>``, ...
        settings: the protocol's settings, the seed, the overhead calibration.
        monitor: per-batch monitor windows (verdict dicts), empty without a monitor.
    """

    ref_correctness: CorrectnessReport
    cand_correctness: CorrectnessReport
    ref: SubjectTiming | None
    cand: SubjectTiming | None
    pair_orders: list[str]
    stats: PairedStats | None
    stop_reason: str | None
    flags: list[str]
    settings: dict[str, Any]
    monitor: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """Both correct, timed, no re-check failure, no side work, and (isolated comparisons,
        :mod:`perfledger.kernels.isolation.isolated`) no clock, digest, cross-check, pause, sched
        or persisting L2 flag."""
        return (
            self.ref_correctness.ok
            and self.cand_correctness.ok
            and self.stats is not None
            and not any(
                f.startswith(
                    (
                        "side_work",
                        "recheck",
                        "clock",
                        "digest",
                        "cross_check",
                        "pause",
                        "sched",
                        "persisting_l2",
                    )
                )
                for f in self.flags
            )
        )

    def table(self) -> list[dict[str, Any]]:
        """The raw per-sample table: one row per pair (seconds)."""
        if self.ref is None or self.cand is None:
            return []
        return [
            {
                "pair": i,
                "order": self.pair_orders[i],
                "input_set": self.ref.input_sets[i],
                "ref_s": self.ref.samples_s[i],
                "cand_s": self.cand.samples_s[i],
                "ref_wall_s": self.ref.wall_s[i],
                "cand_wall_s": self.cand.wall_s[i],
            }
            for i in range(len(self.pair_orders))
        ]


# --------------------------------------------------------------------------- the harness

#: Stream ids of protocol 2's per-pair input sets (kept apart from trials and rotated sets).
_FRESH_STREAM = 1 << 40


@dataclass
class _PairInputs:
    """The input set of one pair and, once a call on it is checked, what it is checked against:
    the inputs as made (``original``) and the reference outputs (``refs``)."""

    inputs: Arrays
    token: int
    original: Arrays | None = None
    refs: Arrays | None = None


class Harness:
    """Runs the measurement protocol of one :class:`Problem` on the current CUDA device.

    Args:
        problem: what is computed.
        config: the protocol's settings.
        ceilings: the environment's measured ceilings (None: plausibility unchecked, and a
            ``no_ceilings`` flag is recorded).
        l2_bytes: the L2 size (None: read from the device).
        monitor: a started :class:`~perfledger.kernels.monitor.monitor.Monitor` (optional): each batch's
            window gets its contamination verdict (R17).
    Raises: MeasurementError without CuPy or a GPU.
    """

    def __init__(
        self,
        problem: Problem,
        config: HarnessConfig = HarnessConfig(),
        *,
        ceilings: Ceilings | None = None,
        l2_bytes: int | None = None,
        monitor: Any = None,
    ) -> None:
        self.cp = require_cupy()
        cp = self.cp
        self.problem = problem
        self.seed = config.seed if config.seed is not None else secrets.randbits(63)
        self.config = replace(config, seed=self.seed)
        self.ceilings = ceilings
        self.monitor = monitor
        if l2_bytes is None:
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
            l2_bytes = int(props["l2CacheSize"])
        self.l2_bytes = l2_bytes
        self.stream = cp.cuda.Stream(non_blocking=True)

        self.flusher = L2Flusher(l2_bytes, config.flush_factor) if config.flush_l2 else None
        self.timer = EventTimer(self.stream, self.flusher, hold=config.hold_stream)
        self._sets: list[Arrays] = []
        self._refs: list[Arrays] = []
        self._hashes: list[Arrays] = []
        self._overhead_s: float | None = None
        # Protocol 2's draws from the hidden seed: which calls are re-checked (drawn after each
        # call) and, without fresh inputs, which pooled set a pair gets.
        self._check_rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0xC4EC]))
        self._pick_rng = np.random.default_rng(np.random.SeedSequence([self.seed, 0x9A1C]))
        self._fresh_next = 0
        self._make_inputs_s: list[float] = []  # host wall time of each make_inputs of the trials
        self._fresh_memo: tuple[int, bool] = (-1, True)

    # -- inputs and references ---------------------------------------------------------------

    def _seed(self, stream_id: int) -> int:
        """A per-trial / per-input-set seed (63 bits) derived from the hidden seed (a keyed hash:
        a few microseconds, as protocol 2 derives one per pair)."""
        key = self.seed.to_bytes(8, "little")
        digest = hashlib.blake2b(stream_id.to_bytes(8, "little"), digest_size=8, key=key)
        return int.from_bytes(digest.digest(), "little") >> 1

    def _make_inputs(self, stream_id: int) -> Arrays:
        with self.stream:
            made = self.problem.make_inputs(self._seed(stream_id))
            arrays = {k: self.cp.ascontiguousarray(self.cp.asarray(v)) for k, v in made.items()}
        self.stream.synchronize()
        return arrays

    def _snapshot(self, inputs: Arrays) -> Arrays:
        """Device copies of the inputs, to prove afterwards that nobody wrote them."""
        with self.stream:
            copies = {k: v.copy() for k, v in inputs.items()}
        self.stream.synchronize()
        return copies

    def _written(self, inputs: Arrays, copies: Arrays) -> list[str]:
        """Names of inputs whose bytes differ from their snapshot (bitwise, NaN-safe)."""
        cp = self.cp

        def bits(a: Any) -> Any:  # the widest integer view the bytes allow: fewer elements
            flat = a.reshape(-1)
            return flat.view(cp.uint64 if a.nbytes % 8 == 0 else cp.uint8)

        return [k for k, v in inputs.items() if not bool(cp.array_equal(bits(v), bits(copies[k])))]

    def _reference(self, inputs: Arrays) -> Arrays:
        cp = self.cp
        with self.stream:
            given = {
                k: (
                    v.astype(cp.float64)
                    if self.problem.reference_float64 and v.dtype.kind == "f"
                    else v
                )
                for k, v in inputs.items()
            }
            result = self.problem.reference(given)
            missing = set(self.problem.outputs) - set(result)
            if missing:
                raise MeasurementError(f"the reference did not return outputs {sorted(missing)}")
            refs = {
                k: cp.asarray(result[k]).astype(
                    cp.float64 if result[k].dtype.kind != "c" else cp.complex128, copy=False
                )
                for k in self.problem.outputs
            }
        self.stream.synchronize()
        return refs

    def _new_outputs(self) -> Arrays:
        cp = self.cp
        return {
            k: cp.empty(shape, dtype=dtype) for k, (shape, dtype) in self.problem.outputs.items()
        }

    def _scrub_pool(self) -> None:
        """Poison the memory pool's free memory: free cached blocks, then allocate, fill with
        0xFF (NaN for float types) and release a block as large as the outputs x 4 + 64 MiB, so a
        subject's fresh ``cupy.empty`` holds poison, not an earlier answer."""
        cp = self.cp
        pool = cp.get_default_memory_pool()
        pool.free_all_blocks()
        size = 64 << 20
        for shape, dtype in self.problem.outputs.values():
            size += 4 * int(np.prod(shape)) * np.dtype(dtype).itemsize
        with self.stream:
            block = cp.empty(size, dtype=cp.uint8)
            block.fill(0xFF)
        self.stream.synchronize()
        del block

    def _input_sets(self) -> None:
        if self._sets:
            return
        for s in range(self.config.input_sets):
            inputs = self._make_inputs(1_000_000 + s)
            self._sets.append(inputs)
            self._refs.append(self._reference(inputs))
            self._hashes.append(self._snapshot(inputs))

    def _check_outputs(
        self, outputs: Arrays, refs: Arrays
    ) -> tuple[list[str], dict[str, float | None]]:
        reasons: list[str] = []
        errors: dict[str, float | None] = {}
        # the problem's outputs, each judged by its declared dtype's tolerance: a subject can
        # replace an array in its outputs dict (one of a lower precision loosened the tolerance
        # that followed it), add one or drop one
        for name, (_shape, dtype) in self.problem.outputs.items():
            out = outputs.get(name)
            if out is None:
                errors[name] = None
                reasons.append(f"output:{name}:missing")
                continue
            tol = self.problem.tolerances.get(name)
            check = correctness.compare(out, refs[name], tolerance=tol, dtype=dtype)
            errors[name] = check.rel_l2_error
            if not check.ok:
                detail = f" ({check.detail})" if check.detail else ""
                reasons.append(f"output:{name}:{check.reason}{detail}")
        reasons += [
            f"output:{name}:unexpected" for name in outputs if name not in self.problem.outputs
        ]
        return reasons, errors

    # -- correctness ------------------------------------------------------------------------------

    def check(self, subject: Subject) -> CorrectnessReport:
        """Correctness of ``subject`` over ``trials`` fresh input sets (module docstring, step 1).
        Never raises for a wrong subject: failures are in the report."""
        cp = self.cp
        trials: list[TrialResult] = []
        outputs = self._new_outputs()
        for trial in range(self.config.trials):
            t0 = time.perf_counter()
            inputs = self._make_inputs(trial)
            self._make_inputs_s.append(time.perf_counter() - t0)
            before = self._snapshot(inputs)
            refs = self._reference(inputs)
            with self.stream:
                for out in outputs.values():
                    correctness.poison(out)
            self.stream.synchronize()
            if self.config.scrub_pool:
                self._scrub_pool()
            reasons: list[str] = []
            errors: dict[str, float | None] = {}
            pending = 0.0
            try:
                with self.stream:
                    subject(inputs, outputs)
                self.stream.synchronize()
                # The stream under test has completed: anything the device still has to do was
                # launched elsewhere and not synchronised with it (a side-stream cheat).
                t0 = time.perf_counter()
                cp.cuda.runtime.deviceSynchronize()
                pending = time.perf_counter() - t0
            except Exception as exc:  # a subject that raises fails its trial, with the reason
                cp.cuda.runtime.deviceSynchronize()
                reasons.append(f"raised:{type(exc).__name__}: {exc}"[:200])
                trials.append(TrialResult(trial, False, tuple(reasons), errors, pending))
                continue
            out_reasons, errors = self._check_outputs(outputs, refs)
            reasons += out_reasons
            reasons += [f"input_written:{k}" for k in self._written(inputs, before)]
            trials.append(TrialResult(trial, not reasons, tuple(reasons), errors, pending))
            del inputs, refs, before
        # A side-stream cheat leaves work pending after every call; one slow synchronize is
        # a host hiccup (another thread holding the GIL), so it takes pending_trials of them.
        late = [t for t in trials if t.pending_s > self.config.pending_work_s]
        if len(late) >= self.config.pending_trials:
            trials = [
                replace(t, ok=False, reasons=(*t.reasons, "pending_side_work")) if t in late else t
                for t in trials
            ]
        return CorrectnessReport(subject.name, all(t.ok for t in trials), tuple(trials))

    # -- timing ---------------------------------------------------------------------------------

    def _calibrate_overhead(self) -> float:
        """Median host wall time beyond event time of an empty call (seconds)."""
        if self._overhead_s is None:
            excess = [self.timer.time(lambda: None).excess_s for _ in range(50)]
            self._overhead_s = float(np.median(excess))
        return self._overhead_s

    def _warmup(self, subjects: Sequence[tuple[Subject, list[Arrays]]]) -> None:
        start = time.perf_counter()
        n = 0
        while n < self.config.warmup_min or time.perf_counter() - start < self.config.warmup_min_s:
            for subject, outs in subjects:
                s = n % len(self._sets)
                self.timer.time(
                    lambda subject=subject, outs=outs, s=s: subject(self._sets[s], outs[s]),
                    s,
                )
            n += 1

    def _warmup2(self, subjects: Sequence[tuple[Subject, Arrays]]) -> None:
        """Protocol 2's warm-up: calls on the path timed calls take, on fresh inputs."""
        start = time.perf_counter()
        n = 0
        while n < self.config.warmup_min or time.perf_counter() - start < self.config.warmup_min_s:
            pair = self._pair_inputs()
            for subject, outs in subjects:
                self._call(subject, outs, pair)
            n += 1

    def _timed(self, subject: Subject, outs: list[Arrays], k: int, timing: SubjectTiming) -> None:
        s = k % len(self._sets)
        recheck = k % self.config.recheck_every == 0
        if recheck:
            with self.stream:
                for out in outs[s].values():
                    correctness.poison(out)
        sample = self.timer.time(lambda: subject(self._sets[s], outs[s]), s)
        timing.samples_s.append(sample.gpu_s)
        timing.wall_s.append(sample.wall_s)
        timing.span_s.append(sample.span_s)
        timing.input_sets.append(s)
        timing.gpu_s += sample.gpu_s
        if recheck:
            reasons, _ = self._check_outputs(outs[s], self._refs[s])
            timing.recheck_failures += [f"sample {k}: {r}" for r in reasons]

    # -- protocol 2: fresh inputs per pair, re-checks drawn after the call ---------------------

    def _fresh(self) -> bool:
        """Whether pairs get fresh inputs: ``fresh_inputs``, unless the problem's
        ``make_inputs`` took longer than ``fresh_inputs_max_s`` in the correctness trials (inputs
        made on the host cost ~0.1 s per 64 MiB: one per pair would multiply a comparison's
        time); then a pooled set per pair, outputs poisoned before every call."""
        if not self.config.fresh_inputs:
            return False
        made = self._make_inputs_s
        if self._fresh_memo[0] != len(made):  # decided again only when trials were added
            fresh = not made or float(np.median(made)) <= self.config.fresh_inputs_max_s
            self._fresh_memo = (len(made), fresh)
        return self._fresh_memo[1]

    def _pair_inputs(self) -> _PairInputs:
        """The input set of the next pair: fresh from the hidden seed (``fresh_inputs``), else a
        pooled set drawn from the hidden seed."""
        if self._fresh():
            token = _FRESH_STREAM + self._fresh_next
            self._fresh_next += 1
            return _PairInputs(self._make_inputs(token), token)
        self._input_sets()
        s = int(self._pick_rng.integers(len(self._sets)))
        return _PairInputs(self._sets[s], s, self._hashes[s], self._refs[s])

    def _expected(self, pair: _PairInputs) -> tuple[Arrays, Arrays]:
        """The pair's inputs as made and their reference outputs (regenerated from the seed the
        first time a call on the pair is checked)."""
        if pair.original is None or pair.refs is None:
            pair.original = self._make_inputs(pair.token)
            pair.refs = self._reference(pair.original)
        return pair.original, pair.refs

    def _call(self, subject: Subject, outs: Arrays, pair: _PairInputs) -> Any:
        """One call under protocol 2, timed or not (warm-up calls take this same path, so that
        nothing tells a subject which calls count): outputs poisoned after the first event,
        L2 flushed, the call between the start and end events."""
        poison = self.config.poison_every_call or not self._fresh()

        def before() -> None:
            for out in outs.values():
                correctness.poison(out)

        return self.timer.time(
            lambda: subject(pair.inputs, outs),
            pair.token,
            before if poison else None,
        )

    def _timed2(
        self, subject: Subject, outs: Arrays, pair: _PairInputs, k: int, timing: SubjectTiming
    ) -> None:
        sample = self._call(subject, outs, pair)
        timing.samples_s.append(sample.gpu_s)
        timing.wall_s.append(sample.wall_s)
        timing.span_s.append(sample.span_s)
        timing.input_sets.append(pair.token)
        timing.gpu_s += sample.gpu_s
        # Drawn only now, after the call completed: before and during the call a checked call
        # and an unchecked one are the same, so a subject cannot do less work on unchecked ones.
        if self._check_rng.random() >= self.config.recheck_share:
            return
        timing.checked_calls.append(k)
        original, refs = self._expected(pair)
        written = self._written(pair.inputs, original)
        timing.recheck_failures += [f"call {k}: input_written:{name}" for name in written]
        reasons, _ = self._check_outputs(outs, refs)
        timing.recheck_failures += [f"call {k}: {r}" for r in reasons]

    def _finish(self, timing: SubjectTiming) -> None:
        timing.median_s = float(np.median(timing.samples_s))
        excess = np.median(np.asarray(timing.wall_s) - np.asarray(timing.span_s))
        limit = self._calibrate_overhead() + max(
            self.config.side_work_s, self.config.side_work_share * timing.median_s
        )
        timing.side_work = bool(excess > limit)
        timing.figures = check_plausible(
            median_s=timing.median_s,
            bytes_per_call=self.problem.bytes_per_call,
            flops_per_call=self.problem.flops_per_call,
            ceilings=self.ceilings,
            margin=self.config.plausibility_margin,
            label=timing.subject,
            flops_unit=self.problem.flops_unit,
        )
        timing.figures["wall_excess_s"] = float(excess)
        timing.figures["wall_excess_limit_s"] = float(limit)

    def _inputs_intact(self) -> list[str]:
        return [
            f"input_written:{k}"
            for s, inputs in enumerate(self._sets)
            for k in self._written(inputs, self._hashes[s])
        ]

    def settings(self) -> dict[str, Any]:
        """The protocol's settings for the samples' metadata."""
        return {
            "harness": self.config.to_json(),
            "problem": self.problem.name,
            "bytes_per_call": self.problem.bytes_per_call,
            "flops_per_call": self.problem.flops_per_call,
            "l2_bytes": self.l2_bytes,
            "flush_bytes": self.flusher.nbytes if self.flusher else 0,
            # calls whose flush found a persisting L2 carve-out (cleared each time)
            "persisting_l2": self.flusher.persisting.to_json() if self.flusher else None,
            "overhead_s": self._overhead_s,
            "stream_hold": self.timer.hold_off or "on",
            "stream_hold_counts": dict(self.timer.hold_counts),
            "stream_hold_max_s": HOLD_MAX_S,
            "ceilings": self.ceilings.to_json() if self.ceilings else None,
            "inputs": (
                "rotated" if self.config.protocol == 1 else "fresh" if self._fresh() else "pooled"
            ),
            "make_inputs_s": float(np.median(self._make_inputs_s)) if self._make_inputs_s else None,
        }

    def measure(self, subject: Subject) -> Measurement:
        """Correctness, then timing of one subject until the stopping rule says stop."""
        report = self.check(subject)
        flags = [] if self.ceilings else ["no_ceilings"]
        if not report.ok:
            return Measurement(report, None, None, ["incorrect", *flags], self.settings())
        timing = SubjectTiming(subject.name, [], [], [], [], 0.0, [], False)
        stopper = Stopper(self.config.stopping)
        reason = None
        k = 0
        if self.config.protocol == 1:
            self._input_sets()
            self._calibrate_overhead()
            outs = [self._new_outputs() for _ in self._sets]
            self._warmup([(subject, outs)])
            while reason is None:
                self.timer.time(lambda: subject(self._sets[0], outs[0]))  # re-warm
                for _ in range(self.config.batch):
                    self._timed(subject, outs, k, timing)
                    k += 1
                reason = stopper.check(timing.samples_s, timing.gpu_s)
        else:
            self._calibrate_overhead()
            out = self._new_outputs()
            self._warmup2([(subject, out)])
            while reason is None:
                self._call(subject, out, self._pair_inputs())  # re-warm (see compare)
                for _ in range(self.config.batch):
                    self._timed2(subject, out, self._pair_inputs(), k, timing)
                    k += 1
                reason = stopper.check(timing.samples_s, timing.gpu_s)
        self._finish(timing)
        flags += self._inputs_intact()
        if timing.side_work:
            flags.append(f"side_work:{subject.name}")
        if timing.recheck_failures:
            flags.append(f"recheck:{subject.name}")
        return Measurement(report, timing, reason, flags, self.settings())

    def compare(self, ref: Subject, cand: Subject) -> Comparison:
        """Paired ABBA comparison of ``cand`` against ``ref`` (module docstring, step 4).

        Correctness of both first; an incorrect subject is not timed (the result says which). The
        stopping rule runs on the per-pair log ratios and each subject's GPU time.
        """
        ref_report = self.check(ref)
        cand_report = self.check(cand)
        flags: list[str] = [] if self.ceilings else ["no_ceilings"]
        if not (ref_report.ok and cand_report.ok):
            if not ref_report.ok:
                flags.append("ref_incorrect")
            if not cand_report.ok:
                flags.append("cand_incorrect")
            return Comparison(
                ref_report, cand_report, None, None, [], None, None, flags, self.settings()
            )
        self._calibrate_overhead()
        # Two pools of output buffers, swapped between the subjects at every pair, so that within
        # each ABBA block each subject runs once first and once second, once on each pool: where
        # a buffer lies in memory (a measurable, run-long effect) cancels like the order does.
        # Within a pair the subjects never share a buffer. Protocol 1 keeps one buffer per
        # rotated input set in each pool; protocol 2 one buffer (with fresh inputs it holds the
        # answer to other inputs before every call; with pooled inputs it is poisoned).
        v1 = self.config.protocol == 1
        if v1:
            self._input_sets()
        pools = [[self._new_outputs() for _ in (self._sets if v1 else [0])] for _ in range(2)]
        subjects = {"A": ref, "B": cand}
        if v1:
            self._warmup([(ref, pools[0]), (cand, pools[1])])
        else:
            self._warmup2([(ref, pools[0][0]), (cand, pools[1][0])])
        tim = {
            "A": SubjectTiming(ref.name, [], [], [], [], 0.0, [], False),
            "B": SubjectTiming(cand.name, [], [], [], [], 0.0, [], False),
        }
        orders: list[str] = []
        stopper = Stopper(self.config.stopping, logs=True)
        windows: list[dict[str, Any]] = []
        reason = None
        k = 0
        while reason is None:
            batch_start = time.monotonic()
            # Between batches the host works (stopping rule, monitor) while the GPU idles; the
            # first sample after that idle ran measurably slower, and it was always the first
            # subject of an AB pair: an A/A bias. One untimed call of each subject re-warms the
            # GPU before every batch.
            # (protocol 2: on inputs of their own, which no timed call sees)
            pair = None if v1 else self._pair_inputs()
            for label, pool in (("B", pools[1]), ("A", pools[0])):
                if pair is None:
                    self.timer.time(
                        lambda subject=subjects[label], pool=pool: subject(self._sets[0], pool[0]),
                    )
                else:
                    self._call(subjects[label], pool[0], pair)
            for _ in range(self.config.batch):
                order = "AB" if k % 2 == 0 else "BA"
                swap = k % 2
                if pair is not None:
                    pair = self._pair_inputs()
                for label in order:
                    pool = pools[swap if label == "A" else 1 - swap]
                    if pair is None:
                        self._timed(subjects[label], pool, k, tim[label])
                    else:
                        self._timed2(subjects[label], pool[0], pair, k, tim[label])
                orders.append(order)
                k += 1
            if self.monitor is not None:
                windows.append(
                    {
                        "pairs": [k - self.config.batch, k],
                        **self.monitor.verdict(batch_start, time.monotonic()).to_json(),
                    }
                )
            a_blocks, b_blocks = abba_blocks(tim["A"].samples_s, tim["B"].samples_s)
            logs = np.log(b_blocks / a_blocks)
            reason = stopper.check(logs, max(tim["A"].gpu_s, tim["B"].gpu_s))
        self._finish(tim["A"])
        self._finish(tim["B"])
        a_blocks, b_blocks = abba_blocks(tim["A"].samples_s, tim["B"].samples_s)
        stats = paired_stats(
            a_blocks,
            b_blocks,
            resamples=self.config.resamples,
            confidence=self.config.confidence,
            seed=self.seed & 0xFFFFFFFF,
        )
        # The statistic is over ABBA blocks (two calls a subject); the medians reported are one
        # call's time, as their names say.
        stats = replace(
            stats,
            ref_median_s=float(np.median(tim["A"].samples_s)),
            cand_median_s=float(np.median(tim["B"].samples_s)),
            medians_per="call",
        )
        flags += self._inputs_intact()
        flags += timing_flags(tim.values(), stats.median_ratio)
        return Comparison(
            ref_report,
            cand_report,
            tim["A"],
            tim["B"],
            orders,
            stats,
            reason,
            flags,
            self.settings(),
            windows,
        )

    def aa(self, subject: Subject) -> Comparison:
        """An A/A comparison of ``subject`` against itself (separate output buffers), under the
        same protocol: its CI width is the measurement's resolution (R4)."""
        return self.compare(subject, subject)


def timing_flags(timings: Iterable[SubjectTiming], median_ratio: float) -> list[str]:
    """The flags a comparison's timings raise: ``side_work:<subject>`` and
    ``recheck:<subject>`` per subject, and ``review_speedup`` for a median ratio beyond
    :data:`~perfledger.kernels.cuda.ceilings.REVIEW_SPEEDUP` either way (SPEC.md section 5)."""
    flags = []
    for t in timings:
        if t.side_work:
            flags.append(f"side_work:{t.subject}")
        if t.recheck_failures:
            flags.append(f"recheck:{t.subject}")
    if median_ratio < 1.0 / REVIEW_SPEEDUP or median_ratio > REVIEW_SPEEDUP:
        flags.append("review_speedup")
    return flags


def abba_blocks(a_s: Sequence[float], b_s: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """Sum each ABBA block: pairs ``2j`` (AB) and ``2j+1`` (BA) form block ``j``, whose A and B
    values are the sums of the block's two samples of each subject (seconds). A block cancels the
    order effect (who runs first) and, with the buffer swap of :meth:`Harness.compare`, where the
    buffers lie, to first order; the per-pair statistic of SPEC.md section 5 is computed over
    blocks. An odd last pair is left out.

    Returns: ``(a_blocks, b_blocks)``, equal-length float arrays.
    """
    a = np.asarray(a_s, dtype=np.float64)
    b = np.asarray(b_s, dtype=np.float64)
    m = (min(a.size, b.size) // 2) * 2
    return a[:m].reshape(-1, 2).sum(axis=1), b[:m].reshape(-1, 2).sum(axis=1)


def resolution_from_aa(comparisons: Sequence[Comparison]) -> dict[str, float]:
    """The measurement resolution from A/A comparisons (R4), each made by a fresh pair of
    workers: the larger of

    - ``reach``: the largest distance of a CI end from a ratio of 1 over the valid runs, and
    - ``bound``: how far from 1 the *next* comparison's A/A ratio can lie, a 95 % prediction
      bound over the runs' median log ratios ``l_i`` (n of them, mean ``m``, stdev ``s``):
      ``exp(|m| + t(0.975, n - 1) * s * sqrt(1 + 1/n)) - 1`` (0 with fewer than 2 runs).

    Why both: each pair of worker processes has a bias of its own (buffers where its own
    allocations put them, its own GPU context), fixed for the comparison; one comparison's
    bootstrap CI is of its blocks, so it does not see it (``docs/kernel-harness.md``: short
    memory-bound kernels, biases many times their CI's width). A later comparison draws a bias
    of its own, which the
    largest of a few earlier ones does not bound (one of n + 1 draws is the largest with chance
    1 / (n + 1)); the prediction bound does, with 95 % coverage where the biases are normal.

    An invalid comparison (:attr:`Comparison.valid`: incorrect, side work, a clock, digest,
    cross-check or pause flag) is left out: its figures do not measure the protocol's noise.

    Returns: ``{"resolution": ratio distance, "reach": ..., "bound": ..., "spread": stdev of
    the median ratios, "repeats": n valid, "excluded": n}``.
    Raises: ValueError when no comparison is valid (the message names their flags).
    """
    valid = [c for c in comparisons if c.valid and c.stats is not None]
    if not valid:
        flags = sorted({f for c in comparisons for f in c.flags} - {"no_ceilings"})
        raise ValueError(
            f"none of the {len(comparisons)} A/A comparisons is valid (flags: "
            f"{', '.join(flags) or 'none; no statistics'})"
        )
    stats = [c.stats for c in valid if c.stats is not None]
    ratios = [s.median_ratio for s in stats]
    spread = float(np.std(ratios, ddof=1)) if len(ratios) > 1 else 0.0
    resolution, reach, bound = aa_comparisons_resolution(
        [s.ci_low for s in stats], [s.ci_high for s in stats], ratios
    )
    return {
        "resolution": resolution,
        "reach": reach,
        "bound": bound,
        "spread": spread,
        "repeats": float(len(stats)),
        "excluded": float(len(comparisons) - len(valid)),
    }


__all__ = [
    "CallableSubject",
    "Comparison",
    "CorrectnessReport",
    "Harness",
    "HarnessConfig",
    "Measurement",
    "Problem",
    "RawKernelSubject",
    "Subject",
    "SubjectTiming",
    "TrialResult",
    "aa_prediction_bound",
    "abba_blocks",
    "require_cupy",
    "resolution_from_aa",
    "timing_flags",
]
