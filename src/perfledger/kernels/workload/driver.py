"""The workload driver (SPEC.md section 5, "Workload driver"; rules R5, R11): any command that
prints one JSON object with a correctness result and metric values is a subject.

The subject protocol (what a command must print on stdout, as its last non-empty line or as the
whole of stdout)::

    {"correct": true, "metrics": {"latency_ms": [1.02, 1.01, 1.03], "memory_mb": 812.0}}

- ``correct`` (required, a JSON boolean): the command's own accuracy check against the user's
  accuracy rule. ``false`` is a valid call whose samples have no performance meaning (R5).
- ``metrics`` (required, an object): metric name -> a finite positive number, or a non-empty list
  of them (the call's repeated samples). NaN, Infinity, zero, negative or non-numbers fail the call.
- ``detail`` (optional, any JSON): kept in the per-call table, never interpreted.

Where a subject's argv holds ``{output}``, every call gets a fresh private path there (and in
``$PERFLEDGER_OUTPUT``) and must write its output to it; ``{seed}`` (and ``$PERFLEDGER_SEED``)
is a fresh unpredictable seed per pair, the same for both calls of the pair, which the command
may use to draw its inputs. The driver then judges the candidate's output against the
reference's of the same pair by the Target's accuracy rule (:mod:`perfledger.kernels.workload.outputs`):
a call is ``correct`` only when its own check *and* that comparison hold; ``self_correct`` keeps
what the command said, ``output`` what it wrote and how it was judged.

A call that exits non-zero, runs past its timeout (it and every descendant are killed), prints no
JSON object, prints JSON of the wrong shape or non-finite values is a *failed call* with a reason
(:data:`FAILURE_REASONS`); it is recorded, never raised. Correctness and metrics of one subject come
from one call (R11) and stay together in one :class:`CallResult`.

Reference and candidate run interleaved in ABBA order (:func:`abba_order`): pair ``k`` runs the
reference first when ``k`` is even and the candidate first when it is odd, so a drift in the
machine (clocks, thermals, caches) is spread over both subjects equally. Cases are interleaved
within each round (``round 0: case a, case b; round 1: ...``).

Public API (stable; the kernel-iteration loop builds on it): :class:`Subject`, :class:`CallResult`,
:class:`PairResult`, :class:`DriverRun`, :func:`parse_output`, :func:`run_call`, :func:`abba_order`,
:func:`run_pairs`, :data:`FAILURE_REASONS`, :data:`CASE_ENV`. A subject is told its case, never
its role (reference or candidate): a subject that knew it could behave differently as either.
The environment that can change how a subject runs is recorded in :attr:`DriverRun.settings`
(``environment``, :mod:`perfledger.kernels.workload.subject_env`).

Imports: the standard library, errors, events and kernels (SPEC.md section 1).
"""

from __future__ import annotations

import json
import math
import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from perfledger.derive import outputs as derive_outputs
from perfledger.errors import MeasurementError, RuleRefused
from perfledger.events.identity import environment_difference
from perfledger.kernels.confine import confine_subject, confinement
from perfledger.kernels.monitor.interference import POLL_S as STOP_POLL_S
from perfledger.kernels.monitor.interference import TREE_POLL_S, StopWatch
from perfledger.kernels.proc import CallTree, undumpable
from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.driver_guard import DriverGuard
from perfledger.kernels.workload.subject_copy import ROOT_ENV
from perfledger.kernels.workload.subject_env import (
    call_environment,
    closed_environment,
    influencing_environment,
    recorded_environment,
)

