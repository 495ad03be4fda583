"""The measure commands' options and their use cases' requests (SPEC.md section 5): the options
of ``perfledger measure workload|kernel|aa|serving|baseline``, declared once
(:func:`measure_params`: the CLI's commands are built from them), and one mapping from their
names to the request each use case takes (``*_request_of``), shared by the CLI and the MCP
server's ``cli ["measure", ...]``, which reads a command's words into its request here
(:func:`measure_request`), checked as the CLI checks them.

``options`` is click's dict of a command's parameters; ``actor`` names who records from the
``--actor`` given (the CLI's :func:`perfledger.app.actors.resolve_actor` on its ledger), asked
only where the request records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click
import msgspec

from perfledger.app.baseline import MeasureBaseline
from perfledger.app.command_lines import refuse_explain_foreign
from perfledger.app.measure_aa import MeasureAA
from perfledger.app.measure_baseline import DEFAULT_CALLS
from perfledger.app.measure_kernel import MeasureKernel
from perfledger.app.measure_self import MeasureWorkloadStage
from perfledger.app.measure_serving_load import MeasureServing
from perfledger.app.options import (
    actor_option,
    call_timeout_option,
    cases_option,
    idempotency_option,
    json_option,
    measure_dry_run_option,
    measured_target_option,
    params_of,
    parse_options,
    quiet_option,
    removed_explain_foreign_option,
)
from perfledger.errors import BadRequest

#: ``--actor``'s value -> who records. Raises: BadRequest for an empty one or no one known.
ActorOf = Callable[[str | None], str]


def units_of(pairs: Sequence[str]) -> dict[str, str]:
    """``--unit NAME=UNIT`` items as ``{name: unit}``. Raises: BadRequest for an item that is
    not NAME=UNIT."""
    out = {}
    for item in pairs:
        name, sep, unit = item.partition("=")
        if not sep or not name or not unit:
            raise BadRequest(f"--unit {item!r}: expected NAME=UNIT", hint="e.g. --unit time_ms=ms")
        out[name] = unit
    return out


def workload_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureWorkloadStage:
    """``measure workload``'s options as :class:`MeasureWorkloadStage` (R5, R11, R17).
    Raises: BadRequest for ``--explain-foreign`` (R17), a bad ``--unit`` or actor."""
    refuse_explain_foreign(kw.get("explain_foreign"))
    return MeasureWorkloadStage(
        experiment_id=kw["experiment_id"], stage=kw["stage"], ref=kw["ref_cmd"],
        cand=kw["cand_cmd"], protocol=kw["protocol"], cases=kw["cases"], pairs=kw["pairs"],
        warmup=kw["warmup"], timeout_s=kw["timeout_s"], units=units_of(kw["unit_flags"]),
        fresh_worker=kw["fresh_worker"],
        monitor="none" if kw["no_monitor"] else kw["monitor_source"],
        samples_id=kw["samples_id"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def kernel_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureKernel:
    """``measure kernel``'s options as :class:`MeasureKernel` (R5, R11). Raises: BadRequest
    for a bad actor."""
    return MeasureKernel(
        experiment_id=kw["experiment_id"], stage=kw["stage"], spec=kw["spec_path"],
        ref_dir=kw["ref_dir"], cand_dir=kw["cand_dir"], samples_id=kw["samples_id"],
        monitor=not kw["no_monitor"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def aa_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureAA:
    """``measure aa``'s options as :class:`MeasureAA` (R4; the actor asked only with
    ``--record``). Raises: BadRequest for a bad actor."""
    return MeasureAA(
        target_id=kw["target_id"], cmd=kw["cmd"], spec=kw["spec_path"],
        directory=kw["kernel_dir"], cases=kw["cases"], runs=kw["runs"],
        timeout_s=kw["timeout_s"], record=kw["record"],
        accept_resolution=kw["accept_resolution"],
        actor=actor(kw["actor"]) if kw["record"] else None,
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def baseline_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureBaseline:
    """``measure baseline``'s options as :class:`MeasureBaseline` (R4). Raises: BadRequest for
    a bad actor."""
    return MeasureBaseline(
        target_id=kw["target_id"], cmd=kw["cmd"], spec=kw["spec_path"],
        directory=kw["kernel_dir"], cases=kw["cases"], calls=kw["calls"],
        timeout_s=kw["timeout_s"], dry_run=kw["dry_run"], actor=actor(kw["actor"]),
        idempotency_key=kw["idempotency_key"],
    )  # fmt: skip


def serving_request_of(kw: dict[str, Any], actor: ActorOf) -> MeasureServing:
    """``measure serving``'s options as :class:`MeasureServing` (R5, R12, R17; the actor asked
    only where it records: ``--experiment`` or ``--evidence``). Raises: BadRequest for
    ``--explain-foreign`` (R17), a bad actor or option."""
    options = dict(kw)
    refuse_explain_foreign(options.pop("explain_foreign", None))
    for adapter_only in ("json_flag", "quiet"):
        options.pop(adapter_only, None)
    if options.pop("no_monitor"):
        options["monitor_source"] = "none"
    options["monitor"] = options.pop("monitor_source")
    options["metrics"] = options.pop("metric_flags")
    if options["experiment_id"] is not None or options["evidence_id"] is not None:  # it records
        options["actor"] = actor(options["actor"])
    return msgspec.convert(options, MeasureServing)


#: The options of ``measure workload`` and ``measure kernel`` that compare a reference and a
#: candidate for an experiment's stage.
_STAGE_OPTIONS = (
    click.option("--experiment", "experiment_id", required=True, help="The experiment id."),
    click.option(
        "--stage",
        type=click.Choice(["screen", "target", "final_audit"]),
        required=True,
        help="The stage these samples are for (R11).",
    ),
    click.option("--samples", "samples_id", default=None, help="Samples id (default: E-STAGE-N)."),
    click.option("--no-monitor", is_flag=True, help="Run without the NVML monitor (screens only)."),
    measure_dry_run_option,
    actor_option,
    idempotency_option,
    quiet_option,
    json_option,
)


def _workload() -> list[click.Parameter]:
    return params_of(
        *_STAGE_OPTIONS,
        click.option(
            "--ref",
            "ref_cmd",
            required=True,
            help="The reference's command line as typed: the "
            "readiness driver with {subject} written as the reference's code directory, e.g. "
            "'python3 work/original/bench.py {case} {output}' (perfledger fills {case} and "
            "{output}).",
        ),
        click.option(
            "--cand",
            "cand_cmd",
            required=True,
            help="The candidate's command line as typed: "
            "the readiness driver with {subject} written as the candidate's code directory, "
            "e.g. 'python3 work/candidate/bench.py {case} {output}'.",
        ),
        cases_option,
        click.option("--pairs", type=click.IntRange(min=1), default=None, help="Pairs per case."),
        click.option(
            "--warmup", type=click.IntRange(min=0), default=1, help="Warm-up calls per case."
        ),
        call_timeout_option,
        click.option(
            "--unit", "unit_flags", multiple=True, help="NAME=UNIT of a metric not in the Target."
        ),
        click.option(
            "--monitor",
            "monitor_source",
            type=click.Choice(["gpu", "host"]),
            default="gpu",
            help="What the monitor watches (R17): the GPU through NVML, or the host's CPU counters "
            "(a CPU workload).",
        ),
        removed_explain_foreign_option,
        click.option(
            "--protocol",
            type=click.Choice(["worker", "command", "self"]),
            default=None,
            help="worker (default): perfledger times every call and judges every output (the subject "
            "speaks the worker protocol); command: one process per call, timed from spawn to exit; "
            "self: the self-timed driver, whose figures the subject reports: recorded as reported, they "
            "make no champion and pass no final audit (R5).",
        ),
        click.option(
            "--fresh-worker",
            is_flag=True,
            help="A fresh worker per pair (the default wherever the reference's outputs do not follow "
            "the seed).",
        ),
    )


def _kernel() -> list[click.Parameter]:
    return params_of(
        *_STAGE_OPTIONS,
        click.option(
            "--spec", "spec_path", default=None, help="Python file: PROBLEMS, REFERENCE, CANDIDATE."
        ),
        click.option(
            "--ref",
            "ref_dir",
            default=None,
            help="Code directory of the reference (R11, bound Target).",
        ),
        click.option(
            "--cand",
            "cand_dir",
            default=None,
            help="Code directory of the candidate (R11, bound Target).",
        ),
    )


def _aa() -> list[click.Parameter]:
    return params_of(
        measured_target_option,
        click.option(
            "--cmd",
            "cmd",
            default=None,
            help="A workload Target: the original's command line "
            "as typed, the readiness driver with {subject} written as the original's directory, "
            "e.g. 'python3 work/original/bench.py {case} {output}'.",
        ),
        click.option(
            "--spec", "spec_path", default=None, help="A kernel spec (its REFERENCE is run)."
        ),
        click.option(
            "--dir", "kernel_dir", default=None, help="The original's code directory (kernel, R11)."
        ),
        cases_option,
        click.option(
            "--runs",
            type=click.IntRange(min=2),
            default=None,
            help="Workload: A/A pairs per case (default: a stopping rule, 10 pairs and more until the "
            "resolution is at most half the minimum effect, at most 60). Kernel: A/A comparisons "
            "(default 5).",
        ),
        call_timeout_option,
        click.option(
            "--record", is_flag=True, help="Append resolution.record with the result (R4)."
        ),
        click.option(
            "--accept-resolution",
            is_flag=True,
            help="Record a resolution at or above the minimum effect (refused otherwise: no verdict "
            "could pass).",
        ),
        actor_option,
        idempotency_option,
        quiet_option,
        json_option,
    )


def _serving() -> list[click.Parameter]:
    return params_of(
        click.option("--ref-url", required=True, help="Reference base URL (http://HOST:PORT/v1)."),
        click.option(
            "--cand-url", default=None, help="Candidate base URL (A/B by interleaved windows)."
        ),
        click.option("--model", default="default", help="The `model` field sent to the reference."),
        click.option(
            "--cand-model", default=None, help="The candidate's `model` (default: --model)."
        ),
        click.option(
            "--before-ref",
            default=None,
            help="A command (shell words) run before each reference window, e.g. one that "
            "restarts the server with the reference's configuration.",
        ),
        click.option(
            "--before-cand",
            default=None,
            help="The same before each candidate window; without --cand-url the candidate is "
            "served at --ref-url (two configurations behind one URL).",
        ),
        click.option(
            "--ready-timeout-s",
            type=click.FloatRange(min=0.1),
            default=300.0,
            help="After a --before-* command: wait this long at most for GET BASE/models = 200.",
        ),
        click.option(
            "--requests", "requests_path", required=True, help="The test set: JSONL of requests."
        ),
        click.option("--api", type=click.Choice(["chat", "completions"]), default="chat"),
        click.option(
            "--rate",
            type=click.FloatRange(min=0, min_open=True),
            default=None,
            help="Open loop: Poisson arrivals per second.",
        ),
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=None,
            help="Closed loop: requests in flight.",
        ),
        click.option("--pairs", type=click.IntRange(min=1), default=5, help="Window pairs (ABBA)."),
        click.option(
            "--steady", type=click.IntRange(min=2), default=40, help="Steady requests a window."
        ),
        click.option(
            "--warmup",
            type=click.IntRange(min=0),
            default=None,
            help="Warm-up requests a window (default 5; closed loop: at least --concurrency).",
        ),
        click.option(
            "--cooldown",
            type=click.IntRange(min=0),
            default=None,
            help="Cool-down requests a window (default 5; closed loop: at least --concurrency).",
        ),
        click.option(
            "--seed", type=int, default=0, help="Seeds the request order and the arrivals."
        ),
        click.option(
            "--ignore-eos",
            is_flag=True,
            help='Send "ignore_eos": true (vLLM, SGLang): every answer runs to max_tokens.',
        ),
        click.option(
            "--timeout-s", type=click.FloatRange(min=0.001), default=120.0, help="Per request."
        ),
        click.option("--drift-metric", type=click.Choice(["ttft", "tpot", "e2e"]), default="ttft"),
        click.option(
            "--drift-alpha",
            type=click.FloatRange(0, 1, min_open=True, max_open=True),
            default=0.01,
            help="Drift test level (Bonferroni over windows).",
        ),
        click.option(
            "--drift-threshold",
            type=click.FloatRange(min=0),
            default=0.10,
            help="Relative median shift a drifting window exceeds.",
        ),
        click.option(
            "--min-effect",
            type=click.FloatRange(min=0),
            default=None,
            help="Ratio distance from 1 reported as a difference (default: the Target's, else 0.05).",
        ),
        click.option(
            "--resamples", type=click.IntRange(min=100), default=2000, help="Bootstrap resamples."
        ),
        click.option(
            "--experiment",
            "experiment_id",
            default=None,
            help="Record samples for this experiment.",
        ),
        click.option(
            "--stage", type=click.Choice(["screen", "target", "final_audit"]), default=None
        ),
        click.option(
            "--samples", "samples_id", default=None, help="Samples id (default: E-STAGE-N)."
        ),
        click.option(
            "--evidence",
            "evidence_id",
            default=None,
            help="Record the report as evidence (layer service) with this id instead.",
        ),
        click.option(
            "--target", "evidence_target", default=None, help="With --evidence: its Target."
        ),
        click.option(
            "--applicability",
            type=click.Choice(["same_boundary", "conservative_upper_bound", "diagnostic"]),
            default="diagnostic",
            help="With --evidence (R6).",
        ),
        click.option("--description", default="", help="With --evidence: what was measured."),
        click.option(
            "--case", "case", default=None, help="The test case (default: the readiness's one)."
        ),
        click.option(
            "--metric",
            "metric_flags",
            multiple=True,
            help="NAME=KIND: a Target metric measured as ttft, tpot, e2e, output_tokens_per_s "
            "or requests_per_s.",
        ),
        click.option(
            "--monitor",
            "monitor_source",
            type=click.Choice(["auto", "gpu", "host"]),
            default="auto",
            help="What the monitor watches (R17): the GPU through NVML, the "
            "host's CPU counters, or auto: NVML where present, else the host.",
        ),
        click.option(
            "--no-monitor", is_flag=True, help="Run without a monitor (screens and reports only)."
        ),
        removed_explain_foreign_option,
        click.option(
            "--raw",
            "raw_path",
            default=None,
            help="Also write the raw table and report (JSON) here.",
        ),
        measure_dry_run_option,
        actor_option,
        idempotency_option,
        click.option("--quiet", is_flag=True, help="No progress on stderr."),
        json_option,
    )


def _baseline() -> list[click.Parameter]:
    return params_of(
        measured_target_option,
        click.option(
            "--cmd",
            "cmd",
            default=None,
            help="A workload Target: the original's command line as typed, the readiness driver with "
            "{subject} written as the original's code directory, e.g. 'python3 work/original/bench.py "
            "{case} {output}' (perfledger fills {case} and {output}).",
        ),
        click.option(
            "--spec",
            "spec_path",
            default=None,
            help="A kernel Target: the spec whose REFERENCE is the original, timed by the kernel harness.",
        ),
        click.option(
            "--dir",
            "kernel_dir",
            default=None,
            help="A kernel Target whose readiness bound the original's directory: that directory (R11).",
        ),
        cases_option,
        click.option(
            "--calls",
            type=click.IntRange(min=1),
            default=DEFAULT_CALLS,
            help=f"Calls of the original per case (default {DEFAULT_CALLS}); every value of the "
            "primary metric a call prints is one baseline value (an observed primary: whole ABBA "
            "pairs of two workers, at least this many calls).",
        ),
        call_timeout_option,
        actor_option,
        idempotency_option,
        click.option("--dry-run", is_flag=True, help="Measure and decide; append nothing."),
        quiet_option,
        json_option,
    )


#: ``perfledger measure NAME``'s options (fresh click parameters on every call) and request.
MEASURES: dict[str, tuple[Callable[[], list[click.Parameter]], Callable[..., Any]]] = {
    "workload": (_workload, workload_request_of),
    "kernel": (_kernel, kernel_request_of),
    "aa": (_aa, aa_request_of),
    "serving": (_serving, serving_request_of),
    "baseline": (_baseline, baseline_request_of),
}


def measure_params(name: str) -> list[click.Parameter]:
    """The options of ``perfledger measure NAME`` (workload, kernel, aa, serving, baseline), in
    ``--help``'s order, as new click parameters. Raises: KeyError for another NAME."""
    return MEASURES[name][0]()


def measure_request(
    name: str, args: Sequence[str], actor: ActorOf, *, default_actor: str | None = None
) -> Any:
    """``perfledger measure NAME ARGS`` as its use case's request (:class:`MeasureWorkloadStage`,
    :class:`MeasureKernel`, :class:`MeasureAA`, :class:`MeasureServing` or
    :class:`MeasureBaseline`), the words read and checked as the CLI reads them (types, ranges,
    choices, required options), then the request's own checks (R17's removed
    ``--explain-foreign``, ``--unit``, who acts: ``--actor``, else ``default_actor``, through
    ``actor``). ``--json`` and ``--quiet`` are the caller's to honour.

    Raises: BadRequest (exit 2) for an option the command does not take, a value it refuses or a
    request check; KeyError for an unknown NAME."""
    options = parse_options(f"measure {name}", measure_params(name), args)
    options["actor"] = options.get("actor") or default_actor
    return MEASURES[name][1](options, actor)


__all__ = [
    "MEASURES",
    "ActorOf",
    "aa_request_of",
    "baseline_request_of",
    "kernel_request_of",
    "measure_params",
    "measure_request",
    "serving_request_of",
    "units_of",
    "workload_request_of",
]
