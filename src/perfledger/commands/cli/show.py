"""``target show``, ``experiment show`` and ``champion show TARGET`` for people (SPEC.md section 6):
the lines of :mod:`perfledger.app.show` printed on a rich console, like ``perfledger status``.
The commands answer with JSON under ``--json`` (unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfledger.app.show import champion_lines, claim_lines, experiment_lines, target_lines

#: Columns a table may use when the output is not a terminal (a terminal's own width otherwise).
PIPED_WIDTH = 240


def people_console() -> Any:
    """A rich console for people: no highlighting; :data:`PIPED_WIDTH` columns when stdout is
    not a terminal (so that rows stay whole in a pipe or a captured answer)."""
    from rich.console import Console  # noqa: PLC0415 (rich: heavy, only when printing for people)

    # highlight off: rich would colour numbers and paths in ways that mean nothing here
    console = Console(highlight=False, soft_wrap=True)
    if not console.is_terminal:  # piped or captured: rows whole (grep-able), not folded at 80
        console.width = PIPED_WIDTH
    return console


def print_targets(targets: Mapping[str, Any], experiments: Mapping[str, Any]) -> None:
    """Print ``targets`` (Target id -> ``TargetView`` builtins) for people; ``experiments``
    maps experiment ids to ``ExperimentView`` builtins."""
    console = people_console()
    if not targets:
        console.print("no current Target: `perfledger target freeze` (R1)")
        return
    for i, target in enumerate(targets.values()):
        if i:
            console.print()
        for line in target_lines(target, experiments):
            console.print(line)


def print_experiment(experiment: Mapping[str, Any], verdicts: Mapping[str, Any]) -> None:
    """Print :func:`experiment_lines` of one experiment."""
    console = people_console()
    for line in experiment_lines(experiment, verdicts):
        console.print(line)


def print_champion(data: Mapping[str, Any]) -> None:
    """Print :func:`champion_lines`."""
    console = people_console()
    for line in champion_lines(data):
        console.print(line)


__all__ = [
    "PIPED_WIDTH",
    "champion_lines",
    "claim_lines",
    "experiment_lines",
    "people_console",
    "print_champion",
    "print_experiment",
    "print_targets",
    "target_lines",
]
