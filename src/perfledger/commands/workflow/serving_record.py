"""The requests that ``perfledger measure serving`` records (R2, R5, R6, R11, R12, R17), built
from a :class:`~perfledger.kernels.serving.serving.ServingRun` and its analysis
(:func:`perfledger.derive.serving_stats.analyze`): the ``samples.record`` body
(:func:`serving_request`) and the ``evidence.add`` body (:func:`evidence_request`), and how a
Target's metric names a serving metric (:func:`metric_kind`). Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from perfledger._version import __version__
from perfledger.commands.workflow.samples_body import samples_body
from perfledger.errors import BadRequest

#: The protocol of samples ``measure serving`` measured (R5, R14): its own HTTP client's ABBA
#: windows, every request in the attached ``serving`` artifact.
SERVING_PROTOCOL = "serving/v1"


def median(values: list[float]) -> float:
    """The median of ``values`` (non-empty). Here rather than :mod:`statistics`, which costs
    every decision's start-up (``raw_table`` imports this module on the write path)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


#: Serving metrics a Target's metric can name (``--metric NAME=KIND``): per request (seconds)
#: or per window (a rate).
PER_REQUEST_KINDS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
PER_WINDOW_KINDS = {
    "output_tokens_per_s": "output_tokens_per_s",
    "requests_per_s": "requests_per_s",
}
#: Names recognised without ``--metric`` (a unit suffix such as ``_ms`` is ignored).
_ALIASES = {
    "ttft": "ttft",
    "time_to_first_token": "ttft",
    "tpot": "tpot",
    "time_per_output_token": "tpot",
    "e2e": "e2e",
    "e2e_latency": "e2e",
    "latency": "e2e",
    "output_tokens_per_s": "output_tokens_per_s",
    "tokens_per_s": "output_tokens_per_s",
    "requests_per_s": "requests_per_s",
}
_SUFFIXES = ("_ms", "_us", "_ns", "_s")


def metric_kind(name: str, explicit: dict[str, str]) -> str | None:
    """The serving metric kind of a Target metric ``name``: ``explicit[name]`` (``--metric``),
    else the name itself (less a unit suffix) where it is a known one; None otherwise.
    Raises: BadRequest for an explicit kind that is not known."""
    if name in explicit:
        kind = explicit[name]
        if kind not in PER_REQUEST_KINDS and kind not in PER_WINDOW_KINDS:
            known = sorted([*PER_REQUEST_KINDS, *PER_WINDOW_KINDS])
            raise BadRequest(
                f"--metric {name}={kind}: unknown serving metric; one of {known}",
                hint=f"use one of {known}",
            )
        return kind
    base = name.lower()
    for suffix in _SUFFIXES:
        if base.endswith(suffix) and base[: -len(suffix)] in _ALIASES:
            base = base[: -len(suffix)]
            break
    return _ALIASES.get(base)


def parse_metric_flags(items: tuple[str, ...]) -> dict[str, str]:
    """``--metric NAME=KIND`` flags as a dict (BadRequest for a malformed one)."""
    out = {}
    for item in items:
        name, sep, kind = item.partition("=")
        if not sep or not name or not kind:
            raise BadRequest(
                f"--metric {item!r}: expected NAME=KIND (e.g. ttft_ms=ttft)",
                hint="write --metric NAME=KIND, e.g. ttft_ms=ttft",
            )
        out[name] = kind
    return out


def _side(
    run: Any,
    window: Any,
    report_window: dict[str, Any],
    metrics: dict[str, tuple[str, float]],
    case: str | None,
) -> tuple[dict[str, list[float]], int, int]:
    """One subject's steady requests of ``case`` (all when None) in one window: metric name ->
    values in its unit, how many succeeded, how many failed."""
    steady = [r for r in run.window_rows(window) if case is None or r.case == case]
    rows = [r for r in steady if r.ok]
    out: dict[str, list[float]] = {}
    for name, (kind, scale) in metrics.items():
        if kind in PER_REQUEST_KINDS:
            attr = PER_REQUEST_KINDS[kind]
            values = [getattr(r, attr) * scale for r in rows if getattr(r, attr)]
        else:
            value = report_window[PER_WINDOW_KINDS[kind]]
            values = [value] if value else []
        if values:
            out[name] = values
    return out, len(rows), len(steady) - len(rows)


