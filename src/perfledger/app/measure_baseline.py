"""The baseline use case (``perfledger measure baseline``; R2, R4, R5, R11): the original
measured, not typed. A workload's original command is called ``calls`` times on every case of
the test set on this machine (whose environment identity must be the readiness's, R11); a
kernel Target's REFERENCE is timed by the kernel harness in two workers of its own. Every value
of the primary metric becomes one baseline value with its case and call id; a call that fails,
or whose own accuracy check fails, stops it (R5: an original that fails has no baseline).
Where readiness snapshotted the original, every call runs from a read-only copy of the
snapshot (R11; the harness workers of a kernel Target each in a copy of their own). A
workload's baseline runs under the monitor a formal stage of its Target uses, whichever
protocol calls the original (the worker protocol: one window per pair; the self-timed driver:
one window per call, each call's process adopted as perfledger's own while it runs), and a
baseline whose windows show too much foreign activity is refused (R17,
:func:`perfledger.app.measure_workload.foreign_windows_refusal`, one judgement for both)."""

from __future__ import annotations

import os
import shlex
import statistics
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import msgspec

from perfledger.app.context import (
    check_cases,
    check_environment,
    environment_payload,
)
from perfledger.app.identity import (
    SubjectCopies,
    check_original_command,
    check_original_subject,
    original_copies,
)
from perfledger.app.kernel_identity import original_kernel_directory
from perfledger.app.measure_driver import own_calls
from perfledger.app.measure_workload import (
    foreign_windows_refusal,
    held,
    measure_original,
    original_monitor,
)
from perfledger.app.measuring import ceilings, failed_call_text, time_scale
from perfledger.app.preconditions import require_readiness
from perfledger.commands.workflow.output_rules import compared
from perfledger.errors import BadRequest, MeasurementError
from perfledger.events.identity import substitute
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.kernels.workload import outputs
from perfledger.kernels.workload.driver import Subject, run_call
from perfledger.kernels.workload.startup_surface import StartupWatch
from perfledger.kernels.workload.subject_env import call_environment
from perfledger.projections.target_kind import target_kind

#: The raw-table artifact attached to the baseline's event.
BASELINE_ARTIFACT = "baseline.json"
#: Calls of the original per case unless --calls says otherwise.
DEFAULT_CALLS = 3
#: ``progress(total, label)``: a context manager giving the function to call after each call
#: (the CLI's progress bar; :func:`no_progress` shows none).
Progress = Callable[[int, str], AbstractContextManager[Callable[[], None]]]


class _Silent:
    """A progress that shows nothing."""

    def __enter__(self) -> Callable[[], None]:
        return lambda: None

    def __exit__(self, *exc: object) -> None:
        return None


def no_progress(total: int, label: str) -> AbstractContextManager[Callable[[], None]]:
    """A :data:`Progress` that shows nothing (a Python caller's default)."""
    return _Silent()


class MeasuredBaseline(msgspec.Struct, frozen=True, kw_only=True):
    """The baseline measured: ``request`` the ``baseline.record`` request (values, cases,
    call ids, the original's content hash, metric, unit, environment id), ``rows`` the raw
    per-call table, ``environment`` this machine's identity, ``settings`` what the raw table
    records beside them (an observed primary's: ``settings``, the worker run's protocol, call
    environments and copies' digests, and ``monitor``, its windows)."""

    request: dict[str, Any]
    rows: list[Any]
    environment: dict[str, Any]
    settings: dict[str, Any] = {}


