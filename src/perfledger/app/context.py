"""What every measuring use case reads before it measures (SPEC.md section 5; R2, R11, R17):
the experiment's context from the ledger's state, the environment identity of this machine,
the cases to measure, the monitor, and the provenance measured samples carry.

Each function raises the refusal that recording would raise, so a use case calls them before
anything runs. Imports: the commands' rules and deciders, kernels, errors (no adapter).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from perfledger.commands.registry.operations import execute, preview
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.deciders import environment_id
from perfledger.commands.workflow.foreign_share import FOREIGN_SHARE_LIMIT
from perfledger.commands.workflow.requests import Name
from perfledger.commands.workflow.samples_body import samples_body
from perfledger.errors import BadRequest
from perfledger.events.workflow import FORMAL_STAGES
from perfledger.kernels.env import collect
from perfledger.kernels.monitor.hostmonitor import HostMonitor
from perfledger.kernels.monitor.monitor import Monitor
from perfledger.kernels.python_tree import python_tree
from perfledger.projections.workflow import formal_runs

#: The raw per-call table's artifact name on measured samples.
SAMPLES_ARTIFACT = "samples.json"


def environment_payload(device: int = 0, tools: bool = True) -> dict[str, Any]:
    """The environment identity as JSON: every field, ``identity``, ``missing``,
    ``readiness_environment`` (the ``environment`` of a readiness request) and the
    ``environment_id`` that readiness derives from it (R2, R11)."""

    env = collect(device, tools=tools)
    readiness = env.readiness_environment()
    return {
        **env.to_json(),
        "readiness_environment": readiness,
        "environment_id": environment_id(readiness),
    }


def start_monitor(enabled: bool, source: str = "gpu") -> tuple[Any, str | None]:
    """A started monitor, or (None, why not). ``source``: ``gpu`` (NVML) or ``host`` (the host's
    CPU counters, :mod:`perfledger.kernels.monitor.hostmonitor`, for CPU workloads)."""
    if not enabled:
        return None, "disabled by --no-monitor"
    if source == "host":
        try:
            return HostMonitor().start(), None
        except RuntimeError as exc:
            return None, f"host monitor unavailable: {exc}"

    try:
        monitor = Monitor().start()
    except RuntimeError as exc:
        return None, str(exc)
    monitor.calibrate()
    return monitor, None


def experiment_context(ledger: Any, experiment_id: str, stage: str) -> dict[str, Any]:
    """What a samples request needs from the ledger's state at its head: Target, readiness,
    reference, candidate (:func:`context_of`). Raises: BadRequest as :func:`context_of`."""
    return context_of(ledger.state(), experiment_id, stage)


def context_of(state: Any, experiment_id: str, stage: str) -> dict[str, Any]:
    """What a samples request of ``experiment_id`` at ``stage`` needs from ``state``: Target,
    readiness, reference (the original for a final audit, else the current champion), candidate.
    Raises: BadRequest for an unknown experiment or a Target without readiness."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        raise BadRequest(
            f"unknown experiment {experiment_id!r}",
            hint="`perfledger experiment list` lists them; `perfledger experiment create` makes one",
        )
    target_id = experiment.created.target_id
    target = state.targets.get(target_id)
    if target is None or target.readiness is None or target.readiness.test_set is None:
        raise BadRequest(
            f"Target {target_id!r} has no readiness with a test set (R2)",
            hint="record readiness first (`perfledger readiness record`)",
        )
    if stage == "final_audit":
        reference = {"kind": "original", "content_hash": target.readiness.original.content_hash}
    else:
        current = rules.current_reference(state, target)
        reference = {"kind": current.kind, "content_hash": current.content_hash}
        if current.experiment_id is not None:
            reference["experiment_id"] = current.experiment_id
    return {
        "state": state,
        "target": target,
        "target_id": target_id,
        "reference": reference,
        "candidate_hash": experiment.created.candidate.content_hash,
        "test_set_hash": target.readiness.test_set.hash,
        "cases": list(target.readiness.test_set.cases),
        "test_set": target.readiness.test_set,
        "primary": target.definition.primary,
        "readiness_environment_id": target.readiness.environment_id,
        "min_pairs": target.readiness.statistics.min_pairs_per_case,
    }


def check_cases(cases: Any, test_set: Any, source: str) -> list[str]:
    """The cases a measurement will record, checked before anything runs: each a name a
    samples request can hold (a non-empty string of at most 200 characters; BadRequest), and
    each a case of the Target's test set where it names them (R11, :func:`rules.
    r11_cases_in_test_set`). Returns: the case names, in order."""

    names = list(cases)
    for case in names:
        try:
            msgspec.convert(case, Name)
        except msgspec.ValidationError as exc:
            raise BadRequest(
                f"case {case!r} of {source} is not a valid case name: {exc}",
                hint="case names are non-empty strings of at most 200 characters",
            ) from None
    if test_set is not None:
        rules.r11_cases_in_test_set(names, test_set, source)
    return names


