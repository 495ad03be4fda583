"""The read models drawn for people (SPEC.md section 6): the lines and rich tables of ``target
show``, ``experiment show`` and ``champion show TARGET``: the Target's definition, readiness
chain and baseline per case with units (R1-R4); an experiment's claim and each verdict's per-case
figures with units (R7, R12); the champion's final-audit standing, its code snapshot and the
``perfledger checkout`` command that writes it back (R11, R13). The CLI prints them
(:mod:`perfledger.commands.cli.show`); any other front end may.

Every function here takes builtins (``msgspec.to_builtins`` of the read models), never the
ledger, and does no I/O, so it draws exactly what ``--json`` would print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from perfledger.events.workflow import R14_ONE_IMPROVEMENT
from perfledger.projections.verdict_explain import (
    case_label,
    explain_verdict,
    pct,
    provenance_text,
)


def _table(*columns: str) -> Any:
    from rich.table import Table  # noqa: PLC0415 (rich: heavy, only when printing for people)

    table = Table(box=None, padding=(0, 2), show_edge=False, pad_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _row(table: Any, *cells: str) -> None:
    """Add one row of plain text to ``table`` (cells escaped: a title or a case name holding
    ``[...]`` is shown as written, never read as rich markup)."""
    table.add_row(*(_escape(c) for c in cells))


def _indent(renderable: Any, n: int = 4) -> Any:
    """``renderable`` shifted right by ``n`` columns (tables under their heading line)."""
    from rich.padding import Padding  # noqa: PLC0415 (rich: heavy, only when printing for people)

    return Padding(renderable, (0, 0, 0, n), expand=False)


def _num(value: float | None, unit: str | None = None) -> str:
    """A figure with 4 significant digits and its unit (``1.955 ms``), ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:.4g}" + (f" {unit}" if unit else "")


def _pct(value: float | None) -> str:
    return "-" if value is None else pct(value)


def _speedup(gain: float | None) -> str:
    """A claim's ``expected_improvement`` end recorded before ``ExperimentCreated`` schema 7
    (speedup - 1, the bound's units, R7) as a speedup."""
    return "-" if gain is None else f"{1.0 + gain:.4g}x"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} s"


def _short(digest: str | None, n: int = 16) -> str:
    return "-" if not digest else digest[:n]


def _metric(m: Mapping[str, Any]) -> str:
    """``cpu_ms (mean, ms, lower is better)`` from a primary, guardrail or secondary spec."""
    parts = [p for p in (m.get("statistic"), m.get("unit")) if p]
    direction = str(m.get("direction", "")).replace("_", " ")
    return f"{m.get('name') or m.get('metric')} ({', '.join([*parts, direction])})"


def _escape(text: object) -> str:
    from rich.markup import escape  # noqa: PLC0415 (rich: heavy, only when printing for people)

    return escape(str(text))


# ----------------------------------------------------------------------------- target