def measure_baseline_of(
    state: Any,
    target_id: str,
    *,
    cmd: str | None = None,
    spec_path: str | None = None,
    kernel_dir: str | None = None,
    cases: list[str] | None = None,
    calls: int = DEFAULT_CALLS,
    timeout_s: float,
    progress: Progress = no_progress,
) -> MeasuredBaseline:
    """Measure Target ``target_id``'s original against the folded ``state`` (``ledger.state()``;
    the ledger need not stay open while it measures): a workload's
    ``cmd`` (the readiness driver with the original in its place), or a kernel Target's spec
    (``spec_path``, or ``kernel_dir`` where readiness bound the original's directory), ``calls``
    times per case of ``cases`` (default: the readiness's test set). Nothing is recorded:
    record ``result.request`` with ``baseline.record`` (the CLI attaches ``result.rows`` as
    :data:`BASELINE_ARTIFACT`).

    Raises: BadRequest (unknown Target, options that do not fit its kind, no cases),
    RuleRefused (R2: no readiness; R11: not the original's code or environment),
    MeasurementError (a failed call, R5)."""
    target = state.targets.get(target_id)
    if target is None:
        raise BadRequest(f"no Target {target_id!r}", hint="`perfledger status` lists them")
    readiness = require_readiness(target)
    kernel = target_kind(target) == "kernel"
    _check_form(target_id, kernel, cmd, spec_path, kernel_dir)
    if cmd is not None:
        check_original_command(target, cmd)  # R11: the baseline runs the original's code
    test_set = readiness.test_set
    chosen = list(cases or []) or list(test_set.cases if test_set is not None else [])
    if not chosen:
        raise BadRequest(
            "no test cases: pass --case or name them in the readiness's test set",
            hint="pass --case NAME, or record readiness whose test_set names its cases",
        )
    check_cases(chosen, test_set, "--case")
    env = environment_payload()
    check_environment(env, {"readiness_environment_id": readiness.environment_id})
    primary = target.definition.primary
    settings: dict[str, Any] = {}
    if kernel:  # the kernel harness times the REFERENCE (R4, as `measure aa --spec`)
        rows, body, settings = _measure_kernel(target, spec_path, kernel_dir, chosen, calls,
                                               progress, primary.unit)  # fmt: skip
    elif primary.name in OBSERVED_METRICS:  # perfledger's own figures, the worker protocol
        rows, body, settings = _measure_observed(target, cmd or "", chosen, calls, timeout_s,
                                                 progress)  # fmt: skip
    else:
        rows, body, settings = _measure(target, cmd or "", chosen, calls, timeout_s, progress,
                                        primary.name)  # fmt: skip
    monitored = settings.get("monitor")
    if monitored is not None:
        # R17: windows another process's load touched are recorded; too many of them refuse
        # it, under either protocol (the self-timed driver's windows are its calls')
        span = "pair" if primary.name in OBSERVED_METRICS else "call"
        refusal = foreign_windows_refusal(monitored["windows"], "baseline", span=span)
        if refusal is not None:
            raise refusal
    body.update(
        target_id=target_id,
        original_hash=readiness.original.content_hash,
        metric=primary.name,
        unit=primary.unit,
        environment_id=env["environment_id"],
    )
    return MeasuredBaseline(request=body, rows=rows, environment=env, settings=settings)