def _pair_monitor(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    foreign = bool(a["foreign_activity"] or b["foreign_activity"])
    flags = sorted(set(a["flags"]) | set(b["flags"]))
    marked = a.get("marked_requests", 0) + b.get("marked_requests", 0)
    if marked:
        flags.append(f"requests_with_interference:{marked}")
    return {
        "observed": bool(a["observed"] and b["observed"]),
        "foreign_activity": foreign,
        "explained": None,  # R17: another actor's review explains, never a typed text
        "flags": flags,
    }


def serving_request(
    run: Any,
    report: dict[str, Any],
    info: dict[str, Any],
    *,
    cases: list[str] | None,
    case: str,
    metrics: dict[str, tuple[str, float]],
    samples_id: str,
    experiment_id: str,
    stage: str,
    environment_id: str,
    units: dict[str, str],
    tail: str | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``samples.record`` body of a serving run: one pair per window pair and test case
    (``cases``, the request lines' own, else the one ``case``) without a drifting window or
    unequal work (R12), per-request values of each subject (see the module docstring),
    ``correct`` false for a subject with failed steady requests of that case (R5), the
    monitor's account of both windows (R17). For a ``tail`` primary, a case with fewer steady
    requests in a window than :data:`perfledger.derive.serving_stats.TAIL_MIN_REQUESTS` asks is
    left out. Returns ``(body, left_out)``: the pairs not recorded, with why."""
    pairs, left_out = serving_pairs(
        run, report, primary=info["primary"].name, cases=cases, case=case, metrics=metrics,
        environment_id=environment_id, tail=tail,
    )  # fmt: skip
    body = samples_body(
        info, samples_id=samples_id, experiment_id=experiment_id, stage=stage,
        environment_id=environment_id, pairs=pairs,
        units={n: u for n, u in units.items() if any(n in q["ref"]["values"] for q in pairs)},
    )  # fmt: skip
    return body, left_out


def serving_settings(
    run: Any,
    *,
    primary: str,
    cases: list[str] | None,
    case: str,
    metrics: dict[str, tuple[str, float]],
    tail: str | None,
) -> dict[str, Any]:
    """The settings of measured serving samples (their provenance's, and the ``serving``
    artifact's): the load's (``run.settings()``) and what :func:`serving_pairs` was given, so
    that R5 re-derives the pairs from the artifact with them. JSON builtins, keys sorted."""
    settings = {
        "load": run.settings(),
        "primary": primary,
        "cases": cases,
        "case": case,
        "metrics": {name: [kind, scale] for name, (kind, scale) in sorted(metrics.items())},
        "tail": tail,
    }
    return json.loads(json.dumps(settings, sort_keys=True, default=str))


def serving_pairs(
    run: Any,
    report: dict[str, Any],
    *,
    primary: str,
    cases: list[str] | None,
    case: str,
    metrics: dict[str, tuple[str, float]],
    environment_id: str,
    tail: str | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The recorded pairs of a serving run and the pairs left out, with why (see
    :func:`serving_request`; ``primary``: the Target's primary metric name). Pure: what
    ``measure serving`` records and what R5 re-derives from the ``serving`` artifact."""
    from perfledger.derive.serving_stats import TAIL_MIN_REQUESTS  # noqa: PLC0415 (numpy via perfledger.derive.serving_stats)

    windows = {w.index: w for w in run.windows}
    pairs, left_out = [], []
    for p in report["pairs"]:
        ref_w, cand_w = windows[p["ref_window"]], windows[p["cand_window"]]
        ref_rw, cand_rw = report["windows"][ref_w.index], report["windows"][cand_w.index]
        voided = [
            r
            for r in p["reasons"]
            if r.startswith(("drift:", "output_tokens_differ:", "output_text_differs:"))
        ]
        for name in cases or [None]:
            label = {"pair": p["pair"], "case": name or case}
            if voided:
                left_out.append({**label, "reasons": voided})
                continue
            ref_v, ref_ok, ref_failed = _side(run, ref_w, ref_rw, metrics, name)
            cand_v, cand_ok, cand_failed = _side(run, cand_w, cand_rw, metrics, name)
            if primary not in ref_v or primary not in cand_v:
                left_out.append({**label, "reasons": [f"no {primary} values"]})
                continue
            if tail is not None and min(ref_ok, cand_ok) < TAIL_MIN_REQUESTS[tail]:
                left_out.append(
                    {**label, "reasons": [f"too_few_for_{tail}:{min(ref_ok, cand_ok)}"]}
                )
                continue

            def side(w: Any, values: dict[str, list[float]], failed: int) -> dict[str, Any]:
                return {
                    "call_id": f"w{w.index}-{w.subject}",
                    "correct": failed == 0,
                    "values": values,
                    "environment_id": environment_id,
                }

            pairs.append(
                {
                    "case": name or case,
                    "ref": side(ref_w, ref_v, ref_failed),
                    "cand": side(cand_w, cand_v, cand_failed),
                    "same_process": False,
                    "monitor": _pair_monitor(ref_rw["monitor"], cand_rw["monitor"]),
                }
            )
    return pairs, left_out


@dataclass
class _Window:
    """A window as the ``serving`` artifact holds it (index, subject, its requests)."""

    index: int
    subject: str
    rows: list[Any]


class _ArtifactRun:
    """A serving run read back from its ``serving`` artifact: its windows, each window's
    steady requests (attributes as :class:`~perfledger.kernels.serving.serving.RequestRecord`)."""

    def __init__(self, table: dict[str, Any]) -> None:
        requests = [SimpleNamespace(**r) for r in table["requests"]]
        self.windows = [
            _Window(
                int(w["index"]), str(w["subject"]), [r for r in requests if r.window == w["index"]]
            )
            for w in table["report"]["windows"]
        ]

    def window_rows(self, window: _Window) -> list[Any]:
        """The steady requests of ``window``."""
        return [r for r in window.rows if r.phase == "steady"]


def _compared(pair: dict[str, Any]) -> dict[str, Any]:
    """What of a pair the re-derivation fixes (its case, both sides, the monitor's account)."""
    monitor = pair.get("monitor") or {}
    return {
        "case": pair.get("case"),
        "same_process": pair.get("same_process"),
        **{
            role: {k: (pair.get(role) or {}).get(k) for k in ("call_id", "correct", "values")}
            for role in ("ref", "cand")
        },
        "monitor": {k: monitor.get(k) for k in ("observed", "foreign_activity", "flags")},
    }


def serving_mismatch(samples: dict[str, Any], table: dict[str, Any]) -> str | None:
    """R5: how measured serving samples (``samples``: a ``samples.record`` body or payload, as
    JSON builtins) differ from their ``serving`` artifact ``table``: the pairs are re-derived
    from the artifact's requests (each window's values and rates,
    :func:`perfledger.derive.serving_stats.window_rates`) with the provenance's settings
    (:func:`serving_settings`), and must equal the recorded ones. Returns: the first
    difference, as a sentence; None when none. Raises: KeyError, TypeError, ValueError on a
    malformed artifact (the caller words it)."""
    from perfledger.derive.serving_stats import window_rates  # noqa: PLC0415 (numpy via perfledger.derive.serving_stats)

    settings = (samples.get("provenance") or {}).get("settings") or {}
    if json.dumps(settings, sort_keys=True) != json.dumps(table.get("settings"), sort_keys=True):
        return "its provenance's settings differ from its serving artifact's"
    run = _ArtifactRun(table)
    report = table["report"]
    # the per-window rates are the requests', not the report's figures
    rated = {
        **report,
        "windows": {
            w["index"]: {**w, **window_rates(run.window_rows(win))}
            for w, win in zip(report["windows"], run.windows, strict=True)
        },
    }
    metrics = {name: (kind, float(scale)) for name, (kind, scale) in settings["metrics"].items()}
    environment_id = (table.get("environment") or {}).get("environment_id")
    derived, _ = serving_pairs(
        run, rated, primary=settings["primary"], cases=settings["cases"], case=settings["case"],
        metrics=metrics, environment_id=environment_id, tail=settings["tail"],
    )  # fmt: skip
    # as JSON: a payload read back holds tuples where a request body holds lists
    recorded = json.loads(json.dumps(samples.get("pairs") or []))
    derived = json.loads(json.dumps(derived))
    if len(recorded) != len(derived):
        return f"it records {len(recorded)} pairs, its serving artifact derives {len(derived)}"
    for i, (got, want) in enumerate(zip(recorded, derived, strict=True)):
        if _compared(got) != _compared(want):
            return f"pair {i} is not what its serving artifact's requests derive"
        if (got.get("ref") or {}).get("environment_id") != environment_id:
            return f"pair {i} names another environment than its serving artifact"
    return None


def evidence_request(
    report: dict[str, Any],
    *,
    evidence_id: str,
    target_id: str | None,
    applicability: str,
    description: str,
    interference_windows: list[dict[str, Any]],
    monitor_note: str | None,
) -> dict[str, Any]:
    """The ``evidence.add`` body of a serving report (R6: layer ``service``, the tool's exact
    version, a unit on every fact). Facts: per subject, the median over its windows of each
    metric's p50/p95/p99 (ms) and of its throughput; with two subjects, the cand/ref ratio of
    each quantile over usable pairs with its CI ends; counts of drifting windows, failed and
    interfered requests. A tail quantile (p95, p99) is left out where a window has fewer steady
    requests than it needs (R7, R12). Drift, interference, failed requests, tails left out and
    a missing monitor are also limitations."""

    from perfledger.derive.serving_stats import TAIL_MIN_REQUESTS  # noqa: PLC0415 (numpy via perfledger.derive.serving_stats)

    facts: list[dict[str, Any]] = []
    # a tail quantile of fewer steady requests than it needs (R7, R12) is not that quantile:
    # recorded, a p99 of 40 requests would pass for a tail it never saw
    short_tails = sorted(
        {
            name
            for w in report["windows"]
            for by_q in w["quantiles"].values()
            for name, q in by_q.items()
            if q and not q["enough_for_tail"]
        }
    )
    subjects = sorted({w["subject"] for w in report["windows"]}, reverse=True)  # ref first
    for subject in subjects:
        ws = [w for w in report["windows"] if w["subject"] == subject]
        for metric, by_q in ws[0]["quantiles"].items():
            for name in by_q:
                if name in short_tails:
                    continue
                values = [
                    w["quantiles"][metric][name]["value_s"]
                    for w in ws
                    if w["quantiles"][metric][name]
                ]
                if values:
                    facts.append({
                        "name": f"{subject}.{metric.removesuffix('_s')}.{name}",
                        "value": 1e3 * median(values), "unit": "ms",
                        "note": f"median over {len(values)} windows",
                    })  # fmt: skip
        for rate, unit in (("requests_per_s", "requests/s"), ("output_tokens_per_s", "tokens/s")):
            values = [w[rate] for w in ws if w[rate]]
            if values:
                facts.append({"name": f"{subject}.{rate}", "value": median(values), "unit": unit})
    for metric, by_q in report["summary"].items():
        for name, s in by_q.items():
            if s and name not in short_tails:
                base = f"cand_over_ref.{metric.removesuffix('_s')}.{name}"
                note = f"{s['pairs']} usable window pairs: {s['finding']}"
                for suffix, key in (("", "ratio"), (".ci_low", "ci_low"), (".ci_high", "ci_high")):
                    facts.append(
                        {"name": base + suffix, "value": s[key], "unit": "ratio", "note": note}
                    )
    drifting = report["drift"]["drifting_windows"]
    facts += [
        {"name": "drifting_windows", "value": float(len(drifting)), "unit": "count"},
        {"name": "failed_requests", "value": float(report["failed_requests"]), "unit": "count"},
        {"name": "interference_requests", "value": float(report["interference_requests"]),
         "unit": "count"},
    ]  # fmt: skip
    limitations = []
    if report["failed_requests"]:
        # a failed request is in no quantile: left out, it would shorten the tail it belongs to
        limitations.append(
            f"{report['failed_requests']} requests failed: they are in no quantile, and window "
            "pairs with failed steady requests are in no ratio (findings inconclusive)"
        )
    if short_tails:
        limitations.append(
            f"{', '.join(short_tails)} left out: a window has fewer steady requests than "
            f"{', '.join(str(TAIL_MIN_REQUESTS[q]) for q in short_tails)} (--steady)"
        )
    if drifting:
        limitations.append(f"drift between steady windows: {drifting}")
    if interference_windows:
        limitations.append(
            f"foreign activity overlapped {report['interference_requests']} requests"
        )
    if monitor_note and monitor_note not in ("gpu", "host"):
        limitations.append(f"monitor: {monitor_note}"[:200])
    body: dict[str, Any] = {
        "evidence_id": evidence_id,
        "layer": "service",
        "tool": {"name": "perfledger measure serving", "version": __version__},
        "facts": facts,
        "limitations": limitations,
        "applicability": applicability,
        "description": description
        or "serving load: p50/p95/p99 of TTFT, time per output token and end-to-end latency",
    }
    if target_id is not None:
        body["target_id"] = target_id
    return body


__all__ = [
    "PER_REQUEST_KINDS",
    "PER_WINDOW_KINDS",
    "SERVING_PROTOCOL",
    "evidence_request",
    "metric_kind",
    "parse_metric_flags",
    "serving_mismatch",
    "serving_pairs",
    "serving_request",
    "serving_settings",
]
