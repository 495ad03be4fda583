"""``perfledger report --html OUT.html``: one self-contained page for a person (SPEC.md section 6).

The page needs no network and no script: CSS inline, every plot an inline PNG (``data:`` URI)
drawn with matplotlib's Agg backend. Sections, top to bottom: the Target and its status (champion,
final audit, primary achieved), the plots, the claims-vs-outcomes table (:mod:`perfledger.
projections.claims`), rejected directions, and a timeline of decisions (newest last).

Plots (each shows what one recorded event measured; nothing is multiplied or pooled across
cases, and the numbers drawn are written under each picture as JSON, ``pre.plot-data``):

1. per test case, each judged result's absolute per-call statistic of the reference and of the
   candidate with their bootstrap CIs (R12, as its verdict or final audit derived them), on a log
   axis;
2. the champion chain: each champion's end-to-end speedup against the original as measured (its
   final audit, or a target result against the original, R13) with its CI, on a log axis; a
   champion measured only against an earlier champion is marked, never given a product of ratios;
3. predicted vs measured gain: each claim's Amdahl bound (speedup) against the measured speedup
   with its CI (R7, R14), log axes, with the ``measured = predicted`` diagonal.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from typing import Any

from perfledger.errors import BadRequest
from perfledger.events.kinds import get_kind
from perfledger.events.vocabulary import DECISION_KINDS
from perfledger.projections.champions import final_audit_standing
from perfledger.projections.claims import claims, improvement_to_speedup
from perfledger.projections.handoff import default_target
from perfledger.projections.rejections import rejected
from perfledger.projections.verdict_explain import measured_details

#: At most this many decisions are listed in the timeline (the newest ones).
TIMELINE_LIMIT = 500
#: At most this many judged results (the latest) are drawn in plot 1.
MAX_RESULTS = 30
#: At most this many test cases get a panel in plot 1 (the first ones judged).
MAX_CASE_PANELS = 12


def _esc(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:+.2f} %"


def _num(value: float | None, spec: str = ".4g") -> str:
    return "–" if value is None else format(value, spec)


def _png(figure: Any) -> str:
    """Render a matplotlib figure as a base64 PNG ``data:`` URI and close it."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib: optional, plots only)

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(figure)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (matplotlib: optional, plots only)

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib: optional, plots only)

    return plt


# ----------------------------------------------------------------------------- data


def _reference_label(state: Any, samples_id: str) -> str:
    """What ``samples_id`` was compared against: ``original`` or the champion experiment's id."""
    view = state.samples.get(samples_id)
    if view is None or view.reference.kind != "champion":
        return "original"
    return view.reference.experiment_id or "champion"


def case_points(state: Any, target_id: str) -> list[dict[str, Any]]:
    """Plot 1's data: per test case, each judged result's absolute per-call statistic of both
    subjects with their bootstrap CIs, exactly as its ``VerdictRecorded`` or
    ``FinalAuditRecorded`` derived them (R12, per case, never pooled), in recording order.

    Each point: ``samples_id``, ``experiment_id``, ``stage``, ``case``, ``reference``
    (``original`` or the champion compared against), ``unit``, ``ref``/``ref_low``/``ref_high``
    and ``cand``/``cand_low``/``cand_high`` (the metric's unit). Cases without valid pairs are
    left out. Only the latest :data:`MAX_RESULTS` results are kept."""

    results: list[tuple[str, str, str, str, Any, str | None]] = []
    for verdict in state.verdicts.values():
        if verdict.target_id == target_id:
            results.append((verdict.samples_id, verdict.experiment_id, verdict.stage,
                            _reference_label(state, verdict.samples_id), verdict.primary,
                            verdict.unit))  # fmt: skip
    for audit in state.final_audits.values():
        if audit.target_id == target_id:
            results.append((audit.samples_id, audit.champion, "final_audit", "original",
                            audit.primary, audit.unit))  # fmt: skip
    order = {samples_id: i for i, samples_id in enumerate(state.samples)}
    results.sort(key=lambda r: order.get(r[0], len(order)))
    points = []
    for samples_id, experiment_id, stage, reference, primary, unit in results[-MAX_RESULTS:]:
        for case in primary.cases or ():
            if case.ref is None or case.cand is None:
                continue
            points.append({
                "samples_id": samples_id, "experiment_id": experiment_id, "stage": stage,
                "case": case.case, "reference": reference, "unit": unit,
                "ref": case.ref, "ref_low": case.ref_low, "ref_high": case.ref_high,
                "cand": case.cand, "cand_low": case.cand_low, "cand_high": case.cand_high,
            })  # fmt: skip
    return points


