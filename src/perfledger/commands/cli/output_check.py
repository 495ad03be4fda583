"""The warning ``readiness record`` and ``measure workload`` print for a readiness whose
correctness would be judged by the subject alone (:func:`perfledger.app.output_check.readiness_warning`)."""

from __future__ import annotations

from typing import Any

import click

from perfledger.app.output_check import readiness_warning


def warn_readiness(body: Any, observed_primary: bool = False) -> None:
    """Print :func:`readiness_warning` on stderr, if any (a warning, never a refusal)."""
    text = readiness_warning(body, observed_primary)
    if text is not None:
        click.echo(f"warning: {text}", err=True)
