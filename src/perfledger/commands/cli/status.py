"""``perfledger status``: where a session stands, on one screen (SPEC.md section 6); the adapter
of :mod:`perfledger.app.status`.

Like ``git status``: the use case composes each current Target's standing, its obligations and
the next decisions the rules accept now; this module writes each decision as the CLI's command
line (:func:`recommended_command`: the measurement that records it, or the write with its
common flags) and draws the status for people (:func:`render`, plain text).

:func:`session_status` is the library call with the CLI's command lines (a JSON-able dict).
"""

from __future__ import annotations

import os
import shlex
from typing import Any

import click

from perfledger.app import status as app_status
from perfledger.app.status import cmd_legend
from perfledger.commands.cli.workflow import COMMON_FLAGS, FIELD_HINTS
from perfledger.projections.target_kind import MEASURED_BY, measuring_command


def session_status(ledger: Any, target_id: str | None = None) -> dict[str, Any]:
    """:func:`perfledger.app.status.session_status` with the CLI's command lines
    (:func:`recommended_command`). Raises: BadRequest for an unknown ``target_id``."""
    return app_status.session_status(ledger, target_id, recommended_command)


def target_status(ledger: Any, state: Any, target_id: str) -> dict[str, Any]:
    """:func:`perfledger.app.status.target_status` with the CLI's command lines."""
    return app_status.target_status(ledger, state, target_id, recommended_command)


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


def _table_lines(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` under ``columns`` as aligned plain-text lines: each column as wide as its widest
    cell, two spaces either side of a cell (the layout rich's borderless table drew)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    return [
        "  " + "    ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (columns, *rows)
    ]


def render(status: dict[str, Any]) -> None:
    """Print ``status`` (from :func:`session_status`) for people: plain lines, the Target's
    header and champion in bold on a terminal (no colour when stdout is not one, or where
    ``NO_COLOR`` is set). Plain text rather than rich: importing rich cost ``status`` about as
    much as answering it, and a title is printed as written, never read as markup."""
    color = False if os.environ.get("NO_COLOR") else None  # None: click's terminal test

    def out(line: str = "") -> None:
        click.echo(line, color=color)

    def bold(text: str) -> str:
        return click.style(text, bold=True)

    out(f"ledger {status['ledger']}  head {status['head'][:12]}")
    if not status["targets"]:
        out("no Target frozen")
        for d in status.get("next", []):
            out(f"  next: {d['command']}  ({d['rule']}) {d['why']}")
        return
    for t in status["targets"]:
        out()
        out(bold(f"Target {t['target_id']}") + f" ({t['target_status']}): {t['title']}")
        out(
            f"  primary {t['primary']}; minimum effect {_pct(t['min_effect'])}; "
            f"resolution {_pct(t['resolution'])}"
            + ("; DIAGNOSTIC ONLY" if t["diagnostic_only"] else "")
        )
        missing = [name.replace("_", " ") for name, done in t["ready"].items() if not done]
        out("  ready: " + ("yes" if not missing else "missing " + ", ".join(missing)))
        achieved = "primary achieved" if t["primary_achieved"] else "primary not achieved"
        out(f"  champion {bold(t['champion'])}; final audit {t['final_audit_text']}; {achieved}")
        if t["experiments"]:
            rows = []
            for e in t["experiments"]:
                bound = "-" if e["bound"] is None else f"{e['bound']:.4g}x"
                verdicts = ", ".join(f"{s} {v}" for s, v in e["verdicts"].items()) or "-"
                rows.append((e["experiment_id"], e["stage"], e["status"], bound, verdicts))
            out("  open experiments:")
            for line in _table_lines(("experiment", "stage", "status", "bound", "verdicts"), rows):
                out(line)
        else:
            out("  open experiments: none")
        if t["obligations"]:
            out("  " + bold("obligations:"))
            for o in t["obligations"]:
                out(f"    {o['rule']} {o['kind']}: {o['text']}")
        else:
            out("  obligations: none")
        out("  next decisions the rules accept now:")
        for d in t["next"]:
            about = f" [{d['about']}]" if d.get("about") else ""
            out(f"    {d['command']}{about}  ({d['rule']}) {d['why']}")
        if t.get("cmd") and any(" CMD" in d["command"] for d in t["next"]):
            out(f"    ({t['cmd']})")


#: ``cmd_legend``: tests and older callers import it from here (its home: perfledger.app.status).
__all__ = [
    "HANDOFF_COMMAND",
    "cmd_legend",
    "command_of",
    "recommended_command",
    "render",
    "session_status",
    "target_status",
]
