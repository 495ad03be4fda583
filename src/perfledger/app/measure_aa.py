"""Measure a Target's A/A resolution: the original against itself under the protocol its
comparisons use, on every case (SPEC.md section 5; R4, R5, R11, R12).

:func:`measure_aa` is the use case behind ``perfledger measure aa``: a workload's original
command (``cmd``: under the worker protocol where the Target's primary is observed, else the
self-timed driver, with R4's stopping rule unless ``runs`` is given), or a kernel spec's
REFERENCE in two workers of its own (``spec``, or ``directory`` where readiness bound the
original's code). Every case gets its own resolution; the Target's is the noise of the
aggregate a verdict derives (workload) or the largest case's (kernel). With ``record`` the
resolution is appended (``resolution.record``, its raw table attached as ``resolution.json``)
unless R4 refuses it (:func:`perfledger.app.aa.resolution_refusal`).

Where readiness snapshotted the original, the A/A runs it as a formal stage runs its subjects
(R11): code that is not the original's is refused before anything runs, and each worker (each
call, under the self-timed driver; each harness worker, for a kernel) runs from a read-only
copy of the snapshot of its own, with its own bytecode cache, under the copies' guard; the
settings record the copies' digests and every worker's call environment. A workload A/A under
the worker protocol runs under the monitor a formal stage uses, and with ``record`` too much
foreign activity in its windows refuses it (R17,
:func:`perfledger.app.measure_workload.foreign_windows_refusal`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from perfledger.app.aa import kernel_aa_pairs_check, resolution_refusal, resolution_warnings
from perfledger.app.context import check_cases, environment_payload, start_monitor
from perfledger.app.identity import (
    check_original_command,
    check_original_subject,
    original_copies,
)
from perfledger.app.kernel_identity import original_kernel_directory
from perfledger.app.measure_baseline import (
    Progress,
    kernel_original_copies,
    no_progress,
)
from perfledger.app.measure_driver import driver_windows, run_driver
from perfledger.app.measure_workload import (
    AA_START_PAIRS,
    aa_more_driver_pairs,
    aa_stopping_rule,
    foreign_windows_refusal,
    held,
    monitor_windows,
    observed_aa,
    original_monitor,
    trivial_output_refusal,
)
from perfledger.app.measuring import ceilings
from perfledger.app.output_check import accuracy_for
from perfledger.app.recording import Warn, append_measured, no_warnings
from perfledger.commands.workflow.aa_table import aa_binding
from perfledger.errors import BadRequest, MeasurementError
from perfledger.events.workflow import OBSERVED_METRICS
from perfledger.projections.verdict_cases import aa_resolution
from perfledger.projections.verdicts import Pair

#: The raw table's artifact name on ``resolution.record``.
RESOLUTION_ARTIFACT = "resolution.json"


class MeasureAA(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A request to measure (and with ``record``, record) a Target's A/A resolution (R4).

    Attributes:
        target_id: the Target.
        cmd: a workload Target: the original's command line (the readiness driver with the
            original's directory in its ``{subject}`` place).
        spec: a kernel Target: a spec whose REFERENCE is run.
        directory: a kernel Target bound to code: the original's code directory (R11).
        cases: the cases (empty: the readiness's test set; a spec's: all its problems).
        runs: workload: A/A pairs per case (None: R4's stopping rule); kernel: A/A comparisons
            per case (None: 5).
        timeout_s: the most one call may take, seconds.
        record: append ``resolution.record`` with the result.
        accept_resolution: record a resolution at or above the minimum effect (else refused).
        actor: who records (required with ``record``).
        idempotency_key: a retry-safe key for the append.
    Exactly one of ``cmd``, ``spec`` and ``directory`` is given.
    """

    target_id: str
    cmd: str | None = None
    spec: str | None = None
    directory: str | None = None
    cases: tuple[str, ...] = ()
    runs: Annotated[int, msgspec.Meta(ge=2, le=100_000)] | None = None
    timeout_s: Annotated[float, msgspec.Meta(gt=0, le=86_400)] = 600.0
    record: bool = False
    accept_resolution: bool = False
    actor: str | None = None
    idempotency_key: str | None = None


