"""Statistics of a serving run (SPEC.md section 5 "Serving workloads"; R7, R12, R17): what
:func:`analyze` derives from a :class:`~perfledger.kernels.serving.serving.ServingRun`, each setting
recorded in its answer:

- **Per window**: p50/p95/p99 of each metric with a seeded percentile bootstrap CI (requests
  resampled within the window), throughput (steady requests/s and output tokens/s over the span
  of the steady requests).
- **Per window pair**: the candidate/reference ratio of each quantile with its bootstrap CI; over
  all usable pairs, the geometric mean of the per-pair ratios with a two-stage bootstrap CI
  (pairs resampled, and requests within each window); one usable pair gives no finding
  (``too_few_pairs``).
- **Drift** (nonstationarity of the steady state, :func:`drift_check`): each window of a subject
  is compared with that subject's other steady windows pooled: a two-sided Mann-Whitney U test on
  the drift metric (default TTFT) at ``alpha`` Bonferroni-corrected over all windows tested, and
  the relative shift of the window's median from the pooled median above ``threshold``. A window
  that passes both is *drifting*; a pair with a drifting window supports no verdict.
- **Pairs left out**: a pair with a failed steady request, a drifting window or unequal work
  is not compared; where any pair was left out, every ``finding`` is ``inconclusive`` (a
  subject that fails a request, or slows down hard, in its slow windows would otherwise choose
  which windows are compared).
- **Same work**: a pair whose subjects produced output token totals more than
  :data:`TOKENS_TOLERANCE` apart, or output text (bytes) more than :data:`TEXT_TOLERANCE`
  apart, over the same requests is not compared.
- **Tails** (R7, R12): a tail quantile (p95, p99) needs at least :data:`TAIL_MIN_REQUESTS` steady
  requests per window (with fewer, its summary's ``finding`` is ``too_few_requests``); the exposure of the tail (the share of the candidate's requests above the
  reference's quantile in each pair) is reported, and no numeric bound is derived from it.

Imports: numpy, scipy (the drift test); of perfledger, :mod:`perfledger.errors` and
the run's records
(:mod:`perfledger.kernels.serving.serving`) by their attributes only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from perfledger.errors import MeasurementError

if TYPE_CHECKING:  # the serving client's records, read here by attribute only
    from perfledger.kernels.serving.serving import RequestRecord, ServingRun, WindowRecord

#: Quantiles reported for every per-request metric.
QUANTILES: dict[str, float] = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
#: Per-request metrics (seconds), in report order.
REQUEST_METRICS = ("ttft_s", "tpot_s", "e2e_s")
#: Steady requests a window needs before its tail quantile means anything (two expected
#: requests beyond the quantile, ``2 / (1 - q)``); fewer is refused for a tail primary (R12).
TAIL_MIN_REQUESTS: dict[str, int] = {"p95": 40, "p99": 200}

#: Defaults of the drift check.
DRIFT_ALPHA = 0.01
DRIFT_THRESHOLD = 0.10
DEFAULT_RESAMPLES = 2_000
#: Largest relative difference of the two subjects' output tokens over a window pair's steady
#: requests (the same requests) for the pair to be compared.
TOKENS_TOLERANCE = 0.02
#: Fewest usable window pairs a summary needs for a finding: with one, the bootstrap cannot
#: resample pairs, and its CI sees the requests of two windows only, not how windows differ.
MIN_PAIRS_FOR_FINDING = 2
#: Largest relative difference of the two subjects' output text (UTF-8 bytes of content) over a
#: window pair's steady requests for the pair to be compared. A server's token count cannot be
#: checked without its tokenizer (a chunk may carry several tokens), but the text can: an answer
#: cut short and reported as full is short of text. The same model's answers to the same
#: requests differ in length by chance; over a window's requests far less than this.
TEXT_TOLERANCE = 0.10


def window_monitor(run: ServingRun, window: WindowRecord, monitor: Any | None) -> dict[str, Any]:
    """The monitor's account of one window (R17): ``observed`` (the monitor saw the window),
    ``foreign_activity`` (the window's verdict, or any of its steady requests marked), ``flags``
    (the reasons). Without a monitor: not observed."""
    if monitor is None:
        return {"observed": False, "foreign_activity": False, "flags": ["no_monitor"]}
    verdict = monitor.verdict(window.start_s, window.end_s)
    marked = [r for r in run.window_rows(window) if r.interference]
    flags = set(verdict.reasons) | {x for r in marked for x in r.interference}
    return {
        "observed": bool(verdict.observed),
        "foreign_activity": bool(verdict.foreign_activity or marked),
        "flags": sorted(flags),
        "marked_requests": len(marked),
    }


# ------------------------------------------------------------------------------ statistics


def _values(rows: list[RequestRecord], metric: str) -> np.ndarray:
    return np.array([getattr(r, metric) for r in rows if r.ok and getattr(r, metric)], dtype=float)


def _boot_quantiles(
    x: np.ndarray, qs: list[float], rng: np.random.Generator, resamples: int
) -> np.ndarray:
    """Bootstrap replicates of the quantiles ``qs`` of ``x``: shape ``(len(qs), resamples)``."""
    idx = rng.integers(0, len(x), size=(resamples, len(x)))
    return np.quantile(x[idx], qs, axis=1)


def _ci(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2
    lo, hi = np.quantile(boot, [tail, 1.0 - tail])
    return float(lo), float(hi)


def drift_check(
    run: ServingRun,
    metric: str = "ttft_s",
    *,
    alpha: float = DRIFT_ALPHA,
    threshold: float = DRIFT_THRESHOLD,
) -> dict[int, dict[str, Any]]:
    """The nonstationarity check of the steady state (see the module docstring): for each
    subject with at least two windows, each window's steady ``metric`` values against that
    subject's other windows pooled: two-sided Mann-Whitney U p-value below ``alpha / m`` (m =
    windows tested) and relative median shift ``|median_w / median_others - 1|`` above
    ``threshold``. Returns: window index -> ``{tested, median_s, shift, p, drifting}``."""
    from scipy.stats import mannwhitneyu  # noqa: PLC0415 (scipy: heavy, kept off the CLI's start-up path)

    out: dict[int, dict[str, Any]] = {}
    by_subject: dict[str, list[WindowRecord]] = {}
    for w in run.windows:
        by_subject.setdefault(w.subject, []).append(w)
    values = {w.index: _values(run.window_rows(w), metric) for w in run.windows}
    tested = [ws for ws in by_subject.values() if len(ws) >= 2]
    m = max(1, sum(len(ws) for ws in tested))
    for ws in by_subject.values():
        for w in ws:
            x = values[w.index]
            others = [values[o.index] for o in ws if o.index != w.index]
            pooled = np.concatenate(others) if others else np.array([])
            entry: dict[str, Any] = {
                "tested": False,
                "median_s": float(np.median(x)) if len(x) else None,
                "shift": None,
                "p": None,
                "drifting": False,
            }
            if len(x) >= 2 and len(pooled) >= 2:
                shift = float(np.median(x) / np.median(pooled) - 1.0)
                p = float(mannwhitneyu(x, pooled, alternative="two-sided").pvalue)
                entry.update(
                    tested=True,
                    shift=shift,
                    p=p,
                    drifting=bool(p < alpha / m and abs(shift) > threshold),
                )
            out[w.index] = entry
    return out


def _finding(low: float, high: float, min_effect: float) -> str:
    """Where a ratio's CI lies against ``1 ± min_effect``."""
    if high < 1.0 - min_effect:
        return "lower"
    if low > 1.0 + min_effect:
        return "higher"
    if low >= 1.0 - min_effect and high <= 1.0 + min_effect:
        return "no_difference"
    return "inconclusive"


