"""``summary.md`` of a kernel-iteration run: a pure rendering of the run's folded state.

Sections: environment (with the catalog and the limitations), the headline (baseline vs best
with the derived CI), one table row per iteration (status, attempts, methods, times, ratio to the
previous best and to the reference, verdict), the methods (effective, ineffective, all tried),
the input profiles' per-axis digests, and the lineage of kernels by content hash. The same run
always renders to the same text, so an auditor can re-render it from a clone.
"""

from __future__ import annotations

from perfledger.events.catalog import metric_value
from perfledger.events.loop import AXES
from perfledger.events.workflow import DerivedVerdict
from perfledger.projections.loop import RunView, input_profile, lineage


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g} ms"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.2f}%"


def _verdict(verdict: DerivedVerdict | None) -> str:
    if verdict is None:
        return "-"
    if verdict.estimate is None:
        return f"{verdict.status} ({verdict.reason})"
    return (
        f"{verdict.status}: {_pct(verdict.estimate)} "
        f"[{_pct(verdict.ci_low)}, {_pct(verdict.ci_high)}] (n={verdict.n_pairs})"
    )


def _short(content_hash: str) -> str:
    algo, _, digest = content_hash.partition(":")
    return f"{algo}:{digest[:12]}" if digest else content_hash[:19]


