"""``perfledger measure baseline``: the original's baseline measured, not typed (R4).

The original's command (for a Target whose readiness declares a ``{subject}`` place: the
readiness driver with the original's code directory in it, checked against the snapshot
readiness took, R11) is called ``--calls`` times on every case of the test set, on this
machine (whose environment identity must be the readiness's, R11). Every value of the primary
metric from a valid call becomes one baseline value, with its case and call id, and
``baseline.record`` is appended with the calls' raw table attached (``baseline.json``). A call
that fails, or whose own accuracy check fails, stops it: an original that fails its accuracy
rule has no baseline (R5). For a primary perfledger observes (``wall_time``, ``cpu_time``) the
original runs as a formal stage runs its subjects (issue 34): two workers in ABBA pairs
(ceil(``--calls`` / 2) pairs per case, every timed call of both is one value), each from a
read-only copy of the readiness snapshot, every output judged, every worker's environment
(names, values' hashes) and the monitor's windows recorded in the raw table. The decider
re-derives the values from that table (R4, ``BaselineRecorded`` 2); a typed ``baseline
record`` is recorded as declared and decides nothing.

Before this command, an agent had to run the original by hand and paste its values, its
content hash and the environment id into a request.
"""

from __future__ import annotations

from typing import Any

import click

from perfledger.app.baseline import measure_baseline as measure_baseline_run
from perfledger.app.measure_baseline import BASELINE_ARTIFACT
from perfledger.app.request_options import baseline_request_of, measure_params
from perfledger.commands.cli import measure as m
from perfledger.commands.cli.common import command_context as _ctx


@click.command("baseline", params=measure_params("baseline"))
def measure_baseline(**kw: Any) -> None:
    """Measure the original's baseline and record it (R4): a workload's CMD called --calls times
    on every case (a kernel Target's REFERENCE timed by the kernel harness --calls times per
    case: --spec SPEC, or --dir DIR where readiness bound the original's directory), every
    value of the primary metric kept with its case and call id, in this machine's environment
    (R11); the raw per-call table is attached. Rules: R2 R4 R5 R11."""

    ctx = _ctx(kw["json_flag"])
    request = baseline_request_of(kw, m._actor)
    done = ctx.read(measure_baseline_run, request, progress=m._progress_of(kw["quiet"]))
    lines = [
        f"baseline {done.metric}: {done.values} value(s) from {done.calls} call(s) per case; "
        "median per case: "
        + ", ".join(f"{c} {v:.4g} {done.unit}" for c, v in done.per_case_median.items())
    ]
    if done.event_id is None:
        m._answer(ctx, done.answer(), [*lines, "dry run: nothing appended"])
        return
    nxt = f"next (R4): `{done.next_command}`"
    m._answer(ctx, done.answer(), [f"{done.kind} {done.event_id}", *lines, nxt])


__all__ = ["BASELINE_ARTIFACT", "measure_baseline"]
