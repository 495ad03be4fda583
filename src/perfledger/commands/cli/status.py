"""``perfledger status``: where a session stands, on one screen (SPEC.md section 6).

Like ``git status``: for each current Target, the Target itself (primary, minimum effect,
resolution), how far its readiness chain got (R2-R4), the champion with its own final-audit
standing (R13), the experiments still open and their stage, the obligations that block
decisions (R14 reconciliations owed, unresolved conflicts, R11 stale results) and the next
decisions the rules accept now (:func:`perfledger.app.next_steps.allowed_decisions`, which
runs the deciders dry on the head; nothing is appended).

:func:`session_status` is the library call (a JSON-able dict); :func:`render` draws it with rich.
"""

from __future__ import annotations

import shlex
from typing import Any

import msgspec

from perfledger.app.handoff import resume_context
from perfledger.app.handoff_request import handoff_request
from perfledger.app.next_steps import allowed_decisions, former_champions, obligations
from perfledger.commands.cli.show import people_console
from perfledger.commands.cli.workflow import COMMON_FLAGS, FIELD_HINTS
from perfledger.errors import BadRequest
from perfledger.projections.champions import final_audit_standing
from perfledger.projections.handoff import derive_handoff
from perfledger.projections.target_kind import MEASURED_BY, measuring_command, target_kind

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


def target_status(ledger: Any, state: Any, target_id: str) -> dict[str, Any]:
    """The status of one Target as a JSON-able dict (see the module docstring).

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
            {**msgspec.to_builtins(d), "command": recommended_command(state, target_id, d)}
            for d in decisions
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


def session_status(ledger: Any, target_id: str | None = None) -> dict[str, Any]:
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
        "targets": [target_status(ledger, state, t) for t in ids],
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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


#: The command that records a handoff derived from the state (R18).
HANDOFF_COMMAND = (
    "perfledger handoff record --target T --gpu-used S --stop-reason TEXT --feedback TEXT"
)


def recommended_command(state: Any, target_id: str, decision: Any) -> str:
    """The command line that makes ``decision`` (a NextDecision on ``target_id``): the
    measurement of the Target's kind that records it where one does
    (:func:`~perfledger.projections.target_kind.measuring_command`: ``perfledger measure
    workload ...`` or ``perfledger measure kernel ...``, R4-R5, R11), else the write with the
    common flags its request takes and ``--request FILE`` for the fields the caller supplies."""

    op, request = decision.op, decision.request
    # the handoff's command derives the request from the state; the caller adds what it spent
    measured_by = {o: measuring_command(state, target_id, o, decision.about) for o in MEASURED_BY}
    made_by = {**measured_by, "handoff.record": HANDOFF_COMMAND}
    if op in made_by and request is None:
        command = made_by[op].replace(" T ", f" {target_id} ")
        target = state.targets.get(target_id)
        if op == "handoff.record" and target is not None and not target.definition.budget.gpu_s:
            # offer only what the Target budgets: without a GPU budget, no GPU time is stated
            command = command.replace(" --gpu-used S", "")
        return command
    fields = dict(request) if request is not None else {}
    if request is None and "target_id" in FIELD_HINTS.get(op, ()):
        fields["target_id"] = target_id
    words = ["perfledger", command_of(op)]
    for flag, field, _ in COMMON_FLAGS:
        if field in fields and isinstance(fields[field], str):
            words += [flag, shlex.quote(fields.pop(field))]
    if op == "review.record":  # R17: the review that explains activity is another actor's
        words += ["--actor", "REVIEWER"]
    if request is None or fields:  # fields only a request carries
        words.append("--request FILE")
    return " ".join(words)


def command_of(op: str) -> str:
    """The CLI command of operation ``op`` (``final-audit.record`` -> ``final-audit record``)."""
    return op.replace(".", " ")


def render(status: dict[str, Any]) -> None:
    """Print ``status`` (from :func:`session_status`) for people, with rich (no colour when
    stdout is not a terminal)."""
    from rich.table import Table  # noqa: PLC0415 (rich: heavy, only when printing for people)

    console = people_console()  # piped: rows whole, not folded at 80 columns
    console.print(f"ledger {status['ledger']}  head {status['head'][:12]}")
    if not status["targets"]:
        console.print("no Target frozen")
        for d in status.get("next", []):
            console.print(f"  next: {d['command']}  ({d['rule']}) {d['why']}")
        return
    for t in status["targets"]:
        console.print()
        console.print(f"[bold]Target {t['target_id']}[/bold] ({t['target_status']}): {t['title']}")
        console.print(
            f"  primary {t['primary']}; minimum effect {_pct(t['min_effect'])}; "
            f"resolution {_pct(t['resolution'])}"
            + ("; DIAGNOSTIC ONLY" if t["diagnostic_only"] else "")
        )
        missing = [name.replace("_", " ") for name, done in t["ready"].items() if not done]
        console.print("  ready: " + ("yes" if not missing else "missing " + ", ".join(missing)))
        achieved = "primary achieved" if t["primary_achieved"] else "primary not achieved"
        console.print(
            f"  champion [bold]{t['champion']}[/bold]; final audit {t['final_audit_text']}; "
            f"{achieved}"
        )
        if t["experiments"]:
            table = Table(title=None, box=None, padding=(0, 2), show_edge=False)
            for column in ("experiment", "stage", "status", "bound", "verdicts"):
                table.add_column(column)
            for e in t["experiments"]:
                bound = "-" if e["bound"] is None else f"{e['bound']:.4g}x"
                verdicts = ", ".join(f"{s} {v}" for s, v in e["verdicts"].items()) or "-"
                table.add_row(e["experiment_id"], e["stage"], e["status"], bound, verdicts)
            console.print("  open experiments:")
            console.print(table)
        else:
            console.print("  open experiments: none")
        if t["obligations"]:
            console.print("  [bold]obligations:[/bold]")
            for o in t["obligations"]:
                console.print(f"    {o['rule']} {o['kind']}: {o['text']}")
        else:
            console.print("  obligations: none")
        console.print("  next decisions the rules accept now:")
        for d in t["next"]:
            about = f" [{d['about']}]" if d.get("about") else ""
            console.print(
                f"    {d['command']}{about}  ({d['rule']}) {d['why']}",
                markup=False,
            )
        if t.get("cmd") and any(" CMD" in d["command"] for d in t["next"]):
            console.print(f"    ({t['cmd']})", markup=False)