class MeasuredAA(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`measure_aa` measured (and recorded).

    Attributes:
        resolution: the Target's resolution, a ratio distance from 1.
        per_case: case -> that case's resolution.
        repeats: valid A/A pairs (workload) or comparisons (kernel) it rests on.
        notes: how it was measured (the recorded ``notes``).
        recorded: whether ``resolution.record`` was appended (``event_id``, ``kind``).
        warnings: what the caller should say (R4, R5, R12).
        aggregation: the aggregation across cases a verdict derives (None: a kernel spec's,
            the largest case's).
        workload: a workload A/A (pairs), else a kernel spec's (comparisons).
    """

    resolution: float
    per_case: dict[str, float]
    repeats: int
    notes: str
    recorded: bool = False
    warnings: list[str] = []
    event_id: str | None = None
    kind: str | None = None
    aggregation: str | None = None
    workload: bool = True

    def answer(self) -> dict[str, Any]:
        """The ``--json`` answer of ``perfledger measure aa``."""
        out: dict[str, Any] = {
            "resolution": self.resolution, "per_case": self.per_case, "repeats": self.repeats,
            "notes": self.notes, "recorded": self.recorded, "warnings": self.warnings,
        }  # fmt: skip
        if self.recorded:
            out.update(event_id=self.event_id, kind=self.kind)
        return out


def measure_aa(
    ledger: Any, request: MeasureAA, *, progress: Progress = no_progress, warn: Warn = no_warnings
) -> MeasuredAA:
    """Measure the A/A resolution of ``request.target_id`` on the open ``ledger`` (module
    docstring), and with ``request.record`` append it.

    Args:
        ledger: the open ledger.
        request: the :class:`MeasureAA`.
        progress: ``(total, label) -> context manager yielding advance()`` (progress shown).
        warn: handed the warnings before anything is appended.
    Returns: the :class:`MeasuredAA`.
    Raises: BadRequest (exit 2: options that do not fit, unknown Target or cases);
        RuleRefused (exit 3: R4's refusal of the resolution, R11: not the original's code);
        MeasurementError (exit 1: too few valid pairs, nothing derived).
    """
    cmd, spec_path, kernel_dir = request.cmd, request.spec, request.directory
    runs, cases = request.runs, request.cases
    if [cmd, spec_path, kernel_dir].count(None) != 2:
        raise BadRequest(
            "pass exactly one of --cmd (a workload), --spec (a kernel spec) or --dir (the "
            "original's code directory of a kernel Target bound to code)",
            hint="`perfledger measure aa --help`; `perfledger status` names the form of this Target's kind",
        )
    if request.record and not request.actor:
        raise BadRequest("recording needs an actor", hint="name who records (--actor)")
    state = ledger.state()
    target = state.targets.get(request.target_id)
    if target is None:
        raise BadRequest(
            f"no Target {request.target_id!r}", hint="`perfledger status` lists the Targets"
        )
    test_set = target.readiness.test_set if target.readiness else None
    artifact: dict[str, Any] = {"kind": "aa", "environment": environment_payload()}
    if target.readiness is not None:  # R4: the table names the Target whose original it measured
        artifact["binding"] = aa_binding(request.target_id, target.readiness.original.content_hash)
    aggregation: str | None = None
    if cmd is not None:
        check_original_command(target, cmd)  # R11: the A/A runs the original's code
        accuracy = accuracy_for(target, {"--cmd": cmd})
        chosen = list(cases) or list(test_set.cases if test_set is not None else [])
        if not chosen:
            raise BadRequest(
                "no test cases: pass --case or name them in the readiness's test set",
                hint="pass --case NAME, or record readiness whose test_set names its cases",
            )
        check_cases(chosen, test_set, "--case")
        resolution, per_case, repeats, method_note, aa_notes, aggregation = _workload_aa(
            target, request, chosen, accuracy, artifact, progress
        )
    else:
        resolution, per_case, repeats, method_note, aa_notes = _kernel_aa(
            target, request, test_set, artifact, progress
        )
    body = {
        "target_id": request.target_id,
        "method": "aa_comparison",
        "resolution": resolution,
        "repeats": repeats,
        "notes": method_note,
        "per_case": per_case,
        "raw_table": RESOLUTION_ARTIFACT,  # R4: re-derived from the table, so it decides
    }
    if request.record:
        ran = runs
        if cmd is not None and runs is None:  # the stopping rule's pairs, as many as ran
            ran = int(artifact.get("settings", {}).get("pairs_per_case") or 0) or None
        resolution_refusal(
            resolution, per_case, target, request.accept_resolution, runs=ran,
            workload=cmd is not None,
        )  # fmt: skip
    warnings = resolution_warnings(resolution, target, request.record) + aa_notes
    warn(warnings)
    figures = {
        "resolution": resolution, "per_case": per_case, "repeats": repeats, "notes": method_note,
        "warnings": warnings, "aggregation": aggregation, "workload": cmd is not None,
    }  # fmt: skip
    if not request.record:
        return MeasuredAA(**figures)
    event = append_measured(
        ledger, "resolution.record", body, RESOLUTION_ARTIFACT, artifact, actor=request.actor or "",
        idempotency_key=request.idempotency_key,
    )  # fmt: skip
    return MeasuredAA(**figures, recorded=True, event_id=event.id, kind=event.kind)


def _workload_aa(
    target: Any,
    request: MeasureAA,
    chosen: list[str],
    accuracy: dict[str, Any] | None,
    artifact: dict[str, Any],
    progress: Progress,
) -> tuple[float, dict[str, float], int, str, list[str], str]:
    """A workload's A/A: ``(resolution, per_case, repeats, notes, warnings, aggregation)``;
    ``artifact`` gets the table and settings."""
    cmd, runs = request.cmd or "", request.runs
    primary = target.definition.primary
    if primary.name in OBSERVED_METRICS:  # perfledger's own figures, the worker protocol
        # R11: both workers run from the original's read-only copies, one each (its own
        # bytecode cache), under the copies' guard, as a formal stage runs its subjects; R17:
        # under the monitor a formal stage of the Target uses
        copies = original_copies(target, cmd, "A/A")
        monitor, monitor_note = original_monitor(primary.name)
        with (
            held(monitor, copies),
            progress(2 * len(chosen) * (runs or 10), "A/A calls") as advance,
        ):
            valid, aa_notes, run = observed_aa(  # no runs: its stopping rule (R4)
                cmd, target=target, cases=chosen, runs=runs, timeout_s=request.timeout_s,
                on_call=lambda _row: advance(), copies=copies, monitor=monitor,
            )  # fmt: skip
        windows = monitor_windows(run, monitor)
    else:
        # R11: the self-timed driver runs each call from one of the original's read-only
        # copies as a self-timed stage does (a process per call: each call's bootstrap runs);
        # R17: under the monitor the worker protocol's A/A runs under, each call's process
        # adopted as perfledger's own while it runs
        copies = original_copies(target, cmd, "A/A", boot_per_call=True)
        monitor, monitor_note = original_monitor(primary.name)
        with held(monitor, copies):
            run = run_driver(
                cmd, cmd, chosen, runs or AA_START_PAIRS, 1, request.timeout_s, progress,
                accuracy, copies=copies,
                more_pairs=None if runs else aa_more_driver_pairs(target, chosen),
                monitor=monitor,
            )  # fmt: skip
        windows = driver_windows(run, monitor)
        if runs is None:  # what ran: the rule, and the pairs it took (R4)
            run.settings["stopping_rule"] = aa_stopping_rule(target, run.settings["pairs_per_case"])
        valid = [
            Pair(p.case, tuple(p.ref.metrics[primary.name]), tuple(p.cand.metrics[primary.name]))
            for p in run.pairs
            if p.usable
            and p.ref.correct
            and p.cand.correct
            and p.ref.metrics.get(primary.name)
            and p.cand.metrics.get(primary.name)
        ]
        # R5: the original against itself on the same seed must give matching outputs
        unequal = [p.cand for p in run.pairs if p.cand.output and not p.cand.output["ok"]]
        aa_notes = (
            [
                f"{len(unequal)} A/A pair(s): the original's outputs of the same case and seed "
                f"differ ({unequal[0].call_id}: {unequal[0].output['reason']}); its accuracy "
                "rule is too strict for a workload that is not deterministic (allclose with a "
                "tolerance), or it does not draw its inputs from {seed} alone"
            ]
            if unequal
            else []
        )
    artifact["monitor"] = {
        "windows": windows, "settings": monitor.settings() if monitor else None,
        "note": monitor_note,
    }  # fmt: skip
    # R17, under either protocol: its medians would be the reference watch's yardstick
    refusal = foreign_windows_refusal(windows, "A/A")
    if refusal is not None:
        if request.record:
            raise refusal
        aa_notes = [*aa_notes, f"{refusal.message} (it would be refused with --record)"]
    # R5: an accuracy rule that accepts outputs doing no work would judge every formal stage
    refusal = trivial_output_refusal(run.settings, "an A/A")
    if refusal is not None:
        if request.record:
            raise refusal
        aa_notes = [*aa_notes, f"{refusal.message} (it would be refused with --record)"]
    counts = {c: sum(1 for p in valid if p.case == c) for c in chosen}
    short = {c: n for c, n in counts.items() if n < 2}
    if short:
        raise MeasurementError(
            f"A/A needs at least 2 valid pairs in every case, got {short}",
            hint=" ".join(aa_notes)
            or f"failed calls: {[(c.call_id, c.reason) for c in run.failed_calls][:5]}",
        )
    # R4: every case gets its own resolution, and the Target's is the noise of the
    # aggregate a verdict derives (its statistic and aggregation, R12)
    stats = target.readiness.statistics if target.readiness is not None else None
    aggregation = stats.aggregation if stats is not None else "geomean"
    try:
        resolution, per_case = aa_resolution(
            valid,
            direction=primary.direction,
            statistic=primary.statistic,
            aggregation=aggregation,
            **(
                {"resamples": stats.resamples, "confidence": stats.confidence}
                if stats is not None
                else {}
            ),
        )
    except ValueError as exc:
        raise MeasurementError(f"the A/A cannot be derived: {exc}") from None
    repeats = len(valid)
    artifact.update(table=run.table(), settings=run.settings)
    rule = run.settings.get("stopping_rule")
    method_note = (
        f"workload A/A: {repeats} ABBA pairs of `{cmd}` over {len(chosen)} case(s), "
        f"{primary.statistic} per case, {aggregation} across cases"
        + (
            f"; stopping rule: {rule['start_pairs']} pairs per case, more until the "
            f"resolution was at most {rule['until_resolution_at_most']:.4g} (half the "
            f"minimum effect) or {rule['max_pairs']} pairs: {rule['pairs_per_case']} ran"
            if rule
            else ""
        )
    )
    return resolution, per_case, repeats, method_note, aa_notes, aggregation


def _kernel_aa(
    target: Any,
    request: MeasureAA,
    test_set: Any,
    artifact: dict[str, Any],
    progress: Progress,
) -> tuple[float, dict[str, float], int, str, list[str]]:
    """A kernel spec's A/A (the same protocol as ``measure kernel``, R4): ``(resolution,
    per_case, repeats, notes, warnings)``; ``artifact`` gets the comparisons per case (and,
    where readiness bound the original's directory, the copies' digests)."""
    spec_path, kernel_dir = request.spec, request.directory
    # R11: on a bound Target the A/A runs the original's directory (its snapshot checked)
    bound = original_kernel_directory(target, spec_path, kernel_dir)
    aa_spec = bound[0] if bound is not None else spec_path or ""
    # R11: each worker in a read-only copy of the original's snapshot of its own
    copies = None if bound is None else kernel_original_copies(target, kernel_dir, "A/A")
    with held(None, copies):
        return _kernel_aa_run(target, request, test_set, artifact, progress, aa_spec, copies)


def _kernel_aa_run(
    target: Any,
    request: MeasureAA,
    test_set: Any,
    artifact: dict[str, Any],
    progress: Progress,
    aa_spec: str,
    copies: Any,
) -> tuple[float, dict[str, float], int, str, list[str]]:
    """:func:`_kernel_aa` once the original's copies (None: the old rule) are made."""
    from perfledger.kernels.harness.harness import resolution_from_aa  # noqa: PLC0415 (numpy via perfledger.kernels.harness.harness)
    from perfledger.kernels.isolation.isolated import compare_spec, spec_facts  # noqa: PLC0415 (numpy via perfledger.kernels.isolation.isolated)

    spec_path, kernel_dir, cases = request.spec, request.directory, request.cases
    aa_dirs = None if copies is None else (copies.copies["ref"].path, copies.copies["cand"].path)
    # the same protocol as `measure kernel` (R4): the reference in two workers of its own
    facts = spec_facts(aa_spec, directory=None if aa_dirs is None else aa_dirs[0])
    problems = list(facts["cases"])
    if cases:
        unknown = sorted(set(cases) - set(problems), key=str)
        if unknown:
            raise BadRequest(
                f"--case {unknown} not in the spec's problems {problems}",
                hint="name cases among the spec's problems, or leave --case out for all of them",
            )
        problems = list(cases)
    check_cases(problems, test_set, f"the spec {spec_path!r}")
    monitor, _note = start_monitor(True)
    # R4: the A/A covers every case of the spec, each with its own resolution
    comps_by_case: dict[str, list[Any]] = {}
    with held(monitor, None):
        n = request.runs or 5
        with progress(n * len(problems), "A/A comparisons") as advance:
            measured_ceilings = ceilings()
            for case in problems:
                comps_by_case[case] = []
                for _ in range(n):
                    if copies is not None:  # R11: both copies as made, before every one
                        copies.guard(None)
                    comps_by_case[case].append(
                        compare_spec(
                            aa_spec,
                            case,
                            ceilings=measured_ceilings,
                            monitor=monitor,
                            roles=("reference", "reference"),
                            directories=aa_dirs,
                        )
                    )
                    advance()
    if copies is not None:
        copies.guard(None)  # and after the last
        artifact["settings"] = dict(copies.settings)
    if kernel_dir is not None:  # R11: the A/A measured the original's code, still there
        check_original_subject(target, kernel_dir, "A/A")
    try:  # R4: invalid A/A comparisons are left out, and said so
        figures_by_case = {c: resolution_from_aa(v) for c, v in comps_by_case.items()}
    except ValueError as exc:
        raise MeasurementError(
            f"the A/A measured no resolution: {exc}",
            hint="measure again on an idle GPU; the flags say what went wrong "
            "(docs/kernel-harness.md)",
        ) from None
    aa_notes = [
        f"case {c}: {int(f['excluded'])} of {int(f['excluded'] + f['repeats'])} A/A "
        "comparisons were invalid and left out (their flags are in the artifact)"
        for c, f in figures_by_case.items()
        if f["excluded"]
    ]
    aa_notes += kernel_aa_pairs_check(figures_by_case, request.record)
    per_case = {c: f["resolution"] for c, f in figures_by_case.items()}
    resolution = max(per_case.values())
    repeats = sum(int(f["repeats"]) for f in figures_by_case.values())
    artifact.update(
        cases={
            case: {
                "comparisons": [
                    {
                        "valid": c.valid,
                        "stats": c.stats.to_json() if c.stats else None,
                        "flags": c.flags,
                        "rows": c.table(),
                    }
                    for c in comps
                ],
                "figures": figures_by_case[case],
            }
            for case, comps in comps_by_case.items()
        },
    )
    spreads = ", ".join(
        f"{c} {f['spread']:.5f} (CI reach {f['reach']:.5f}, next-pair bound {f['bound']:.5f})"
        for c, f in figures_by_case.items()
    )
    method_note = (
        f"kernel A/A: {repeats} harness comparisons (a fresh pair of workers each) over "
        f"{len(problems)} case(s); resolution = max(CI reach, 95 % prediction bound of the "
        f"next pair's ratio); spread {spreads}"
    )
    return resolution, per_case, repeats, method_note, aa_notes


__all__ = ["RESOLUTION_ARTIFACT", "MeasureAA", "MeasuredAA", "measure_aa"]