def render_summary(run: RunView) -> str:
    """Render ``run`` as Markdown (``summary.md``).

    Args:
        run: a run of :class:`~perfledger.projections.loop.LoopState`.
    Returns: the Markdown text (ends with a newline). Times in ms; improvements are
        ``(best - candidate) / best`` with their bootstrap 95 % CI.
    """
    setup = run.setup
    lines: list[str] = [f"# Kernel-iteration run `{setup.run_id}`", ""]
    lines += [
        f"Baseline `{setup.baseline.name}` ({_short(setup.baseline.content_hash)}), reference "
        f"`{setup.reference.name}` ({_short(setup.reference.content_hash)}), entry `{setup.entry}`, "
        f"dims `{', '.join(f'{k}={v}' for k, v in sorted(setup.dims.items()))}`, "
        f"{setup.iterations} planned iteration(s), minimum effect {setup.min_effect:.1%}.",
        "",
        "## Environment",
        "",
        "| item | value |",
        "|---|---|",
        f"| subject | {setup.subject_kind} |",
        f"| SM architecture | {setup.sm_arch} |",
    ]
    for key, value in sorted(setup.environment.items()):
        lines.append(f"| {key} | {value if value is not None else '(missing)'} |")
    lines += [
        f"| environment id | `{setup.environment_id[:16]}` |",
        f"| catalog | {setup.catalog.catalog_id} v{setup.catalog.version} "
        f"(`{_short(setup.catalog_hash)}`) |",
        "",
    ]
    if setup.limitations:
        lines += ["Limitations (R16):", ""] + [f"- {text}" for text in setup.limitations] + [""]
    lines += ["## Headline", ""]
    final = run.finalized
    baseline_ms = setup.baseline_timing.median_ms
    if run.best_hash == setup.baseline.content_hash:
        lines.append(
            f"The baseline remained the best kernel ({_ms(baseline_ms)} median at setup): no "
            "iteration cleared the minimum effect."
        )
    else:
        headline = final.headline if final is not None else None
        base = final.baseline_median_ms if final is not None else baseline_ms
        best = final.best_median_ms if final is not None else run.best_median_ms
        ratio = best / base if best and base else None
        lines.append(
            f"Best kernel from iteration {run.best_iteration} ({_short(run.best_hash)}): "
            f"{_ms(best)} vs baseline {_ms(base)} ({_ratio(ratio)} of the baseline's time)."
        )
        lines.append("")
        lines.append(f"Baseline vs best, paired and interleaved: {_verdict(headline)}.")
    if setup.reference_timing is not None:
        ref_ms = setup.reference_timing.median_ms
        lines.append("")
        lines.append(f"Reference `{setup.reference.name}`: {_ms(ref_ms)} median at setup.")
    if final is not None:
        lines += ["", f"Stop reason: {final.stop_reason}."]
    lines += [
        "",
        "## Iterations",
        "",
        "| iter | status | attempts | compute | memory | latency | candidate | best before | "
        "ratio to previous best | ratio to reference | improvement [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(run.iterations, key=int):
        view = run.iterations[key]
        closed = view.closed
        if closed is None:
            lines.append(f"| {view.iteration} | open | {view.last_attempt} | | | | | | | | |")
            continue
        chosen = [closed.selection[a].chosen if a in closed.selection else "-" for a in AXES]
        lines.append(
            f"| {view.iteration} | {closed.status} | {max(view.last_attempt, closed.attempt)} "
            f"| {' | '.join(f'`{c}`' for c in chosen)} | {_ms(closed.cand_median_ms)} "
            f"| {_ms(closed.best_median_ms)} | {_ratio(closed.ratio_to_best)} "
            f"| {_ratio(closed.ratio_to_reference)} | {_verdict(closed.verdict)} |"
        )
    lines += ["", "## Methods", ""]
    lines.append(
        "- effective (selected into the best kernel's lineage): "
        + (", ".join(f"`{m}`" for m in run.selected) or "none")
    )
    lines.append(
        "- ineffective (iteration that found it so): "
        + (", ".join(f"`{m}` ({i})" for m, i in sorted(run.ineffective.items())) or "none")
    )
    lines.append("- all tried: " + (", ".join(f"`{m}`" for m in run.tried) or "none"))
    skipped_rows = []
    for key in sorted(run.iterations, key=int):
        closed = run.iterations[key].closed
        if closed is None:
            continue
        for axis in AXES:
            selection = closed.selection.get(axis)
            if selection is None:
                continue
            for entry in selection.skipped:
                skipped_rows.append(
                    f"| {key} | {axis} | `{entry.method}` | {entry.reason} | {entry.detail} |"
                )
    if skipped_rows:
        lines += [
            "",
            "Higher-priority methods not chosen, with their checked reasons (R24):",
            "",
            "| iter | axis | method | reason | detail |",
            "|---|---|---|---|---|",
            *skipped_rows,
        ]
    lines += ["", "## Input profiles (per-axis digest)", ""]
    any_profile = False
    for key in sorted(run.iterations, key=int):
        profile = input_profile(run, int(key))
        if profile is None:
            continue
        any_profile = True
        lines.append(
            f"Iteration {key}: {profile.tool} {profile.tool_version}"
            + (f"; limitations: {'; '.join(profile.limitations)}" if profile.limitations else "")
        )
        for axis in AXES:
            parts = []
            for name in profile.top.get(axis, ()):
                value = metric_value(setup.catalog, profile.metrics, name)
                if value is None:
                    continue
                unit = profile.units.get(name, "derived" if name not in profile.metrics else "")
                parts.append(f"`{name}` = {value:.4g} {unit}".rstrip())
            values = ", ".join(parts)
            lines.append(f"- {axis}: {values or '(none recorded)'}")
        lines.append("")
    if not any_profile:
        lines += ["(no input profile recorded)", ""]
    lines += ["## Lineage of the best kernel", ""]
    for node in lineage(run):
        origin = "baseline" if node.iteration == 0 else f"iteration {node.iteration}"
        lines.append(f"1. `{node.content_hash}` `{node.name}` ({origin}, {node.outcome})")
    others = [
        n
        for n in run.kernels.values()
        if n.content_hash not in {x.content_hash for x in lineage(run)}
    ]
    if others:
        lines += ["", "Other kernels tried:", ""]
        for node in sorted(others, key=lambda n: (n.iteration, n.attempt)):
            lines.append(
                f"- `{node.content_hash}` `{node.name}` (iteration {node.iteration}, attempt "
                f"{node.attempt}, {node.outcome}, from `{_short(node.parent or '')}`)"
            )
    return "\n".join(lines).rstrip() + "\n"
