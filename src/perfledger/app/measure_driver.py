"""``measure workload``'s, ``measure aa``'s and ``measure baseline``'s driver steps at the
application edge (SPEC.md section 5 "Workload driver"; R5, R11, R12, R17): running the two
subjects' commands in ABBA pairs (guarded between calls, each call's process adopted by the
monitor as perfledger's own), the monitor's windows of the pairs, the ``samples.record``
request built from the run, and what the measurement found suspicious, said when it
returns."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

import msgspec

from perfledger.app.output_check import judged_findings, recorded_output
from perfledger.commands.workflow.deciders import work_metrics
from perfledger.commands.workflow.samples_body import samples_body
from perfledger.derive.wall_check import unchecked_rates, unresolved_cases
from perfledger.errors import BadRequest
from perfledger.events.workflow import FORMAL_STAGES
from perfledger.kernels.workload.driver import Subject, run_pairs
from perfledger.kernels.workload.startup_surface import StartupWatch

if TYPE_CHECKING:  # measure_baseline runs the driver's calls with own_calls (no import cycle)
    from perfledger.app.measure_baseline import Progress


def _call_values(call: Any, units: dict[str, str]) -> dict[str, list[float]]:
    return {name: values for name, values in call.metrics.items() if name in units}


def workload_request(
    run: Any,
    info: dict[str, Any],
    *,
    samples_id: str,
    experiment_id: str,
    stage: str,
    environment_id: str,
    units: dict[str, str],
    monitor: Any,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Build the ``samples.record`` body of a driver run: one pair per usable ABBA pair (both
    calls well formed; a call's ``correct`` is kept as is, R5), with the monitor's verdict of the
    pair's window (R17; never an explanation: another actor's review explains). Returns
    ``(body, windows)``."""
    pairs = []
    windows = []
    primary = info["primary"].name
    for p in run.pairs:
        if not p.usable or primary not in p.ref.metrics or primary not in p.cand.metrics:
            continue
        verdict = monitor.verdict(p.start_s, p.end_s) if monitor is not None else None
        if verdict is not None:
            windows.append({"call_ids": [p.ref.call_id, p.cand.call_id], **verdict.to_json()})
        pair: dict[str, Any] = {
            "case": p.case,
            "ref": {
                "call_id": p.ref.call_id,
                "correct": p.ref.correct,
                "values": _call_values(p.ref, units),
                "environment_id": environment_id,
                "wall_s": p.ref.wall_s,
                **_judged(p.ref),
            },
            "cand": {
                "call_id": p.cand.call_id,
                "correct": p.cand.correct,
                "values": _call_values(p.cand, units),
                "environment_id": environment_id,
                "wall_s": p.cand.wall_s,
                **_judged(p.cand),
            },
            "same_process": False,
        }
        if verdict is not None:
            pair["monitor"] = verdict.to_request()
        pairs.append(pair)
    body = samples_body(
        info, samples_id=samples_id, experiment_id=experiment_id, stage=stage,
        environment_id=environment_id, units=units, pairs=pairs,
    )  # fmt: skip
    return body, windows


def _judged(call: Any) -> dict[str, Any]:
    """``{"output": ...}`` where the driver judged the call's output (R5), else ``{}``."""

    output = recorded_output(call)
    return {} if output is None else {"output": output}


def run_driver(
    ref_cmd: str,
    cand_cmd: str,
    cases: list[str],
    pairs: int,
    warmup: int,
    timeout_s: float,
    progress: Progress,
    accuracy: dict[str, Any] | None = None,
    before_call: Any = None,
    copies: Any = None,
    more_pairs: Any = None,
    monitor: Any = None,
) -> Any:
    """Run the driver on the two commands (``progress``: shown per call, as
    :data:`perfledger.app.measure_baseline.Progress`); with ``copies`` (:func:`subject_copies`, a snapshot
    Target), each subject runs from its read-only copy instead, guarded before every call and
    after the run (R11, :class:`perfledger.kernels.workload.subject_copy.CopyGuard`);
    ``more_pairs``: a stopping rule (``run_pairs``'s); ``monitor``: the run's started monitor,
    which adopts each call's process as perfledger's own while it runs (its ``adopt``, and its
    ``disown`` once the call is reaped where it has one, R17), as the worker protocol's
    workers are."""

    try:
        if copies is None:
            ref = Subject("ref", shlex.split(ref_cmd))
            cand = Subject("cand", shlex.split(cand_cmd))
        else:
            ref = Subject("ref", copies.argvs["ref"], env=copies.copies["ref"].env)
            cand = Subject("cand", copies.argvs["cand"], env=copies.copies["cand"].env)
    except ValueError as exc:
        raise BadRequest(
            f"cannot parse the command: {exc}",
            hint="quote the command as shell words (balanced quotes)",
        ) from None
    # R11: start-up files of the subjects' Python (.pth, sitecustomize) unchanged before each call
    startup = StartupWatch([ref.argv, cand.argv])

    def checks(label: str) -> None:
        startup.check()
        if before_call is not None:
            before_call(label)
        if copies is not None:
            copies.guard(label)

    total = len(cases) * (2 * pairs + 2 * warmup)
    with progress(total, "driver calls") as advance:
        run = run_pairs(
            ref,
            cand,
            cases=cases,
            pairs_per_case=pairs,
            warmup_calls=warmup,
            timeout_s=timeout_s,
            on_call=lambda _call: advance(),
            accuracy=accuracy,
            before_call=checks,
            subject_roots=None if copies is None else copies.roots,
            extra_settings=None if copies is None else copies.settings,
            more_pairs=more_pairs,
            **own_calls(monitor),
        )
    if copies is not None:
        copies.guard(None)  # the last call's report and both copies, after the run
    return run


