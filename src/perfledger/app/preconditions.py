"""Preconditions of a measurement that the application checks before anything is measured
(R2, R17): what a formal stage needs that a screen does not, and what a baseline needs first.
Each raises RuleRefused naming its rule and saying what to do instead."""

from __future__ import annotations

from typing import Any

from perfledger.commands.workflow import rules


def refuse_formal_unmonitored(stage: str, monitor_note: str, *, windows: bool = False) -> None:
    """R17: a formal stage (target, final_audit) measures only under the monitor; called when
    the monitor is not running (``monitor_note`` says why). A screen passes. ``windows``: a
    serving measurement (its samples are windows; the hint names ``--monitor host`` alone).
    Raises: RuleRefused (R17), nothing measured."""
    if stage == "screen":
        return
    if windows:
        raise rules.refuse(
            "R17",
            f"a formal ({stage}) stage needs the monitor over every window, and it is not "
            f"running: {monitor_note}; nothing was measured",
            "on a machine without a GPU, use --monitor host",
        )
    raise rules.refuse(
        "R17",
        f"a formal ({stage}) stage needs the monitor over every sample window, and it is not "
        f"running: {monitor_note}; nothing was measured",
        "on a machine without a GPU, measure a CPU workload with --monitor host",
    )


def require_readiness(target: Any) -> Any:
    """R2: the baseline is measured after readiness; returns ``target``'s readiness.
    Raises: RuleRefused (R2) when none is recorded."""
    readiness = target.readiness
    if readiness is None:
        raise rules.refuse(
            "R2", "the baseline is measured after readiness", "`perfledger readiness record`"
        )
    return readiness


def require_catalog_arch(catalog: Any, arch: str) -> None:
    """R23: the loop measures on a GPU architecture its catalog's feature map lists
    (``catalog.architectures``). Raises: RuleRefused (R23) naming ``arch``."""
    if arch not in catalog.architectures:
        raise rules.refuse(
            "R23",
            f"{arch} is not in the catalog's feature map",
            "use a GPU architecture the catalog lists (`perfledger loop state` shows the catalog), or extend the catalog",
        )


__all__ = ["refuse_formal_unmonitored", "require_catalog_arch", "require_readiness"]
