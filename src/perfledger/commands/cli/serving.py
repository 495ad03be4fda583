"""``perfledger measure serving`` (SPEC.md section 5 "Serving workloads"; R2, R5, R7, R11, R12,
R17): a paired, monitored load against OpenAI-compatible HTTP endpoints
(:mod:`perfledger.kernels.serving.serving`), reported, and with ``--experiment``/``--stage`` recorded
through ``samples.record`` like ``measure workload``:

- one recorded pair per window pair (and test case, where the request lines name their
  ``case``): each subject's values are its steady requests' per-request
  TTFT / time per output token / end-to-end latency (in the Target's unit), so a verdict can take
  a median or a tail of them (R12), or the window's throughput (one value);
- a window pair with a drifting window, or whose subjects produced output token totals (or
  output text) that differ over the same requests, is left out of the request (kept, with its
  reason, in the artifact): it supports no verdict; at a formal stage (target, final audit) any
  such pair refuses the recording (R12: a subject would choose the pairs its verdict rests on);
- a subject with failed steady requests in its window is recorded ``correct: false`` (R5);
- each pair carries the monitor's account of its two windows, with the requests that overlapped
  foreign activity counted in its flags (R17).

The per-request table, the per-window statistics, the drift check and the settings are attached
as the artifact ``samples.json`` (``kind: serving``), bound to the samples, which carry
provenance ``perfledger`` (protocol ``serving/v1``): their pairs are re-derived from it (R5,
:func:`perfledger.commands.workflow.serving_record.serving_mismatch`). Docs: ``docs/serving.md``.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import click

from perfledger.app.identity import refuse_unsnapshotted
from perfledger.app.measure_serving import (
    load_warnings,
    refuse_voided_pairs,
    serving_artifact,
    serving_cases,
    serving_metrics,
    serving_result,
    test_set_warnings,
)
from perfledger.app.preconditions import refuse_formal_unmonitored
from perfledger.commands.cli import measure as m
from perfledger.commands.cli.common import (
    actor_option,
    idempotency_option,
    json_option,
    measure_dry_run_option,
    refuse_explain_foreign,
    removed_explain_foreign_option,
)
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.serving_record import (
    PER_REQUEST_KINDS,
    SERVING_PROTOCOL,
    evidence_request,
    serving_request,
    serving_settings,
)
from perfledger.errors import BadRequest, MeasurementError


def _monitor(m: Any, disabled: bool, source: str) -> tuple[Any, str | None, str | None]:
    """Start the monitor (R17): ``gpu`` (NVML), ``host`` (CPU counters) or ``auto`` (NVML
    where it opens, else the host). Returns ``(monitor or None, note, source used)``; the note
    says why there is none, or why ``auto`` fell back to the host."""
    if disabled:
        return None, "disabled by --no-monitor", None
    if source != "auto":
        monitor, note = m._start_monitor(True, source)
        return monitor, note, source if monitor is not None else None
    monitor, why = m._start_monitor(True, "gpu")
    if monitor is not None:
        return monitor, None, "gpu"
    monitor, note = m._start_monitor(True, "host")
    if monitor is None:
        return None, f"NVML: {why}; {note}", None
    return monitor, f"NVML unavailable ({why}): the host monitor watches instead", "host"


def _words(command: str | None) -> tuple[str, ...] | None:
    """A ``--before-*`` command split into argv (BadRequest when it cannot be parsed)."""
    if command is None:
        return None

    try:
        words = tuple(shlex.split(command))
    except ValueError as exc:
        raise BadRequest(
            f"cannot parse the command {command!r}: {exc}",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        ) from None
    if not words:
        raise BadRequest(
            "an empty --before-* command",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    return words


def _summary_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    for w in report["windows"]:
        q = w["quantiles"]["ttft_s"]["p50"]
        drift = " DRIFT" if w["drift"]["drifting"] else ""
        foreign = " interference" if w["monitor"]["foreign_activity"] else ""
        ttft = f"{1e3 * q['value_s']:.2f} ms" if q else "n/a"
        rps = w["requests_per_s"]
        lines.append(
            f"window {w['index']} pair {w['pair']} {w['subject']:4s} ttft p50 {ttft}, "
            f"{rps or 0:.1f} req/s, failed {w['failed']}{drift}{foreign}"
        )
    for metric, by_q in report["summary"].items():
        for name, s in by_q.items():
            if s:
                lines.append(
                    f"{metric} {name}: cand/ref {s['ratio']:.4f} CI [{s['ci_low']:.4f}, "
                    f"{s['ci_high']:.4f}] over {s['pairs']} pairs: {s['finding']}"
                )
    d = report["drift"]
    lines.append(
        f"drift ({d['metric']}): "
        + (f"detected in windows {d['drifting_windows']}" if d["detected"] else "none detected")
    )
    return lines


@click.command("serving")
@click.option("--ref-url", required=True, help="Reference base URL (http://HOST:PORT/v1).")
@click.option("--cand-url", default=None, help="Candidate base URL (A/B by interleaved windows).")
@click.option("--model", default="default", help="The `model` field sent to the reference.")
@click.option("--cand-model", default=None, help="The candidate's `model` (default: --model).")
@click.option(
    "--before-ref",
    default=None,
    help="A command (shell words) run before each reference window, e.g. one that "
    "restarts the server with the reference's configuration.",
)
@click.option(
    "--before-cand",
    default=None,
    help="The same before each candidate window; without --cand-url the candidate is "
    "served at --ref-url (two configurations behind one URL).",
)
@click.option(
    "--ready-timeout-s",
    type=click.FloatRange(min=0.1),
    default=300.0,
    help="After a --before-* command: wait this long at most for GET BASE/models = 200.",
)
@click.option("--requests", "requests_path", required=True, help="The test set: JSONL of requests.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default="chat")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Open loop: Poisson arrivals per second.")  # fmt: skip
@click.option("--concurrency", type=click.IntRange(min=1), default=None,
              help="Closed loop: requests in flight.")  # fmt: skip
@click.option("--pairs", type=click.IntRange(min=1), default=5, help="Window pairs (ABBA).")
@click.option("--steady", type=click.IntRange(min=2), default=40, help="Steady requests a window.")
@click.option("--warmup", type=click.IntRange(min=0), default=None,
              help="Warm-up requests a window (default 5; closed loop: at least --concurrency).")  # fmt: skip
@click.option("--cooldown", type=click.IntRange(min=0), default=None,
              help="Cool-down requests a window (default 5; closed loop: at least --concurrency).")  # fmt: skip
@click.option("--seed", type=int, default=0, help="Seeds the request order and the arrivals.")
@click.option(
    "--ignore-eos",
    is_flag=True,
    help='Send "ignore_eos": true (vLLM, SGLang): every answer runs to max_tokens.',
)
@click.option("--timeout-s", type=click.FloatRange(min=0.001), default=120.0, help="Per request.")
@click.option("--drift-metric", type=click.Choice(["ttft", "tpot", "e2e"]), default="ttft")
@click.option("--drift-alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.01, help="Drift test level (Bonferroni over windows).")  # fmt: skip
@click.option("--drift-threshold", type=click.FloatRange(min=0), default=0.10,
              help="Relative median shift a drifting window exceeds.")  # fmt: skip
@click.option("--min-effect", type=click.FloatRange(min=0), default=None,
              help="Ratio distance from 1 reported as a difference (default: the Target's, else 0.05).")  # fmt: skip
@click.option(
    "--resamples", type=click.IntRange(min=100), default=2000, help="Bootstrap resamples."
)
@click.option(
    "--experiment", "experiment_id", default=None, help="Record samples for this experiment."
)
@click.option("--stage", type=click.Choice(["screen", "target", "final_audit"]), default=None)
@click.option("--samples", "samples_id", default=None, help="Samples id (default: E-STAGE-N).")
@click.option(
    "--evidence",
    "evidence_id",
    default=None,
    help="Record the report as evidence (layer service) with this id instead.",
)
@click.option("--target", "evidence_target", default=None, help="With --evidence: its Target.")
@click.option(
    "--applicability",
    type=click.Choice(["same_boundary", "conservative_upper_bound", "diagnostic"]),
    default="diagnostic",
    help="With --evidence (R6).",
)
@click.option("--description", default="", help="With --evidence: what was measured.")
@click.option("--case", "case", default=None, help="The test case (default: the readiness's one).")
@click.option("--metric", "metric_flags", multiple=True,
              help="NAME=KIND: a Target metric measured as ttft, tpot, e2e, output_tokens_per_s "
              "or requests_per_s.")  # fmt: skip
@click.option("--monitor", "monitor_source", type=click.Choice(["auto", "gpu", "host"]),
              default="auto", help="What the monitor watches (R17): the GPU through NVML, the "
              "host's CPU counters, or auto: NVML where present, else the host.")  # fmt: skip
@click.option(
    "--no-monitor", is_flag=True, help="Run without a monitor (screens and reports only)."
)
@removed_explain_foreign_option
@click.option(
    "--raw", "raw_path", default=None, help="Also write the raw table and report (JSON) here."
)
@measure_dry_run_option
@actor_option
@idempotency_option
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@json_option
def measure_serving(**kw: Any) -> None:
    """Load OpenAI-compatible endpoints (streaming) in interleaved ABBA windows and report
    per-request TTFT, time per output token, end-to-end latency and throughput, p50/p95/p99 with
    bootstrap CIs per window pair, drift between steady windows and interference (R17); with
    --experiment and --stage, record the window pairs as samples (docs/serving.md).

    Example: perfledger measure serving --ref-url http://127.0.0.1:8000/v1 --cand-url
    http://127.0.0.1:8001/v1 --requests testset.jsonl --concurrency 16 --pairs 6
    """
    run_measure_serving(**kw)


def run_measure_serving(**kw: Any) -> None:
    """The body of ``measure serving`` (see its help); every check that can fail runs before any
    request is sent. Raises: BadRequest, RuleRefused (R2, R11, R12, R17), MeasurementError."""
    from perfledger.derive import serving_stats as st  # noqa: PLC0415 (numpy via perfledger.derive.serving_stats)
    from perfledger.kernels.serving import serving as sv  # noqa: PLC0415 (numpy via perfledger.kernels.serving.serving)

    ctx = _ctx(kw["json_flag"])
    refuse_explain_foreign(kw.pop("explain_foreign", None))
    recording = kw["experiment_id"] is not None
    if recording != (kw["stage"] is not None):
        raise BadRequest(
            "--experiment and --stage go together (record samples of that stage)",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    if (kw["rate"] is None) == (kw["concurrency"] is None):
        raise BadRequest(
            "pass exactly one of --rate (open loop) or --concurrency (closed loop)",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    if recording and kw["evidence_id"] is not None:
        raise BadRequest(
            "record either samples (--experiment) or evidence (--evidence), not both",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    if kw["evidence_id"] is None and kw["evidence_target"] is not None:
        raise BadRequest(
            "--target goes with --evidence",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    if kw["before_cand"] is not None and kw["before_ref"] is None and kw["cand_url"] is None:
        raise BadRequest(
            "--before-cand without --cand-url switches one server's configuration: give "
            "--before-ref too (the command that brings the reference's back)",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    if recording and kw["cand_url"] is None and kw["before_cand"] is None:
        raise BadRequest(
            "recording samples needs a candidate: pass --cand-url (or --before-cand)",
            hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
        )
    config = sv.LoadConfig(
        mode="poisson" if kw["rate"] is not None else "closed",
        rate_rps=kw["rate"],
        concurrency=kw["concurrency"],
        steady_requests=kw["steady"],
        warmup_requests=kw["warmup"],
        cooldown_requests=kw["cooldown"],
        pairs=kw["pairs"],
        seed=kw["seed"],
        timeout_s=kw["timeout_s"],
        api=kw["api"],
        ignore_eos=kw["ignore_eos"],
    )
    config.check()
    requests, set_hash = sv.load_request_set(kw["requests_path"], kw["api"])
    ref = sv.Endpoint(kw["ref_url"], kw["model"], _words(kw["before_ref"]), kw["ready_timeout_s"])
    cand_url = kw["cand_url"] or (kw["ref_url"] if kw["before_cand"] else None)
    cand = (
        sv.Endpoint(
            cand_url,
            kw["cand_model"] or kw["model"],
            _words(kw["before_cand"]),
            kw["ready_timeout_s"],
        )
        if cand_url
        else None
    )
    warnings: list[str] = []
    info: dict[str, Any] | None = None
    metrics: dict[str, tuple[str, float]] = {}
    units: dict[str, str] = {}
    tail: str | None = None
    min_effect = kw["min_effect"]
    case = kw["case"]
    cases: list[str] | None = None
    stage = kw["stage"]
    if recording:
        m.refuse_formal_dry_run(stage, kw["dry_run"])
        ledger = ctx.open()
        try:
            info = m._context(ledger, kw["experiment_id"], stage)
        finally:
            ledger.close()
        refuse_unsnapshotted(info["target"], "measure serving")
        metrics, units, tail = serving_metrics(
            info["target"], info["primary"], kw["metric_flags"], config.steady_requests,
            sv.TAIL_MIN_REQUESTS,
        )  # fmt: skip
        case, cases = serving_cases(requests, case, info, metrics)
        warnings += test_set_warnings(set_hash, info, stage)
        if min_effect is None:
            min_effect = info["target"].definition.min_effect
    if kw["evidence_id"] is not None:  # checked before any request is sent
        ledger = ctx.open()
        try:
            state = ledger.state()
        finally:
            ledger.close()
        if kw["evidence_id"] in state.evidence:
            raise BadRequest(
                f"evidence {kw['evidence_id']!r} is already recorded",
                hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
            )
        if kw["evidence_target"] is not None:
            rules.r1_target_frozen(state, kw["evidence_target"])
    sv.check_request_set(requests, config)
    env = m.environment_payload(tools=False)
    if info is not None:
        m.check_environment(env, info)
    monitor, monitor_note, source = _monitor(m, kw["no_monitor"], kw["monitor_source"])
    if recording and monitor is None:
        refuse_formal_unmonitored(stage, monitor_note, windows=True)
    if monitor is None and not kw["no_monitor"]:
        warnings.append(f"no monitor: {monitor_note}")
    elif monitor is not None and monitor_note:
        warnings.append(monitor_note)
    sid = ""
    if info is not None:
        sid = kw["samples_id"] or m._default_samples_id(kw["experiment_id"], stage, info["state"])
        try:  # R14: a formal stage's start is recorded before anything is measured
            # what recording would refuse of this experiment and stage, before anything is sent
            rules.r15_not_rejected(info["state"], kw["experiment_id"])
            if stage == "target":
                rules.r11_screen_before_target(info["state"], kw["experiment_id"])
            m.start_formal_run_of_command(
                ctx, kw["experiment_id"], stage, sid, SERVING_PROTOCOL, kw["actor"]
            )
        except BaseException:
            if monitor is not None:
                monitor.stop()
            raise
    n_windows = config.pairs * (2 if cand else 1)
    try:
        with m._progress(n_windows, "serving windows", kw["quiet"]) as advance:
            run = sv.run_serving(
                ref, cand, requests, set_hash, config, on_window=lambda _w: advance()
            )
    finally:
        if monitor is not None:
            monitor.stop()
    interference = sv.mark_interference(run, monitor) if monitor is not None else []
    report = st.analyze(
        run,
        monitor=monitor,
        drift_metric=PER_REQUEST_KINDS[kw["drift_metric"]],
        drift_alpha=kw["drift_alpha"],
        drift_threshold=kw["drift_threshold"],
        min_effect=0.05 if min_effect is None else min_effect,
        resamples=kw["resamples"],
        tail=tail,
    )
    warnings += load_warnings(report)
    artifact = serving_artifact(run, report, interference, env, monitor, monitor_note, source)
    settings: dict[str, Any] = {}
    if info is not None:  # R5: what the pairs are re-derived with from this artifact
        settings = serving_settings(
            run, primary=info["primary"].name, cases=cases, case=case or "", metrics=metrics,
            tail=tail,
        )  # fmt: skip
        artifact["settings"] = settings
    if kw["raw_path"]:
        Path(kw["raw_path"]).write_text(json.dumps(artifact, indent=1, default=str))
    result = serving_result(run, report, set_hash, interference, env, monitor_note, source)
    lines = _summary_lines(report)
    if not recording:
        result["warnings"] = warnings
        m._warn(warnings)
        if kw["evidence_id"] is not None:
            body = evidence_request(
                report,
                evidence_id=kw["evidence_id"],
                target_id=kw["evidence_target"],
                applicability=kw["applicability"],
                description=kw["description"],
                interference_windows=interference,
                monitor_note=monitor_note or source,
            )
            if kw["dry_run"]:
                result["request"] = body
            else:
                event = m._append(
                    ctx, "evidence.add", body, "serving.json", artifact, kw["actor"],
                    kw["idempotency_key"],
                )  # fmt: skip
                result.update(evidence_id=kw["evidence_id"], event_id=event.id, kind=event.kind)
                lines = [f"{event.kind} {event.id}", *lines]
        m._answer(ctx, result, lines)
        return
    assert info is not None
    body, left_out = serving_request(
        run,
        report,
        info,
        cases=cases,
        case=case or "",
        metrics=metrics,
        tail=tail,
        samples_id=sid,
        experiment_id=kw["experiment_id"],
        stage=stage,
        environment_id=env["environment_id"],
        units=units,
    )
    body["provenance"] = m.measured_provenance(SERVING_PROTOCOL, settings)
    result.update(samples_id=sid, pairs_recorded=len(body["pairs"]), pairs_left_out=left_out)
    refuse_voided_pairs(left_out, stage)
    if not body["pairs"]:
        raise MeasurementError(
            f"no window pair can be recorded: {left_out}",
            hint="every pair had a drifting window or no values: measure again on a steadier "
            "server (see the report's windows with --raw FILE)",
        )
    warnings += m.foreign_activity_warnings(body["pairs"], stage)
    result["warnings"] = warnings
    m._warn(warnings)
    if kw["dry_run"]:
        result["request"] = body
        m._answer(ctx, result, [json.dumps(body, indent=2)])
        return
    event = m._append(
        ctx,
        "samples.record",
        body,
        m.SAMPLES_ARTIFACT,
        artifact,
        kw["actor"],
        kw["idempotency_key"],
    )
    result.update(event_id=event.id, kind=event.kind)
    lines = [f"{event.kind} {event.id}", f"samples {sid}: {len(body['pairs'])} pairs recorded"]
    lines += [
        f"pair {x['pair']} case {x['case']} left out: {', '.join(x['reasons'])}" for x in left_out
    ]
    m._answer(ctx, result, lines + _summary_lines(report))


__all__ = ["measure_serving", "run_measure_serving"]
