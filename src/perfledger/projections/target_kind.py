"""The kind of a Target's measurement, read from its readiness (SPEC.md section 5): ``kernel``
where the readiness's driver is perfledger's kernel harness (``perfledger measure kernel --spec
SPEC``, or a subject directory's ``{subject}/spec.py``), ``workload`` for any other driver
command, and None before readiness says.

Guidance (``status``, ``resume``, hints, warnings) names the measuring command of the Target's
kind: ``measure kernel`` and ``measure aa --spec`` for a kernel Target, ``measure workload`` and
``measure aa --cmd`` for a workload one.
"""

from __future__ import annotations

import itertools
from typing import Any, Literal

TargetKind = Literal["kernel", "workload"]

#: The file name of a kernel spec (``PROBLEMS``, ``REFERENCE``/``CANDIDATE`` or ``SUBJECT``).
KERNEL_SPEC_NAME = "spec.py"


def driver_kind(argv: Any) -> TargetKind:
    """``kernel`` when a driver's argv runs perfledger's kernel harness (``... measure kernel
    ...``) or names a kernel spec (``{subject}/spec.py``), else ``workload``."""
    words = [str(w) for w in (argv or ())]
    harness = any(a == "measure" and b == "kernel" for a, b in itertools.pairwise(words))
    spec = any(w.endswith(KERNEL_SPEC_NAME) for w in words)
    return "kernel" if harness or spec else "workload"


def target_kind(target: Any) -> TargetKind | None:
    """The kind of ``target`` (a :class:`~perfledger.projections.workflow.TargetView`): from its
    readiness's driver; None while no readiness (or a readiness without a driver) is recorded."""
    readiness = getattr(target, "readiness", None)
    driver = getattr(readiness, "driver", None)
    if driver is None:
        return None
    return driver_kind(driver.argv)


#: Operations whose request a measurement builds, for a workload Target: the command that
#: measures and records one (``T``, ``E``, ``STAGE`` are filled by :func:`measuring_command`).
MEASURED_BY = {
    "baseline.record": "perfledger measure baseline --target T --cmd CMD",
    "resolution.record": "perfledger measure aa --target T --cmd CMD --record",
    "samples.record": "perfledger measure workload --experiment E --stage STAGE --ref CMD --cand CMD",
}
#: The same for a kernel Target (its readiness driver is the kernel harness): the harness times
#: the spec's REFERENCE for the baseline and the A/A, and compares REFERENCE with CANDIDATE.
KERNEL_MEASURED_BY = {
    "baseline.record": "perfledger measure baseline --target T --spec SPEC",
    "resolution.record": "perfledger measure aa --target T --spec SPEC --record",
    "samples.record": "perfledger measure kernel --experiment E --stage STAGE --spec SPEC",
}
#: A kernel Target whose readiness bound the original to a subject directory
#: (``{subject}/spec.py``, R11) names code directories, not a spec.
BOUND_KERNEL_MEASURED_BY = {
    **KERNEL_MEASURED_BY,
    "baseline.record": "perfledger measure baseline --target T --dir DIR",
    "resolution.record": "perfledger measure aa --target T --dir DIR --record",
    "samples.record": "perfledger measure kernel --experiment E --stage STAGE --ref DIR --cand DIR",
}


def next_stage(state: Any, target_id: str, experiment_id: str) -> str:
    """The stage the next samples of ``experiment_id`` are for (R11, R13): the champion's final
    audit, the target stage after a screen, else the screen; ``STAGE`` for an unknown one."""
    e = state.experiments.get(experiment_id)
    target = state.targets.get(target_id)
    if e is None or target is None:
        return "STAGE"
    if target.champion == experiment_id:
        return "final_audit"
    return "target" if e.samples.get("screen") else "screen"


def formal_monitor(target: Any) -> str:
    """The ``--monitor`` option a workload's formal stage needs (R17): ``host`` for a CPU-time
    primary (the host's other processes are what can move it), else the choice by where the
    workload runs (the default monitor watches a GPU through NVML)."""
    primary = getattr(getattr(target, "definition", None), "primary", None)
    if getattr(primary, "name", None) == "cpu_time":
        return " --monitor host"
    return " --monitor gpu|host"


def measuring_command(state: Any, target_id: str, op: str, experiment_id: str | None) -> str:
    """The command that measures and records ``op`` (a key of :data:`MEASURED_BY`) on
    ``target_id``, of the Target's kind, with the Target, experiment and stage filled in;
    before readiness says the kind, the workload form with the kernel one beside it.

    Raises: KeyError for an op no measurement records."""
    target = state.targets.get(target_id)
    kind = target_kind(target) if target is not None else None
    bound = kind == "kernel" and any(
        "{subject}" in str(w)
        for w in target.readiness.driver.argv  # type: ignore[union-attr]
    )
    if kind is None:
        line = f"{MEASURED_BY[op]}  (kernel Target: {KERNEL_MEASURED_BY[op]})"
    elif kind == "kernel":
        line = (BOUND_KERNEL_MEASURED_BY if bound else KERNEL_MEASURED_BY)[op]
    else:
        line = MEASURED_BY[op]
    experiment = experiment_id if experiment_id in state.experiments else "E"
    stage = next_stage(state, target_id, experiment)
    if kind == "workload" and op == "samples.record" and stage in ("target", "final_audit"):
        line += formal_monitor(target)
    return (
        line.replace(" T ", f" {target_id} ")
        .replace(" E ", f" {experiment} ")
        .replace(" STAGE ", f" {stage} ")
    )
