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
from typing import Any

import click

from perfledger.app.measure_serving_load import measure_serving as measure_serving_load
from perfledger.app.request_options import measure_params, serving_request_of
from perfledger.commands.cli import measure as m
from perfledger.commands.cli.common import command_context as _ctx
from perfledger.commands.cli.common import resolve_actor as _actor


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


@click.command("serving", params=measure_params("serving"))
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
    """The body of ``measure serving`` (see its help): the options as a
    :class:`~perfledger.app.measure_serving_load.MeasureServing`, measured by
    :func:`~perfledger.app.measure_serving_load.measure_serving`, rendered. Raises: BadRequest,
    RuleRefused (R2, R11, R12, R17), MeasurementError."""
    ctx = _ctx(kw["json_flag"])
    request = serving_request_of(kw, _actor)
    done = measure_serving_load(
        request, open_ledger=ctx.open, progress=m._progress_of(kw["quiet"]), warn=m._warn
    )
    answer = done.answer
    if done.request is not None and done.samples:  # a dry run of samples
        m._answer(ctx, answer, [json.dumps(done.request, indent=2)])
        return
    lines = _summary_lines(answer)
    if done.event_id is not None and done.samples:
        lines = [
            f"{done.kind} {done.event_id}",
            f"samples {answer['samples_id']}: {answer['pairs_recorded']} pairs recorded",
            *(f"pair {x['pair']} case {x['case']} left out: {', '.join(x['reasons'])}"
              for x in done.left_out),
            *lines,
        ]  # fmt: skip
    elif done.event_id is not None:
        lines = [f"{done.kind} {done.event_id}", *lines]
    m._answer(ctx, answer, lines)


__all__ = ["measure_serving", "run_measure_serving"]