def target_lines(target: Mapping[str, Any], experiments: Mapping[str, Any]) -> list[Any]:
    """The renderables of one Target for people (R1-R4, R13): definition, readiness, metric
    audit, baseline per case (in the primary's unit), resolution per case, champion and final
    audit, experiments. ``target`` is a ``TargetView`` as builtins; ``experiments`` maps every
    experiment id to its ``ExperimentView`` as builtins."""
    d = target["definition"]
    unit = d["primary"].get("unit")
    out: list[Any] = [
        f"[bold]Target {_escape(d['target_id'])}[/bold] ({target['status']}): {_escape(d['title'])}",
        f"  primary {_escape(_metric(d['primary']))}; minimum effect {_pct(d['min_effect'])}"
        + ("; DIAGNOSTIC" if d.get("diagnostic") or target.get("diagnostic_only") else ""),
    ]
    for g in d.get("guardrails") or ():
        out.append(
            f"  guardrail {_escape(_metric(g))}: may regress at most "
            f"{_pct(g.get('allowed_regression'))}"
        )
    for s in d.get("secondaries") or ():
        out.append(f"  secondary {_escape(_metric(s))}: threshold {_pct(s.get('threshold'))}")
    out.append(f"  scope {_escape(', '.join(d.get('scope') or ())) or '-'}")
    out.append(f"  risk boundary: {_escape(d.get('risk_boundary', '-'))}")
    budget = d.get("budget") or {}
    out.append(
        f"  budget: wall {_seconds(budget.get('wall_s'))}, GPU {_seconds(budget.get('gpu_s'))}"
    )
    if target.get("superseded_by"):
        out.append(f"  superseded by {_escape(target['superseded_by'])}")
    out += _readiness_lines(target.get("readiness"))
    audit = (target.get("metric_audits") or {}).get(d["primary"]["name"])
    if audit is None:
        out.append("  metric audit: [bold]missing[/bold] (R3: `perfledger metric-audit record`)")
    else:
        matches = "matches the Target" if audit.get("matches_target") else "DOES NOT match"
        out.append(
            f"  metric audit {_escape(audit['metric'])} ({_escape(audit.get('unit'))}): "
            f"{_escape(audit.get('numerator'))} per {_escape(audit.get('denominator'))}; source "
            f"{_escape(audit.get('source'))}; {matches}"
        )
    out += _baseline_lines(target.get("baseline"), target.get("resolution"), unit)
    declared = target.get("declared_baseline")
    if declared:  # R4: recorded and shown, deciding nothing
        out.append(
            f"  declared baseline: median {_num(declared.get('median'), declared.get('unit'))} "
            "[bold]declared[/bold]: typed, it decides nothing (R4: `perfledger measure "
            "baseline` measures one)"
        )
    out += _champion_lines(target)
    out += _experiment_rows(target, experiments)
    for p in (target.get("pending") or {}).values():
        out.append(
            f"  [bold]reconciliation owed[/bold] (R14): {_escape(p['experiment_id'])} result "
            f"{_escape(p['samples_id'])} lies outside its claim "
            f"[{_pct(p.get('predicted_low'))}, {_pct(p.get('predicted_high'))}]: "
            "`perfledger reconcile`"
        )
    return out


def _readiness_lines(r: Mapping[str, Any] | None) -> list[Any]:
    if r is None:
        return ["  readiness: [bold]missing[/bold] (R2: `perfledger readiness record`)"]
    original = r.get("original") or {}
    snap = original.get("snapshot") or None
    test_set = r.get("test_set") or {}
    env = r.get("environment") or {}
    stats = r.get("statistics") or {}
    known = ", ".join(f"{k} {v}" for k, v in env.items() if v) or "none known"
    out = [
        f"  original {_escape(original.get('label') or '-')} {_escape(original.get('content_hash'))}"
        + (f"; code snapshot {_short(snap.get('digest'))}" if snap else "")
        + (
            f"; code not snapshotted (R11): {_escape(original['unsnapshotted'])}"
            if original.get("unsnapshotted")
            else ""
        ),
        f"  test set: {test_set.get('case_count')} case(s) "
        f"({_escape(', '.join(test_set.get('cases') or ()) or '-')}), "
        f"hash {_escape(test_set.get('hash'))}, supplied by {_escape(test_set.get('supplied_by'))}",
        f"  accuracy rule: {_escape(r.get('accuracy_rule'))}",
        f"  driver: {_escape(' '.join((r.get('driver') or {}).get('argv') or ()))}",
        f"  environment: {_escape(known)}"
        + (f"; missing {', '.join(r['missing_lineage'])}" if r.get("missing_lineage") else ""),
        f"  statistics: {stats.get('aggregation')} across cases, "
        f"{_pct(stats.get('confidence'))} CI from {stats.get('resamples')} resamples, at least "
        f"{stats.get('min_pairs_per_case')} pairs per case"
        + ("; outside samples allowed" if stats.get("allow_outside_samples") else "")
        + ("; per-case regression allowed" if stats.get("allow_case_regression") else ""),
    ]
    return out