def _speedups(primary: Any) -> tuple[float | None, float | None, float | None]:
    """A derived verdict's estimate and CI as end-to-end speedups (reference/candidate for a
    lower-is-better metric, R12's improvement converted by
    :func:`perfledger.projections.claims.improvement_to_speedup`)."""
    return (
        improvement_to_speedup(primary.estimate, primary.direction),
        improvement_to_speedup(primary.ci_low, primary.direction),
        improvement_to_speedup(primary.ci_high, primary.direction),
    )


def champion_chain(state: Any, target_id: str) -> list[dict[str, Any]]:
    """Plot 2's data: each champion of ``target_id``'s lineage, in order, with its end-to-end
    speedup against the original *as measured* (R13): its latest final audit (the champion
    against the original), else its target-stage verdict when that compared against the
    original. Ratios of successive experiments are never multiplied: a champion measured only
    against an earlier champion has ``speedup`` None and names that reference and its own
    measured step (``step``, ``step_low``, ``step_high``).

    Each entry: ``champion``, ``decision``, ``speedup``/``speedup_low``/``speedup_high`` (vs the
    original, or None), ``source`` (the samples id measured against the original), ``reference``
    and the step figures of the result that chose it."""

    target = state.targets[target_id]
    audits: dict[str, Any] = {}
    for audit in state.final_audits.values():
        if audit.target_id == target_id and audit.primary.estimate is not None:
            audits[audit.champion] = audit  # the latest audit of each champion wins
    chain = []
    for entry in target.lineage:
        point: dict[str, Any] = {"champion": entry.champion, "decision": entry.decision,
                                 "speedup": None, "speedup_low": None, "speedup_high": None,
                                 "source": None, "reference": None, "step": None,
                                 "step_low": None, "step_high": None}  # fmt: skip
        if entry.champion == "original":
            point.update(speedup=1.0, speedup_low=1.0, speedup_high=1.0, reference="original")
            chain.append(point)
            continue
        verdict = state.verdicts.get(entry.samples_id or "")
        if verdict is not None and verdict.experiment_id == entry.champion:
            point["reference"] = _reference_label(state, verdict.samples_id)
            point["step"], point["step_low"], point["step_high"] = _speedups(verdict.primary)
        audit = audits.get(entry.champion)
        if audit is not None:
            figures = _speedups(audit.primary)
            point.update(speedup=figures[0], speedup_low=figures[1], speedup_high=figures[2],
                         source=audit.samples_id)  # fmt: skip
        elif point["reference"] == "original" and point["step"] is not None:
            point.update(speedup=point["step"], speedup_low=point["step_low"],
                         speedup_high=point["step_high"], source=entry.samples_id)  # fmt: skip
        chain.append(point)
    return chain


def predicted_points(rows: list[Any]) -> list[dict[str, Any]]:
    """Plot 3's data: per claim with a bound and a measured result, the Amdahl bound (speedup,
    R7) and the measured speedup with its CI against that result's reference (R14)."""
    points = []
    for r in rows:
        bound = r.recomputed_bound or r.stated_bound
        m = r.measured
        if bound is None or m is None or m.speedup is None or m.speedup <= 0:
            continue
        points.append({"experiment_id": r.experiment_id, "samples_id": m.samples_id,
                       "bound": bound, "speedup": m.speedup, "speedup_low": m.speedup_low,
                       "speedup_high": m.speedup_high})  # fmt: skip
    return points


# ----------------------------------------------------------------------------- plots


def _log_scale(axes: Any, which: str = "y") -> None:
    """Put ``axes``' ``which`` axis (``x`` or ``y``) on a log scale with plain-number tick labels
    (1.25, not 1.25 x 10^0)."""
    from matplotlib.ticker import (  # noqa: PLC0415 (matplotlib: optional, plots only)
        FuncFormatter,
        LogFormatter,
    )

    getattr(axes, f"set_{which}scale")("log")
    axis = axes.yaxis if which == "y" else axes.xaxis
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    # minor ticks labelled only where the axis spans little (else they crowd)
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))


def _yerr(values: list[float], lows: list[Any], highs: list[Any]) -> list[list[float]]:
    """Asymmetric error bars from CI ends (a missing end draws no bar)."""
    return [
        [v - (lo if lo is not None else v) for v, lo in zip(values, lows, strict=True)],
        [(hi if hi is not None else v) - v for v, hi in zip(values, highs, strict=True)],
    ]