#: Environment variable carrying the test case's name into each call.
CASE_ENV = "PERFLEDGER_CASE"
#: Placeholder replaced by the case name in a subject's argv.
CASE_PLACEHOLDER = "{case}"
#: Why a call failed; ``None`` in :attr:`CallResult.reason` means it did not.
FAILURE_REASONS = (
    "spawn_error",  # the command could not be started (not found, not executable)
    "timeout",  # ran past timeout_s; its process group was killed
    "exit_status",  # exited non-zero (or was killed by a signal)
    "not_json",  # stdout holds no JSON object
    "bad_shape",  # JSON object without a boolean `correct` or a valid `metrics` object
    "non_finite",  # a metric value is NaN or +-Infinity
    "non_positive",  # a metric value is zero or negative
    "interfered",  # another process stopped or traced the command (kernels.monitor.interference)
)
#: Most characters of stdout/stderr kept per call (the tail).
TAIL_CHARS = 2_000


@dataclass(frozen=True)
class Subject:
    """A subject of the workload driver: a command line, its extra environment and directory.

    Attributes:
        label: ``ref`` or ``cand`` (or any short name); kept in the per-call table, never
            passed to the command (a subject must not learn its role).
        argv: the command and its arguments; ``{case}`` in an argument is replaced by the case.
        env: extra environment variables (added to the driver's own environment).
        cwd: working directory (default: the driver's).
        inherit: whether the calls inherit the driver's environment (False: ``env`` is their
            whole environment, as :func:`run_pairs` makes it for subject copies, R11).
    """

    label: str
    argv: Sequence[str]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    inherit: bool = True

    def __post_init__(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise ValueError("a subject needs a non-empty argv of strings")


@dataclass(frozen=True)
class CallResult:
    """One driver call of one subject on one case.

    Attributes:
        subject: the subject's label.
        case: the test case.
        call_id: unique within a run (``"<label>-<case>-<round>"``).
        ok: True when the call produced a well-formed result (whatever its correctness).
        correct: the subject's own accuracy verdict; False whenever ``ok`` is False.
        metrics: metric name -> the call's values (finite, positive); empty when not ``ok``.
        reason: one of :data:`FAILURE_REASONS` when not ``ok``, else None.
        message: a human-readable explanation of ``reason`` ('' when ok).
        returncode: the exit status (negative for a signal), None when it never ran or timed out.
        start_s, end_s: ``time.monotonic()`` when the call started and ended (seconds), to align
            with the GPU monitor's observations (R17).
        wall_s: ``end_s - start_s`` (seconds).
        detail: the subject's optional ``detail`` value.
        stdout_tail, stderr_tail: the last :data:`TAIL_CHARS` characters of each stream.
        ended_descendants: processes the command left behind (or, on timeout, had running) that
            the driver killed when the call ended.
        seed: the ``{seed}`` the call was given (None when its argv declares none).
        self_correct: the command's own accuracy verdict where the driver also judged its
            output (then ``correct`` is both), None otherwise.
        output: where the argv declares ``{output}``: what the call wrote (``blake3``, ``size``,
            ``error``, ``stored``: the artifact name of small outputs) and how it was judged
            (``ok``, ``reason``, ``method``, ``compare``); None otherwise.
    """

    subject: str
    case: str
    call_id: str
    ok: bool
    correct: bool
    metrics: dict[str, list[float]]
    reason: str | None
    message: str
    returncode: int | None
    start_s: float
    end_s: float
    wall_s: float
    detail: Any = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    ended_descendants: int = 0
    seed: str | None = None
    self_correct: bool | None = None
    output: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the call as JSON builtins (one row of the raw per-call table)."""
        return asdict(self)


@dataclass(frozen=True)
class PairResult:
    """One ABBA pair: both subjects on one case, in ``order``.

    Attributes:
        case: the test case.
        index: the round (0-based) of this case.
        order: ``("ref", "cand")`` or ``("cand", "ref")``: who ran first.
        ref, cand: the two calls.
    """

    case: str
    index: int
    order: tuple[str, str]
    ref: CallResult
    cand: CallResult

    @property
    def usable(self) -> bool:
        """Both calls produced well-formed results (correct or not): the pair can be recorded."""
        return self.ref.ok and self.cand.ok

    @property
    def start_s(self) -> float:
        """``time.monotonic()`` at the start of the pair's first call (seconds)."""
        return min(self.ref.start_s, self.cand.start_s)

    @property
    def end_s(self) -> float:
        """``time.monotonic()`` at the end of the pair's last call (seconds)."""
        return max(self.ref.end_s, self.cand.end_s)


@dataclass(frozen=True)
class DriverRun:
    """The result of :func:`run_pairs`.

    Attributes:
        pairs: every pair in the order it ran.
        warmup: warm-up calls (not paired, not part of any verdict).
        settings: the protocol settings used (recorded in the samples' metadata).
        outputs: artifact name -> bytes of the outputs small enough to keep
            (:data:`perfledger.derive.outputs.STORE_MAX_BYTES`), paired calls only.
    """

    pairs: list[PairResult]
    warmup: list[CallResult]
    settings: dict[str, Any]
    outputs: dict[str, bytes] = field(default_factory=dict)

    @property
    def failed_calls(self) -> list[CallResult]:
        """Every paired call that did not produce a well-formed result."""
        return [c for p in self.pairs for c in (p.ref, p.cand) if not c.ok]

    def table(self) -> list[dict[str, Any]]:
        """The raw per-call table: one row per call (warm-up rows flagged), in run order."""
        rows = [{**c.to_json(), "warmup": True, "pair": None} for c in self.warmup]
        for n, p in enumerate(self.pairs):
            first, second = (p.ref, p.cand) if p.order[0] == "ref" else (p.cand, p.ref)
            for c in (first, second):
                rows.append({**c.to_json(), "warmup": False, "pair": n})
        return rows


def _tail(text: str) -> str:
    return text[-TAIL_CHARS:]


def _find_object(stdout: str) -> Any:
    """The JSON object of a call's stdout: the whole text, else its last non-empty line."""
    text = stdout.strip()
    if not text:
        raise ValueError("stdout is empty")
    try:
        return json.loads(text)
    except ValueError:
        pass
    last = text.splitlines()[-1].strip()
    return json.loads(last)


def parse_output(stdout: str) -> tuple[bool, dict[str, list[float]], Any, str | None, str]:
    """Parse a call's stdout under the subject protocol (module docstring).

    Args:
        stdout: the call's standard output (text).
    Returns: ``(correct, metrics, detail, reason, message)``; ``reason`` is None when the output
        is well formed, else one of ``not_json``, ``bad_shape``, ``non_finite``, ``non_positive``
        (then ``correct`` is False and ``metrics`` empty).
    Never raises for bad output.
    """
    try:
        data = _find_object(stdout)
    except (ValueError, RecursionError) as exc:
        return False, {}, None, "not_json", f"no JSON object on stdout ({exc})"
    if not isinstance(data, dict):
        return (
            False,
            {},
            None,
            "not_json",
            f"stdout holds JSON {type(data).__name__}, not an object",
        )
    correct = data.get("correct")
    if not isinstance(correct, bool):
        return False, {}, None, "bad_shape", "`correct` must be a JSON boolean"
    raw = data.get("metrics")
    if not isinstance(raw, dict) or not raw:
        return False, {}, None, "bad_shape", "`metrics` must be a non-empty object"
    metrics: dict[str, list[float]] = {}
    for name, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in values
        ):
            return (
                False,
                {},
                None,
                "bad_shape",
                f"metric {name!r} must be a number or a list of numbers",
            )
        try:
            floats = [float(v) for v in values]
        except OverflowError:  # a JSON integer beyond float range (10**400)
            return False, {}, None, "non_finite", f"metric {name!r} has a value beyond float range"
        if not all(math.isfinite(v) for v in floats):
            return False, {}, None, "non_finite", f"metric {name!r} has a NaN or infinite value"
        if not all(v > 0 for v in floats):
            return False, {}, None, "non_positive", f"metric {name!r} has a zero or negative value"
        metrics[str(name)] = floats
    return correct, metrics, data.get("detail"), None, ""


