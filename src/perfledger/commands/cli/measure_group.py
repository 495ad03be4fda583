"""``perfledger measure``: the group of the measure commands, gathered from the modules that
define them (kernel, workload and A/A in :mod:`~perfledger.commands.cli.measure`, serving in
:mod:`~perfledger.commands.cli.serving`, the original's baseline in
:mod:`~perfledger.commands.cli.measure_baseline`).
"""

from __future__ import annotations

import click

from perfledger.commands.cli.measure import measure_aa, measure_kernel, measure_workload
from perfledger.commands.cli.measure_baseline import measure_baseline
from perfledger.commands.cli.serving import measure_serving

measure_group = click.Group(
    "measure",
    help="Measure under the protocol of docs/SPEC.md section 5 and record the samples (R4, R5, R11, R17).",
)
for _command in (measure_kernel, measure_workload, measure_aa, measure_serving, measure_baseline):
    measure_group.add_command(_command)

__all__ = ["measure_group"]