def plot_cases(points: list[dict[str, Any]], statistic: str) -> str | None:
    """Plot 1: one panel per test case; per judged result, the reference's and the candidate's
    absolute per-call statistic with their CIs, on a log axis (their ratio is the gain)."""
    cases = list(dict.fromkeys(p["case"] for p in points))[:MAX_CASE_PANELS]
    if not cases:
        return None
    plt = _pyplot()
    columns = min(3, len(cases))
    rows_n = (len(cases) + columns - 1) // columns
    figure, grid = plt.subplots(rows_n, columns, figsize=(4.2 * columns, 3.4 * rows_n),
                                squeeze=False)  # fmt: skip
    for axes, case in zip(grid.flat, cases, strict=False):
        mine = [p for p in points if p["case"] == case]
        xs = list(range(len(mine)))
        for key, offset, style, label in (("ref", -0.12, "s", "reference"),
                                          ("cand", 0.12, "o", "candidate")):  # fmt: skip
            values = [p[key] for p in mine]
            axes.errorbar([x + offset for x in xs], values,
                          yerr=_yerr(values, [p[key + "_low"] for p in mine],
                                     [p[key + "_high"] for p in mine]),
                          fmt=style, capsize=3, label=label,
                          color="0.45" if key == "ref" else "tab:blue")  # fmt: skip
        _log_scale(axes)
        axes.set_xticks(xs, [f"{p['experiment_id']}\n{p['stage']}\nvs {p['reference']}"
                             for p in mine], fontsize=7, rotation=30, ha="right")  # fmt: skip
        unit = mine[0]["unit"]
        axes.set_ylabel(f"{statistic} per call" + (f" ({unit})" if unit else "") + ", log")
        axes.set_title(f"case {case}", fontsize=9)
        axes.legend(loc="best", fontsize=7)
    for axes in list(grid.flat)[len(cases) :]:
        axes.set_visible(False)
    figure.tight_layout()
    return _png(figure)