#: After the command exits, the most time spent reading what is left in its pipes (seconds): its
#: leftover processes are ended first, so end-of-file normally comes at once.
DRAIN_S = 1.0
#: Most bytes of stdout kept per call (the tail: the JSON object is its last line).
STDOUT_MAX_BYTES = 16 * 1024 * 1024


class _Streams:
    """The command's stdout and stderr, read without blocking until end-of-file or a deadline."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:

        self.data = {"out": bytearray(), "err": bytearray()}
        self.selector = selectors.DefaultSelector()
        self.open = 0
        for name, stream in (("out", proc.stdout), ("err", proc.stderr)):
            assert stream is not None
            os.set_blocking(stream.fileno(), False)
            self.selector.register(stream, selectors.EVENT_READ, name)
            self.open += 1
        self.pidfd: int | None = None
        try:
            # the command's exit wakes the selector at once (Linux >= 5.3); else it is polled
            self.pidfd = os.pidfd_open(proc.pid)
            self.selector.register(self.pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            self.pidfd = None

    def wait(self, timeout_s: float) -> bool:
        """Read whatever is ready within ``timeout_s`` (>= 0); True when the command's exit
        was signalled (pidfd)."""
        exited = False
        for key, _mask in self.selector.select(max(timeout_s, 0.0)):
            if key.data == "exit":
                exited = True
                self.selector.unregister(key.fileobj)
                continue
            try:
                chunk = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                self.selector.unregister(key.fileobj)
                self.open -= 1
                continue
            buf = self.data[key.data]
            buf += chunk
            limit = STDOUT_MAX_BYTES if key.data == "out" else 4 * TAIL_CHARS
            if len(buf) > 2 * limit:
                del buf[:-limit]
        return exited

    def drain(self, timeout_s: float) -> None:
        """Read until both streams reach end-of-file or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while self.open and time.monotonic() < deadline:
            self.wait(deadline - time.monotonic())

    def text(self, name: str) -> str:
        return self.data[name].decode("utf-8", errors="replace")

    def close(self, proc: subprocess.Popen[bytes]) -> None:
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def run_call(
    subject: Subject,
    *,
    case: str,
    call_id: str,
    timeout_s: float = 600.0,
    output_path: str | None = None,
    seed: str | None = None,
    on_spawn: Callable[[int], None] | None = None,
    on_reaped: Callable[[int], None] | None = None,
) -> CallResult:
    """Run ``subject`` once on ``case`` and parse its output (never raises for a bad command).

    Every process the call starts is ended by the time this returns, whatever session or process
    group it moved to (:class:`perfledger.kernels.proc.CallTree`): on timeout, the command and
    all its descendants are killed at ``timeout_s``; when the command exits, descendants it left
    behind are killed at once (they could otherwise work during the other subject's call) and
    counted in :attr:`CallResult.ended_descendants`. The pipes are read with a deadline only:
    a leftover holding stdout open cannot stretch the call (a 2 s timeout costs about 2 s).

    ``wall_s`` runs from just before the command is started to when its exit was seen (or the
    timeout): the driver's own clock of the call, which the command cannot reach.

    Args:
        subject: what to run.
        case: the test case, substituted for ``{case}`` and passed as ``$PERFLEDGER_CASE``.
        call_id: the id recorded for this call.
        timeout_s: wall-clock limit in seconds (> 0).
        output_path: put in place of ``{output}`` and passed as ``$PERFLEDGER_OUTPUT``.
        seed: put in place of ``{seed}`` and passed as ``$PERFLEDGER_SEED``.
        on_spawn: called with the command's pid as soon as it started (a monitor adopting it
            as perfledger's own, R17: its CPU and GPU work is the measurement, not foreign);
            its errors end the call's processes and propagate.
        on_reaped: called with the command's pid once it was reaped (its CPU time is then in
            this process's counters; a host monitor stops counting the pid, which the kernel
            may give to another process).
    Returns: the :class:`CallResult` (its output is read and judged by :func:`run_pairs`).
    Raises: ValueError for a non-positive timeout; what ``on_spawn`` or ``on_reaped`` raise.
    """

    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")

    argv = [a.replace(CASE_PLACEHOLDER, case) for a in subject.argv]
    base = os.environ if subject.inherit else {}
    env = {**base, **subject.env, CASE_ENV: case}  # the case, never the role
    if output_path is not None:
        argv = [a.replace(outputs.OUTPUT_PLACEHOLDER, output_path) for a in argv]
        env[outputs.OUTPUT_ENV] = output_path
    if seed is not None:
        argv = [a.replace(outputs.SEED_PLACEHOLDER, seed) for a in argv]
        env[outputs.SEED_ENV] = seed
    # not dumpable during the call: the command (same user) cannot write this process's clock
    with undumpable(), CallTree() as tree:
        start = time.monotonic()
        end = start

        def result(**kw: Any) -> CallResult:
            base: dict[str, Any] = dict(
                subject=subject.label,
                case=case,
                call_id=call_id,
                ok=False,
                correct=False,
                metrics={},
                reason=None,
                message="",
                returncode=None,
                start_s=start,
                end_s=end,
                wall_s=end - start,
                seed=seed,
            )
            base.update(kw)
            return CallResult(**base)

        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=subject.cwd,
                start_new_session=True,
                preexec_fn=confine_subject,  # even as root it cannot reach this process
            )
        except OSError as exc:
            end = time.monotonic()
            return result(reason="spawn_error", message=f"cannot start {argv[0]!r}: {exc}")
        tree.watch(proc.pid)
        streams = _Streams(proc)
        stops = StopWatch(proc.pid)  # R11: stopped by a process outside the call?
        deadline = start + timeout_s
        timed_out = False
        tree_due = start + TREE_POLL_S
        try:
            if on_spawn is not None:
                on_spawn(proc.pid)
            with stops:  # the driver's own stops too (a SIGCONT handler while it waits)
                while True:
                    now = time.monotonic()
                    stops.poll()
                    if now >= tree_due:  # the processes below the command: no waitid for them
                        stops.poll_tree(tree.descendants())
                        tree_due = now + TREE_POLL_S
                    if now >= deadline:
                        timed_out = proc.poll() is None
                        break
                    # without a pidfd, poll for the exit every 10 ms
                    step = min(deadline - now, STOP_POLL_S if streams.pidfd is not None else 0.01)
                    if streams.wait(step) or proc.poll() is not None:
                        break
                end = time.monotonic()
            ended = tree.end(include_root=timed_out)
            proc.wait()
            streams.drain(DRAIN_S)
        except BaseException:
            # interrupted (Ctrl-C, a monitor's error): nothing the call started may outlive it
            tree.end(include_root=True)
            proc.wait()
            raise
        finally:
            streams.close(proc)
            if on_reaped is not None and proc.returncode is not None:
                on_reaped(proc.pid)
    tails = {"stdout_tail": _tail(streams.text("out")), "stderr_tail": _tail(streams.text("err"))}
    if stops.found:
        return result(
            reason="interfered",
            message=f"another process stopped or traced the command during the call "
            f"({stops.message}); its time is not its own",
            returncode=None if timed_out else proc.returncode,
            ended_descendants=ended,
            **tails,
        )
    if timed_out:
        return result(
            reason="timeout",
            message=f"no result within {timeout_s:g} s; the command and its "
            f"{ended} descendant(s) were killed",
            ended_descendants=ended,
            **tails,
        )
    if proc.returncode != 0:
        return result(
            reason="exit_status",
            message=f"exited with status {proc.returncode}",
            returncode=proc.returncode,
            ended_descendants=ended,
            **tails,
        )
    correct, metrics, detail, reason, message = parse_output(streams.text("out"))
    return result(
        ok=reason is None,
        correct=correct,
        metrics=metrics,
        reason=reason,
        message=message,
        returncode=0,
        detail=detail,
        ended_descendants=ended,
        **tails,
    )


