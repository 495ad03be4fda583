"""Subjects in a process of their own, checked against a clock they cannot reach (SPEC.md
section 5, property 3 of the measurement protocol).

The process that computes statistics never runs subject code: each subject is a child process
(any command) that runs batches of calls on request and reports one time per call. A subject
that patches its timing code, its CUDA event functions or anything else in its own process can
only change what it *reports*; the parent checks every batch's reports against its own wall
time of the batch (from writing the request to reading the complete reply, the child having
synchronised its device before replying) and checks the outputs itself.

The parent's check (:func:`clock_check`): per batch, the parent's wall time beyond the reported
times, per call, is the *excess*: harness overhead (inputs, flush, events, IPC), the same for any
honest subject of one problem. A subject whose median excess is larger than the other subject's
by more than ``max(tolerance_s, tolerance_share x its own median call time)`` reported less
time than it took (or did work it did not report): flagged ``clock:<label>``, and the
comparison is invalid. A batch whose reported times add up to more than its wall time is
impossible: flagged ``clock_exceeds_wall:<label>``.

Protocol (one JSON object a line on the child's stdin / stdout):

- parent: ``{"op": "run", "seeds": [int, ...]}`` (one call per seed, inputs derived from it);
  child: ``{"times_s": [float, ...], "outputs": [any, ...]}`` (one each per call; ``outputs``
  optional, checked by the parent's ``verify(seed, output)``);
- parent: ``{"op": "exit"}``; the child exits.

A child that writes anything else, a line longer than :data:`MAX_LINE_BYTES`, dies, or does
not answer within ``timeout_s`` raises
:class:`~perfledger.errors.MeasurementError`. CPU only (subprocess, select). The kernel
harness's subjects run this way through :mod:`perfledger.kernels.isolation.subject_worker` and
:mod:`perfledger.kernels.isolation.isolated` (their own protocol, on :meth:`SubjectProcess.request`, and
this module's :func:`clock_check`).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfledger.derive.stats import PairedStats, paired_stats
from perfledger.errors import MeasurementError
from perfledger.kernels.proc import drop_ptrace_capability

#: Default tolerances of :func:`clock_check` (seconds per call; share of a call's time).
TOLERANCE_S = 50e-6
TOLERANCE_SHARE = 0.05
#: The longest reply line a subject process may send (bytes): replies are a few values per
#: call; a subject that writes more is ended, not buffered until the parent runs out of memory.
MAX_LINE_BYTES = 8 << 20


@dataclass(frozen=True)
class Batch:
    """One batch of one subject's calls.

    Attributes:
        subject: the subject's label.
        seeds: one per call.
        reported_s: the times the subject process reported, one per call (seconds).
        wall_s: the parent's wall time of the batch, request written to reply read (seconds).
        failed_outputs: indices of calls whose output the parent's ``verify`` rejected.
    """

    subject: str
    seeds: tuple[int, ...]
    reported_s: tuple[float, ...]
    wall_s: float
    failed_outputs: tuple[int, ...] = ()

    @property
    def excess_s(self) -> float:
        """The parent's wall time beyond the reported times, per call (seconds)."""
        return (self.wall_s - sum(self.reported_s)) / len(self.reported_s)


@contextmanager
def _inherit() -> Iterator[None]:
    yield None