def plot_champions(chain: list[dict[str, Any]]) -> str | None:
    """Plot 2: each champion's end-to-end speedup against the original as measured (final audit,
    or a target result against the original), with its CI, on a log axis."""
    measured = [(i, p) for i, p in enumerate(chain) if p["speedup"] is not None]
    if not any(p["champion"] != "original" for _, p in measured):
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(5.0, 1.1 * len(chain) + 2.0), 3.6))
    xs = [i for i, _ in measured]
    ys = [p["speedup"] for _, p in measured]
    axes.errorbar(xs, ys, yerr=_yerr(ys, [p["speedup_low"] for _, p in measured],
                                     [p["speedup_high"] for _, p in measured]),
                  fmt="o", capsize=4, color="tab:blue")  # fmt: skip
    for x, y in zip(xs, ys, strict=True):
        axes.annotate(f"{y:.3g}x", (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    for i, p in enumerate(chain):
        if p["speedup"] is None:
            axes.annotate(f"not measured vs original\n(vs {p['reference']})", (i, 1.0),
                          textcoords="offset points", xytext=(0, 8), fontsize=7,
                          ha="center", color="0.4")  # fmt: skip
    axes.axhline(1.0, color="0.6", linewidth=0.8)
    _log_scale(axes)
    axes.set_xticks(range(len(chain)), [p["champion"] for p in chain], fontsize=8)
    axes.set_ylabel("speedup vs original (log)")
    axes.set_title("Champions, each measured against the original")
    return _png(figure)


def plot_predicted_vs_measured(points: list[dict[str, Any]]) -> str | None:
    """Plot 3: each claim's bound (predicted speedup) against the measured speedup and CI, on
    log axes."""
    if not points:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(4.8, 4.2))
    xs = [p["bound"] for p in points]
    ys = [p["speedup"] for p in points]
    axes.errorbar(xs, ys, yerr=_yerr(ys, [p["speedup_low"] for p in points],
                                     [p["speedup_high"] for p in points]),
                  fmt="o", capsize=4, color="tab:purple")  # fmt: skip
    for p in points:
        axes.annotate(p["experiment_id"], (p["bound"], p["speedup"]), textcoords="offset points",
                      xytext=(5, 4), fontsize=8)  # fmt: skip
    ends = [v for p in points for v in (p["bound"], p["speedup"], p["speedup_low"],
                                        p["speedup_high"]) if v is not None and v > 0]  # fmt: skip
    span = [min([*ends, 1.0]) * 0.95, max(ends) * 1.05]
    axes.plot(span, span, color="0.6", linestyle=":", label="measured = predicted")
    _log_scale(axes, "x")
    _log_scale(axes, "y")
    axes.set_xlabel("predicted (Amdahl bound, speedup, log)")
    axes.set_ylabel("measured speedup vs its reference (log)")
    axes.set_title("Predicted vs measured gain")
    axes.legend(loc="best", fontsize=8)
    return _png(figure)


# ----------------------------------------------------------------------------- page

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#222;max-width:1200px}
h1{margin-bottom:.2rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem}td,th{border:1px solid #ccc;padding:.25rem .5rem;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}
.status{display:inline-block;padding:.2rem .6rem;border-radius:.3rem;font-weight:600}
.ok{background:#d9f2d9}.no{background:#f7e0c4}.plots{display:flex;flex-wrap:wrap;gap:1rem}
figure{margin:0}figcaption{font-size:.8rem;color:#555}.muted{color:#777}
"""


def _figure(uri: str | None, alt: str, caption: str, name: str, data: Any) -> str:
    """One plot with its caption and the numbers it draws (``<pre class=plot-data
    data-plot=NAME>``, JSON), so that a reader or a test can check them against the ledger."""
    if uri is None:
        return f'<figure><p class="muted">{_esc(caption)}: no data yet.</p></figure>'
    return (
        f'<figure><img class="plot" alt="{_esc(alt)}" src="{uri}">'
        f"<figcaption>{_esc(caption)}</figcaption><details><summary>plotted data</summary>"
        f'<pre class=plot-data data-plot="{_esc(name)}">{_esc(json.dumps(data, indent=1))}</pre>'
        "</details></figure>"
    )


def _claims_table(rows: list[Any]) -> str:
    head = (
        "<tr><th class=l>experiment</th><th class=l>status</th><th>f</th><th>s</th>"
        "<th>stated bound</th><th>recomputed</th><th>min effect</th>"
        "<th>predicted improvement</th><th>measured improvement (CI)</th>"
        "<th>measured speedup</th><th>prediction error</th><th class=l>reconciliation</th></tr>"
    )
    body = []
    for r in rows:
        m = r.measured
        measured = f"{_pct(m.estimate)} ({_pct(m.ci_low)} .. {_pct(m.ci_high)})" if m else "–"
        recon = ("owed, " + ("recorded" if r.reconciled else "missing")) if r.reconciliation_owed else (
            "recorded" if r.reconciled else "–")  # fmt: skip
        body.append(
            f"<tr><td class=l>{_esc(r.experiment_id)}</td><td class=l>{_esc(r.status)}</td>"
            f"<td>{_num(r.coverage, '.3g')}</td><td>{_num(r.local_speedup, '.3g')}</td>"
            f"<td>{_num(r.stated_bound)}</td><td>{_num(r.recomputed_bound)}</td>"
            f"<td>{_pct(r.min_effect)}</td>"
            f"<td>{_pct(r.predicted_low)} .. {_pct(r.predicted_high)}</td><td>{_esc(measured)}</td>"
            f"<td>{_num(m.speedup if m else None)}</td><td>{_num(r.prediction_error, '+.3f')}</td>"
            f"<td class=l>{_esc(recon)}</td></tr>"
        )
        body += [f"<tr><td></td><td class=l colspan=11>{_esc(line)}</td></tr>" for line in
                 measured_details(m)]  # fmt: skip
    return f"<table>{head}{''.join(body)}</table>"


def _timeline(entries: list[tuple[str, str, str, str]]) -> str:
    rows = "".join(
        f"<tr><td class=l>{_esc(ts)}</td><td class=l>{_esc(kind)}</td><td class=l>{_esc(actor)}"
        f"</td><td class=l>{_esc(summary)}</td></tr>"
        for ts, kind, actor, summary in entries
    )
    return (
        "<table><tr><th class=l>time (UTC)</th><th class=l>decision</th><th class=l>actor</th>"
        f"<th class=l>summary</th></tr>{rows}</table>"
    )


def _flags_section(rows: list[Any]) -> str:
    """The measurement flags of the claims' experiments (R5, R12), or '' when there are none."""
    items = "".join(
        f"<li>{_esc(r.experiment_id)}: {_esc(flag)}</li>"
        for r in rows
        for flag in r.measurement_flags
    )
    return f"<h2>Measurement flags</h2><ul>{items}</ul>" if items else ""


def render_html(
    state: Any, target_id: str | None, timeline: list[tuple[str, str, str, str]], head: str
) -> tuple[str, int]:
    """Render the page; returns (HTML text, number of plot images)."""

    tid = target_id or default_target(state)
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>perfledger report"
             f"{(' — ' + _esc(tid)) if tid else ''}</title><style>{_CSS}</style></head><body>"]  # fmt: skip
    if tid is None:
        parts.append("<h1>perfledger report</h1><p>No Target is frozen in this ledger yet.</p>")
        rows: list[Any] = []
    else:
        target = state.targets[tid]
        d = target.definition
        achieved = target.champion is not None and target.final_audit_status == "pass"
        parts.append(
            f"<h1>{_esc(tid)}: {_esc(d.title)}</h1>"
            f"<p>Primary <b>{_esc(d.primary.name)}</b> ({_esc(d.primary.statistic)}, "
            f"{_esc(d.primary.unit)}, {_esc(d.primary.direction)}), minimum effect "
            f"{d.min_effect * 100:g} %. Target status: {_esc(target.status)}.</p>"
            f"<p><span class='status {'ok' if achieved else 'no'}'>primary "
            f"{'achieved' if achieved else 'not achieved'}</span> champion "
            f"<b>{_esc(target.champion or 'original')}</b>, final audit "
            f"{_esc(final_audit_standing(state, target).text())}; ledger head <code>{_esc(head)}</code></p>"
        )
        rows = claims(state, tid)
    cases = case_points(state, tid) if tid else []
    chain = champion_chain(state, tid) if tid else []
    predicted = predicted_points(rows)
    statistic = state.targets[tid].definition.primary.statistic if tid else ""
    plots = [
        _figure(plot_cases(cases, statistic), "per-case absolute times",
                "Per test case: the reference's and the candidate's per-call "
                f"{statistic} with 95 % CIs, as each verdict derived them (log axis)",
                "cases", cases),
        _figure(plot_champions(chain), "champion chain",
                "Champions, each measured end to end against the original (final audit, or a "
                "target result against the original), with CI (log axis)", "champions", chain),
        _figure(plot_predicted_vs_measured(predicted), "predicted vs measured gain",
                "Predicted (Amdahl bound) vs measured speedup, with CI (log axes)",
                "predicted", predicted),
    ]  # fmt: skip
    parts.append(f"<h2>Plots</h2><div class=plots>{''.join(plots)}</div>")
    parts.append(
        "<h2>Claims vs outcomes</h2><p class=muted>An improvement is R12's: (ref - cand)/ref for "
        "a lower-is-better primary, the fraction of time saved (20 % is a speedup of 1.25x), "
        "(cand - ref)/ref for a higher-is-better one; a speedup is ref/cand (cand/ref).</p>"
        f"{_claims_table(rows)}"
    )
    parts.append(_flags_section(rows))
    rejections = rejected(state, tid) if tid else []
    items = "".join(
        f"<li>{_esc(r.experiment_id)}: closes <b>{_esc(r.closes)}</b> — {_esc(r.reason)}</li>"
        for r in rejections
    )
    parts.append(f"<h2>Rejected directions</h2><ul>{items or '<li>none</li>'}</ul>")
    parts.append(f"<h2>Timeline of decisions</h2>{_timeline(timeline)}")
    parts.append("</body></html>\n")
    page = "".join(parts)
    return page, page.count('<img class="plot"')


def build_report(ledger: Any, path: str, *, target_id: str | None = None) -> dict[str, Any]:
    """Write the HTML report of ``ledger`` to ``path``.

    Returns: ``{"path", "bytes", "plots"}``. Raises: BadRequest for an unknown Target or an
    unwritable path.
    """

    state = ledger.state()
    if target_id is not None and target_id not in state.targets:
        raise BadRequest(f"no Target {target_id!r}", hint="`perfledger status` lists the Targets")
    timeline: list[tuple[str, str, str, str]] = []
    for event in ledger.events():
        envelope = event.envelope
        if envelope.kind not in DECISION_KINDS:
            continue
        timeline.append((envelope.ts[:19].replace("T", " "), envelope.kind, envelope.actor,
                         get_kind(envelope.kind).summary(event.payload)))  # fmt: skip
    page, plots = render_html(state, target_id, timeline[-TIMELINE_LIMIT:], ledger.head())
    data = page.encode("utf-8")
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise BadRequest(
            f"cannot write {path!r}: {exc.strerror}", hint="name a writable path"
        ) from None
    return {"path": os.path.abspath(path), "bytes": len(data), "plots": plots}