def abba_order(rounds: int) -> list[tuple[str, str]]:
    """The ABBA order of ``rounds`` pairs: ``(ref, cand)`` for even rounds, ``(cand, ref)`` for
    odd ones, so ref runs first in ceil(rounds/2) pairs and second in floor(rounds/2).

    Args:
        rounds: number of pairs (>= 0).
    Returns: a list of ``rounds`` 2-tuples of the labels ``"ref"`` and ``"cand"``.
    """
    if rounds < 0:
        raise ValueError("rounds must be >= 0")
    return [("ref", "cand") if k % 2 == 0 else ("cand", "ref") for k in range(rounds)]


def run_pairs(
    ref: Subject,
    cand: Subject,
    *,
    cases: Sequence[str],
    pairs_per_case: int = 5,
    timeout_s: float = 600.0,
    warmup_calls: int = 1,
    on_call: Callable[[CallResult], None] | None = None,
    accuracy: Mapping[str, Any] | None = None,
    before_call: Callable[[str], None] | None = None,
    subject_roots: Mapping[str, str] | None = None,
    extra_settings: Mapping[str, Any] | None = None,
    more_pairs: Callable[[list[PairResult]], int] | None = None,
    on_spawn: Callable[[int], None] | None = None,
    on_reaped: Callable[[int], None] | None = None,
) -> DriverRun:
    """Run ``ref`` and ``cand`` interleaved in ABBA order over ``cases``.

    Round ``k`` (0-based) runs one pair of every case, in the order of :func:`abba_order`; the
    first ``warmup_calls`` rounds of single calls per subject and case (ABBA too) are warm-up,
    reported in :attr:`DriverRun.warmup` and never paired.

    Args:
        ref, cand: the reference and candidate subjects.
        cases: test-case names (non-empty, distinct).
        pairs_per_case: pairs per case (>= 1). R2/R12 need at least 5 valid pairs per case.
        timeout_s: per-call wall-clock limit (seconds).
        warmup_calls: warm-up calls per subject and case (>= 0).
        on_call: called after each call (progress bars, monitors); its errors propagate.
        accuracy: the Target's accuracy rule (``compare``: ``exact`` or ``allclose``, ``rtol``,
            ``atol``), required when the subjects' argv declare ``{output}``: each pair's
            candidate output is judged against its reference's (module docstring).
        before_call: called with the subject's label (``ref`` or ``cand``) before every call,
            when no call's process is alive (R11: the caller checks that neither subject's
            files changed since their snapshots; a subject that edits the other's files in one
            call and restores them in its last would otherwise pass a check made after the run
            alone); its errors propagate.
        subject_roots: label -> the private directory of the subject's copy
            (:mod:`perfledger.kernels.workload.subject_copy`), which its environment's values
            may hold where the other's hold its own (R11).
        extra_settings: more entries for :attr:`DriverRun.settings` (recorded with the samples).
        more_pairs: a stopping rule: called with the pairs so far once the planned pairs of
            every case ran; the more pairs per case to run (0 stops). The settings record how
            many ran (``pairs_per_case``) and how many were planned first (``planned_pairs``).
        on_spawn, on_reaped: :func:`run_call`'s, for every call (warm-up calls too): a monitor
            adopts each call's process as perfledger's own while it runs (R17).
    Returns: the :class:`DriverRun`; failed calls are inside it, never raised. Its settings
        carry ``call_environment``: each subject's full environment, every variable's name and
        the hash of its value (:func:`perfledger.kernels.workload.subject_env.call_environment`), and the
        names of the variables set per call (``per_call``).
    Raises: ValueError for bad arguments (one subject declaring ``{output}`` and the other
        not, or ``{output}`` without an accuracy rule that compares); MeasurementError when
        this process's scheduling (affinity, nice, policy, timer slack, limits, cgroup)
        changed between calls (:mod:`perfledger.kernels.workload.driver_guard`): a subject lowered it;
        MeasurementError when a call's command was stopped or traced by another process
        (:mod:`perfledger.kernels.monitor.interference`); RuleRefused (R11), before any call, when the
        two subjects' environments differ other than by their private directories, naming the
        variables.
    """
    if not cases or len(set(cases)) != len(cases):
        raise ValueError("cases must be non-empty and distinct")
    if pairs_per_case < 1 or warmup_calls < 0:
        raise ValueError("pairs_per_case must be >= 1 and warmup_calls >= 0")

    subjects = {"ref": ref, "cand": cand}
    declared = [outputs.declares_output(s.argv) for s in (ref, cand)]
    checked = all(declared)
    if any(declared) and not checked:
        raise ValueError("both subjects or neither must declare an {output} place")
    rule = dict(accuracy or {})
    if checked and rule.get("compare") not in ("exact", "allclose"):
        raise ValueError(
            "subjects that declare {output} need an accuracy rule that compares outputs "
            "(compare: exact or allclose)"
        )
    seeded = checked or any(outputs.SEED_PLACEHOLDER in a for s in (ref, cand) for a in s.argv)
    roots = dict(subject_roots or {})
    extra_env = {"ref": dict(ref.env), "cand": dict(cand.env)}
    closed: dict[str, Any] = {}
    # R11 (red36 E1): subjects that run from copies (their places in ``env``) get a closed
    # environment, recorded in full
    if all(ROOT_ENV in s.env for s in (ref, cand)):
        dropped: list[str] = []
        for label in ("ref", "cand"):
            s = ref if label == "ref" else cand
            whole, dropped = closed_environment(os.environ, {}, s.env)
            s = replace(s, env=whole, inherit=False)
            ref, cand = (s, cand) if label == "ref" else (ref, s)
        subjects = {"ref": ref, "cand": cand}
        closed = {
            "subject_environment": recorded_environment(dict(ref.env), roots.get("ref")),
            "environment_dropped": dropped,
        }
    environments = {
        label: call_environment({**(os.environ if s.inherit else {}), **s.env}, roots.get(label))
        for label, s in (("ref", ref), ("cand", cand))
    }
    _same_environment(environments["ref"], environments["cand"], ref, cand)
    kept: dict[str, bytes] = {}
    # R11: every call inherits this process's scheduling; a subject must not lower it for the
    # other's calls (kernels.workload.driver_guard)
    guard = DriverGuard()
    last: list[str | None] = [None]

    def call(label: str, case: str, tag: str, seed: str | None) -> tuple[CallResult, Any]:
        guard.check(last[0])
        last[0] = f"{label}-{case}-{tag}"
        if before_call is not None:
            before_call(label)
        place = outputs.OutputPlace() if checked else None
        try:
            out = run_call(
                subjects[label], case=case, call_id=f"{label}-{case}-{tag}", timeout_s=timeout_s,
                output_path=None if place is None else place.path, seed=seed,
                on_spawn=on_spawn, on_reaped=on_reaped,
            )  # fmt: skip
        finally:  # read and removed once the call's processes are gone, even when interrupted
            written = None if place is None else place.collect()
        if out.reason == "interfered":  # R11: a process outside the run slowed this call
            raise MeasurementError(
                f"call {out.call_id}: {out.message}. A process outside the measurement can "
                "slow one subject's calls this way; nothing from this run was recorded",
                hint="find the process (ps -ef) and stop it, or end a debugger attached to "
                "the calls, then measure again",
            )
        if on_call is not None:
            on_call(out)
        return out, written

    def judged(call: CallResult, written: Any, reason: str, keep: bool) -> CallResult:
        """The call with its output judged: correct only when both checks hold (R5)."""
        record = {
            **written.to_json(), "ok": not reason, "reason": reason,
            "method": derive_outputs.METHOD, "compare": rule["compare"],
        }  # fmt: skip
        if keep and record["stored"] is not None:
            kept[record["stored"]] = written.data
        return replace(
            call, self_correct=call.correct, correct=call.correct and not reason, output=record
        )

    def run_round(order: tuple[str, str], case: str, tag: str, keep: bool) -> dict[str, Any]:
        seed = outputs.new_seed() if seeded else None  # one seed per pair: the same inputs
        done = {label: call(label, case, tag, seed) for label in order}
        if not checked:
            return {label: result for label, (result, _w) in done.items()}
        (ref_call, ref_out), (cand_call, cand_out) = done["ref"], done["cand"]
        ref_reason = "" if ref_out.data is not None else f"output: {ref_out.error}"
        if keep and ref_out.data is not None and case not in trivial:
            # R5: does the declared rule tell an output that does no work from this one?
            trivial[case] = derive_outputs.trivial_output_passes(
                ref_out.data, rule["compare"], float(rule.get("rtol", 0.0)),
                float(rule.get("atol", 0.0)),
            )  # fmt: skip
        cand_reason = derive_outputs.judge_pair(
            ref_out, cand_out, rule["compare"], float(rule.get("rtol", 0.0)),
            float(rule.get("atol", 0.0)),
        )  # fmt: skip
        return {
            "ref": judged(ref_call, ref_out, ref_reason, keep),
            "cand": judged(cand_call, cand_out, cand_reason, keep),
        }

    trivial: dict[str, str] = {}  # case -> what no-work output the accuracy rule accepts
    warmup: list[CallResult] = []
    for w, order in enumerate(abba_order(warmup_calls)):
        for case in cases:
            done = run_round(order, case, f"w{w}", keep=False)
            warmup += [done[label] for label in order]
    pairs: list[PairResult] = []
    k, planned = 0, pairs_per_case
    while k < planned:
        order = abba_order(k + 1)[k]
        for case in cases:
            done = run_round(order, case, str(k), keep=True)
            pairs.append(PairResult(case, k, order, done["ref"], done["cand"]))
        k += 1
        if k == planned and more_pairs is not None:
            planned += max(0, int(more_pairs(pairs)))
    guard.check(last[0])
    settings = {
        "protocol": "workload_abba",
        "cases": list(cases),
        "pairs_per_case": k,
        **({"planned_pairs": pairs_per_case} if more_pairs is not None else {}),
        "timeout_s": timeout_s,
        "warmup_calls": warmup_calls,
        "ref_argv": list(ref.argv),
        "cand_argv": list(cand.argv),
        # what can change how the subjects run, for an auditor to see (R11)
        "environment": influencing_environment(),
        "subject_env": extra_env,
        "confinement": confinement(),  # what Landlock and seccomp held every subject process to
        **closed,
        # R11: the full environment of every call (names, values' hashes), the same for both
        "call_environment": {
            **environments,
            "per_call": [CASE_ENV, outputs.OUTPUT_ENV, outputs.SEED_ENV],
        },
        **dict(extra_settings or {}),
    }
    if checked:  # who judged correctness, by which rule (R5)
        settings["outputs"] = {
            "method": derive_outputs.METHOD, "accuracy": rule, "seeded": seeded,
            "store_max_bytes": derive_outputs.STORE_MAX_BYTES,
            "trivial_passes": {c: why for c, why in trivial.items() if why},
        }  # fmt: skip
    return DriverRun(pairs, warmup, settings, kept)


def _same_environment(
    ref_env: Mapping[str, str], cand_env: Mapping[str, str], ref: Subject, cand: Subject
) -> None:
    """R11 before any call: the two subjects' calls get the same environment (hashes as
    recorded), apart from their private directories; else refused naming the variables."""
    differ = environment_difference(ref_env, cand_env)
    if ref.cwd != cand.cwd:
        differ.append("(working directory)")
    if differ:
        raise RuleRefused(
            "R11: the reference's and the candidate's calls would run with different "
            f"environments: {', '.join(differ)}; a variable set for one subject alone can "
            "change how it runs without any file of it differing, so nothing was measured",
            rule="R11",
            hint="give both subjects the same environment (only their own directories differ)",
        )


__all__ = [
    "CASE_ENV",
    "CASE_PLACEHOLDER",
    "FAILURE_REASONS",
    "CallResult",
    "DriverRun",
    "PairResult",
    "Subject",
    "abba_order",
    "parse_output",
    "run_call",
    "run_pairs",
]