def _measure_observed(
    target: Any, cmd: str, cases: list[str], calls: int, timeout_s: float, progress: Progress
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """A workload's baseline of an observed primary, run as a formal stage runs its subjects
    (R4, R11, R17): the original's read-only copies where readiness snapshotted it (each call
    under their guard), two workers of the original interleaved, every worker's call
    environment recorded (names, values' hashes), and the monitor a formal stage of the Target
    uses (``host`` for a CPU-time primary, else NVML where it runs, else ``host``) over every
    pair (the caller judges its windows, R17). Returns ``(rows, body, settings)``
    (:func:`measure_original`). Raises: BadRequest (a readiness that compares no outputs),
    RuleRefused (R11), MeasurementError."""
    primary = target.definition.primary
    accuracy = compared(target.readiness)
    if accuracy is None:
        raise BadRequest(
            "the baseline of an observed primary runs under the worker protocol, which judges "
            "every output, and the Target's readiness compares none; nothing was measured",
            hint='record readiness with "accuracy": {"compare": "exact"} (or "allclose") and a '
            "driver that declares {output}",
        )
    copies = original_copies(target, cmd, "baseline")
    monitor, _note = original_monitor(primary.name)
    with (
        held(monitor, copies),
        progress(len(cases) * 2 * max(1, -(-calls // 2)), "baseline calls") as advance,
    ):
        rows, body, settings = measure_original(
            cmd, cases=cases, calls=calls, metric=primary.name, unit=primary.unit,
            accuracy=accuracy, copies=copies, monitor=monitor, timeout_s=timeout_s,
            on_call=advance,
        )  # fmt: skip
    return rows, body, settings


def kernel_original_copies(target: Any, kernel_dir: str | None, role: str) -> SubjectCopies | None:
    """The original's two read-only copies for a kernel Target bound to code (R4, R11: the
    baseline's and the A/A's harness workers each run in one, never in ``kernel_dir`` itself);
    None under the old rule (no snapshot, ``kernel_dir`` None). The kernel workers neither read
    nor write bytecode (:class:`perfledger.kernels.isolation.isolated.WorkerProcess`) and do not
    run perfledger's bootstrap, so the copies' guard checks their files, not what they read.
    Raises: RuleRefused (R11: not the original's code), BadRequest."""
    if kernel_dir is None:
        return None
    command = shlex.join(substitute(target.readiness.driver.argv, kernel_dir))
    return original_copies(target, command, role)


def _check_form(
    target_id: str, kernel: bool, cmd: str | None, spec_path: str | None, kernel_dir: str | None
) -> None:
    """The options fit the Target's kind: a kernel's original is timed by the harness (--spec
    or --dir), a workload's is run as a command (--cmd). Raises: BadRequest, before anything
    runs."""
    if kernel and (cmd is not None or (spec_path is None and kernel_dir is None)):
        raise BadRequest(
            f"Target {target_id!r} is a kernel Target (its readiness driver is the kernel "
            "harness): its original is timed by the harness, not run as a command",
            hint=f"`perfledger measure baseline --target {target_id} --spec SPEC` (its "
            "REFERENCE is the original), or --dir DIR where readiness bound the original's "
            "directory",
        )
    if not kernel and (cmd is None or spec_path is not None or kernel_dir is not None):
        raise BadRequest(
            f"Target {target_id!r} is a workload Target: its original is run as a command",
            hint=f"`perfledger measure baseline --target {target_id} --cmd CMD` (the readiness "
            "driver with the original in its place)",
        )


def _measure_kernel(
    target: Any,
    spec_path: str | None,
    kernel_dir: str | None,
    cases: list[str],
    calls: int,
    progress: Progress,
    unit: str,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Time a kernel Target's original (the spec's REFERENCE, in two workers of its own, as
    the A/A does) ``calls`` times per case with the harness; every timed call is one value in
    the primary's ``unit``. Where readiness bound the original's directory, each worker runs in
    a read-only copy of its snapshot of its own (:func:`kernel_original_copies`), checked before
    every comparison and after the run (R11). Returns (the raw table, ``{"values", "cases",
    "call_ids"}``, the settings: the copies' digests). Raises: RuleRefused (R11: not the
    original's directory, a copy written), MeasurementError (an original that fails the
    harness's correctness checks has no baseline, R5)."""
    from perfledger.kernels.isolation.isolated import compare_spec  # noqa: PLC0415 (numpy via perfledger.kernels.isolation.isolated)

    bound = original_kernel_directory(target, spec_path, kernel_dir)
    spec = bound[0] if bound is not None else spec_path or ""
    copies = None if bound is None else kernel_original_copies(target, kernel_dir, "baseline")
    dirs = None if copies is None else (copies.copies["ref"].path, copies.copies["cand"].path)
    scale = time_scale(unit)
    rows: list[dict[str, Any]] = []
    values: list[float] = []
    of_case: list[str] = []
    call_ids: list[str] = []
    with (
        held(None, copies),
        progress(len(cases) * calls, "baseline comparisons") as advance,
    ):
        measured_ceilings = ceilings()
        for case in cases:
            for k in range(calls):
                if copies is not None:  # R11: both copies as made, before every comparison
                    copies.guard(None)
                c = compare_spec(spec, case, ceilings=measured_ceilings, monitor=None,
                                 roles=("reference", "reference"), directories=dirs)  # fmt: skip
                if c.ref is None or not c.ref_correctness.ok or c.ref.recheck_failures:
                    raise MeasurementError(
                        f"the original failed the harness's checks on case {case!r} ({c.flags}): "
                        "an original that fails has no baseline (R5); nothing was recorded",
                        hint="run `perfledger measure aa --spec SPEC` to see its flags "
                        "(docs/kernel-harness.md)",
                    )
                table = c.table()  # R4: the values are its rows', as the decider re-derives
                got = [row["ref_s"] * scale for row in table]
                values += got
                of_case += [case] * len(got)
                call_ids += [f"{case}-{k}-{i}" for i in range(len(got))]
                rows.append({"case": case, "flags": c.flags, "rows": table})
                advance()
        if copies is not None:
            copies.guard(None)  # and after the last comparison
    if kernel_dir is not None:  # R11: the code timed is the original's, still there
        check_original_subject(target, kernel_dir, "baseline")
    settings = {} if copies is None else {"settings": dict(copies.settings)}
    return rows, {"values": values, "cases": of_case, "call_ids": call_ids}, settings


def _measure(
    target: Any,
    cmd: str,
    cases: list[str],
    calls: int,
    timeout_s: float,
    progress: Progress,
    metric: str,
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """Call ``cmd`` ``calls`` times per case (the self-timed driver's calls, in a row); where
    readiness snapshotted the original, every call runs from its read-only copy under the
    copies' guard (R11: what a call reads from outside the copy refused, the copy and its
    private bytecode cache checked before every call and after the last), under the monitor a
    formal stage of the Target uses (R17, :func:`original_monitor`: NVML where it runs, else
    the host's counters), which adopts each call's process as perfledger's own while it runs
    and judges every call's window. Returns (the raw table, ``{"values", "cases",
    "call_ids"}``, the settings: the calls' full environment, names and values' hashes, the
    copies' digests, and ``monitor``: the windows, one per call, and the monitor's settings;
    the caller judges the windows). Raises: BadRequest for a command that cannot be parsed;
    RuleRefused (R11); MeasurementError for a failed call, a call whose accuracy check failed
    (R5) or one without ``metric``."""

    try:
        argv = shlex.split(cmd)
    except ValueError as exc:
        raise BadRequest(
            f"cannot parse the command: {exc}",
            hint="quote the command as shell words (balanced quotes)",
        ) from None
    # one process per call: each call's bootstrap must run (boot_per_call)
    copies = original_copies(target, cmd, "baseline", boot_per_call=True)
    copy = None if copies is None else copies.copies["ref"]
    subject = Subject("original", argv if copies is None else copies.argvs["ref"],
                      env={} if copy is None else copy.env)  # fmt: skip
    # R11: the calls' full environment (names, values' hashes), as the worker records it
    settings = {"protocol": "driver", "call_environment": {"original": call_environment(
        {**os.environ, **subject.env}, None if copy is None else copy.root)}}  # fmt: skip
    if copies is not None:
        settings.update(subject_copies={"original": copies.settings["subject_copies"]["ref"]})
    startup = StartupWatch([subject.argv])  # R11: its Python's start-up files unchanged
    monitor, _note = original_monitor(metric)  # R17: as the worker protocol's baseline
    with held(monitor, copies):
        rows, body = _calls(
            subject, cases, calls, timeout_s, progress, metric, startup, copies, monitor
        )
    windows = call_windows(rows, monitor)
    monitored = {"windows": windows, "settings": monitor.settings() if monitor else None}
    return rows, body, {"settings": settings, "monitor": monitored}


def call_windows(rows: list[dict[str, Any]], monitor: Any) -> list[dict[str, Any]]:
    """The monitor's verdict of every self-timed call's window (R17): ``rows`` the calls'
    raw table rows (``call_id``, ``start_s``, ``end_s``: monotonic seconds), each window as
    the raw tables record them (``call_ids`` and the verdict); none without a monitor. The
    monitor is stopped first, so that its last observation brackets the last window."""
    if monitor is None:
        return []
    monitor.stop()
    return [
        {"call_ids": [row["call_id"]], **monitor.verdict(row["start_s"], row["end_s"]).to_json()}
        for row in rows
    ]


def _calls(
    subject: Subject,
    cases: list[str],
    calls: int,
    timeout_s: float,
    progress: Progress,
    metric: str,
    startup: StartupWatch,
    copies: SubjectCopies | None,
    monitor: Any = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The calls of :func:`_measure`, each checked first (``startup``, ``copies``' guard),
    each call's process ``monitor``'s own while it runs (R17)."""
    # an {output} place gets a fresh private path per call, {seed} a fresh seed: as measure does
    declares = outputs.declares_output(subject.argv)
    seeded = declares or any(outputs.SEED_PLACEHOLDER in a for a in subject.argv)
    rows: list[dict[str, Any]] = []
    values: list[float] = []
    of_case: list[str] = []
    call_ids: list[str] = []
    with progress(len(cases) * calls, "baseline calls") as advance:
        for case in cases:
            for k in range(calls):
                startup.check()
                if copies is not None:
                    copies.guard("ref")
                place = outputs.OutputPlace() if declares else None
                try:
                    call = run_call(
                        subject, case=case, call_id=f"baseline-{case}-{k}", timeout_s=timeout_s,
                        output_path=None if place is None else place.path,
                        seed=outputs.new_seed() if seeded else None, **own_calls(monitor),
                    )  # fmt: skip
                finally:  # read and removed once the call's processes are gone
                    written = None if place is None else place.collect()
                advance()
                if written is not None and written.data is None:
                    raise MeasurementError(
                        f"the original wrote no readable output at its {{output}} place on case "
                        f"{case!r} ({call.call_id}): {written.error}; nothing was recorded",
                        hint="the command must write its output to the path it is given in "
                        "place of {output} (or $PERFLEDGER_OUTPUT)",
                    )
                rows.append(call.to_json())
                if not call.ok:
                    raise MeasurementError(
                        "a call of the original failed; nothing was recorded"
                        + failed_call_text(call),
                        hint="run the command by hand: it must print one JSON object with "
                        "`correct` and `metrics`",
                    )
                if not call.correct:
                    raise MeasurementError(
                        f"the original failed its own accuracy check on case {case!r} "
                        f"({call.call_id}); an original that fails has no baseline (R5); "
                        "nothing was recorded"
                    )
                got = call.metrics.get(metric)
                if not got:
                    raise MeasurementError(
                        f"the call {call.call_id} printed no {metric!r} metric (the Target's "
                        f"primary); it printed {sorted(call.metrics)}; nothing was recorded"
                    )
                values += got
                of_case += [case] * len(got)
                call_ids += [f"{call.call_id}-{i}" for i in range(len(got))]
    if copies is not None:
        copies.guard(None)  # the last call's report and both copies
    return rows, {"values": values, "cases": of_case, "call_ids": call_ids}


def medians(cases: list[str], values: list[float]) -> dict[str, float]:
    """The median of ``values`` per case (in first-seen case order)."""

    grouped: dict[str, list[float]] = {}
    for case, value in zip(cases, values, strict=True):
        grouped.setdefault(case, []).append(value)
    return {c: float(statistics.median(v)) for c, v in grouped.items()}


__all__ = [
    "BASELINE_ARTIFACT",
    "DEFAULT_CALLS",
    "MeasuredBaseline",
    "call_windows",
    "kernel_original_copies",
    "measure_baseline_of",
    "medians",
    "no_progress",
]
