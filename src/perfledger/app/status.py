"""Where a session stands (SPEC.md section 6): the use case behind ``perfledger status`` and the
MCP server's ``status`` tool.

For each current Target: the Target itself (primary, minimum effect, resolution), how far its
readiness chain got (R2-R4), the champion with its own final-audit standing (R13), the
experiments still open and their stage, the obligations that block decisions (R14
reconciliations owed, unresolved conflicts, R11 stale results) and the next decisions the rules
accept now (:func:`perfledger.app.next_steps.allowed_decisions`, which runs the deciders dry on
the head; nothing is appended), each with the command line that makes it. How a decision is
written as a command is the adapter's (``recommend``: the CLI's flags), so this module imports
no adapter.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

import msgspec

from perfledger.app.command_lines import recommended_command
from perfledger.app.handoff import resume_context
from perfledger.app.handoff_request import handoff_request
from perfledger.app.next_steps import allowed_decisions, former_champions, obligations
from perfledger.errors import BadRequest
from perfledger.projections.champions import final_audit_standing
from perfledger.projections.handoff import derive_handoff
from perfledger.projections.target_kind import target_kind

#: ``(state, target_id, decision) -> the command line that makes it`` (an adapter's).
Recommend = Callable[[Any, str, Any], str]


def _no_command(state: Any, target_id: str, decision: Any) -> str:
    """A :data:`Recommend` that writes the operation alone (a Python caller's default)."""
    return decision.op


#: Experiment statuses that close an experiment (it is no longer "open" in the status).
CLOSED_STATUSES = frozenset({"rejected", "champion"})


def _primary_text(target: Any) -> str:
    p = target.definition.primary
    return f"{p.name} ({p.statistic}, {p.unit}, {p.direction.replace('_', ' ')})"


def _experiments(state: Any, target: Any) -> list[dict[str, Any]]:
    """The Target's experiments not closed (rejected, or the champion), with stage, status,
    the claim's bound and each recorded verdict's status."""
    rows = []
    demoted = former_champions(target)  # replaced by a later champion: closed too
    for experiment_id in target.experiments:
        e = state.experiments.get(experiment_id)
        if e is None or e.status in CLOSED_STATUSES or experiment_id in demoted:
            continue
        verdicts = {s: state.verdicts[s].status for s in e.verdicts if s in state.verdicts}
        rows.append(
            {
                "experiment_id": experiment_id,
                "stage": e.stage,
                "status": e.status,
                "bound": e.created.figures.bound,
                "verdicts": verdicts,
            }
        )
    return rows


def target_status(
    ledger: Any, state: Any, target_id: str, recommend: Recommend = _no_command
) -> dict[str, Any]:
    """The status of one Target as a JSON-able dict (see the module docstring); ``recommend``
    writes each next decision's ``command``.

    Raises: KeyError for an unknown Target."""

    target = state.targets[target_id]
    standing = final_audit_standing(state, target)
    handoff = derive_handoff(
        state, target_id, resume_context(ledger, state, target_id, artifacts=False)
    )
    decisions = allowed_decisions(
        state, target_id, ledger.payload, handoff_request(handoff, gpu_used_s=0.0, wall_used_s=0.0)
    )
    return {
        "target_id": target_id,
        "title": target.definition.title,
        "target_status": target.status,
        "primary": _primary_text(target),
        "min_effect": target.definition.min_effect,
        "resolution": target.resolution.resolution if target.resolution else None,
        "ready": {
            "readiness": target.readiness is not None,
            "metric_audit": target.definition.primary.name in target.metric_audits,
            "baseline": target.baseline is not None,
            "resolution": target.resolution is not None,
        },
        "diagnostic_only": target.diagnostic_only,
        "champion": target.champion or "original",
        "final_audit": msgspec.to_builtins(standing),
        "final_audit_text": standing.text(),
        "primary_achieved": handoff.primary_achieved,
        "experiments": _experiments(state, target),
        "kind": target_kind(target),
        "obligations": obligations(state, target_id),
        "next": [
            {**msgspec.to_builtins(d), "command": recommend(state, target_id, d)} for d in decisions
        ],
        "cmd": cmd_legend(target),
    }


def cmd_legend(target: Any) -> str | None:
    """What ``CMD`` stands for in a workload Target's measuring commands: a command line as
    typed, the readiness driver with ``{subject}`` written as the code's directory (the
    original's, for the baseline, the A/A and ``--ref``), ``{case}`` and ``{output}`` left for
    perfledger to fill; None for a kernel Target."""
    if target_kind(target) == "kernel":
        return None
    readiness = target.readiness
    snapshot = getattr(readiness.original, "snapshot", None) if readiness is not None else None
    argv = list(getattr(snapshot, "argv", None) or []) if snapshot is not None else []
    if argv:
        example = " ".join(argv)
        where = f"the original's: {shlex.quote(example)}"
    else:
        where = "e.g. 'python3 work/original/bench.py {case} {output}'"
    return (
        "CMD is a command line as you type it: the readiness driver with {subject} written as "
        f"the code's directory ({where}); perfledger fills {{case}} and {{output}}"
    )


def session_status(
    ledger: Any, target_id: str | None = None, recommend: Recommend = _no_command
) -> dict[str, Any]:
    """Where the session in ``ledger`` stands: ``{"ledger", "head", "targets": [...]}`` with one
    :func:`target_status` per current (or contested) Target, or only ``target_id``'s; without a
    Target, ``next`` says to freeze one (R1).

    Raises: BadRequest for an unknown ``target_id``."""

    state = ledger.state()
    if target_id is not None and target_id not in state.targets:
        raise BadRequest(f"no Target {target_id!r}", hint="`perfledger status` lists them")
    ids = (
        [target_id]
        if target_id is not None
        else [t for t, v in state.targets.items() if v.status != "superseded"]
    )
    out: dict[str, Any] = {
        "ledger": ledger.path,
        "head": ledger.head(),
        "targets": [target_status(ledger, state, t, recommend) for t in ids],
    }
    if not state.targets:
        out["next"] = [
            {
                "op": "evidence.add",
                "why": "profiler facts may come before a Target",
                "rule": "R6",
                "command": "perfledger evidence add --request FILE",
            },
            {
                "op": "target.freeze",
                "why": "a Target comes before any experiment",
                "rule": "R1",
                "command": "perfledger target freeze --request FILE",
            },
        ]
    return out


def session_status_with_commands(ledger: Any, target_id: str | None = None) -> dict[str, Any]:
    """:func:`session_status` with the CLI's command lines
    (:func:`perfledger.app.command_lines.recommended_command`): the answer of ``perfledger
    status --json`` and of the MCP ``status`` tool. Raises: BadRequest for an unknown
    ``target_id``."""
    return session_status(ledger, target_id, recommended_command)


__all__ = [
    "CLOSED_STATUSES",
    "Recommend",
    "cmd_legend",
    "session_status",
    "session_status_with_commands",
    "target_status",
]