def own_calls(monitor: Any) -> dict[str, Any]:
    """The driver's ``on_spawn`` and ``on_reaped`` for ``monitor`` (None: neither): every
    call's process adopted as perfledger's own while it runs (``adopt``), and, where the
    monitor counts live process trees (the host monitor's ``disown``), no longer once reaped,
    its time then in this process's counters (R17). The NVML monitor keeps every pid it
    adopted: a window's verdict is judged after the run from the pids it listed."""
    return {
        "on_spawn": getattr(monitor, "adopt", None),
        "on_reaped": getattr(monitor, "disown", None),
    }


def driver_windows(run: Any, monitor: Any) -> list[dict[str, Any]]:
    """The monitor's verdict of every pair's window of the driver's ``run`` (R17: a
    :class:`~perfledger.kernels.workload.driver.DriverRun`), as the raw tables record them
    (``call_ids`` and the verdict), as
    :func:`perfledger.app.measure_workload.monitor_windows` does for the worker protocol's;
    none without a monitor. The monitor is stopped first, so that its last observation
    brackets the last window."""
    if monitor is None:
        return []
    monitor.stop()
    return [
        {
            "call_ids": [p.ref.call_id, p.cand.call_id],
            **monitor.verdict(p.start_s, p.end_s).to_json(),
        }
        for p in run.pairs
    ]


def measurement_findings(
    body: dict[str, Any],
    stage: str,
    run: Any = None,
    wall_check: Any = None,
    target: Any = None,
) -> dict[str, Any]:
    """What the measurement found suspicious, for people and agents, when ``measure`` returns
    (SPEC.md section 5): the wall-clock check of self-reported times as ``samples.record``
    derived it (``wall_check``: the decided payload's
    :class:`~perfledger.events.workflow.WallCheck`, None where no driver timed the calls;
    computed once, by the decider, :mod:`perfledger.derive.wall_check`), the
    candidate's failed accuracy checks (R5), who judged correctness (perfledger comparing
    outputs, or the subject alone) and, given the driver ``run``, the calls that left
    processes behind (ended with the call); given the ``target``, the rates no work metric
    turns into time (not checked against the wall clock). Returns: ``{"wall_check", "candidate_failed_calls",
    "accuracy_judged", "left_processes": {call_id: n}, "findings": [lines]}``; a line starts
    with ``FLAG`` when it blocks a pass or a champion, ``note`` otherwise."""

    check = wall_check
    lines: list[str] = []
    formal = stage in FORMAL_STAGES
    if check is not None:
        if check.flagged:
            blocks = (
                "this stage cannot pass nor support a champion (R12, R13)"
                if formal
                else (
                    "in a target or final-audit stage, flagged samples cannot pass nor support a champion (R12, R13)"
                )
            )
            lines.append(
                f"FLAG wall clock: self-reported times not borne out by the driver's wall time; {blocks}"
            )
            lines += [f"  {reason}" for reason in check.reasons]
        for c in unresolved_cases(check):
            lines.append(
                f"note wall clock: case {c.case!r}, {c.metric}: the reported saving "
                f"{1e3 * c.reported_saving_s:.3g} ms per call is below what the wall clock resolves "
                f"({1e3 * c.resolution_s:.3g} ms): not verifiable at this resolution"
            )
        if not check.flagged:
            checked = sum(1 for c in check.cases if c.status == "consistent")
            lines.append(f"wall clock: {checked} case(s) consistent, none flagged")
        if target is not None:
            for name in unchecked_rates(body["units"], work_metrics(target.definition)):
                lines.append(
                    f"note wall clock: {name} is a rate ({body['units'][name]}) and the Target "
                    "names no work_metric for it: not checked against the driver's wall clock "
                    "(docs/measurement.md)"
                )
    failed = [p["cand"]["call_id"] for p in body["pairs"] if not p["cand"]["correct"]]
    if failed:
        shown = ", ".join(failed[:8]) + (" ..." if len(failed) > 8 else "")
        what = (
            "cannot support a champion (R5, R13)"
            if formal
            else "has no performance meaning on those calls (R5)"
        )
        lines.append(
            f"{'FLAG' if formal else 'note'} accuracy: the candidate failed its check on {len(failed)} call(s) ({shown}); it {what}"
        )

    judged, judged_lines = judged_findings(body)  # R5: who judged correctness
    lines += judged_lines
    left: dict[str, int] = {}
    if run is not None:
        calls = [*run.warmup, *(c for p in run.pairs for c in (p.ref, p.cand))]
        left = {c.call_id: c.ended_descendants for c in calls if c.ended_descendants}
    if left:
        shown = ", ".join(f"{k} ({n})" for k, n in list(left.items())[:8])
        lines.append(
            f"note processes: {len(left)} call(s) left processes behind, ended with the call so "
            f"they could not run during the other subject's call: {shown}"
        )
    return {
        "wall_check": None if check is None else msgspec.to_builtins(check),
        "candidate_failed_calls": failed,
        "accuracy_judged": judged,
        "left_processes": left,
        "findings": lines,
    }


__all__ = [
    "driver_windows",
    "measurement_findings",
    "own_calls",
    "run_driver",
    "workload_request",
]