class SubjectProcess:
    """A subject running in a child process (``argv``), spoken to by the protocol above.

    Args:
        label: the subject's name.
        argv: the command.
        timeout_s: the most a batch may take before the child is ended and an error raised.
        env: the child's environment (None: inherited).
        stderr_path: a file the child's stderr goes to (None: inherited); its last lines are
            quoted when the child fails.
        cwd: the child's working directory (None: this process's).
    Raises: MeasurementError when the command cannot start.
    """

    def __init__(
        self,
        label: str,
        argv: Sequence[str],
        *,
        timeout_s: float = 60.0,
        env: dict[str, str] | None = None,
        stderr_path: str | None = None,
        cwd: str | None = None,
    ) -> None:
        self.label = label
        self.timeout_s = timeout_s
        self.stderr_path = stderr_path
        try:
            with open(stderr_path, "wb") if stderr_path else _inherit() as err:
                self._proc = subprocess.Popen(
                    list(argv),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,  # the child's signals and terminal are its own
                    # even as root it cannot pass over the parent's being non-dumpable
                    preexec_fn=drop_ptrace_capability,
                )
        except OSError as exc:
            raise MeasurementError(f"subject {label!r} could not start: {exc}") from None
        self._buffer = b""

    @property
    def pid(self) -> int:
        """The child's process id (the id of its process group and session too)."""
        return int(self._proc.pid)

    def stderr_tail(self, lines: int = 8) -> str:
        """The last ``lines`` lines the child wrote to stderr ("" when inherited)."""
        if not self.stderr_path:
            return ""
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])

    def _failed(self, message: str) -> MeasurementError:
        """End the child; the error to raise, with its stderr's last lines."""
        self.close()
        tail = self.stderr_tail()
        return MeasurementError(message + (f"; its stderr ends:\n{tail}" if tail else ""))

    def _readline(self, deadline: float) -> bytes:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.perf_counter()
            if left <= 0:
                raise self._failed(
                    f"subject {self.label!r} did not answer within {self.timeout_s} s"
                )
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = self._proc.wait()
                raise self._failed(f"subject {self.label!r} exited (code {code}) mid-batch")
            self._buffer += chunk
            if len(self._buffer) > MAX_LINE_BYTES and b"\n" not in self._buffer:
                raise self._failed(
                    f"subject {self.label!r} sent a reply line longer than "
                    f"{MAX_LINE_BYTES >> 20} MiB"
                )
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def request(
        self, message: dict[str, Any], timeout_s: float | None = None
    ) -> tuple[dict[str, Any], float]:
        """Send one request line and read one reply line, each read with a deadline.

        Args:
            message: the request (JSON builtins).
            timeout_s: the most the reply may take (None: ``self.timeout_s``).
        Returns: ``(reply object, the parent's wall seconds from writing to reading)``.
        Raises: MeasurementError when the child is gone, late, or answers anything but one
            JSON object (the child is ended).
        """
        return self.receive(self.send(message), timeout_s)

    def send(self, message: dict[str, Any]) -> float:
        """Write one request line (the first half of :meth:`request`). Returns: the parent's
        clock when it was written. Raises: MeasurementError when the child is gone."""
        assert self._proc.stdin is not None
        line_out = json.dumps(message).encode() + b"\n"
        t0 = time.perf_counter()
        try:
            self._proc.stdin.write(line_out)
            self._proc.stdin.flush()
        except OSError as exc:
            raise self._failed(f"subject {self.label!r} is gone: {exc}") from None
        return t0

    def receive(self, t0: float, timeout_s: float | None = None) -> tuple[dict[str, Any], float]:
        """Read the reply to the request :meth:`send` wrote at ``t0`` (the second half of
        :meth:`request`, which says what it returns and raises)."""
        line = self._readline(t0 + (self.timeout_s if timeout_s is None else timeout_s))
        wall = time.perf_counter() - t0  # the parent's own clock: nothing the child can touch
        try:
            reply = json.loads(line)
        except ValueError as exc:
            reply = exc
        if not isinstance(reply, dict):
            raise self._failed(
                f"subject {self.label!r} sent a malformed reply ({reply}): {line[:200]!r}"
            )
        return reply, wall

    def run(self, seeds: Sequence[int]) -> tuple[list[float], list[Any] | None, float]:
        """Run one call per seed; returns ``(reported times, outputs or None, parent wall s)``.

        Raises: MeasurementError for a malformed or late reply (the child is ended).
        """
        reply, wall = self.request({"op": "run", "seeds": [int(s) for s in seeds]})
        line = json.dumps(reply)
        try:
            times = [float(t) for t in reply["times_s"]]
        except (ValueError, KeyError, TypeError) as exc:
            self.close()
            raise MeasurementError(
                f"subject {self.label!r} sent a malformed reply ({exc}): {line[:200]!r}"
            ) from None
        outputs = reply.get("outputs")
        if len(times) != len(seeds) or (outputs is not None and len(outputs) != len(seeds)):
            self.close()
            raise MeasurementError(
                f"subject {self.label!r} answered {len(times)} calls for {len(seeds)}"
            )
        if not all(np.isfinite(t) and t > 0 for t in times):
            self.close()
            raise MeasurementError(f"subject {self.label!r} reported non-positive times")
        return times, outputs, wall

    def close(self) -> None:
        """Ask the child to exit; end it if it does not within a second."""
        if self._proc.poll() is not None:
            return
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(b'{"op": "exit"}\n')
            self._proc.stdin.close()
            self._proc.wait(timeout=1.0)
        except (OSError, subprocess.TimeoutExpired):
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> SubjectProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ClockCheck:
    """The parent's check of two subjects' reported times against its own clock.

    Attributes:
        excess_s: label -> median excess per call over its batches (seconds).
        call_s: label -> median reported time per call (seconds).
        limit_s: label -> the most that subject's median excess may exceed the other's
            (seconds): each subject's limit scales with its own reported call time, since the
            time it could hide is a share of its own calls.
        flags: ``clock:<label>`` / ``clock_exceeds_wall:<label>``; empty when consistent.
        noise_s: the noise allowance (``noise_sigmas`` x the standard error of the difference
            of the median excesses, before the per-subject cap; 0 when not asked for).
    """

    excess_s: dict[str, float]
    call_s: dict[str, float]
    limit_s: dict[str, float]
    flags: list[str]
    noise_s: float = 0.0


