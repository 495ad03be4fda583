"""Paired comparison of two kernel subjects, each in a worker process of its own (SPEC.md
section 5, property 3): the process that computes statistics never runs subject code, checks
the times the workers report against its own clock, and checks their outputs itself.

What runs where:

- each subject worker (:mod:`perfledger.kernels.isolation.subject_worker`) loads the spec, runs the
  harness's correctness trials and timed calls of its one subject, and reports per call an event
  time, its own re-check and a keyed digest of the call's outputs;
- this process (which never imports the spec) draws the seeds, orders the batches, times each
  batch with its own monotonic clock (request written -> reply read), checks the reports of
  each subject's two batches of an ABBA block together, the unit of the statistic
  (:func:`perfledger.kernels.isolation.isolation.clock_check`), has both workers reveal calls it draws
  after the batch, checks each revealed output against the committed digest and the candidate's
  against the reference's for the same seed, and computes the statistics, the stopping rule and
  plausibility.

The schedule: correctness of both; warm-up batches (alternating, until ``warmup_min`` calls and
``warmup_min_s`` seconds); then ABBA blocks: a batch of ``calls`` calls of the reference on
seeds ``s1``, the candidate's batch on ``s1``, the candidate's on ``s2``, the reference's on
``s2`` (so order cancels within a block); the block's statistic is the log ratio of the
subjects' summed times; the stopping rule runs on the blocks. After each pair of batches on the
same seeds, call indices are drawn (from :mod:`secrets`, after both replies; at least
``reveals_per_batch``, as many as
:func:`perfledger.derive.isolation_checks.reveals_per_pair` says a run of the planned length
needs), and both workers write those calls' outputs; under an ``exact`` accuracy
rule every call's digest is compared with the reference's too.

Flags (each makes :attr:`~perfledger.kernels.harness.harness.Comparison.valid` false and puts a reason
in the flagged subject's ``recheck_failures``, so ``measure kernel`` records it as incorrect):
``clock:candidate`` / ``clock_exceeds_wall:<role>`` (reported times not borne out by this
process's clock), ``digest:<role>`` (revealed bytes differ from the committed digest, or the
reveal failed), ``cross_check:candidate`` (the candidate's revealed output differs from the
reference's beyond the problem's tolerance), ``pause:<role>`` (a process of the idle worker's
ran during the other worker's batch or reveal: :meth:`_Run.alone`), ``sched:<role>`` (a thread
of that worker was reniced or given another scheduling policy: :meth:`_Run._check_sched`;
``sched:measuring`` for this process's), ``stream_hold:reference`` (the reference's worker timed
without its stream hold while the candidate's held), ``persisting_l2:<role>`` (that worker's
context held a persisting L2 carve-out, whose lines survive the flush),
``clock_unconfirmed:candidate`` (the statistic says faster, but the saving per call is
within what this process's clock cannot see: all of it may be the candidate's under-report;
:func:`~perfledger.derive.isolation_checks.clock_confirms`, never in an A/A), and the harness's
own ``recheck:<subject>``, ``side_work:<subject>``, ``review_speedup``.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from perfledger.derive.isolation_checks import (
    NOT_CONFIRMABLE,
    REVEAL_ESCAPE,
    REVEAL_SKIP_SHARE,
    ClockConfirmation,
    clock_confirms,
    escape_bound,
    reveals_per_pair,
)
from perfledger.derive.stats import PairedStats, paired_stats
from perfledger.errors import BadRequest, MeasurementError
from perfledger.kernels.cuda.ceilings import Ceilings, check_plausible
from perfledger.kernels.harness.harness import (
    Comparison,
    CorrectnessReport,
    SubjectTiming,
    correctness,
    timing_flags,
)
from perfledger.kernels.harness.stopping import Stopper, StoppingRule
from perfledger.kernels.isolation.isolation import (
    TOLERANCE_S,
    TOLERANCE_SHARE,
    Batch,
    ClockCheck,
    SubjectProcess,
)
from perfledger.kernels.isolation.isolation import clock_check as _clock_check
from perfledger.kernels.isolation.reveal_ipc import MappedBuffer, device_output_digest, parent_ready
from perfledger.kernels.isolation.subject_protocol import (
    KEY_BYTES,
    output_digest,
    read_reveal,
    report_from_json,
)
from perfledger.kernels.proc import (
    STOPPED_STATES,
    CallTree,
    autogroup_nice,
    children_by_parent,
    children_of,
    comm,
    cpu_ns,
    is_stopped,
    process_table,
    sched_of,
    session_of,
    states_text,
    stop_pending,
    subtree,
    thread_ids,
    undumpable,
)

#: The worker command (the spec, role and case are appended).
WORKER = (sys.executable, "-m", "perfledger.kernels.isolation.subject_worker")
#: The workers' bytecode cache prefix in subject directories: a path that no process can
#: create (under a device file), so Python neither reads nor writes ``.pyc`` files there.
NO_BYTECODE = os.path.join(os.devnull, "perfledger-no-bytecode")
#: ... and their compiled-kernel caches: in memory only (CuPy), none (the CUDA driver's JIT).
NO_KERNEL_CACHE = {"CUPY_CACHE_IN_MEMORY": "1", "CUDA_CACHE_DISABLE": "1"}
#: ... and the compiled-kernel caches that are files, by their environment variables: each
#: worker in a subject directory gets fresh, empty ones of its own (:class:`WorkerProcess`):
#: :func:`perfledger.kernels.subjects.solve.build_solve`'s libraries (``solve.CACHE_ENV``, named here so
#: that this process does not import the solve module), Triton's and TorchInductor's.
BUILD_CACHE_ENV = {
    "PERFLEDGER_SOLVE_CACHE": "solve",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
}
#: The two roles, and their labels in the ABBA schedule.
ROLES = {"A": "reference", "B": "candidate"}


@dataclass(frozen=True)
class IsolationConfig:
    """Settings of the isolated comparison (each recorded in the results' ``settings``).

    Attributes:
        calls_per_batch: calls in one request to a worker (None: half the harness's ``batch``,
            so that one ABBA block has ``batch`` calls of each subject, as many as one stopping
            check of the in-process harness).
        reveals_per_batch: the fewest calls of each pair of batches (same seeds) whose outputs
            both workers reveal (drawn after the replies). More are revealed where the run is
            short: :func:`~perfledger.derive.isolation_checks.reveals_per_pair` sizes the draws so
            that a subject skipping ``reveal_skip_share`` of its timed calls escapes every
            reveal with probability at most ``reveal_escape`` (every call of a run of at most
            688 calls), and the run does not stop on noise before that bound holds. Under an
            ``exact`` accuracy rule every call's digest is compared with the reference's too.
        reveal_skip_share, reveal_escape: of the reveal sizing above (1 %, 0.001).
        start_timeout_s: the most loading the spec, ``hello`` and correctness may take (s).
        timeout_s: the most one batch or reveal may take (s).
        tolerance_s, tolerance_share, noise_sigmas, overhead_share: of
            :func:`perfledger.kernels.isolation.isolation.clock_check` (the overhead inside the parent's
            clock, inputs, re-checks, copying and hashing every call's outputs, varies from
            batch to batch and a little from one process to the other).
        same_cpus: pin both workers to the same CPUs (the first half of this process's), so
            that their host overheads are measured under the same conditions (they take turns).
        stop_idle: stop the idle worker's process group (``SIGSTOP``) while the other worker
            runs a batch, continue it after (:meth:`WorkerProcess.pause`).
        worker: the worker command (tests use stand-ins that speak the same protocol).
    """

    calls_per_batch: int | None = None
    reveals_per_batch: int = 1
    reveal_skip_share: float = REVEAL_SKIP_SHARE
    reveal_escape: float = REVEAL_ESCAPE
    start_timeout_s: float = 900.0
    timeout_s: float = 300.0
    tolerance_s: float = TOLERANCE_S
    tolerance_share: float = TOLERANCE_SHARE
    noise_sigmas: float = 4.0
    overhead_share: float = 0.2
    same_cpus: bool = True
    stop_idle: bool = True
    worker: tuple[str, ...] = WORKER

    def __post_init__(self) -> None:
        if self.calls_per_batch is not None and self.calls_per_batch < 1:
            raise ValueError("calls_per_batch must be >= 1")
        if self.reveals_per_batch < 1:
            raise ValueError("reveals_per_batch must be >= 1")
        if not (0.0 < self.reveal_skip_share < 1.0 and 0.0 < self.reveal_escape < 1.0):
            raise ValueError("reveal_skip_share and reveal_escape must be in (0, 1)")


@dataclass
class BatchReply:
    """One worker's reply to ``run`` (seconds), validated."""

    times_s: list[float]
    wall_s: list[float]
    span_s: list[float]
    digests: list[str]
    recheck_failures: list[str]
    checked_calls: list[int]
    parent_wall_s: float
    seeds: list[int] = field(default_factory=list)
    key: bytes = b""
    #: the worker's statement of the persisting L2 carve-outs its flushes found and cleared
    persisting_l2: dict[str, Any] | None = None


class WorkerProcess:
    """One subject worker, spoken to by the protocol of
    :mod:`perfledger.kernels.isolation.subject_protocol`.

    Args:
        role: ``reference`` or ``candidate``.
        spec_path: the spec file; case: the case (None: only ``hello``'s case list works).
        config: the isolation settings; stderr_path: where the worker's stderr goes.
        directory: the subject's own code directory (R11), or None. With one, the worker runs
            there (its cwd, so ``sys.path[0]`` and relative paths are the directory's), loads
            the spec's ``SUBJECT`` (``spec_path`` is then relative to the directory) and
            neither reads nor writes bytecode caches (:data:`NO_BYTECODE`) nor compiled-kernel
            caches on disk (:data:`NO_KERNEL_CACHE`), and builds its ``solve()`` libraries and
            Triton / TorchInductor kernels in fresh directories of its own
            (:data:`BUILD_CACHE_ENV`, removed on :meth:`close`): no
            ``.pyc`` or binary that the other subject planted, in the subject directories or in
            a cache directory, runs.
    Raises: MeasurementError when the worker cannot start.
    """

    def __init__(
        self,
        role: str,
        spec_path: str,
        case: str | None,
        config: IsolationConfig,
        stderr_path: str | None = None,
        *,
        directory: str | None = None,
    ) -> None:
        self.role = role  # the spec's subject this worker runs (an A/A runs the reference twice)
        env = None
        self._build_dir: str | None = None
        if directory is not None:
            spec_path = os.path.join(os.path.abspath(directory), spec_path)
            # every module compiled from its source: a cache directory of the worker's own
            # (same user) could be found and written by the other worker before a lazy import;
            # so every kernel (CuPy's on-disk cache, the driver's JIT cache: the other subject
            # could plant a slower binary under the key of this one's kernel)
            env = dict(os.environ, PYTHONPYCACHEPREFIX=NO_BYTECODE, PYTHONDONTWRITEBYTECODE="1")
            env.update(NO_KERNEL_CACHE)
            # and every solve() library and Triton / TorchInductor kernel built for this worker
            # alone: the shared caches (~/.cache/perfledger/solve, ~/.triton/cache, ...) are
            # keyed by the sources, which the other subject can read, so it could leave a slower
            # binary there for a later reference worker
            self._build_dir = tempfile.mkdtemp(prefix="perfledger-builds-")
            for name, sub in BUILD_CACHE_ENV.items():
                env[name] = os.path.join(self._build_dir, sub)
                os.mkdir(env[name])
        subject = role if directory is None else "subject"
        argv = [*config.worker, "--spec", spec_path, "--subject", subject]
        if case is not None:
            argv += ["--case", case]
        self.role = role
        self.config = config
        self.overhead_s = 0.0  # the worker's calibration of an empty call (after check)
        #: the persisting L2 statement of the worker's check reply (a carve-out after setup)
        self.persisting_l2: dict[str, Any] | None = None
        self.stream_hold: dict[str, Any] | None = None  # as the last batch's reply said
        # the scheduling it inherits (nice, policy), taken before any subject code runs: the
        # spec's module-level code could renice this process before the first batch
        self.sched = sched_of(0)
        try:
            self.proc = SubjectProcess(
                role,
                argv,
                timeout_s=config.timeout_s,
                stderr_path=stderr_path,
                env=env,
                cwd=None if directory is None else os.path.abspath(directory),
            )
        except BaseException:
            self._remove_build_dir()
            raise
        if config.same_cpus and hasattr(os, "sched_setaffinity"):
            cpus = sorted(os.sched_getaffinity(0))
            with contextlib.suppress(OSError):  # gone already: the first request says so
                os.sched_setaffinity(self.proc.pid, cpus[: max(1, len(cpus) // 2)])

    def _ask(
        self, message: dict[str, Any], timeout_s: float | None = None, sent: float | None = None
    ) -> tuple[dict, float]:
        """Send ``message`` (unless it was sent at ``sent``) and read its reply; a reply that
        is an error ends the worker and raises (BadRequest for a spec that does not load)."""
        if sent is None:
            sent = self.proc.send(message)
        reply, wall = self.proc.receive(sent, timeout_s)
        error = reply.get("error")
        if error is not None:
            self.proc.close()
            if not isinstance(error, dict):
                error = {"message": str(error)}
            text = str(error.get("message", ""))[:2000]
            hint = str(error.get("hint", "") or "")
            if error.get("type") == "BadRequest" and message["op"] == "hello":
                raise BadRequest(text, hint=hint)
            raise MeasurementError(f"the {self.role} worker ({message['op']}): {text}", hint=hint)
        return reply, wall

    def _malformed(self, what: str) -> MeasurementError:
        self.proc.close()
        return MeasurementError(f"the {self.role} worker sent a malformed reply: {what}")

    def hello(self, seed: int, sent: float | None = None) -> dict[str, Any]:
        """The problem's facts (:mod:`perfledger.kernels.isolation.subject_worker`); ``sent``: the
        request was already written (:meth:`ask_hello`) at that time."""
        message = {"op": "hello", "seed": seed}
        reply, _ = self._ask(message, self.config.start_timeout_s, sent)
        if not isinstance(reply.get("cases"), list):
            raise self._malformed("hello without a case list")
        return reply

    def ask_hello(self, seed: int) -> float:
        """Write ``hello`` without waiting (both workers set up at once: nothing in ``hello``
        is timed). Returns: when it was written."""
        return self.proc.send({"op": "hello", "seed": seed})

    def check(self) -> CorrectnessReport:
        """The worker's overhead calibration and correctness trials of its subject (the
        calibration is kept in :attr:`overhead_s`)."""
        reply, _ = self._ask({"op": "check"}, self.config.start_timeout_s)
        try:
            self.overhead_s = float(reply.get("overhead_s") or 0.0)
            persisting = reply.get("persisting_l2")
            self.persisting_l2 = persisting if isinstance(persisting, dict) else None
            if not (math.isfinite(self.overhead_s) and self.overhead_s >= 0):
                raise ValueError(f"overhead {self.overhead_s}")
            return report_from_json(reply["report"])
        except (KeyError, TypeError, ValueError) as exc:
            raise self._malformed(f"correctness report ({exc})") from None

    def run(self, seeds: Sequence[int], key: bytes) -> BatchReply:
        """One call per seed; the reply checked for shape (times finite and positive, one
        64-hex-digit digest per call). Raises: MeasurementError."""
        reply, wall = self._ask({"op": "run", "seeds": [int(s) for s in seeds], "key": key.hex()})
        n = len(seeds)
        hold = reply.get("stream_hold")
        self.stream_hold = hold if isinstance(hold, dict) else None
        try:
            out = BatchReply(
                [float(t) for t in reply["times_s"]],
                [float(t) for t in reply["wall_s"]],
                [float(t) for t in reply["span_s"]],
                [str(d) for d in reply["digests"]],
                [str(r) for r in reply.get("recheck_failures", [])],
                [int(i) for i in reply.get("checked_calls", [])],
                wall,
                [int(s) for s in seeds],
                key,
            )
            persisting = reply.get("persisting_l2")
            out.persisting_l2 = persisting if isinstance(persisting, dict) else None
        except (KeyError, TypeError, ValueError) as exc:
            raise self._malformed(f"run ({exc})") from None
        lengths = {len(out.times_s), len(out.wall_s), len(out.span_s), len(out.digests)}
        if lengths != {n}:
            raise self._malformed(f"{sorted(lengths)} values for {n} calls")
        if not all(math.isfinite(t) and t > 0 for t in out.times_s):
            raise self._malformed("a time that is not finite and positive")
        if not all(len(d) == 64 and all(c in "0123456789abcdef" for c in d) for d in out.digests):
            raise self._malformed("a digest that is not 64 hex digits")
        return out

    def reveal(self, index: int, path: str, outputs: dict[str, tuple[Any, str]]) -> dict:
        """Call ``index`` of the last batch's outputs, read from the file the worker wrote.
        Raises: ValueError when the worker answers an error (it is not ended: a refusal to
        reveal is the worker's failure, flagged, not the measurement's) or the file is missing
        or not the problem's outputs."""
        reply, _ = self.proc.request({"op": "reveal", "index": index, "path": path})
        if reply.get("error") is not None:
            raise ValueError(f"the worker refused: {str(reply['error'])[:300]}")
        try:
            return read_reveal(path, outputs)
        finally:
            if os.path.exists(path):
                os.remove(path)

    def reveal_mapped(self, index: int, mapped: Any, sent: float | None = None) -> dict:
        """Call ``index`` of the last batch's outputs through the worker's exported device buffer
        (:class:`~perfledger.kernels.isolation.reveal_ipc.MappedBuffer`): device arrays of this process's
        own. ``sent``: the request was already written (:meth:`ask_reveal`) at that time.
        Raises: ValueError when the worker answers an error or the copy fails."""
        if sent is None:
            sent = self.ask_reveal(index)
        reply, _ = self.proc.receive(sent)
        if reply.get("error") is not None:
            raise ValueError(f"the worker refused: {str(reply['error'])[:300]}")
        try:
            return mapped.read()
        except Exception as exc:  # a CUDA error reading the worker's memory
            raise ValueError(f"the reveal buffer could not be read: {exc}"[:300]) from None

    def ask_reveal(self, index: int) -> float:
        """Write the request of :meth:`reveal_mapped` without waiting for the reply (both
        workers fill their buffers at once). Returns: when it was written."""
        return self.proc.send({"op": "reveal", "index": index})

    def pause(self, stop: bool) -> None:
        """Stop (``SIGSTOP``) or continue (``SIGCONT``) the worker's process group."""
        if not hasattr(signal, "SIGSTOP"):
            return
        with contextlib.suppress(
            ProcessLookupError, PermissionError
        ):  # gone: the next request says so
            os.killpg(self.proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)

    def close(self) -> None:
        """Ask the worker to exit (ended after a second); remove its build caches."""
        self.pause(False)
        self.proc.close()
        self._remove_build_dir()

    def _remove_build_dir(self) -> None:
        if self._build_dir is not None:
            shutil.rmtree(self._build_dir, ignore_errors=True)
            self._build_dir = None


def spec_facts(
    spec_path: str, config: IsolationConfig = IsolationConfig(), directory: str | None = None
) -> dict[str, Any]:
    """The spec's case names and whether it defines a candidate (a ``SUBJECT``), from a worker
    (this process never loads the spec); ``directory``: the subject directory the spec lives in
    (R11, :class:`WorkerProcess`), ``spec_path`` then relative to it.

    The worker and every process it started are ended on return.

    Returns: ``{"cases": [...], "has_candidate": bool, "has_subject": bool}``.
    Raises: BadRequest when the spec does not load (the loader's message); MeasurementError
    when the worker fails.
    """
    # the spec's code runs in the worker: whatever it starts (a helper in a session of its
    # own) is found through the tree and ended with it, or it would run, never stopped,
    # during the comparison's batches
    with tempfile.TemporaryDirectory(prefix="perfledger-worker-") as tmp, CallTree() as tree:
        worker = WorkerProcess(
            "reference",
            spec_path,
            None,
            config,
            os.path.join(tmp, "err"),
            directory=directory,
        )
        try:
            return worker.hello(0)
        finally:
            worker.close()
            tree.end(include_root=False)


#: How long :meth:`_Run.alone` waits for the processes it stopped to stop (s), and the CPU
#: time a process whose stop was still pending then may take to process it (ns).
STOP_WAIT_S = 0.05
#: ... and, after the batch, of one that runs no user code: a thread in uninterruptible sleep
#: (``D``, inside the kernel) takes its stop when it leaves.
_NO_USER_CODE_STATES = STOPPED_STATES | {"D"}
STRAGGLER_NS = 1_000_000


def _settled_cpu_ns(pid: int, deadline: float) -> int | None:
    """:func:`cpu_ns` of a process that was just stopped, once it no longer changes: a thread
    shows the stopped state before it leaves the CPU, and the slice it was running is counted
    only when it leaves (read early, that slice looks like CPU time taken while stopped). Read
    until two reads 0.1 ms apart agree, or ``deadline`` (the last read then)."""
    cpu = cpu_ns(pid)
    while time.monotonic() < deadline:
        time.sleep(1e-4)
        again = cpu_ns(pid)
        if again == cpu:
            break
        cpu = again
    return cpu


def _tree_by_children(tree: CallTree, active: int) -> tuple[set[int], set[int]] | None:
    """What :meth:`CallTree.descendants` finds (processes started for the comparison), and the
    active worker's subtree, by walking children files from this process: a cost that grows with
    the comparison's processes, not with every process on the host. None without those files."""
    mine = children_of(tree.me)
    if mine is None:
        return None
    roots = [
        p for p in mine if p not in tree._before and session_of(p) not in (tree._my_session, None)
    ]
    seen: dict[int, int | None] = {}  # pid -> the root it was found under
    stack = [(p, p) for p in roots]
    while stack:
        pid, root = stack.pop()
        if pid in seen:
            continue
        seen[pid] = root
        kids = children_of(pid)
        if kids is None:
            return None
        stack += [(k, root) for k in kids]
    keep = {p for p, root in seen.items() if root == active}
    return set(seen), keep


#: The cross-check's tolerance as a multiple of the problem's (see :meth:`_Run.reveal`).
CROSS_CHECK_FACTOR = 2.0
#: Outputs of at least this many elements are cross-checked on the device where CuPy works
#: (the host's float64 passes over a 64 MiB output took a large share of a reveal).
DEVICE_COMPARE_MIN = 1 << 20


def _compare_outputs(
    cand: Any, ref: Any, tolerance: float | None, rule: dict[str, Any] | None = None
) -> Any:
    """:func:`perfledger.kernels.harness.correctness.compare` of two revealed outputs (host arrays),
    the candidate's held to the reference's dtype and shape, by ``rule`` (the Target's accuracy
    rule) or else ``tolerance``: on this process's GPU for large ones when CuPy is usable (this
    process runs no subject code; the subjects are stopped or idle between batches), else on
    the host."""
    if cand.size >= DEVICE_COMPARE_MIN:
        try:
            import cupy  # noqa: PLC0415 (CuPy: optional, GPU only)

            return correctness.compare(
                cupy.asarray(cand), cupy.asarray(ref), tolerance=tolerance, rule=rule
            )
        except Exception:  # no CuPy or no device here: the host path gives the same answer
            pass
    return correctness.compare(cand, ref, tolerance=tolerance, rule=rule)


def _block_batch(role: str, parts: Sequence[BatchReply]) -> Batch:
    """One subject's batches of one ABBA block as one :class:`Batch` (seeds and reported times
    in order, the parent's wall times summed): what :func:`clock_check` compares, so that time
    moved from one batch of a block to another still counts against the block."""
    return Batch(
        role,
        tuple(s for p in parts for s in p.seeds),
        tuple(t for p in parts for t in p.times_s),
        sum(p.parent_wall_s for p in parts),
    )


def _timing(name: str) -> SubjectTiming:
    return SubjectTiming(name, [], [], [], [], 0.0, [], False)


def _absorb(timing: SubjectTiming, reply: BatchReply, first: int) -> None:
    """Add a timed batch (its first call has index ``first``) to a subject's timing."""
    timing.samples_s += reply.times_s
    timing.wall_s += reply.wall_s
    timing.span_s += reply.span_s
    timing.input_sets += reply.seeds
    timing.gpu_s += sum(reply.times_s)
    timing.checked_calls += [first + i for i in reply.checked_calls]


def _finish(
    timing: SubjectTiming,
    facts: dict[str, Any],
    harness: dict[str, Any],
    ceilings: Ceilings | None,
    calls: int = 1,
) -> None:
    """Median, side-work check and plausibility (as :meth:`Harness._finish`), on the reports.

    ``calls``: calls per batch. Plausibility is checked on the smaller of the median reported
    call and the median of the batches' mean calls: the parent's clock bears out a batch's sum,
    not how a subject spreads it over its calls (one tiny call and the rest larger would lift
    the median above an implausible mean).
    """
    timing.median_s = float(np.median(timing.samples_s))
    samples = np.asarray(timing.samples_s)
    whole = samples[: samples.size - samples.size % calls].reshape(-1, calls)
    batch_mean_s = float(np.median(whole.mean(axis=1))) if whole.size else timing.median_s
    excess = float(np.median(np.asarray(timing.wall_s) - np.asarray(timing.span_s)))
    overhead = float(facts["settings"].get("overhead_s") or 0.0)
    limit = overhead + max(
        float(harness["side_work_s"]), float(harness["side_work_share"]) * timing.median_s
    )
    timing.side_work = excess > limit
    timing.figures = check_plausible(
        median_s=min(timing.median_s, batch_mean_s),
        bytes_per_call=facts.get("bytes_per_call"),
        flops_per_call=facts.get("flops_per_call"),
        ceilings=ceilings,
        margin=float(harness["plausibility_margin"]),
        label=timing.subject,
        flops_unit=facts.get("flops_unit"),
    )
    timing.figures["wall_excess_s"] = excess
    timing.figures["wall_excess_limit_s"] = limit


class _Run:
    """One isolated comparison in progress (see :func:`compare_workers`)."""

    def __init__(
        self,
        workers: dict[str, WorkerProcess],
        facts: dict[str, Any],
        config: IsolationConfig,
        reveal_dir: str,
        tree: CallTree | None = None,
        accuracy: dict[str, Any] | None = None,
    ) -> None:
        self.workers = workers
        #: the Target's accuracy rule (``exact`` / ``allclose``), None: the problem's tolerances
        self.accuracy = accuracy
        #: calls revealed per pair of batches (sized after the warm-up: :meth:`plan_reveals`)
        self.reveals_per_pair = config.reveals_per_batch
        #: each worker's latest persisting L2 statement (:meth:`check_persisting`)
        self.persisting: dict[str, dict[str, Any]] = {}
        self.tree = tree
        self.facts = facts
        self.config = config
        self.reveal_dir = reveal_dir
        self.outputs = {k: (tuple(v[0]), str(v[1])) for k, v in facts["outputs"].items()}
        self.tolerances = {k: float(v) for k, v in (facts.get("tolerances") or {}).items()}
        self.failures: dict[str, list[str]] = {"A": [], "B": []}
        self.flags: list[str] = []
        self.reveals = 0
        self.revealed: list[list[int]] = []  # the call indices drawn, per pair of batches
        self.batches: list[Batch] = []
        self.mapped: dict[str, Any] = {}  # label -> MappedBuffer where reveals go through IPC
        #: called with the role before each batch, both workers quiet (R11: the code still
        #: the code snapshotted; raises to end the comparison)
        self.before_batch: Callable[[str], None] | None = None
        #: the scheduling the workers inherited from this process (nice, policy), as it was
        #: before either started: taken now, after their specs loaded, it could already be
        #: lowered (this process's and the other worker's) and hide both from the check
        inherited = [s for w in workers.values() if (s := getattr(w, "sched", None)) is not None]
        self.sched = (min(s[0] for s in inherited), inherited[0][1]) if inherited else sched_of(0)

    def map_reveals(self, facts: dict[str, dict[str, Any]]) -> str:
        """Map both workers' exported reveal buffers where both offer one and this process can
        check on the device (:mod:`perfledger.kernels.isolation.reveal_ipc`). Returns: ``"ipc"`` or
        ``"file"`` (how reveals travel)."""
        offers = {label: f.get("reveal_ipc") for label, f in facts.items()}
        if not all(isinstance(o, dict) for o in offers.values()) or not parent_ready():
            return "file"
        try:
            for label, offer in offers.items():
                self.mapped[label] = MappedBuffer(offer, self.outputs)
        except Exception:  # refused by the driver, or a malformed offer: files still work
            self.close()
            return "file"
        return "ipc"

    def close(self) -> None:
        """Unmap the reveal buffers."""
        for mapped in self.mapped.values():
            mapped.close()
        self.mapped = {}

    def seeds(self, n: int) -> tuple[list[int], bytes]:
        """Fresh call seeds and a digest key (hidden until the request is written)."""
        # from the kernel's generator, each when needed: nothing in this process's memory
        # predicts the next draw (a subject that could read it learns nothing ahead)
        return [secrets.randbits(63) for _ in range(n)], secrets.token_bytes(KEY_BYTES)

    def batch(self, label: str, seeds: list[int], key: bytes, first: int | None) -> BatchReply:
        """One worker's batch; ``first`` is the index of its first timed call (None: warm-up)."""
        with self.alone(label):
            if self.before_batch is not None:
                self.before_batch(ROLES[label])
            self._check_sched(label)
            reply = self.workers[label].run(seeds, key)
        where = "warm-up" if first is None else f"call {first}+"
        self.failures[label] += [f"{where}: {r}" for r in reply.recheck_failures]
        self.check_persisting(label, reply.persisting_l2, f"in its batch ({where})")
        self.batches.append(
            Batch(ROLES[label], tuple(seeds), tuple(reply.times_s), reply.parent_wall_s)
        )
        return reply

    def _check_sched(self, label: str) -> None:
        """Flag ``sched:<role>`` when a thread of the worker about to run its batch has a
        higher nice value or another scheduling policy than the workers inherited, or its
        session's autogroup a nice value above 0 (:func:`autogroup_nice`): a process of
        the same user (the other subject's code, or the candidate's code run in the reference's
        worker when one spec defines both) may lower another's scheduling, which then runs its
        batches slower, its reports honest against this process's clock. ``sched:measuring``
        when this process's main thread was lowered so."""
        if self.sched is None:
            return
        nice, policy = self.sched
        mine = sched_of(os.getpid())  # this process's main thread: its clock's overhead
        if (
            mine is not None
            and (mine[0] > nice or mine[1] != policy)
            and ("sched:measuring" not in self.flags)
        ):
            # slower to wake and read replies, it widens both overheads and with them the
            # clock check's noise allowance (up to its cap); either worker may have done it
            self.flags.append("sched:measuring")
        if f"sched:{ROLES[label]}" in self.flags:
            return
        lowered = []
        for tid in thread_ids(self.workers[label].proc.pid):
            got = sched_of(int(tid))
            if got is not None and (got[0] > nice or got[1] != policy):
                lowered.append(f"thread {tid} nice {got[0]}, policy {got[1]}")
        # the worker leads a session of its own, whose new autogroup starts at nice 0; the
        # owner may raise it (until the worker makes itself undumpable)
        group = autogroup_nice(self.workers[label].proc.pid)
        if group is not None and group > 0:
            lowered.append(f"autogroup nice {group}")
        if lowered:
            role = ROLES[label]
            self._flag(
                f"sched:{role}",
                label,
                f"sched: the {role}'s worker runs with a lower scheduling than it started with "
                f"(nice {nice}, policy {policy}): " + "; ".join(lowered[:4]),
            )

    @contextlib.contextmanager
    def alone(self, label: str) -> Iterator[None]:
        """With ``stop_idle``: the worker ``label`` is the only one of the comparison's processes
        that runs inside the block (its batch, or its reveal: the other cannot race it to the
        file or the device); the others are stopped before and continued after, and checked
        in between (:meth:`_ran`: one that ran flags ``pause:<idle role>``)."""
        if not self.config.stop_idle:
            yield
            return
        idle_label = "B" if label == "A" else "A"
        idle = self.workers[idle_label]
        idle.pause(True)
        stopped = self._stop_others(self.workers[label].proc.pid)
        try:
            base = self._hold(stopped)
            yield
            # a stop is a signal, not a guarantee: something may have continued a stopped
            # process (code of the idle subject's running in the active worker), or a process
            # forked just before the stop escaped it; checked before anything is continued
            running = self._ran(self.workers[label].proc.pid, stopped, base)
            if running:
                role = ROLES[idle_label]
                self._flag(
                    f"pause:{role}",
                    idle_label,
                    f"pause: processes of the {role}'s worker ran during the other subject's "
                    f"batch or check (was not stopped: "
                    + "; ".join(f"pid {p} {why}" for p, why in sorted(running.items())[:8])
                    + ")",
                )
        finally:
            idle.pause(False)
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)

    def _others(self, active: int) -> set[int]:
        """The processes started during the comparison, except the active worker and its
        descendants (a helper that called ``setsid`` or double-forked is still found, by
        ancestry: :class:`~perfledger.kernels.proc.CallTree`)."""
        if self.tree is None:
            return set()
        found = _tree_by_children(self.tree, active)
        if found is None:  # no /proc/<pid>/task/<tid>/children here: walk the whole table
            table = process_table()
            keep = subtree([active], children_by_parent(table))
            others = {p for p, state in self.tree.descendants(table).items() if state != "Z"}
        else:
            others, keep = found
        return others - keep

    def _hold(self, stopped: set[int]) -> dict[int, tuple[int | None, bool]]:
        """Wait (at most :data:`STOP_WAIT_S`) until the processes just stopped have stopped.
        Returns: pid -> (its CPU time now in ns, whether it had stopped)."""
        deadline = time.monotonic() + STOP_WAIT_S
        waiting = set(stopped)
        while waiting and time.monotonic() < deadline:
            waiting = {p for p in waiting if not is_stopped(p)}
            if waiting:
                time.sleep(1e-4)
        return {p: (_settled_cpu_ns(p, deadline), p not in waiting) for p in stopped}

    def _ran(
        self, active: int, stopped: set[int], base: dict[int, tuple[int | None, bool]]
    ) -> dict[int, str]:
        """The processes held by :meth:`_stop_others` and :meth:`_hold` that ran since: one
        that can run and has no stop pending (continued), one that took CPU time (beyond a
        straggler's processing of its stop), and one that was not there (something that ran
        made it; the active worker's own session left out: what it started is its own work,
        inside the parent's clock). Returns: pid -> what it did (for the flag's reason)."""
        out: dict[int, str] = {}
        for pid, (cpu0, held) in base.items():
            cpu = cpu_ns(pid)  # None: gone, or no schedstat here (the state check still holds)
            if cpu is None and not os.path.exists(f"/proc/{pid}"):
                continue  # gone (a stopped process ends only when killed)
            continued = not is_stopped(pid, _NO_USER_CODE_STATES) and not stop_pending(pid)
            took = None not in (cpu, cpu0) and cpu - cpu0 > (0 if held else STRAGGLER_NS)
            if continued or took:
                what = [f"{comm(pid)}"]
                if continued:
                    what.append(f"running (threads {states_text(pid)})")
                if took and cpu is not None and cpu0 is not None:
                    what.append(f"took {(cpu - cpu0) / 1e6:.3g} ms of CPU")
                if not held:
                    what.append("its stop was slow")
                out[pid] = ", ".join(what)
        active_sid = session_of(active)
        for pid in self._others(active) - stopped:
            if session_of(pid) not in (active_sid, None):
                out[pid] = f"{comm(pid)}, started meanwhile outside the active worker's session"
        return out

    def _stop_others(self, active: int) -> set[int]:
        """Stop every process started during the comparison except the active worker and its
        descendants (:meth:`_others`): the idle worker's descendants in other sessions and
        processes orphaned into this one. Returns: their pids."""
        stopped = set()
        for pid in self._others(active):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
        return stopped

    def check_persisting(self, label: str, statement: dict[str, Any] | None, when: str) -> None:
        """Flag ``persisting_l2:<role>`` when the worker says its context holds a persisting L2
        carve-out (``bytes``) or that a flush found one set (``found``): lines a subject marked
        persisting (a stream access-policy window) stay in L2 through a flush that writes a
        buffer, so its calls would not start cold (issue 36, hole 4). Each flush clears the
        carve-out first (:class:`~perfledger.kernels.cuda.timing.PersistingL2`); the subject
        that set one is refused all the same (its own worker's statement, like its times)."""
        if statement:
            self.persisting[label] = statement  # the latest, recorded with the settings
        if not statement or f"persisting_l2:{ROLES[label]}" in self.flags:
            return
        try:
            now, found = int(statement.get("bytes") or 0), int(statement.get("found") or 0)
            largest = int(statement.get("max_bytes") or 0)
        except (TypeError, ValueError):
            now, found, largest = 0, 1, 0  # a statement that does not parse: not believed
        if now <= 0 and found <= 0:
            return
        role = ROLES[label]
        self._flag(
            f"persisting_l2:{role}",
            label,
            f"persisting_l2: the {role}'s worker {when} held a persisting L2 carve-out "
            f"({max(now, largest)} bytes; {found} timed or warm-up calls found one before their "
            "flush, each cleared): lines marked persisting stay in L2 through the flush, so its "
            "calls would not start cold; set no cudaLimitPersistingL2CacheSize (or set it back to "
            "0 before the call returns)",
        )

    def _flag(self, flag: str, label: str, reason: str) -> None:
        if flag not in self.flags:
            self.flags.append(flag)
        self.failures[label].append(reason)

    def reveal(self, replies: dict[str, BatchReply], first: int) -> None:
        """Draw calls of the last pair of batches (same seeds) now, after both replies; have
        both workers reveal them; check digests, then the candidate against the reference."""
        n = len(replies["A"].seeds)
        if self.accuracy is not None and self.accuracy.get("compare") == "exact":
            self._exact_digests(replies, first)
        count = min(self.reveals_per_pair, n)
        drawn: set[int] = set()
        while len(drawn) < count:  # drawn now, after both replies (see seeds)
            drawn.add(secrets.randbelow(n))
        self.revealed.append(sorted(drawn))
        for index in sorted(drawn):
            revealed: dict[str, dict[str, np.ndarray]] = {}
            # through IPC both workers fill their buffers at once, neither stopped: each buffer
            # is its own worker's and is checked against that worker's commitment alone
            sent = (
                {label: self.workers[label].ask_reveal(index) for label in replies}
                if self.mapped
                else {}
            )
            for label, reply in replies.items():
                role = ROLES[label]
                # a name nobody can guess, written and read while the other worker is stopped
                path = os.path.join(self.reveal_dir, f"{role}-{secrets.token_hex(8)}.bin")
                try:
                    if self.mapped:
                        worker = self.workers[label]
                        arrays = worker.reveal_mapped(index, self.mapped[label], sent[label])
                        digest = device_output_digest(arrays, reply.key)
                    else:
                        with self.alone(label):
                            arrays = self.workers[label].reveal(index, path, self.outputs)
                        digest = output_digest(arrays, reply.key)
                except ValueError as exc:
                    self._flag(f"digest:{role}", label, f"call {first + index}: reveal: {exc}")
                    continue
                if digest != reply.digests[index]:
                    self._flag(
                        f"digest:{role}",
                        label,
                        f"call {first + index}: revealed outputs differ from the committed digest",
                    )
                    continue
                revealed[label] = arrays
            self.reveals += 1
            if len(revealed) < 2:
                continue
            for name, ref_out in revealed["A"].items():
                # the reference's declared dtype's tolerance (the problem's, as the reference's
                # worker stated it), never the candidate's
                tolerance = self.tolerances.get(name)
                if tolerance is None:
                    tolerance = correctness.tolerance_for(self.outputs[name][1])
                # two approximations, each within the tolerance of the exact answer, are within
                # twice it of each other (triangle inequality): one honest candidate and one
                # honest reference must not be flagged for their own rounding. A Target's
                # accuracy rule compares the two outputs as it says, element-wise.
                check = _compare_outputs(
                    revealed["B"][name], ref_out, CROSS_CHECK_FACTOR * tolerance, self.accuracy
                )
                if not check.ok:
                    detail = f"; {check.detail}" if check.detail else ""
                    self._flag(
                        "cross_check:candidate",
                        "B",
                        f"call {first + index}: output:{name}:{check.reason} against the "
                        f"reference's output for the same inputs (error {check.rel_l2_error}"
                        f"{detail})",
                    )

    def _exact_digests(self, replies: dict[str, BatchReply], first: int) -> None:
        """Under an ``exact`` accuracy rule: every call's digest of the candidate equals the
        reference's (both batches ran on the same seeds and digested with the same key, so equal
        outputs, dtypes and shapes give equal digests); else flag ``cross_check:candidate``."""
        differ = [
            i
            for i, (a, b) in enumerate(zip(replies["A"].digests, replies["B"].digests, strict=True))
            if a != b
        ]
        if differ:
            shown = ", ".join(str(first + i) for i in differ[:8])
            self._flag(
                "cross_check:candidate",
                "B",
                f"calls {shown}: outputs differ from the reference's for the same inputs "
                f"({len(differ)} of {len(replies['A'].digests)} calls of the batch; their "
                "digests differ, exact accuracy rule)",
            )

    def plan_reveals(self, calls: int, planned_calls: int) -> None:
        """Size the reveals of each pair of batches of ``calls`` calls for a run of at least
        ``planned_calls`` calls (:func:`~perfledger.derive.isolation_checks.reveals_per_pair`; never
        fewer than ``reveals_per_batch``). Under an ``exact`` rule every digest is compared
        already (:meth:`_exact_digests`): the fewest reveals then."""
        floor = min(calls, self.config.reveals_per_batch)
        if self.accuracy is not None and self.accuracy.get("compare") == "exact":
            self.reveals_per_pair = floor
            return
        sized = reveals_per_pair(
            calls, planned_calls, self.config.reveal_skip_share, self.config.reveal_escape
        )
        self.reveals_per_pair = max(floor, sized)

    def escape_bound(self, timed_calls: int, calls: int) -> float:
        """The probability bound that a subject skipping ``reveal_skip_share`` of its
        ``timed_calls`` escaped every reveal so far (0 under an ``exact`` rule: every call's
        digest compared)."""
        if self.accuracy is not None and self.accuracy.get("compare") == "exact":
            return 0.0
        return escape_bound(
            timed_calls, calls, self.reveals_per_pair, self.config.reveal_skip_share
        )


def compare_workers(
    ref: WorkerProcess,
    cand: WorkerProcess,
    *,
    ceilings: Ceilings | None = None,
    monitor: Any = None,
    config: IsolationConfig = IsolationConfig(),
    reveal_dir: str,
    tree: CallTree | None = None,
    before_batch: Callable[[str], None] | None = None,
    accuracy: dict[str, Any] | None = None,
) -> Comparison:
    """Paired ABBA comparison of two started workers (module docstring).

    Args:
        ref, cand: the workers (not yet greeted).
        ceilings: the environment's ceilings (None: unchecked, flagged ``no_ceilings``).
        monitor: a started :class:`~perfledger.kernels.monitor.monitor.Monitor` (optional): one window
            per ABBA block.
        config: the isolation settings.
        reveal_dir: a private directory for the revealed outputs.
        tree: the processes started since the workers (entered before they started): with
            ``stop_idle``, all of them but the active worker's are stopped during a batch.
        before_batch: called with the role (``reference``/``candidate``) before each batch,
            the idle worker stopped and the active one waiting for its request; what it raises
            ends the comparison (R11: the subjects' files checked).
        accuracy: the Target's accuracy rule (``{"compare": "exact"}`` or ``{"compare":
            "allclose", "rtol", "atol"}``; SPEC.md R5): the revealed outputs are cross-checked
            by it, and under ``exact`` every call's digest must equal the reference's. None:
            by the problem's tolerances (twice the reference's dtype's relative L2 bound).
    Returns: the :class:`~perfledger.kernels.harness.harness.Comparison` ``Harness.compare`` returns
        (per-call samples; ``settings["isolation"] == "process"``).
    Raises: MeasurementError when a worker fails, disagrees with the other on the problem, or a
        figure is implausible; BadRequest when a spec does not load.
    """
    seed = secrets.randbits(63)  # the bootstrap's
    harness_seed = secrets.randbits(63)  # the workers' (inputs of their correctness trials)
    workers = {"A": ref, "B": cand}
    sent = {label: w.ask_hello(harness_seed) for label, w in workers.items()}
    facts = {label: w.hello(harness_seed, sent[label]) for label, w in workers.items()}
    for key in ("case", "outputs", "bytes_per_call", "flops_per_call", "flops_unit"):
        if facts["A"].get(key) != facts["B"].get(key):
            raise MeasurementError(
                f"the workers disagree on the problem's {key}: {facts['A'].get(key)!r} "
                f"(reference) and {facts['B'].get(key)!r} (candidate)"
            )
    fa = facts["A"]
    harness = dict(fa["settings"]["harness"])
    calls = config.calls_per_batch or max(1, int(harness["batch"]) // 2)
    stopping = StoppingRule(**harness["stopping"])
    if accuracy is not None and accuracy.get("compare") not in correctness.RULES:
        accuracy = None  # ``self_reported``: outputs judged by the problem's tolerances
    run = _Run(workers, fa, config, reveal_dir, tree, accuracy)
    run.before_batch = before_batch
    with contextlib.closing(run):  # the reveal buffers are unmapped on the way out
        reports = {}
        for label, worker in workers.items():
            with run.alone(label):  # its calibration of an empty call with the other stopped
                reports[label] = worker.check()
            facts[label]["settings"]["overhead_s"] = worker.overhead_s
            run.check_persisting(label, worker.persisting_l2, "after its correctness trials")
        flags: list[str] = [] if ceilings else ["no_ceilings"]
        settings = {
            **fa["settings"],
            "inputs": "fresh",  # every call gets inputs made from a seed of its own
            "ceilings": ceilings.to_json() if ceilings else None,  # what plausibility used
            "harness": {**harness, "batch": 2 * calls},
            "isolation": "process",
            "subjects": {
                role: {k: facts[label].get(k) for k in ("subject", "content_hash", "identity")}
                for label, role in ROLES.items()
            },
            "isolation_settings": {
                "calls_per_batch": calls,
                "reveals_per_batch": config.reveals_per_batch,
                "reveal_skip_share": config.reveal_skip_share,
                "reveal_escape": config.reveal_escape,
                "tolerance_s": config.tolerance_s,
                "tolerance_share": config.tolerance_share,
                "noise_sigmas": config.noise_sigmas,
                "overhead_share": config.overhead_share,
                "same_cpus": config.same_cpus,
                "stop_idle": config.stop_idle,
                "harness_batch": int(harness["batch"]),
                "reveals_by": run.map_reveals(facts),
            },
        }
        if not (reports["A"].ok and reports["B"].ok):
            flags += [f for label, f in (("A", "ref_incorrect"), ("B", "cand_incorrect"))
                      if not reports[label].ok]  # fmt: skip
            return Comparison(
                reports["A"], reports["B"], None, None, [], None, None, flags, settings
            )
        # warm-up: batches on the path timed batches take, until enough calls and seconds
        start = time.perf_counter()
        n = 0
        warm: dict[str, list[float]] = {"A": [], "B": []}
        while n < int(harness["warmup_min"]) or time.perf_counter() - start < float(
            harness["warmup_min_s"]
        ):
            seeds, key = run.seeds(calls)
            for label in "AB":
                warm[label] += run.batch(label, seeds, key, None).times_s
            n += calls
        planned = _planned_calls(calls, stopping, warm)
        run.plan_reveals(calls, planned)
        tim = {"A": _timing(fa["subject"]), "B": _timing(facts["B"]["subject"])}
        orders: list[str] = []
        blocks: dict[str, list[float]] = {"A": [], "B": []}
        stopper = Stopper(stopping, logs=True)
        windows: list[dict[str, Any]] = []
        reason = None
        k = 0  # calls of each subject so far
        block_batches: list[Batch] = []  # one per subject and ABBA block (the clock check's)
        while reason is None:
            block_start = time.monotonic()
            sums = {"A": 0.0, "B": 0.0}
            parts: dict[str, list[BatchReply]] = {"A": [], "B": []}
            for order in ("AB", "BA"):
                seeds, key = run.seeds(calls)
                replies = {}
                for label in order:
                    replies[label] = run.batch(label, seeds, key, k)
                    _absorb(tim[label], replies[label], k)
                    sums[label] += sum(replies[label].times_s)
                    parts[label].append(replies[label])
                run.reveal(replies, k)
                orders += [order] * calls
                k += calls
            for label in "AB":
                blocks[label].append(sums[label])
                block_batches.append(_block_batch(ROLES[label], parts[label]))
            if monitor is not None:
                windows.append(
                    {
                        "pairs": [k - 2 * calls, k],
                        **monitor.verdict(block_start, time.monotonic()).to_json(),
                    }
                )
            logs = np.log(np.asarray(blocks["B"]) / np.asarray(blocks["A"]))
            reason = stopper.check(logs, max(tim["A"].gpu_s, tim["B"].gpu_s))
            if reason in ("target_rsd", "noise_settled") and (
                run.escape_bound(k, calls) > config.reveal_escape
            ):
                # a run shorter than planned (its calls slower than in the warm-up): not
                # stopped on noise before skipping 1 % of its calls would have been caught
                reason = None
        # per ABBA block, the unit the statistic is made of: a median over single batches let a
        # subject report all its time in most batches and hide time in one batch of every
        # block (every block under-reported, most batches clean)
        clock = _clock_check(
            block_batches,
            tolerance_s=config.tolerance_s,
            tolerance_share=config.tolerance_share,
            noise_sigmas=config.noise_sigmas,
            overhead_share=config.overhead_share,
            # only a larger excess of the candidate can hide a lie that favours it; an honest
            # reference of long compute-bound calls shows a larger excess against a much faster
            # candidate (the H200: 99 us a call against a 5 us candidate), never a false pass
            suspects=("candidate",),
        )
        clock_flags = list(clock.flags)
        for batch in run.batches:  # every batch, warm-up too: a sum above its wall is impossible
            over = f"clock_exceeds_wall:{batch.subject}"
            if sum(batch.reported_s) > batch.wall_s and over not in clock_flags:
                clock_flags.append(over)
        for flag in clock_flags:
            label = "A" if flag.endswith(":reference") else "B"
            run._flag(
                flag,
                label,
                f"{flag}: median excess of the parent's wall time over the reported times "
                f"{clock.excess_s[ROLES[label]]:.3g} s per call (limit of the difference "
                f"{clock.limit_s[ROLES[label]]:.3g} s; the other subject's "
                f"{clock.excess_s.get(ROLES['B' if label == 'A' else 'A'], math.nan):.3g} s)",
            )
        held = _hold_states(run.workers)
        if held.get("A") not in (None, "on") and held.get("B") == "on":
            # the reference's launch latency in its event times, the candidate's kept out: a
            # bias toward "faster" that the candidate can cause (GPU work it left queued keeps
            # the reference's holds from owning the SMs until its timer gives up)
            run._flag(
                "stream_hold:reference",
                "A",
                f"stream_hold:reference: the reference was timed without its stream hold "
                f"({held['A']}) while the candidate's held: their launch latencies were not "
                "measured alike",
            )
        for label in "AB":
            _finish(tim[label], facts[label], harness, ceilings, calls)
            tim[label].recheck_failures += run.failures[label]
        stats = paired_stats(
            blocks["A"],
            blocks["B"],
            resamples=int(harness["resamples"]),
            confidence=float(harness["confidence"]),
            seed=seed & 0xFFFFFFFF,
        )
        stats = replace(
            stats,
            ref_median_s=float(np.median(tim["A"].samples_s)),
            cand_median_s=float(np.median(tim["B"].samples_s)),
            medians_per="call",
        )
        confirmation = _confirm_saving(stats, clock, calls, aa=ref.role == cand.role)
        if confirmation is not None and not confirmation.confirmable:
            # hole 1: what the candidate saved may be all under-report; not a pass
            run.flags.append(UNCONFIRMED)
            tim["B"].recheck_failures.append(f"{UNCONFIRMED}: {confirmation.note}")
        flags += run.flags
        flags += timing_flags((tim["A"], tim["B"]), stats.median_ratio)
        settings.update(
            bootstrap_seed=seed,
            revealed_calls=run.revealed,  # recorded only now, after every draw was made
            reveal_plan={
                "planned_calls": planned,
                "reveals_per_pair": run.reveals_per_pair,
                "timed_calls": k,
                "escape_bound": run.escape_bound(k, calls),
                "exact_digests": run.accuracy is not None
                and run.accuracy.get("compare") == "exact",
            },
            accuracy=run.accuracy,
            # each worker's own statement of the persisting L2 carve-outs its flushes cleared
            persisting_l2={ROLES[label]: run.persisting.get(label) for label in "AB"},
            harness_seed=harness_seed,
            clock={
                "per": "abba_block",  # the excesses are medians over blocks, not batches
                "excess_s": clock.excess_s,
                "call_s": clock.call_s,
                "limit_s": clock.limit_s,
                "noise_s": clock.noise_s,
                # whether this clock confirms the candidate's claimed saving (None: none claimed)
                "confirmation": None if confirmation is None else asdict(confirmation),
            },
            reveals=run.reveals,
            batches=len(run.batches),
            # each worker's own account of its stream holds (a statement, not a check)
            stream_hold={ROLES[label]: w.stream_hold for label, w in run.workers.items()},
        )
        return Comparison(
            reports["A"], reports["B"], tim["A"], tim["B"], orders, stats, reason, flags, settings,
            windows,
        )  # fmt: skip


#: The flag of a claimed saving the parent's clock cannot confirm (issue 36, hole 1;
#: :func:`~perfledger.derive.isolation_checks.clock_confirms`).
UNCONFIRMED = "clock_unconfirmed:candidate"


def _confirm_saving(
    stats: PairedStats, clock: ClockCheck, calls: int, *, aa: bool
) -> ClockConfirmation | None:
    """Whether the parent's clock confirms the saving the candidate's reports claim (issue 36,
    hole 1; docs/kernel-harness.md, "What the parent's clock can confirm"): None where nothing
    is claimed (the statistic's CI not wholly below 1) or in an A/A (both workers run the
    reference: an A/A claims nothing, and leaving its "faster" runs out would narrow its
    resolution). ``stats``: the comparison's, medians per call; ``clock``: its clock check;
    ``calls``: calls per batch. A limit the clock check could not set confirms nothing."""
    if aa or stats.direction() != "faster":
        return None
    limit = clock.limit_s.get("candidate", math.nan)
    if not math.isfinite(limit):
        return ClockConfirmation(
            False, stats.ref_median_s - stats.cand_median_s, math.inf,
            f"{NOT_CONFIRMABLE}: the clock check set no limit for the candidate",
        )  # fmt: skip
    return clock_confirms(
        stats.ref_median_s,
        stats.cand_median_s,
        limit,
        calls_per_batch=calls,
        clock_tick_s=time.get_clock_info("perf_counter").resolution,  # the batches' clock
    )


def _planned_calls(calls: int, rule: StoppingRule, warm: dict[str, list[float]]) -> int:
    """The fewest timed calls of each subject the run is expected to take: the stopping rule's
    ``min_samples`` ABBA blocks (``2 x calls`` calls each), and its ``min_gpu_s`` at the slower
    subject's median warm-up call (the rule stops on the larger of the two GPU times). A
    subject that reports faster warm-up calls than it makes later only lengthens its run
    (:func:`compare_workers` does not stop on noise before the reveals' bound holds)."""
    by_blocks = 2 * calls * rule.min_samples
    medians = [float(np.median(times)) for times in warm.values() if times]
    slowest = max(medians) if medians else 0.0
    by_time = math.floor(rule.min_gpu_s / slowest) if slowest > 0 else 0
    return max(by_blocks, by_time)


def _hold_states(workers: dict[str, WorkerProcess]) -> dict[str, str | None]:
    """Each worker's stream-hold state as its last batch reply stated it (``on``, why not, or
    None when it said nothing)."""
    states: dict[str, str | None] = {}
    for label, worker in workers.items():
        state = (worker.stream_hold or {}).get("state")
        states[label] = state if isinstance(state, str) else None
    return states


def _memory_dir() -> str | None:
    """A memory-backed directory for revealed outputs where there is one (``/dev/shm``:
    outputs of hundreds of MiB are written and read back there at memory speed), else None
    (the default temporary directory)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def compare_spec(
    spec_path: str,
    case: str,
    *,
    ceilings: Ceilings | None = None,
    monitor: Any = None,
    config: IsolationConfig = IsolationConfig(),
    roles: tuple[str, str] = ("reference", "candidate"),
    directories: tuple[str, str] | None = None,
    before_batch: Callable[[str], None] | None = None,
    accuracy: dict[str, Any] | None = None,
) -> Comparison:
    """Compare the spec's two subjects for ``case``, each in a worker of its own
    (:func:`compare_workers`); ``roles=("reference", "reference")`` is an A/A of the
    reference (two workers, the same subject). With ``directories`` (reference's, candidate's:
    code directories, R11), each worker runs in its own directory and loads the ``SUBJECT`` of
    the spec ``spec_path`` relative to it (:class:`WorkerProcess`); an A/A passes the
    original's directory twice; ``before_batch(role)`` runs before every batch with both
    workers quiet (:func:`compare_workers`: the subjects' files checked, R11); ``accuracy``: the
    Target's accuracy rule (:func:`compare_workers`). The workers are
    ended on return or error; their stderr goes to a private file whose last lines are quoted
    when a worker fails."""
    with (
        tempfile.TemporaryDirectory(prefix="perfledger-isolated-") as tmp,
        tempfile.TemporaryDirectory(prefix="perfledger-reveal-", dir=_memory_dir()) as reveals,
        CallTree() as tree,
        undumpable(),
    ):
        workers: list[WorkerProcess] = []
        own = getattr(monitor, "own_pids", None)
        try:
            dirs = directories or (None, None)
            for role, err, directory in zip(roles, ("ref", "cand"), dirs, strict=True):
                workers.append(
                    WorkerProcess(
                        role,
                        spec_path,
                        case,
                        config,
                        os.path.join(tmp, err + ".err"),
                        directory=directory,
                    )
                )
            if own is not None:  # the workers' GPU contexts are the comparison's own (R17)
                monitor.own_pids = own | {w.proc.pid for w in workers}
            return compare_workers(
                *workers,
                ceilings=ceilings,
                monitor=monitor,
                config=config,
                reveal_dir=reveals,
                tree=tree,
                before_batch=before_batch,
                accuracy=accuracy,
            )
        finally:
            if own is not None:
                monitor.own_pids = own
            for worker in workers:
                worker.close()
            tree.end(include_root=False)  # whatever the workers left behind


__all__ = [
    "ROLES",
    "WORKER",
    "BatchReply",
    "IsolationConfig",
    "WorkerProcess",
    "compare_spec",
    "compare_workers",
    "spec_facts",
]
