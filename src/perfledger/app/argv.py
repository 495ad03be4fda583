"""Checks of a command line's words and options made before any use case's request exists
(SPEC.md section 6), shared by every front end that takes perfledger's command lines: where the
global ``--ledger`` may stand and what it may take, and which forms of ``evidence add`` go
together. Light by design (the errors only): the CLI runs them before loading a command.
"""

from __future__ import annotations

import os

from perfledger.errors import BadRequest

#: The root's options that every subcommand inherits, taking a value: accepted after the
#: subcommand too (``perfledger status --ledger L`` as ``perfledger --ledger L status``).
GLOBAL_VALUE_OPTIONS = ("--ledger",)
#: Commands whose trailing words are another program's argv: nothing is taken from those.
PASSTHROUGH = (("evidence", "ncu"),)


def hoist_global_options(args: list[str]) -> list[str]:
    """``args`` with each global option given after the subcommand (``--ledger PATH`` or
    ``--ledger=PATH``) moved before it, so that it is the root's; words after ``--`` and the
    argv of a passthrough command (``evidence ncu``) are left alone. ``--json`` needs no move:
    the root and every command that answers take it."""
    front: list[str] = []
    rest: list[str] = []
    path: list[str] = []  # the command words seen so far
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--" or tuple(path[:2]) in PASSTHROUGH:
            rest += args[i:]
            break
        name = word.split("=", 1)[0]
        if name in GLOBAL_VALUE_OPTIONS:
            taken = args[i : i + 1] if "=" in word else args[i : i + 2]
            (front if path else rest).extend(taken)
            i += len(taken)
            continue
        if not word.startswith("-"):
            path.append(word)
        rest.append(word)
        i += 1
    return [*front, *rest]


def refuse_misplaced_ledger(args: list[str], commands: list[str]) -> None:
    """Refuse a ``--ledger`` without its value (last word; an empty shell variable) or whose
    value is a command's or an operation's name that no directory has (``schema --ledger
    experiment.create --example``): click would take the next word as the path, and the answer
    ("No such command 'experiment.create'") would name the wrong problem.

    Raises: BadRequest (exit 2) saying what ``--ledger`` took."""
    hint = (
        "give the ledger's directory after --ledger (`perfledger schema OP --example --ledger "
        "DIR`), or leave --ledger out: $PERFLEDGER_DIR, else the git repository of the current "
        "directory"
    )
    path: list[str] = []  # the command words seen so far (as :func:`hoist_global_options`)
    for i, word in enumerate(args):
        if word == "--" or tuple(path[:2]) in PASSTHROUGH:
            return
        if word not in GLOBAL_VALUE_OPTIONS:
            if not word.startswith("-") and (i == 0 or args[i - 1] not in GLOBAL_VALUE_OPTIONS):
                path.append(word)
            continue
        if i + 1 == len(args):
            raise BadRequest(f"{word} has no value: it needs the ledger's directory", hint=hint)
        value = args[i + 1]
        named = value in commands or ("." in value and value.split(".", 1)[0] in commands)
        if named and not os.path.exists(value):
            raise BadRequest(
                f"{word} took {value!r} as its path: give the ledger's directory after {word}",
                hint=hint,
            )


#: The hint of a malformed ``evidence add``.
EVIDENCE_ADD_HINT = (
    "`perfledger evidence add --help` gives the forms; docs/profilers.md the report kinds"
)


def refuse_evidence_form(kind: str | None, report: str | None) -> None:
    """Refuse an ``evidence add`` that mixes its two forms (R6, R16): a REPORT file without
    ``--kind`` (what parses it), or ``--kind`` without the REPORT file.

    Raises: BadRequest (exit 2) naming what is missing."""
    if kind is None and report is not None:
        raise BadRequest(
            "a REPORT file needs --kind (ncu, nsys, nsys-stats, torch, ...)", hint=EVIDENCE_ADD_HINT
        )
    if kind is not None and report is None:
        raise BadRequest(f"--kind {kind} needs the REPORT file", hint=EVIDENCE_ADD_HINT)


__all__ = [
    "EVIDENCE_ADD_HINT",
    "GLOBAL_VALUE_OPTIONS",
    "PASSTHROUGH",
    "hoist_global_options",
    "refuse_evidence_form",
    "refuse_misplaced_ledger",
]