def clock_check(
    batches: Sequence[Batch],
    *,
    tolerance_s: float = TOLERANCE_S,
    tolerance_share: float = TOLERANCE_SHARE,
    noise_sigmas: float = 0.0,
    noise_cap_share: float = 0.25,
    overhead_share: float = 0.0,
    suspects: Sequence[str] | None = None,
) -> ClockCheck:
    """Check reported times against the parent's wall time (module docstring), property 3.

    Args:
        batches: every batch of the (one or two) subjects compared.
        tolerance_s, tolerance_share: how much a subject's median excess per call may exceed
            the other's: the larger of ``tolerance_s`` and ``tolerance_share`` x the subject's
            own median reported call time ...
        noise_sigmas: ... and, when > 0, of that many standard errors of the difference of the
            two median excesses (robust: from each subject's median absolute deviation over its
            batches), for overheads that vary from batch to batch (copies, hashing) ...
        noise_cap_share: ... that allowance capped at this share of the subject's own median
            call time (a subject that makes its own overhead noisy cannot widen its limit
            further, and under-reporting its calls narrows it);
        overhead_share: ... and of this share of the smaller median excess (an overhead that
            differs a little from one process to another, or grows with a subject's own work:
            a long compute-bound call leaves the clocks lower for the hashing after it; a
            subject can raise the other's excess only through GPU work left queued when it was
            stopped, which the docs' limits name),
            also capped at ``noise_cap_share`` x the subject's own median call time: where the
            harness's overhead is several times a call (copying and hashing a large output), a
            share of it uncapped would let a subject report half its time unflagged.
        suspects: the labels checked for a larger excess (None: every label). A comparison
            whose subjects are not equally suspect checks only the one a lie could favour:
            a larger excess of the candidate is the mark of every lie that helps it (it
            under-reports, or the reference over-reports); a larger excess of the reference
            can only make the candidate look slower.
    Returns: :class:`ClockCheck`.
    Raises: ValueError without batches.
    """
    if not batches:
        raise ValueError("no batches to check")
    labels = sorted({b.subject for b in batches})
    excess = {
        lb: float(np.median([b.excess_s for b in batches if b.subject == lb])) for lb in labels
    }
    call = {
        lb: float(np.median([t for b in batches if b.subject == lb for t in b.reported_s]))
        for lb in labels
    }
    noise = 0.0
    if noise_sigmas > 0 and len(labels) > 1:
        variance = 0.0
        for lb in labels:
            values = np.asarray([b.excess_s for b in batches if b.subject == lb])
            mad = float(np.median(np.abs(values - np.median(values))))
            # standard error of a median of n values of a normal of sd 1.4826 x MAD
            variance += (1.2533 * 1.4826 * mad) ** 2 / max(values.size, 1)
        noise = noise_sigmas * float(np.sqrt(variance))
    shared = max(noise, overhead_share * max(min(excess.values()), 0.0))
    # per subject: what it could hide is a share of its own calls
    limit = {
        lb: max(
            tolerance_s,
            tolerance_share * call[lb],
            min(shared, noise_cap_share * call[lb]),
        )
        for lb in labels
    }
    flags: list[str] = []
    for lb in labels:
        # a reported sum above the wall time is impossible, whatever the overhead
        if any(sum(b.reported_s) > b.wall_s for b in batches if b.subject == lb):
            flags.append(f"clock_exceeds_wall:{lb}")
        others = [excess[o] for o in labels if o != lb]
        suspect = suspects is None or lb in suspects
        if suspect and others and excess[lb] - min(others) > limit[lb]:
            flags.append(f"clock:{lb}")
    return ClockCheck(excess, call, limit, flags, noise)


