"""The workflow's top-level commands, built once from the operation registry
(:func:`perfledger.commands.cli.workflow.commands`) and completed by the modules that add
subcommands to them: ``evidence add --kind``, ``evidence ncu|list|show``
(:mod:`~perfledger.commands.cli.evidence`); ``claims``, ``champion show|lineage``, ``rejected``,
``handoff``, ``resume``, ``audit``, ``report`` (:mod:`~perfledger.commands.cli.readmodels`);
``review list`` (:mod:`~perfledger.commands.cli.review`).
"""

from __future__ import annotations

import functools

import click

from perfledger.commands.cli import evidence, readmodels, review, workflow


@functools.cache
def workflow_commands() -> dict[str, click.Command]:
    """Name -> command of every workflow and read-model command (built on the first call)."""
    group = click.Group("perfledger")
    for command in workflow.commands():
        group.add_command(command)
    evidence.extend(group)
    readmodels.install(group)
    review.extend(group)
    return dict(group.commands)


__all__ = ["workflow_commands"]