def window_rates(steady: Sequence[Any]) -> dict[str, float | None]:
    """A window's rates from its steady requests (objects with ``ok``, ``start_s``, ``end_s``,
    ``output_tokens``): ``requests_per_s`` and ``output_tokens_per_s`` of the succeeded ones
    over their span (seconds), None for an empty span. The per-window metrics that
    ``measure serving`` records and that R5 re-derives from the ``serving`` artifact."""
    ok = [r for r in steady if r.ok]
    span = (max(r.end_s for r in ok) - min(r.start_s for r in ok)) if ok else 0.0
    return {
        "requests_per_s": len(ok) / span if span > 0 else None,
        "output_tokens_per_s": sum(r.output_tokens for r in ok) / span if span > 0 else None,
    }


def analyze(
    run: ServingRun,
    *,
    monitor: Any | None = None,
    drift_metric: str = "ttft_s",
    drift_alpha: float = DRIFT_ALPHA,
    drift_threshold: float = DRIFT_THRESHOLD,
    min_effect: float = 0.05,
    confidence: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    tail: str | None = None,
) -> dict[str, Any]:
    """Analyse a run (see the module docstring); pure but for ``monitor.verdict`` (call
    :func:`mark_interference` first to mark requests).

    Args:
        run: the run.
        monitor: the stopped monitor, or None (windows then not observed).
        drift_metric: the per-request metric of the drift check.
        drift_alpha, drift_threshold: see :func:`drift_check`.
        min_effect: the ratio distance from 1 that counts as a difference (``finding``).
        confidence, resamples: of the bootstrap CIs (seeded from the run's seed).
        tail: ``p95`` or ``p99`` when the primary statistic is a tail: its exposure is reported.
    Returns: a JSON-ready dict: ``windows`` (per window: subject, phase counts, failures,
        throughput, quantiles with CIs, drift, monitor), ``pairs`` (per pair: ratios with CIs,
        usable or why not), ``summary`` (per metric and quantile over usable pairs),
        ``drift`` (detected or not), ``tails``.
    Raises: MeasurementError when no window has two successful steady requests.
    """
    rng = np.random.default_rng(run.config.seed + 1)
    drift = drift_check(run, drift_metric, alpha=drift_alpha, threshold=drift_threshold)
    windows_out: list[dict[str, Any]] = []
    boots: dict[int, dict[str, dict[str, np.ndarray]]] = {}
    points: dict[int, dict[str, dict[str, float]]] = {}
    for w in run.windows:
        steady = run.window_rows(w)
        ok = [r for r in steady if r.ok]
        rates = window_rates(steady)
        entry: dict[str, Any] = {
            "index": w.index,
            "pair": w.pair,
            "subject": w.subject,
            "start_s": w.start_s,
            "end_s": w.end_s,
            "requests": {p: len(run.window_rows(w, p)) for p in ("warmup", "steady", "cooldown")},
            "failed": sum(1 for r in run.requests[w.rows[0] : w.rows[-1] + 1] if not r.ok),
            "steady_failed": len(steady) - len(ok),
            **rates,
            "output_tokens": sum(r.output_tokens for r in ok),
            "output_bytes": sum(r.output_bytes for r in ok),
            # open loop: how late the generator sent requests after their scheduled arrival
            # (a late generator under-loads the server and hides queueing)
            "dispatch_lag_s_max": max(
                (
                    r.start_s - w.start_s - r.scheduled_offset_s
                    for r in run.requests[w.rows[0] : w.rows[-1] + 1]
                    if r.scheduled_offset_s is not None
                ),
                default=None,
            ),
            "quantiles": {},
            "drift": drift[w.index],
            "monitor": window_monitor(run, w, monitor),
            "prepared": w.prepared,
        }
        boots[w.index], points[w.index] = {}, {}
        for metric in REQUEST_METRICS:
            x = _values(steady, metric)
            entry["quantiles"][metric] = {}
            boots[w.index][metric], points[w.index][metric] = {}, {}
            # one resampling per window and metric serves all three quantiles
            boot_all = (
                _boot_quantiles(x, list(QUANTILES.values()), rng, resamples)
                if len(x) >= 2
                else None
            )
            for k, (name, q) in enumerate(QUANTILES.items()):
                if boot_all is None:
                    entry["quantiles"][metric][name] = None
                    continue
                b = boot_all[k]
                lo, hi = _ci(b, confidence)
                value = float(np.quantile(x, q))
                boots[w.index][metric][name], points[w.index][metric][name] = b, value
                entry["quantiles"][metric][name] = {
                    "value_s": value,
                    "ci_low_s": lo,
                    "ci_high_s": hi,
                    "n": len(x),
                    "enough_for_tail": name not in TAIL_MIN_REQUESTS
                    or len(x) >= TAIL_MIN_REQUESTS[name],
                }
        windows_out.append(entry)
    if not any(points[w.index].get(drift_metric) for w in run.windows):
        raise MeasurementError(
            "no window has two successful steady requests: nothing to analyse",
            hint="see the failed requests in the raw table (`error`)",
        )
    pairs_out: list[dict[str, Any]] = []
    usable: list[tuple[int, int]] = []  # (ref window, cand window)
    if "cand" in run.endpoints:
        by_pair: dict[int, dict[str, WindowRecord]] = {}
        for w in run.windows:
            by_pair.setdefault(w.pair, {})[w.subject] = w
        for pair, ws in sorted(by_pair.items()):
            ref_w, cand_w = ws["ref"], ws["cand"]
            reasons = []
            for label, w in (("ref", ref_w), ("cand", cand_w)):
                if drift[w.index]["drifting"]:
                    reasons.append(f"drift:{label}")
                if windows_out[w.index]["steady_failed"]:
                    reasons.append(f"failed_requests:{label}")
                if not points[w.index].get(drift_metric):
                    reasons.append(f"no_values:{label}")
            # the same requests in both windows: a subject that answers with fewer tokens ends
            # sooner for a reason that is not speed, so the pair compares nothing
            ref_tokens = windows_out[ref_w.index]["output_tokens"]
            cand_tokens = windows_out[cand_w.index]["output_tokens"]
            if ref_tokens and abs(cand_tokens / ref_tokens - 1.0) > TOKENS_TOLERANCE:
                reasons.append(f"output_tokens_differ:{cand_tokens}/{ref_tokens}")
            ref_bytes = windows_out[ref_w.index]["output_bytes"]
            cand_bytes = windows_out[cand_w.index]["output_bytes"]
            if ref_bytes and abs(cand_bytes / ref_bytes - 1.0) > TEXT_TOLERANCE:
                reasons.append(f"output_text_differs:{cand_bytes}/{ref_bytes}")
            ratios: dict[str, dict[str, Any]] = {}
            for metric in REQUEST_METRICS:
                ratios[metric] = {}
                for name in QUANTILES:
                    br, bc = (
                        boots[ref_w.index][metric].get(name),
                        boots[cand_w.index][metric].get(name),
                    )
                    if br is None or bc is None:
                        ratios[metric][name] = None
                        continue
                    lo, hi = _ci(bc / br, confidence)
                    ratio = points[cand_w.index][metric][name] / points[ref_w.index][metric][name]
                    ratios[metric][name] = {"ratio": ratio, "ci_low": lo, "ci_high": hi}
            entry = {
                "pair": pair,
                "ref_window": ref_w.index,
                "cand_window": cand_w.index,
                "usable": not reasons,
                "reasons": reasons,
                "ratios": ratios,
            }
            if tail in QUANTILES and points[ref_w.index].get(drift_metric):
                entry["tail_exposure"] = _tail_exposure(run, ref_w, cand_w, tail)
            pairs_out.append(entry)
            if not reasons:
                usable.append((ref_w.index, cand_w.index))
    # a subject decides which of its windows fail, drift or answer short: pairs left out for
    # such reasons would let it choose the windows compared (fail one request, or slow down
    # hard, where it is slow), so any pair left out leaves no finding but "inconclusive"
    left_out = len(pairs_out) - len(usable)
    summary: dict[str, Any] = {}
    if usable:
        for metric in REQUEST_METRICS:
            summary[metric] = {}
            for name in QUANTILES:
                have = [
                    (r, c)
                    for r, c in usable
                    if name in boots[r][metric] and name in boots[c][metric]
                ]
                if not have:
                    summary[metric][name] = None
                    continue
                logs = np.array(
                    [np.log(boots[c][metric][name] / boots[r][metric][name]) for r, c in have]
                )
                point = float(
                    np.exp(
                        np.mean(
                            [
                                math.log(points[c][metric][name] / points[r][metric][name])
                                for r, c in have
                            ]
                        )
                    )
                )
                pick = rng.integers(0, len(have), size=(resamples, len(have)))
                combined = np.exp(logs[pick, np.arange(resamples)[:, None]].mean(axis=1))
                lo, hi = _ci(combined, confidence)
                # a p95/p99 of fewer requests than it needs is not that tail (R7, R12)
                enough = all(
                    windows_out[i]["quantiles"][metric][name]["enough_for_tail"]
                    for pair in have
                    for i in pair
                )
                finding = _finding(lo, hi, min_effect)
                if len(have) < MIN_PAIRS_FOR_FINDING:
                    finding = "too_few_pairs"
                elif not enough:
                    finding = "too_few_requests"
                elif left_out:
                    finding = "inconclusive"
                summary[metric][name] = {
                    "ratio": point,
                    "ci_low": lo,
                    "ci_high": hi,
                    "pairs": len(have),
                    "pairs_left_out": left_out,
                    "finding": finding,
                }
    drifting = [i for i, d in drift.items() if d["drifting"]]
    return {
        "windows": windows_out,
        "pairs": pairs_out,
        "usable_pairs": len(usable),
        "summary": summary,
        "drift": {
            "metric": drift_metric,
            "test": "two-sided Mann-Whitney U of each window vs the subject's other steady "
            "windows pooled, Bonferroni over the windows tested, and |median shift| > threshold",
            "alpha": drift_alpha,
            "threshold": drift_threshold,
            "detected": bool(drifting),
            "drifting_windows": drifting,
        },
        "interference_requests": sum(1 for r in run.requests if r.interference),
        "failed_requests": sum(1 for r in run.requests if not r.ok),
        "settings": {
            **run.settings(),
            "confidence": confidence,
            "resamples": resamples,
            "min_effect": min_effect,
            "summary": "geometric mean of per-pair quantile ratios (cand/ref); two-stage "
            "bootstrap: pairs resampled, requests resampled within each window",
        },
    }


def _tail_exposure(
    run: ServingRun, ref_w: WindowRecord, cand_w: WindowRecord, tail: str
) -> dict[str, Any]:
    """R7's exposure of a tail primary in one pair, per metric: the reference's quantile and the
    share of the candidate's (and the reference's own) steady requests above it."""
    out: dict[str, Any] = {}
    for metric in REQUEST_METRICS:
        ref, cand = (
            _values(run.window_rows(ref_w), metric),
            _values(run.window_rows(cand_w), metric),
        )
        if len(ref) < 2 or len(cand) == 0:
            out[metric] = None
            continue
        threshold = float(np.quantile(ref, QUANTILES[tail]))
        out[metric] = {
            "ref_quantile_s": threshold,
            "cand_share_above": float(np.mean(cand > threshold)),
            "ref_share_above": float(np.mean(ref > threshold)),
        }
    return out


__all__ = [
    "DEFAULT_RESAMPLES",
    "DRIFT_ALPHA",
    "DRIFT_THRESHOLD",
    "MIN_PAIRS_FOR_FINDING",
    "TEXT_TOLERANCE",
    "TOKENS_TOLERANCE",
    "analyze",
    "drift_check",
    "window_monitor",
    "window_rates",
]