@dataclass
class IsolatedComparison:
    """Result of :func:`compare_isolated`.

    Attributes:
        batches: every batch in the order run.
        orders: ``"AB"`` / ``"BA"`` per batch pair.
        stats: paired statistics of the per-batch mean call times (``cand / ref``).
        clock: the parent's clock check.
        flags: the clock flags and ``output:<label>`` for rejected outputs.
    """

    batches: list[Batch]
    orders: list[str]
    stats: PairedStats
    clock: ClockCheck
    flags: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """No clock or output flag."""
        return not self.flags


def compare_isolated(
    ref: SubjectProcess,
    cand: SubjectProcess,
    *,
    pairs: int,
    calls: int,
    seed: int,
    verify: Callable[[int, Any], bool] | None = None,
    tolerance_s: float = TOLERANCE_S,
    tolerance_share: float = TOLERANCE_SHARE,
    resamples: int = 2000,
) -> IsolatedComparison:
    """Paired comparison of two subject processes, batches interleaved AB / BA, each batch of
    a pair on the same seeds (fresh per pair, from ``seed``); statistics only from reports that
    pass the parent's clock check.

    Args:
        ref, cand: the subject processes (labels must differ).
        pairs: batch pairs (>= 2); calls: calls per batch (>= 1).
        seed: the hidden seed of the calls' seeds.
        verify: ``verify(call seed, output) -> ok``, the parent's own output check.
        tolerance_s, tolerance_share: of :func:`clock_check`.
    Returns: :class:`IsolatedComparison`.
    Raises: ValueError for bad arguments; MeasurementError when a subject process fails.
    """
    if ref.label == cand.label:
        raise ValueError("the two subjects need different labels")
    if pairs < 2 or calls < 1:
        raise ValueError("pairs must be >= 2 and calls >= 1")
    rng = np.random.default_rng(seed)
    batches: list[Batch] = []
    orders: list[str] = []
    means: dict[str, list[float]] = {ref.label: [], cand.label: []}
    for k in range(pairs):
        seeds = tuple(int(s) for s in rng.integers(0, 2**62, size=calls))
        order = (ref, cand) if k % 2 == 0 else (cand, ref)
        orders.append("AB" if k % 2 == 0 else "BA")
        for subject in order:
            times, outputs, wall = subject.run(seeds)
            failed: tuple[int, ...] = ()
            if verify is not None:
                failed = tuple(
                    i for i, s in enumerate(seeds) if outputs is None or not verify(s, outputs[i])
                )
            batches.append(Batch(subject.label, seeds, tuple(times), wall, failed))
            means[subject.label].append(float(np.mean(times)))
    clock = clock_check(batches, tolerance_s=tolerance_s, tolerance_share=tolerance_share)
    flags = list(clock.flags)
    for label in (ref.label, cand.label):
        if any(b.failed_outputs for b in batches if b.subject == label):
            flags.append(f"output:{label}")
    stats = paired_stats(
        means[ref.label], means[cand.label], resamples=resamples, seed=seed & 0xFFFFFFFF
    )
    return IsolatedComparison(batches, orders, stats, clock, flags)


__all__ = [
    "MAX_LINE_BYTES",
    "TOLERANCE_S",
    "TOLERANCE_SHARE",
    "Batch",
    "ClockCheck",
    "IsolatedComparison",
    "SubjectProcess",
    "clock_check",
    "compare_isolated",
]
