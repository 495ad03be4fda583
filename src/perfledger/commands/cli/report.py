"""``perfledger report --html OUT.html``: one self-contained page for a person (SPEC.md section 6).

The page needs no network and no script: CSS inline, every plot an inline PNG (``data:`` URI)
drawn with matplotlib's Agg backend. Sections, top to bottom: the Target and its status (champion,
final audit, primary achieved), the plots, the claims-vs-outcomes table (:mod:`perfledger.
projections.claims`), rejected directions, and a timeline of decisions (newest last).

Plots:

1. per experiment (the latest 30), the distribution of paired improvements (the per-pair ratios a verdict is
   derived from, R12) of its latest target (else screen) samples, with the verdict's median and
   CI and the minimum-effect line;
2. champion progression over time: the end-to-end speedup of the current champion relative to
   the original (product of each lineage step's verdict speedup, R13), by decision time;
3. predicted vs measured gain: each claim's Amdahl bound (speedup) against the measured speedup
   with its CI (R7, R14), with the ``measured = predicted`` diagonal.
"""

from __future__ import annotations

import base64
import html
import io
import os
from datetime import datetime
from typing import Any

import msgspec

from perfledger.errors import BadRequest
from perfledger.events.kinds import get_kind
from perfledger.events.vocabulary import DECISION_KINDS
from perfledger.projections.champions import final_audit_standing
from perfledger.projections.claims import claims, improvement_to_speedup
from perfledger.projections.handoff import default_target
from perfledger.projections.rejections import rejected
from perfledger.projections.verdict_explain import case_line, implausible_lines, provenance_text
from perfledger.projections.verdicts import Pair, improvements

#: At most this many decisions are listed in the timeline (the newest ones).
TIMELINE_LIMIT = 500
#: At most this many experiments (the latest) get a distribution in plot 1.
MAX_DISTRIBUTIONS = 30


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


def pair_improvements(state: Any, samples_id: str, payload_of: Any) -> list[float]:
    """The per-pair improvements (ratios, R12) of ``samples_id``'s primary metric, valid pairs
    only (R5); the pairs are read from the samples' event (``payload_of``: event id ->
    payload)."""

    samples = payload_of(state.samples[samples_id].event_id)
    target = state.targets[samples.target_id].definition
    metric = target.primary.name
    pairs = [
        Pair(p.case, tuple(p.ref.values.get(metric, ())), tuple(p.cand.values.get(metric, ())),
             p.ref.correct and p.cand.correct)
        for p in samples.pairs
    ]  # fmt: skip
    try:
        return [gain for _, gain in improvements(pairs, target.primary.direction)]
    except ValueError:
        return []


def champion_progress(
    state: Any, target_id: str, times: dict[str, str]
) -> list[tuple[str, str, float]]:
    """(time, champion, cumulative speedup vs the original) after each lineage step of
    ``target_id``; starts at the Target's freezing with the original at 1.0."""

    target = state.targets[target_id]
    points = [(times.get(target.frozen_event, ""), "original", 1.0)]
    level = {"original": 1.0}
    for entry in target.lineage:
        verdict = state.verdicts.get(entry.samples_id or "")
        if entry.champion == "original":
            value = 1.0
        elif verdict is not None:
            step = improvement_to_speedup(verdict.primary.estimate, verdict.primary.direction)
            samples = state.samples.get(verdict.samples_id)
            ref = (
                samples.reference.experiment_id
                if samples and samples.reference.kind == "champion"
                else "original"
            )
            value = level.get(ref or "original", 1.0) * (step or 1.0)
        else:  # a demotion (R13) restores the level of the champion current again
            value = level.get(entry.champion, points[-1][2])
        level[entry.champion] = value
        points.append((times.get(entry.event_id, ""), entry.champion, value))
    return points


# ----------------------------------------------------------------------------- plots


def plot_distributions(state: Any, rows: list[Any], payload_of: Any) -> str | None:
    """Plot 1: paired improvements per experiment, with CI and the minimum-effect line."""
    data = [
        (r, pair_improvements(state, r.measured.samples_id, payload_of))
        for r in rows
        if r.measured and r.measured.samples_id in state.samples  # R14: a run without samples
    ]
    data = [(r, values) for r, values in data if values][-MAX_DISTRIBUTIONS:]
    if not data:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(max(5.0, 1.3 * len(data) + 2.5), 3.8))
    positions = list(range(1, len(data) + 1))
    axes.violinplot([values for _, values in data], positions=positions, showextrema=False)
    for x, (row, values) in zip(positions, data, strict=True):
        axes.scatter([x] * len(values), values, s=9, color="0.25", zorder=3)
        m = row.measured
        if m.estimate is not None and m.ci_low is not None and m.ci_high is not None:
            axes.errorbar([x + 0.18], [m.estimate], yerr=[[m.estimate - m.ci_low],
                          [m.ci_high - m.estimate]], fmt="D", color="tab:red", capsize=4,
                          label="median and CI" if x == 1 else None)  # fmt: skip
    min_effect = data[0][0].min_effect
    axes.axhline(
        min_effect, color="tab:green", linestyle="--", label=f"minimum effect {min_effect:g}"
    )
    axes.axhline(0.0, color="0.6", linewidth=0.8)
    axes.set_xticks(positions, [f"{r.experiment_id}\n({r.measured.stage})" for r, _ in data])
    axes.set_ylabel("paired improvement (ratio)")
    axes.set_title("Paired improvements per experiment")
    axes.legend(loc="best", fontsize=8)
    return _png(figure)