def check_environment(env: dict[str, Any], info: dict[str, Any]) -> None:
    """R11 before anything runs: this machine's environment identity is the one the Target's
    readiness recorded (the samples would be refused after the measurement otherwise)."""
    if env["environment_id"] != info["readiness_environment_id"]:
        raise rules.refuse(
            "R11",
            "this machine's environment differs from the one the Target's readiness recorded; "
            "nothing was measured",
            f"readiness recorded environment_id {info['readiness_environment_id']}, this machine "
            f"is {env['environment_id']} (`perfledger env` shows its fields): measure where "
            "readiness was recorded, or supersede the Target with readiness from this machine",
        )


def measured_provenance(protocol: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The ``provenance`` of samples this module measured (R5): the protocol, its settings (as
    JSON, keys sorted) and the raw per-call table attached as :data:`SAMPLES_ARTIFACT`."""
    canonical = json.loads(json.dumps(settings, sort_keys=True, default=str))
    return {
        "source": "perfledger",
        "protocol": protocol,
        "settings": canonical,
        "raw_table": SAMPLES_ARTIFACT,
    }


def default_samples_id(experiment_id: str, stage: str, state: Any) -> str:
    """``E-STAGE-N``, the first N that no samples and no started formal run of the ledger take
    (a started run's id is taken even without its samples, R14)."""
    taken = formal_runs(state)
    n = 1
    while (
        f"{experiment_id}-{stage}-{n}" in state.samples or f"{experiment_id}-{stage}-{n}" in taken
    ):
        n += 1
    return f"{experiment_id}-{stage}-{n}"


def refuse_formal_dry_run(stage: str, dry_run: bool) -> None:
    """R14: a formal stage has no dry run (a look at its figures before deciding to record them
    is a run the ledger must see). Raises: RuleRefused (R14) for ``dry_run`` of one."""
    if dry_run and stage in FORMAL_STAGES:
        raise rules.refuse(
            "R14",
            f"a formal ({stage}) stage has no dry run: its start is recorded before anything is "
            "measured, and a run that records no samples counts as failed",
            "try the commands with --stage screen --dry-run; measure the formal stage for real",
        )


def start_formal_run(
    ledger: Any, experiment_id: str, stage: str, samples_id: str, protocol: str, actor: str
) -> None:
    """R14: append the ``FormalRunStarted`` of a formal stage (nothing for a screen) before
    anything is measured. Raises: RuleRefused (nothing appended, nothing measured) where the
    experiment may not measure that stage now, e.g. an earlier result of it has no verdict."""
    if stage not in FORMAL_STAGES:
        return
    body = {"experiment_id": experiment_id, "stage": stage, "samples_id": samples_id,
            "protocol": protocol}  # fmt: skip
    execute(ledger, "formal-run.start", body, actor=actor)


def foreign_activity_warnings(pairs: list[dict[str, Any]], stage: str) -> list[str]:
    """Warnings about the samples' windows before they are recorded (R17): the pairs (request
    dicts of ``samples.record``) whose monitor saw foreign activity that no explanation covers
    make every verdict on these samples ``inconclusive``; at a formal stage, more than
    :data:`~perfledger.commands.workflow.foreign_share.FOREIGN_SHARE_LIMIT` of the pairs lets
    nothing pass unless an actor other than the experiment's reviews the samples (``VerdictRecorded``
    schema 11, ``FinalAuditRecorded`` 14: no readiness setting waives it), so the warning says
    to measure again or have them reviewed. Returns: zero or one warning line."""

    indices = [i for i, p in enumerate(pairs) if (p.get("monitor") or {}).get("foreign_activity")]
    if not indices:
        return []
    if stage in FORMAL_STAGES and len(indices) > FOREIGN_SHARE_LIMIT * len(pairs):
        return [
            f"{len(indices)}/{len(pairs)} {stage}-stage sample windows had unexplained foreign "
            "activity (other processes' CPU or GPU use above the monitor's threshold): the "
            "verdict on these samples will be inconclusive (R17). Beyond "
            f"{100 * FOREIGN_SHARE_LIMIT:.0f} % of the pairs a formal stage passes only where "
            "another actor (not the experiment's) reviews these samples (`perfledger review "
            "record`, then `perfledger activity explain` citing it); no readiness setting waives "
            "it: measure again on a quieter machine, or have the samples reviewed"
        ]
    return [
        f"{len(indices)}/{len(pairs)} {stage}-stage sample windows had unexplained foreign "
        "activity (other processes' CPU or GPU use above the monitor's threshold): the verdict "
        "on these samples will be inconclusive (R17). If that activity cannot affect the metric, "
        "another actor reviews the samples (`perfledger review record`) and `perfledger activity "
        f'explain --samples ID --request -` cites that review with {{"pairs": {indices}, '
        '"explanation": "...", "review_id": "..."}; otherwise measure on a quieter machine'
    ]


def raw_table(
    kind: str, run: Any, env: dict[str, Any], windows: list[Any], note: str | None, monitor: Any
) -> dict[str, Any]:
    """The raw per-call table attached to measured samples as :data:`SAMPLES_ARTIFACT` (R5):
    its ``kind`` (``workload``, ``worker``), the run's rows and settings, the environment and
    the monitor's windows of the pairs."""
    return {
        "kind": kind,
        "table": run.table(),
        "settings": run.settings,
        "environment": env,
        "monitor": {
            "windows": windows,
            "note": note,
            "settings": monitor.settings() if monitor else None,
        },
    }


def check_installation_unchanged(env: dict[str, Any]) -> None:
    """R11 after a run: no file of the Python installation the environment identity covers
    (interpreter, standard library, site-packages, editable installs' sources) was written
    since ``env`` was collected, even with its content put back (change times tell). A subject
    that edits an installed module can change how the other subject's calls run, and no
    snapshot holds it. Raises: RuleRefused (R11); nothing is recorded by the caller."""
    stamp = env.get("python_tree_stamp")
    if not stamp:
        return
    if python_tree().stamp != stamp:
        raise rules.refuse(
            "R11",
            "files of the Python installation (interpreter, standard library, site-packages, "
            "editable installs' sources) were written while the subjects were measured: code "
            "that no snapshot holds could have run in either subject's calls; the samples were "
            "not recorded",
            "install nothing during a measurement and keep subjects from writing there "
            "(`perfledger env` shows the installation's digest, python_tree); measure again",
        )


__all__ = [
    "SAMPLES_ARTIFACT",
    "check_cases",
    "check_environment",
    "check_installation_unchanged",
    "default_samples_id",
    "environment_payload",
    "experiment_context",
    "foreign_activity_warnings",
    "measured_provenance",
    "raw_table",
    "refuse_formal_dry_run",
    "start_formal_run",
    "start_monitor",
]


def stand_in_samples(
    info: dict[str, Any],
    *,
    experiment_id: str,
    stage: str,
    samples_id: str,
    cases: list[str],
    environment_id: str,
    protocol: str,
    monitored: bool,
    identity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A samples request of the shape a measuring command will record (every call correct,
    values 1.0, ``min_pairs_per_case`` same-process pairs per case, observed where
    ``monitored``), from ``info`` (:func:`context_of`): what is decided before anything is
    measured."""
    primary = info["primary"]
    side = {"correct": True, "values": {primary.name: [1.0]}, "environment_id": environment_id}
    observed = {"observed": True, "foreign_activity": False, "explained": None, "flags": []}
    pairs = [
        {"case": case, "same_process": True,
         "ref": {"call_id": f"{case}-{k}", **side}, "cand": {"call_id": f"{case}-{k}", **side},
         **({"monitor": observed} if monitored else {})}
        for k in range(max(1, int(info["min_pairs"] or 1)))
        for case in cases
    ]  # fmt: skip
    body = samples_body(
        info, samples_id=samples_id, experiment_id=experiment_id, stage=stage,
        environment_id=environment_id, units={primary.name: primary.unit}, pairs=pairs,
    )  # fmt: skip
    if identity is not None:
        body["identity"] = identity
    body["provenance"] = measured_provenance(protocol, {"cases": sorted(cases)})
    return body


def refuse_before_measuring(ledger: Any, stand_in: dict[str, Any], actor: str) -> None:
    """Decide, on the head and before anything is measured, ``stand_in`` (the
    :func:`stand_in_samples` of the run) and the start of its formal run: every refusal that
    recording the samples would raise for the state of the ledger (R11 stage order and
    reference, R15 rejected, R8, R14 unjudged runs, ...) is raised now, not after minutes of
    measuring.

    Raises: BadRequest (exit 2) or RuleRefused (exit 3), the ledger unchanged."""
    sid, stage = stand_in["samples_id"], stand_in["stage"]
    formal = stage in FORMAL_STAGES
    if formal:  # what starting the run would refuse
        start = {"experiment_id": stand_in["experiment_id"], "stage": stage, "samples_id": sid,
                 "protocol": stand_in["provenance"]["protocol"]}  # fmt: skip
        preview(ledger, "formal-run.start", start, actor=actor)
    preview(ledger, "samples.record", stand_in, actor=actor, starting_run=sid if formal else None)
