"""``perfledger status``: where a session stands, on one screen (SPEC.md section 6); the adapter
of :mod:`perfledger.app.status`.

Like ``git status``: the use case composes each current Target's standing, its obligations and
the next decisions the rules accept now, each with the CLI's command line
(:func:`perfledger.app.status.session_status_with_commands`); this module draws it for people
(:func:`render`, plain text).
"""

from __future__ import annotations

import os
from typing import Any

import click


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f} %"


def _table_lines(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """``rows`` under ``columns`` as aligned plain-text lines: each column as wide as its widest
    cell, two spaces either side of a cell (the layout rich's borderless table drew)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    return [
        "  " + "    ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in (columns, *rows)
    ]


def render(status: dict[str, Any]) -> None:
    """Print ``status`` (from :func:`~perfledger.app.status.session_status_with_commands`) for people: plain lines, the Target's
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


__all__ = ["render"]
