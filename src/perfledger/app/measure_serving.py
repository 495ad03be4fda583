"""``measure serving``'s steps at the application edge (SPEC.md section 5 "Serving
workloads"; R2, R12): which Target metrics a serving load measures and how (per request or per
window, in which unit), which test cases its request lines name, whether its request set is the
readiness's, and which left-out window pairs void a formal stage. Each check runs before any
request is sent (the last after the load, before anything is recorded); a refusal names its
rule, and nothing is measured or recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfledger.app.context import check_cases
from perfledger.app.metrics import target_units
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.serving_record import (
    PER_REQUEST_KINDS,
    PER_WINDOW_KINDS,
    metric_kind,
    parse_metric_flags,
)
from perfledger.derive.units import UNITS_PER_SECOND
from perfledger.errors import BadRequest

#: Reasons a window pair is left out of the recorded samples that its subjects control (drift,
#: unequal work): a formal stage with any is refused (R12).
VOIDING_REASONS = ("drift:", "output_tokens_differ:", "output_text_differs:")


def serving_metrics(
    target: Any,
    primary: Any,
    metric_flags: tuple[str, ...],
    steady_requests: int,
    tail_min_requests: Mapping[str, int],
) -> tuple[dict[str, tuple[str, float]], dict[str, str], str | None]:
    """The Target's metrics a serving load measures: ``(metrics, units, tail)`` with
    ``metrics`` name -> (kind, seconds per unit: 1.0 for a count or rate), ``units`` name ->
    the Target's unit, ``tail`` the primary's tail statistic (p95, p99) or None. ``metric_flags``
    are ``--metric NAME=KIND``; ``tail_min_requests`` the steady requests a tail statistic needs
    per window (:data:`perfledger.kernels.serving.serving.TAIL_MIN_REQUESTS`).
    Raises: BadRequest (a time metric in a unit that is no time, a primary no serving metric
    measures), RuleRefused (R12: a tail primary without per-request samples or with too few
    steady requests)."""
    metrics: dict[str, tuple[str, float]] = {}
    units: dict[str, str] = {}
    tail: str | None = None
    explicit = parse_metric_flags(metric_flags)
    for name, unit in target_units(target).items():
        kind = metric_kind(name, explicit)
        if kind is None:
            continue
        if kind in PER_REQUEST_KINDS:
            if unit not in UNITS_PER_SECOND:
                raise BadRequest(
                    f"metric {name!r} ({kind}) is a time; its unit {unit!r} is not one of "
                    f"{sorted(UNITS_PER_SECOND)}",
                    hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
                )
            metrics[name] = (kind, UNITS_PER_SECOND[unit])
        else:
            metrics[name] = (kind, 1.0)
        units[name] = unit
    if primary.name not in metrics:
        raise BadRequest(
            f"the Target's primary {primary.name!r} is not a serving metric",
            hint="name it with --metric NAME=KIND (ttft, tpot, e2e, output_tokens_per_s, "
            "requests_per_s)",
        )
    if primary.statistic in tail_min_requests:
        tail = primary.statistic
        need = tail_min_requests[tail]
        if metrics[primary.name][0] not in PER_REQUEST_KINDS:
            raise rules.refuse(
                "R12",
                f"a {tail} primary needs per-request samples",
                "measure with per-request latencies (`perfledger measure serving` records one value per request)",
            )
        if steady_requests < need:
            raise rules.refuse(
                "R12",
                f"a {tail} primary needs at least {need} steady requests per window; "
                f"--steady is {steady_requests}; nothing was measured",
                f"pass --steady {need} or more",
            )
    return metrics, units, tail


def serving_cases(
    requests: list[Any], case: str | None, info: dict[str, Any], metrics: dict[str, Any]
) -> tuple[str | None, list[str] | None]:
    """The test cases a serving load records: ``(case, cases)``: where the request lines name
    their ``case``, every one of them (``cases``, checked against the readiness's test set),
    else the one ``case`` (``--case``, or the readiness's only case). Raises: BadRequest."""
    cases: list[str] | None = None
    line_cases = sorted({r.case for r in requests if r.case is not None})
    if line_cases:
        # the request lines name their cases: one recorded pair per window pair and case
        if case is not None:
            raise BadRequest(
                "the request set's lines name their cases; drop --case",
                hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
            )
        if any(metrics[n][0] in PER_WINDOW_KINDS for n in metrics):
            raise BadRequest(
                "a window's throughput is not split by case: with a `case` on every request "
                "line, measure per-request metrics only (or one case a run, with --case)",
                hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
            )
        cases = check_cases(line_cases, info["test_set"], "the request set's `case`")
    else:
        if case is None:
            if len(info["cases"]) != 1:
                raise BadRequest(
                    f"name the test case with --case (the readiness lists {info['cases']})",
                    hint="`perfledger measure serving --help` gives the options; docs/serving.md the request set and the protocol",
                )
            case = info["cases"][0]
        check_cases([case], info["test_set"], "--case")
    return case, cases


def test_set_warnings(set_hash: str, info: dict[str, Any], stage: str) -> list[str]:
    """R2: a formal stage measures the request set readiness recorded (its blake3 hash); a
    screen on another set is measured with a warning (returned). Raises: RuleRefused (R2)."""
    if set_hash != info["test_set_hash"]:
        text = (
            f"the request set's hash {set_hash} is not the readiness test set's hash "
            f"{info['test_set_hash']}"
        )
        if stage != "screen":
            raise rules.refuse(
                "R2",
                f"{text}: a formal stage measures the recorded test set; nothing was measured",
                "measure with the test set file readiness recorded (its hash is blake3 of "
                "the file's bytes), or supersede the Target",
            )
        return [text + " (a screen only)"]
    return []


def refuse_voided_pairs(left_out: list[dict[str, Any]], stage: str) -> None:
    """R12: at a formal stage, a window pair left out for a reason its subjects control (drift,
    unequal work) refuses the recording: the verdict would rest on pairs a subject chose.
    ``left_out``: ``{"reasons": [...], ...}`` per pair left out. Raises: RuleRefused (R12)."""
    voided = [x for x in left_out if any(r.startswith(VOIDING_REASONS) for r in x["reasons"])]
    if voided and stage != "screen":
        # a subject chooses which of its windows drift or answer short: a formal verdict on the
        # pairs left would rest on windows it picked (slowing down hard where it is slow)
        raise rules.refuse(
            "R12",
            f"{len(voided)} window pairs were left out ({voided[0]['reasons'][0]}, ...): a "
            f"formal ({stage}) stage's verdict rests on every window pair measured; nothing "
            "was recorded",
            "measure again on a steady server (the report's windows: --raw FILE)",
        )


#: Open loop: a send later than this after its scheduled arrival is warned about (seconds).
DISPATCH_LAG_WARN_S = 0.05


def load_warnings(report: dict[str, Any]) -> list[str]:
    """Warnings about a serving load's ``report`` (:func:`perfledger.derive.serving_stats.analyze`):
    windows whose open-loop sends lagged their scheduled arrivals (the offered rate was not
    met), and drift between steady windows (those windows support no verdict)."""
    out: list[str] = []
    lagging = [
        w["index"]
        for w in report["windows"]
        if w["dispatch_lag_s_max"] is not None and w["dispatch_lag_s_max"] > DISPATCH_LAG_WARN_S
    ]
    if lagging:
        out.append(
            f"the load generator sent requests more than {1e3 * DISPATCH_LAG_WARN_S:.0f} ms after "
            f"their scheduled arrival in windows {lagging}: the offered rate was not met (a "
            "busy client machine); lower --rate or measure from a quieter machine"
        )
    if report["drift"]["detected"]:
        out.append(
            f"drift between steady windows {report['drift']['drifting_windows']}: those windows "
            "support no verdict"
        )
    return out


def serving_artifact(
    run: Any, report: dict[str, Any], interference: list[Any], env: dict[str, Any],
    monitor: Any, monitor_note: str | None, source: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The ``serving`` artifact a serving load attaches (and ``--raw`` writes): every request,
    the report, the windows that overlapped foreign activity, the environment and the
    monitor's note, source and settings."""
    return {
        "kind": "serving",
        "requests": [r.to_json() for r in run.requests],
        "report": report,
        "interference_windows": interference,
        "environment": env,
        "monitor": {
            "note": monitor_note,
            "source": source,
            "settings": monitor.settings() if monitor is not None else None,
        },
    }


def serving_result(
    run: Any, report: dict[str, Any], set_hash: str, interference: list[Any],
    env: dict[str, Any], monitor_note: str | None, source: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The answer of a serving load (``--json``): the request set's hash, requests sent and
    failed, interference, drift, the per-metric summary, the pairs and the windows."""
    return {
        "request_set_hash": set_hash,
        "requests_sent": len(run.requests),
        "failed_requests": report["failed_requests"],
        "interference_requests": report["interference_requests"],
        "interference_windows": interference,
        "drift": report["drift"],
        "summary": report["summary"],
        "pairs": [
            {k: p[k] for k in ("pair", "usable", "reasons", "ratios", "tail_exposure") if k in p}
            for p in report["pairs"]
        ],
        "windows": [
            {
                k: w[k]
                for k in (
                    "index",
                    "pair",
                    "subject",
                    "requests",
                    "failed",
                    "requests_per_s",
                    "output_tokens_per_s",
                    "dispatch_lag_s_max",
                    "quantiles",
                    "drift",
                    "monitor",
                )
            }
            for w in report["windows"]
        ],
        "environment_id": env["environment_id"],
        "monitor": monitor_note or source,
    }


__all__ = [
    "DISPATCH_LAG_WARN_S",
    "VOIDING_REASONS",
    "load_warnings",
    "refuse_voided_pairs",
    "serving_artifact",
    "serving_cases",
    "serving_metrics",
    "serving_result",
    "test_set_warnings",
]