def _baseline_lines(
    baseline: Mapping[str, Any] | None, resolution: Mapping[str, Any] | None, unit: str | None
) -> list[Any]:
    if baseline is None:
        return ["  baseline: [bold]missing[/bold] (R4: `perfledger measure baseline`)"]
    bunit = baseline.get("unit") or unit
    out: list[Any] = [
        f"  baseline {_escape(baseline['metric'])}: median {_num(baseline.get('median'), bunit)} "
        f"over {len(baseline.get('values') or ())} value(s)"
    ]
    if resolution is None:
        out.append("  resolution: [bold]missing[/bold] (R4: `perfledger measure aa --record`)")
    else:
        out.append(
            f"  resolution {_pct(resolution.get('resolution'))} ({_escape(resolution.get('method'))}, "
            f"{resolution.get('repeats')} repeats)"
            + (
                " [bold]declared[/bold]: typed, it decides nothing (R4: `perfledger measure aa "
                "--record` measures one)"
                if resolution.get("source") == "declared"
                else ""
            )
        )
    per_case = baseline.get("per_case_median") or {}
    res_case = (resolution or {}).get("per_case") or {}
    if per_case or res_case:
        table = _table("case", f"baseline median ({bunit})", "resolution")
        for case in dict.fromkeys([*per_case, *res_case]):
            _row(table, str(case), _num(per_case.get(case)), _pct(res_case.get(case)))
        out.append(_indent(table))
    return out


def _champion_lines(target: Mapping[str, Any]) -> list[Any]:
    champion = target.get("champion") or "original"
    status = target.get("final_audit_status") or "none"
    audit = target.get("final_audit")
    of = f" ({_escape(audit)})" if audit else ""
    return [f"  champion [bold]{_escape(champion)}[/bold]; final audit {_escape(status)}{of}"]


def _experiment_rows(target: Mapping[str, Any], experiments: Mapping[str, Any]) -> list[Any]:
    ids = list(target.get("experiments") or ())
    if not ids:
        return ["  experiments: none"]
    table = _table("experiment", "stage", "status", "bound", "title")
    for eid in ids:
        e = experiments.get(eid)
        if e is None:
            continue
        bound = e["created"]["figures"].get("bound")
        _row(table,
            eid, e["stage"], e["status"], "-" if bound is None else f"{bound:.4g}x",
            str(e["created"].get("title", "")),
        )  # fmt: skip
    return ["  experiments (`perfledger experiment show ID`):", _indent(table)]


# ----------------------------------------------------------------------------- experiment


def verdict_renderables(samples_id: str, verdict: Mapping[str, Any]) -> list[Any]:
    """One recorded verdict for people (R12): status and the condition that decided it, the
    estimate and CI against the threshold, then a table of every case's per-call figures in the
    primary's unit (reference -> candidate, each with its CI) and improvement with its CI,
    then guardrails and notes. ``verdict`` is a ``VerdictRecorded`` as builtins."""
    e = explain_verdict(verdict)
    unit = e.get("unit")
    how = f" ({e['statistic']}, {e['aggregation']})" if e.get("statistic") else ""
    out: list[Any] = [
        f"  [bold]{_escape(samples_id)}[/bold] {verdict.get('stage')} stage: "
        f"[bold]{e['status']}[/bold]: {_escape(e['reason'])}",
        f"    improvement {_pct(e['estimate'])}{_escape(how)}, CI [{_pct(e['ci_low'])}, "
        f"{_pct(e['ci_high'])}]; threshold {_pct(e['threshold'])}"
        + ("; CONTRADICTS the claim (R14)" if verdict.get("contradicts_claim") else ""),
    ]
    if e["cases"]:
        u = f" ({unit})" if unit else ""
        table = _table(
            "case", f"reference{u}", f"candidate{u}", "improvement", "CI", "pairs", "status"
        )
        for c in e["cases"]:
            ref = f"{_num(c.get('ref'))} [{_num(c.get('ref_low'))}, {_num(c.get('ref_high'))}]"
            cand = f"{_num(c.get('cand'))} [{_num(c.get('cand_low'))}, {_num(c.get('cand_high'))}]"
            status = case_label(c.get("status")) + (", regressed" if c.get("regressed") else "")
            _row(table,
                str(c["case"]), ref, cand, _pct(c.get("estimate")),
                f"[{_pct(c.get('ci_low'))}, {_pct(c.get('ci_high'))}]",
                str(c.get("n_pairs", 0)), status,
            )  # fmt: skip
        out.append(_indent(table, 6))
    for g in verdict.get("guardrails") or ():
        out.append(
            f"    guardrail {_escape(g.get('metric'))}: {g.get('status')}: {_escape(g.get('reason'))}"
        )
    marked = provenance_text(e.get("samples_provenance"))
    if marked:
        out.append(f"    {marked}")
    out += [f"    note: {_escape(n)}" for n in verdict.get("notes") or ()]
    return out