def plot_champions(points: list[tuple[str, str, float]]) -> str | None:
    """Plot 2: the champion's end-to-end speedup vs the original over time."""
    if len(points) < 2:
        return None

    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(6.0, 3.4))
    times = [datetime.fromisoformat(t.replace("Z", "+00:00")) if t else None for t, _, _ in points]
    if all(times):
        xs: list[Any] = times
    else:
        xs = list(range(len(points)))
    axes.step(xs, [p[2] for p in points], where="post", color="tab:blue")
    axes.scatter(xs, [p[2] for p in points], color="tab:blue", zorder=3)
    for x, (_, name, value) in zip(xs, points, strict=True):
        axes.annotate(name, (x, value), textcoords="offset points", xytext=(4, 6), fontsize=8)
    axes.set_ylabel("speedup vs original")
    axes.set_title("Champion progression")
    figure.autofmt_xdate()
    return _png(figure)


def plot_predicted_vs_measured(rows: list[Any]) -> str | None:
    """Plot 3: each claim's bound (predicted speedup) against the measured speedup and CI."""
    points = [
        r for r in rows
        if r.measured is not None and r.measured.speedup is not None
        and (r.recomputed_bound or r.stated_bound) is not None
    ]  # fmt: skip
    if not points:
        return None
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(4.8, 4.2))
    xs = [r.recomputed_bound or r.stated_bound for r in points]
    ys = [r.measured.speedup for r in points]
    low = [y - (r.measured.speedup_low or y) for r, y in zip(points, ys, strict=True)]
    high = [(r.measured.speedup_high or y) - y for r, y in zip(points, ys, strict=True)]
    axes.errorbar(xs, ys, yerr=[low, high], fmt="o", capsize=4, color="tab:purple")
    for r, x, y in zip(points, xs, ys, strict=True):
        axes.annotate(
            r.experiment_id, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8
        )
    span = [min([*xs, *ys, 1.0]) * 0.95, max([*xs, *ys]) * 1.05]
    axes.plot(span, span, color="0.6", linestyle=":", label="measured = predicted")
    axes.set_xlabel("predicted (Amdahl bound, speedup)")
    axes.set_ylabel("measured speedup")
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


def _figure(uri: str | None, alt: str, caption: str) -> str:
    if uri is None:
        return f'<figure><p class="muted">{_esc(caption)}: no data yet.</p></figure>'
    return (
        f'<figure><img class="plot" alt="{_esc(alt)}" src="{uri}">'
        f"<figcaption>{_esc(caption)}</figcaption></figure>"
    )


def _claims_table(rows: list[Any]) -> str:
    head = (
        "<tr><th class=l>experiment</th><th class=l>status</th><th>f</th><th>s</th>"
        "<th>stated bound</th><th>recomputed</th><th>min effect</th><th>measured (CI)</th>"
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
            f"<td>{_pct(r.min_effect)}</td><td>{_esc(measured)}</td>"
            f"<td>{_num(m.speedup if m else None)}</td><td>{_num(r.prediction_error, '+.3f')}</td>"
            f"<td class=l>{_esc(recon)}</td></tr>"
        )
        body += [f"<tr><td></td><td class=l colspan=10>{_esc(line)}</td></tr>" for line in
                 _measured_details(m)]  # fmt: skip
    return f"<table>{head}{''.join(body)}</table>"


def _measured_details(m: Any) -> list[str]:
    """Per-case figures (R12: absolute per-call statistic, original -> candidate, with CIs) and
    the outside-samples mark (R5) under a claims row."""

    if m is None:
        return []
    lines = [case_line(msgspec.to_builtins(c), m.unit) for c in m.cases]
    lines += implausible_lines(m.implausible)
    marked = provenance_text(m.samples_provenance)
    return lines + ([marked] if marked else [])


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


def render_html(state: Any, target_id: str | None, timeline: list[tuple[str, str, str, str]],
                times: dict[str, str], head: str, payload_of: Any) -> tuple[str, int]:  # fmt: skip
    """Render the page; returns (HTML text, number of plot images). ``payload_of`` reads a
    recorded event's payload by id (the samples' pairs)."""

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
    plots = [
        _figure(plot_distributions(state, rows, payload_of), "distribution of paired improvements",
                "Paired improvements per experiment, with the verdict's median and CI and the "
                "minimum effect"),
        _figure(plot_champions(champion_progress(state, tid, times)) if tid else None,
                "champion progression", "Champion progression: speedup vs the original"),
        _figure(plot_predicted_vs_measured(rows), "predicted vs measured gain",
                "Predicted (Amdahl bound) vs measured speedup, with CI"),
    ]  # fmt: skip
    parts.append(f"<h2>Plots</h2><div class=plots>{''.join(plots)}</div>")
    parts.append(f"<h2>Claims vs outcomes</h2>{_claims_table(rows)}")
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
        raise BadRequest(f"no Target {target_id!r}")
    timeline: list[tuple[str, str, str, str]] = []
    times: dict[str, str] = {}
    for event in ledger.events():
        envelope = event.envelope
        if envelope.kind not in DECISION_KINDS:
            continue
        times[envelope.id] = envelope.ts
        timeline.append((envelope.ts[:19].replace("T", " "), envelope.kind, envelope.actor,
                         get_kind(envelope.kind).summary(event.payload)))  # fmt: skip
    page, plots = render_html(
        state, target_id, timeline[-TIMELINE_LIMIT:], times, ledger.head(), ledger.payload
    )
    data = page.encode("utf-8")
    try:
        with open(path, "wb") as handle:
            handle.write(data)
    except OSError as exc:
        raise BadRequest(f"cannot write {path!r}: {exc.strerror}") from None
    return {"path": os.path.abspath(path), "bytes": len(data), "plots": plots}
