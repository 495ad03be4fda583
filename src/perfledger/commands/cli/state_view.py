"""The human form of ``perfledger state``: the folded state at the head, summarised on one
screen (the whole state, every field, stays ``perfledger state --json``).

:func:`state_lines` reads the JSON ``state`` answer (``{"head", "state_hash", "state"}``) and
returns the lines: the ledger, its head and state hash, the events by kind, and per Target its
status, primary, readiness chain, champion and experiments (stage and status), with counts of
what else the state holds.
"""

from __future__ import annotations

from typing import Any

#: The maps of the state shown as counts (name shown -> key).
COUNTED = {
    "evidence": "evidence",
    "samples": "samples",
    "verdicts": "verdicts",
    "final audits": "final_audits",
    "rejections": "rejections",
    "local results": "local_results",
    "host advice": "host_advice",
    "upstream checks": "upstream_checks",
}


def _ready(target: dict[str, Any]) -> str:
    primary = (target.get("definition") or {}).get("primary") or {}
    steps = {
        "readiness": target.get("readiness") is not None,
        "metric audit": primary.get("name") in (target.get("metric_audits") or {}),
        "baseline": target.get("baseline") is not None,
        "resolution": target.get("resolution") is not None,
    }
    missing = [name for name, done in steps.items() if not done]
    return "ready" if not missing else "missing " + ", ".join(missing)


def state_lines(answer: dict[str, Any]) -> list[str]:
    """The lines of ``perfledger state`` for people (module docstring), from its JSON answer."""
    state = answer.get("state") or {}
    lines = [
        f"ledger {state.get('name', '')!r}: {state.get('event_count', 0)} events, head "
        f"{str(answer.get('head', ''))[:12]}, state_hash {str(answer.get('state_hash', ''))[:16]}",
    ]
    kinds = state.get("kinds") or {}
    if kinds:
        lines.append("  events: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    experiments = state.get("experiments") or {}
    for tid, target in sorted((state.get("targets") or {}).items()):
        definition = target.get("definition") or {}
        primary = definition.get("primary") or {}
        lines.append(
            f"Target {tid} ({target.get('status', 'current')}): {definition.get('title', '')}"
        )
        lines.append(
            f"  primary {primary.get('name')} ({primary.get('statistic')}, {primary.get('unit')}, "
            f"{str(primary.get('direction', '')).replace('_', ' ')}); {_ready(target)}; "
            f"champion {target.get('champion') or 'original'}"
        )
        for eid in target.get("experiments") or []:
            e = experiments.get(eid) or {}
            stages = ", ".join(f"{s} {len(ids)}" for s, ids in (e.get("samples") or {}).items())
            lines.append(
                f"  experiment {eid}: {e.get('status', '?')} (stage {e.get('stage', '?')}"
                + (f"; samples {stages}" if stages else "")
                + ")"
            )
    counts = [f"{name} {len(state.get(key) or {})}" for name, key in COUNTED.items()]
    lines.append("  " + ", ".join(counts))
    open_conflicts = [
        cid for cid, c in (state.get("conflicts") or {}).items() if c.get("resolved_by") is None
    ]
    if open_conflicts:
        lines.append("  open conflicts: " + ", ".join(sorted(open_conflicts)))
    lines.append("every field: `perfledger state --json`; what to do next: `perfledger status`")
    return lines