def claim_lines(created: Mapping[str, Any], rules_schema: int | None = None) -> list[str]:
    """The claim of an ``ExperimentCreated`` payload (builtins) in two plain lines (R7, R8): its
    inputs, the Amdahl bound the tool computed and the predicted interval; the local speedup
    needed to cross the minimum effect and whether the bound clears it. ``rules_schema``: the
    schema the claim was recorded under (None: the current rules); from
    :data:`~perfledger.events.workflow.R14_ONE_IMPROVEMENT` on the interval is in the verdict's
    units (R12) and shown so, before it is speedup - 1 and shown as speedups."""
    claim, figures = created["claim"], created["figures"]
    expected = claim.get("expected_improvement") or {}
    bound = figures.get("bound")
    if rules_schema is None or rules_schema >= R14_ONE_IMPROVEMENT:
        predicted = (
            f"; predicted end-to-end improvement [{_pct(expected.get('low'))}, "
            f"{_pct(expected.get('high'))}] as the verdict measures it"
        )
    else:
        predicted = (
            f"; predicted end-to-end speedup [{_speedup(expected.get('low'))}, "
            f"{_speedup(expected.get('high'))}]"
        )
    return [
        f"claim: coverage f {_num(claim.get('coverage'))}, local speedup s "
        f"{_num(claim.get('local_speedup'))}x, added cost {_num(claim.get('added_cost'))}; "
        + ("no numeric bound (tail primary: exposure stated)" if bound is None else
           f"Amdahl bound {_num(bound)}x")
        + predicted,
        f"to cross the minimum effect: local speedup {_num(figures.get('s_min'))}x "
        f"(cut {_pct(figures.get('r_min'))} of the region's time)"
        + ("; NOT reachable" if figures.get("reachable") is False else "")
        + ("; bound below the minimum effect (R8)" if figures.get("below_min_effect") else "")
        + ("; bound below the resolution (R8)" if figures.get("below_resolution") else ""),
    ]  # fmt: skip


def experiment_lines(experiment: Mapping[str, Any], verdicts: Mapping[str, Any]) -> list[Any]:
    """An experiment for people (R7-R15): title, stage and status, the claim (coverage, local
    speedup, added cost, Amdahl bound, predicted interval, the local speedup needed), its
    preregistration, the samples of each stage and every recorded verdict
    (:func:`verdict_renderables`), and a rejection if any. Builtins of ``ExperimentView`` and of
    ``VerdictRecorded`` by samples id."""
    c = experiment["created"]
    out: list[Any] = [
        f"[bold]Experiment {_escape(c['experiment_id'])}[/bold] of Target "
        f"{_escape(c['target_id'])}: {_escape(c['title'])}",
        f"  stage {experiment['stage']}; status [bold]{experiment['status']}[/bold]; approach "
        f"{c.get('approach')}; candidate {_escape(c['candidate'].get('label') or '-')} "
        f"{_escape(c['candidate'].get('content_hash'))}{_hash_source(c['candidate'])}",
        *(f"  {_escape(line)}" for line in claim_lines(c, experiment.get("rules_schema", 1))),
        f"  a failure would reject its {c['preregistration'].get('rejects')} (R9)",
    ]
    samples = experiment.get("samples") or {}
    if samples:
        out.append(
            "  samples: " + "; ".join(f"{stage} {', '.join(ids)}" for stage, ids in samples.items())
        )
    if experiment.get("reconciliations"):
        out.append(f"  reconciliations recorded: {experiment['reconciliations']} (R14)")
    if verdicts:
        out.append("  verdicts:")
        for samples_id, verdict in verdicts.items():
            out += verdict_renderables(samples_id, verdict)
    else:
        out.append("  verdicts: none yet (`perfledger verdict record --samples ID`)")
    rejection = experiment.get("rejection")
    if rejection:
        out.append(
            f"  rejected: closes {rejection.get('closes')} (R15): {_escape(rejection.get('reason'))}"
        )
    return out


