"""Why a recorded verdict has its status: the one condition that decided it (R11, R12, R17).

A recorded ``VerdictRecorded`` payload keeps the reason its derivation wrote (``primary.reason``)
and the decider's ``notes``; both are part of the payload that the auditor re-derives and compares
byte for byte (R12), so old ledgers must keep them as they are. This module reads those recorded
fields (never re-deriving anything) and names the single condition that decided the final status,
with the figures in percent, for people: ``verdict record``'s answer, the handoff.

The pass rule of R12, as applied here: a target-stage verdict passes when the CI's lower end is at
or above the minimum effect **and** above the measured A/A resolution, i.e. above
``max(min_effect, resolution)`` (the *threshold*), with enough valid pairs, a non-degenerate CI
and no unexplained foreign activity in the sample windows (R17). A screen never passes (R11).

The conditions, in the order they are checked (the first that applies decided):

``too_few_pairs``
    fewer valid pairs than required per test case;
``degenerate``
    a zero-width CI (identical values prove nothing);
``foreign_share``
    R17: foreign activity touched more than a share of a formal stage's pairs; an explanation
    cannot by itself let the result pass (measure again on a quiet host; from ``VerdictRecorded``
    11 a review of the samples by an actor other than the experiment's lifts it);
``foreign_activity``
    R17: pairs overlap unexplained foreign activity (the derivation alone was pass or fail);
``wall_clock``
    R12: the driver's wall clock does not bear out the self-reported times (the derivation
    alone was pass);
``missing_cases``
    R12: a formal stage whose samples leave out a case of the Target's test set, or measured
    another test set (the derivation of what was measured alone was pass);
``stale``
    R11: the reference is no longer the current champion;
``screen``
    R11: a screen that would have passed: screens never pass, the target stage decides;
``pass``
    the CI's lower end is at or above the threshold;
``case_regressed``
    R12: a test case's CI lies wholly on the losing side beyond its resolution, and the Target
    allows no per-case regression (the case is named);
``case_lost``
    R12 (``per_case/v2``): a test case lost more than the minimum effect (or its whole CI is
    below zero) and cannot be outvoted by the others: at most inconclusive (the case is named);
``every_case``
    the Target's aggregation is ``every_case`` and some case did not pass;
``fail``
    the CI's upper end is below the minimum effect (``clear loss`` when below zero);
``below_min_effect``
    the CI straddles the minimum effect: its lower end is below it;
``below_resolution``
    the CI's lower end clears the minimum effect but not the resolution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from perfledger.projections.measurement_flags import WALL_CLOCK_NOTE

#: Condition ids, in the order :func:`explain_verdict` checks them.
CONDITIONS = (
    "too_few_pairs",
    "degenerate",
    "foreign_share",
    "foreign_activity",
    "wall_clock",
    "missing_cases",
    "stale",
    "screen",
    "pass",
    "case_regressed",
    "case_lost",
    "every_case",
    "fail",
    "below_min_effect",
    "below_resolution",
)


#: How a per-case derivation's reason starts when a regressed case blocked the verdict
#: (:func:`perfledger.projections.verdict_cases.derive_case_verdict`).
BLOCKED = "case(s) regressed beyond their resolution"
#: How a ``per_case/v2`` reason starts when a case that lost capped the verdict at inconclusive
#: (:data:`perfledger.projections.verdict_cases.LOSING`).
LOSING = "case(s) lost more than the minimum effect"
#: How the R17 note starts when foreign activity on too many pairs of a formal stage kept it
#: from passing although explained (:mod:`perfledger.commands.workflow.foreign_share`).
FOREIGN_SHARE = "R17: foreign activity touched"
#: How the R12 note starts when a formal stage's samples left out a case of the test set, or
#: measured another test set (:mod:`perfledger.commands.workflow.verdict_guards`).
MISSING_CASES = "R12: not the Target's whole test set"


def pct(ratio: float | None) -> str:
    """Format a ratio (0.1234) as a percentage with two decimals (``"12.34 %"``); ``"n/a"`` for
    None."""
    if ratio is None:
        return "n/a"
    return f"{ratio * 100:.2f} %"


def _note(notes: list[str], prefix: str) -> str | None:
    return next((n for n in notes if n.startswith(prefix)), None)


def explain_verdict(payload: Mapping[str, Any]) -> dict[str, Any]:
    """Name the one condition that decided a recorded verdict.

    Args:
        payload: a ``VerdictRecorded`` payload as builtins (``msgspec.to_builtins``): ``status``,
            ``stage``, ``stale``, ``notes`` and ``primary`` (the derived verdict: ``status``,
            ``reason``, ``estimate``, ``ci_low``, ``ci_high`` (ratios), ``min_effect``,
            ``resolution`` (ratios), ``degenerate``, ``clear_loss``).
    Returns: ``{"status", "condition" (one of :data:`CONDITIONS`), "reason" (one sentence, figures
        in percent), "estimate", "ci_low", "ci_high", "min_effect", "resolution", "threshold"
        (ratios; threshold = max(min_effect, resolution), what the CI's lower end must reach)}``.
    Raises: KeyError when ``payload`` lacks ``status`` or ``primary``.
    """
    primary = payload["primary"]
    status = payload["status"]
    stage = payload.get("stage", "target")
    notes = list(payload.get("notes") or ())
    low, high = primary.get("ci_low"), primary.get("ci_high")
    min_effect = float(primary.get("min_effect", 0.0))
    resolution = float(primary.get("resolution", 0.0))
    threshold = max(min_effect, resolution)
    derived = primary.get("status")
    ci = f"CI [{pct(low)}, {pct(high)}]"
    # an explanation's note (R17, activity explain) says what cleared, not what kept a pass out
    r17 = next(
        (n for n in notes if n.startswith("R17") and "explained after the samples" not in n), None
    )
    wall = _note(notes, WALL_CLOCK_NOTE)
    if derived == "inconclusive" and low is None:
        condition, reason = "too_few_pairs", str(primary.get("reason", "too few valid pairs"))
    elif primary.get("degenerate"):
        condition = "degenerate"
        reason = "degenerate CI: the paired values are identical, which proves nothing"
    elif _note(notes, FOREIGN_SHARE) is not None and status == "inconclusive":
        condition = "foreign_share"
        reason = f"{_note(notes, FOREIGN_SHARE)}; without it the derivation was {derived} ({ci})"
    elif r17 is not None and status == "inconclusive":
        condition = "foreign_activity"
        reason = (
            f"{r17}; without it the derivation was {derived} ({ci}); if the activity cannot "
            "affect the metric, another actor's review explains it (`perfledger review record`, "
            "then `perfledger activity explain` citing it, before the verdict); else re-measure "
            "on a quieter machine"
        )
    elif wall is not None and status == "inconclusive" and derived == "pass":
        condition = "wall_clock"
        reason = f"{wall}; without it the derivation was pass ({ci})"
    elif _note(notes, MISSING_CASES) is not None and status == "inconclusive" and derived == "pass":
        condition = "missing_cases"
        reason = f"{_note(notes, MISSING_CASES)}; the cases measured alone passed ({ci})"
    elif payload.get("stale") and status == "inconclusive" and derived != "inconclusive":
        condition = "stale"
        reason = f"R11: the reference is no longer the current champion (stale); {ci}"
    elif stage == "screen" and derived == "pass":
        condition = "screen"
        reason = (
            f"screen stages never pass (R11): {ci} clears the threshold {pct(threshold)}; "
            "the target stage decides"
        )
    elif primary.get("blocking") and str(primary.get("reason", "")).startswith(LOSING):
        condition = "case_lost"
        reason = f"R12: {primary.get('reason', '')}"
    elif primary.get("blocking") and str(primary.get("reason", "")).startswith(BLOCKED):
        condition = "case_regressed"
        reason = f"R12: {primary.get('reason', '')}"
    elif primary.get("aggregation") == "every_case" and derived != "pass":
        condition = "every_case"
        reason = str(primary.get("reason", ""))
    elif derived == "pass":
        condition = "pass"
        reason = (
            f"CI lower end {pct(low)} >= threshold {pct(threshold)} "
            f"(max of minimum effect {pct(min_effect)} and resolution {pct(resolution)})"
        )
    elif derived == "fail":
        condition = "fail"
        reason = f"CI upper end {pct(high)} < minimum effect {pct(min_effect)}" + (
            " (a clear loss: the whole CI is below zero)" if primary.get("clear_loss") else ""
        )
    elif low is not None and low < min_effect:
        condition = "below_min_effect"
        reason = (
            f"CI lower end {pct(low)} < minimum effect {pct(min_effect)} "
            f"(the CI straddles it: upper end {pct(high)})"
        )
    else:
        condition = "below_resolution"
        reason = (
            f"CI lower end {pct(low)} clears the minimum effect {pct(min_effect)} but not the "
            f"A/A resolution {pct(resolution)}: a tighter resolution (a longer `measure aa`: more --runs) "
            "or more pairs could decide it"
        )
    return {
        "status": status,
        "condition": condition,
        "reason": reason,
        "estimate": primary.get("estimate"),
        "ci_low": low,
        "ci_high": high,
        "min_effect": min_effect,
        "resolution": resolution,
        "threshold": threshold,
        "statistic": primary.get("statistic"),
        "aggregation": primary.get("aggregation"),
        "unit": payload.get("unit"),
        "samples_provenance": payload.get("samples_provenance"),
        # each case as recorded, with the label people read (a case's "fail" is below_min_effect)
        "cases": [{**c, "label": case_label(c.get("status"))} for c in primary.get("cases") or ()],
    }


#: The label people read for a case's recorded ``status`` where the word would mislead: a
#: case's ``fail`` means only that its improvement CI's upper end lies below the minimum effect
#: (the case alone cannot show the minimum effect), not what ``fail`` means for a verdict. The
#: recorded data keeps ``status``; readers show :func:`case_label`.
CASE_LABELS = {"fail": "below_min_effect"}


def case_label(status: str | None) -> str:
    """The label shown for a case's recorded ``status`` (:data:`CASE_LABELS`; others as is)."""
    return CASE_LABELS.get(str(status), str(status))


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def case_line(case: Mapping[str, Any], unit: str | None = None) -> str:
    """One case's figures for people: the absolute per-call statistic of each subject with its
    CI (original -> candidate, in ``unit``), the improvement with its CI, the case's status."""
    if case.get("ref") is None:
        return f"case {case['case']}: no valid pairs ({case_label(case.get('status'))})"
    u = f" {unit}" if unit else ""
    mark = ", regressed" if case.get("regressed") else ""
    return (
        f"case {case['case']}: {_num(case.get('ref'))}{u} "
        f"[{_num(case.get('ref_low'))}, {_num(case.get('ref_high'))}] -> "
        f"{_num(case.get('cand'))}{u} [{_num(case.get('cand_low'))}, "
        f"{_num(case.get('cand_high'))}]; improvement {pct(case.get('estimate'))} "
        f"CI [{pct(case.get('ci_low'))}, {pct(case.get('ci_high'))}] "
        f"({case.get('n_pairs', 0)} pairs): {case_label(case.get('status'))}{mark}"
    )


def provenance_text(source: str | None) -> str | None:
    """How readers mark samples of ``source`` (R5): a line for samples recorded from outside
    perfledger or reported by the subject, None for measured ones (and for verdicts recorded before provenance was kept)."""
    if source == "outside":
        return "samples recorded from outside perfledger (not measured by it; R5)"
    if source == "reported":
        return "figures the subject reported (its own timer, not perfledger's clock; R5)"
    return None


def implausible_lines(implausible: Any) -> list[str]:
    """How readers flag samples' implausible ratios (R12): one line per case (``implausible``:
    case -> candidate/reference ratio; unset or empty: none)."""
    if not isinstance(implausible, dict):
        return []
    return [
        f"FLAG implausible ratio: case {case} measured {ratio:.4g}x its reference (R12: no "
        "champion until another actor's review names and explains it)"
        for case, ratio in implausible.items()
    ]


def _as_speedup(improvement: float | None, payload: Mapping[str, Any]) -> str:
    """`` (1.25x)``: R12's improvement named as the speedup it is (``ref/cand`` for a
    lower-is-better metric: ``1/(1 - g)``; ``1 + g`` for higher-is-better); empty without one."""
    if improvement is None:
        return ""
    lower = (payload.get("primary") or {}).get("direction", "lower_is_better") == "lower_is_better"
    if lower and improvement >= 1.0:
        return ""
    return f" ({1.0 / (1.0 - improvement) if lower else 1.0 + improvement:.4g}x)"


def verdict_lines(payload: Mapping[str, Any]) -> list[str]:
    """The text lines ``verdict record`` prints under its event line: status with the deciding
    condition, the estimate and CI in percent, the threshold used, then the recorded notes."""
    e = explain_verdict(payload)
    how = f" ({e['statistic']}, {e['aggregation']})" if e.get("statistic") else ""
    lines = [
        f"status {e['status']}: {e['reason']}",
        f"  estimate {pct(e['estimate'])}{_as_speedup(e['estimate'], payload)}{how}, "
        f"CI [{pct(e['ci_low'])}, {pct(e['ci_high'])}]; "
        f"threshold {pct(e['threshold'])} = max(minimum effect {pct(e['min_effect'])}, "
        f"resolution {pct(e['resolution'])})",
    ]
    lines += [f"  {case_line(c, e.get('unit'))}" for c in e["cases"]]
    lines += [
        f"  guardrail {g.get('metric')}: {g.get('status')}: {g.get('reason')}"
        for g in payload.get("guardrails") or ()
    ]
    marked = provenance_text(e.get("samples_provenance"))
    if marked:
        lines.append(f"  {marked}")
    lines += [f"  note: {n}" for n in payload.get("notes") or ()]
    return lines


def measured_details(m: Any) -> list[str]:
    """The lines under a claims row (``m``: its measured figures, or None): per-case figures
    (R12: absolute per-call statistic, original -> candidate, with CIs), implausible cases and
    the outside-samples mark (R5). Shared by ``perfledger claims`` and the report."""
    if m is None:
        return []
    lines = [case_line(msgspec.to_builtins(c), m.unit) for c in m.cases]
    lines += implausible_lines(m.implausible)
    marked = provenance_text(m.samples_provenance)
    return lines + ([marked] if marked else [])