def _hash_source(candidate: dict[str, Any]) -> str:
    """How the candidate's content hash was obtained (R11, ``ExperimentCreated`` schema 6):
    `` (computed from DIR)`` or `` (declared: typed, not computed)``; empty before."""
    source = candidate.get("content_hash_source")
    if source == "computed":
        return f" (computed from {_escape((candidate.get('snapshot') or {}).get('subject', '?'))})"
    if source == "declared":
        return " (declared: typed, not computed)"
    return ""


# ----------------------------------------------------------------------------- champion


def champion_lines(data: Mapping[str, Any]) -> list[Any]:
    """One Target's champion for people (R11, R13): who it is and since which event, its final
    audit standing, its code snapshot with the ``perfledger checkout`` command that writes it
    back, then its lineage (each champion's target-stage verdict, estimate and CI, and final
    audits). ``data`` is ``champion show TARGET --json``'s object."""
    champion = data.get("champion") or "original"
    since = data.get("since_event")
    out: list[Any] = [
        f"[bold]Target {_escape(data['target_id'])}[/bold] ({data.get('target_status')}): "
        f"champion [bold]{_escape(champion)}[/bold]"
        + (f" since event {_short(since)}" if since else "")
    ]
    audit = data.get("final_audit") or None
    if audit:
        of = f" ({_escape(audit.get('samples_id'))})" if audit.get("samples_id") else ""
        out.append(f"  final audit {audit.get('status')}{of}")
    else:
        out.append(f"  final audit {data.get('final_audit_status') or 'none'}")
    draws = data.get("formal_draws") or {}
    if draws.get("text"):  # how many formal target stages the champion was drawn from (R14)
        out.append(f"  {_escape(draws['text'])}")
    if data.get("open_conflicts"):
        out.append(
            f"  [bold]CONFLICTS[/bold] {_escape(', '.join(data['open_conflicts']))}: "
            "`perfledger resolve CONFLICT --keep OPTION`"
        )
    snap = data.get("snapshot")
    if snap:
        git = snap.get("git") or {}
        where = ""
        if git:  # where the code lived in the user's own git work tree (R11)
            dirty = " with uncommitted changes" if git.get("dirty") else ""
            where = f"; git commit {_short(git.get('commit'), 12)}{dirty}"
        out.append(
            f"  code: snapshot {_short(snap.get('digest'))} of {_escape(snap.get('of'))}, "
            f"{snap.get('files')} file(s) from {_escape(snap.get('subject'))}{where}"
        )
        out.append(f"  get it: {_escape(snap.get('checkout'))}")
    else:
        out.append("  code: no snapshot recorded (a Target recorded before code identity)")
    steps: Sequence[Mapping[str, Any]] = data.get("lineage") or ()
    if steps:
        table = _table("champion", "decision", "samples", "verdict", "improvement (CI)",
                       "pairs", "final audits")  # fmt: skip
        for s in steps:
            audits = (
                ", ".join(
                    f"{a.get('samples_id')} {a.get('status')} {_pct(a.get('estimate'))}"
                    for a in s.get("final_audits") or ()
                )
                or "none"
            )
            _row(table,
                str(s.get("champion")), str(s.get("decision")), str(s.get("samples_id") or "-"),
                str(s.get("verdict_status") or "-"),
                f"{_pct(s.get('estimate'))} [{_pct(s.get('ci_low'))}, {_pct(s.get('ci_high'))}]",
                str(s.get("n_pairs") or "-"), audits,
            )  # fmt: skip
        out += ["  lineage (original first):", _indent(table)]
    return out


__all__ = [
    "champion_lines",
    "claim_lines",
    "experiment_lines",
    "target_lines",
    "verdict_renderables",
]
