"""R11 code identity: the checks the deciders run on snapshots (pure; the snapshots are taken at
the edge by :mod:`perfledger.kernels.workload.snapshot`, the digest is :mod:`perfledger.events.identity`).

The rule is versioned by the Target's readiness: a readiness whose driver declares a
``{subject}`` place records the original's snapshot, and from then on every samples event of the
Target must carry both subjects' snapshots, and candidates' changed paths are computed, never
typed. A readiness recorded without a ``{subject}`` place (every one recorded before snapshots
existed) keeps the old rule: typed ``changed_paths`` checked against the scope, no snapshots. So
old ledgers re-decide exactly as they were recorded.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow import rules
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events.identity import (
    COVERAGE_SUBJECT,
    SamplesIdentity,
    Snapshot,
    declares_subject,
    differing_paths,
    environment_difference,
    file_artifact_name,
    substitute,
    tree_digest,
)
from perfledger.events.workflow import OBSERVING_PROTOCOLS, R11_SUBJECT_OWED, R11_WHOLE_SUBJECT
from perfledger.projections.workflow import TargetView, WorkflowState

#: How many differing paths a refusal names before it says "and N more".
NAMED_PATHS = 20


def _named(paths: list[str]) -> str:
    shown = ", ".join(paths[:NAMED_PATHS])
    more = len(paths) - NAMED_PATHS
    return shown + (f" and {more} more" if more > 0 else "")


def original_snapshot(target: TargetView) -> Snapshot | None:
    """The original's snapshot recorded at readiness, or None (no readiness, or one recorded
    under the old rule, without a ``{subject}`` place)."""
    readiness = target.readiness
    if readiness is None or readiness.original.snapshot is msgspec.UNSET:
        return None
    snap = readiness.original.snapshot
    assert isinstance(snap, Snapshot)
    return snap


def _as_snapshot(snap: rq.SubjectSnapshot) -> Snapshot:
    return msgspec.convert(msgspec.to_builtins(snap), Snapshot)


def check_snapshot(snap: Snapshot, driver_argv: tuple[str, ...] | list[str], role: str) -> None:
    """A snapshot is consistent (its digest is the tree digest of its entries: BadRequest
    otherwise) and its command is the readiness driver with its subject in the declared place
    (R11). ``role`` names the subject in messages (``reference``, ``original``)."""
    if tree_digest(snap.files, snap.driver) != snap.digest:
        raise BadRequest(
            f"the {role}'s snapshot digest {snap.digest} is not the tree digest of its files",
            hint="snapshots are taken by perfledger (`measure workload`, `readiness record` "
            "with original.subject), not typed",
        )
    expected = substitute(driver_argv, snap.subject)
    if list(snap.argv) != expected:
        raise refuse(
            "R11",
            f"the {role}'s command is not the readiness driver with the subject in its place: "
            f"ran {list(snap.argv)}, the driver with subject {snap.subject!r} is {expected}",
            f"run the readiness driver {list(driver_argv)} with the {role}'s directory in "
            "place of {subject}",
        )


def r11_readiness_snapshot(
    target: TargetView, req: rq.ReadinessRecord, version: int = R11_WHOLE_SUBJECT
) -> None:
    """R2/R11 at readiness: a driver that declares a ``{subject}`` place needs the original's
    snapshot (taken from ``original.subject`` by ``perfledger readiness record``), consistent,
    of the driver's command, holding at least one file inside the Target's scope and, from
    ``ReadinessRecorded`` schema ``version`` :data:`R11_WHOLE_SUBJECT`, covering every file under
    the subject; a snapshot without a declared place is refused."""
    has_place = req.driver is not None and declares_subject(req.driver.argv)
    given = req.original.snapshot is not msgspec.UNSET
    unsnapshotted = req.original.unsnapshotted is not msgspec.UNSET
    if not has_place:
        if given:
            raise refuse(
                "R11",
                "the original carries a snapshot but the driver declares no {subject} place",
                "put {subject} in the driver's argv where the code's directory goes",
            )
        r11_subject_owed(target, req, version)
        return
    if unsnapshotted:
        raise refuse(
            "R11",
            "original.unsnapshotted says the code cannot be snapshotted, but the driver declares "
            "a {subject} place: the original is snapshotted",
            "leave original.unsnapshotted out and pass original.subject",
        )
    if not given:
        raise refuse(
            "R2",
            "the driver declares a {subject} place: readiness needs the original's snapshot",
            "pass original.subject (the original's directory) to `perfledger readiness record`,"
            " which snapshots it",
        )
    assert req.driver is not None and isinstance(req.original.snapshot, rq.SubjectSnapshot)
    snap = _as_snapshot(req.original.snapshot)
    check_snapshot(snap, req.driver.argv, "original")
    if version >= R11_WHOLE_SUBJECT and snap.coverage != COVERAGE_SUBJECT:
        raise refuse(
            "R11",
            "the original's snapshot covers only the files inside the scope: a snapshot must "
            "cover every file under the subject directory",
            "pass original.subject to `perfledger readiness record`, which snapshots it",
        )
    scope = target.definition.scope
    if not any(rules.path_in_scope(p, g) for p in snap.files for g in scope):
        raise refuse(
            "R11",
            f"no file of the original's directory {snap.subject!r} lies inside the Target's "
            f"scope {list(scope)}",
            "the scope's globs are relative to the subject directory",
        )


#: Endings of a driver word that names a script file (``bench.py``): the word a suggested
#: driver puts in the code directory.
_SCRIPT_ENDINGS = (".py", ".sh", ".js", ".rb", ".pl", ".lua", ".jl", ".R")


def driver_with_subject(argv: Any) -> list[str]:
    """A suggestion for a driver ``argv`` that declares no ``{subject}`` place: the first word
    naming a path (``dir/bench.py``) or a script (``bench.py``) with its directory replaced by
    ``{subject}``; the argv with ``{subject}`` appended when no word names one."""
    words = [str(w) for w in argv]
    for i, word in enumerate(words):
        if i > 0 and not word.startswith("-") and ("/" in word or word.endswith(_SCRIPT_ENDINGS)):
            return [*words[:i], "{subject}/" + word.rsplit("/", 1)[-1], *words[i + 1 :]]
    return [*words, "{subject}"]


def r11_subject_owed(target: TargetView, req: rq.ReadinessRecord, version: int) -> None:
    """R11 at readiness, from ``ReadinessRecorded`` schema :data:`R11_SUBJECT_OWED`: a readiness
    without a ``{subject}`` place, of a Target whose formal stages take only samples perfledger
    measured (not diagnostic, ``statistics.allow_outside_samples`` false), must say why the code
    cannot be snapshotted (``original.unsnapshotted``); else it is refused with the driver
    rewritten to hold the place. Readiness recorded before keeps the old rule."""
    if version < R11_SUBJECT_OWED or req.original.unsnapshotted is not msgspec.UNSET:
        return
    if target.definition.diagnostic or req.statistics.allow_outside_samples or req.driver is None:
        return
    suggestion = driver_with_subject(req.driver.argv)
    raise refuse(
        "R11",
        "the readiness driver declares no {subject} place: results of this Target would not be "
        "bound to the code that ran (the reference's and the candidate's code unchecked, "
        "changed paths typed)",
        f"put {{subject}} where the code's directory goes (e.g. {json.dumps(suggestion)}; a "
        'kernel spec: ["{subject}/spec.py"]) and pass original.subject (the original\'s '
        "directory); or, where the code cannot be snapshotted, say why in "
        "original.unsnapshotted (claims then say that results are not bound to code)",
    )


def r11_experiment_changed_paths(target: TargetView, req: rq.ExperimentCreate) -> None:
    """R11 at experiment creation: under snapshots (the readiness recorded the original's),
    changed paths are computed from the snapshots, so a typed ``changed_paths`` is refused;
    under the old rule they are required and must lie inside the scope."""
    typed = req.candidate.changed_paths
    if original_snapshot(target) is not None:
        if typed is not msgspec.UNSET:
            raise refuse(
                "R11",
                "candidate.changed_paths is computed by perfledger from the reference's and the "
                "candidate's snapshots; it cannot be typed for this Target",
                "leave candidate.changed_paths out",
            )
        return
    if typed is msgspec.UNSET:
        raise refuse(
            "R11",
            "candidate.changed_paths is needed: this Target's driver declares no {subject} "
            "place, so perfledger cannot compute them",
            "state the paths the candidate changes, each inside the Target's scope "
            f"{json.dumps(list(target.definition.scope))}: "
            '"candidate": {"changed_paths": ["PATH", ...], ...}; or bind results to code: a '
            "driver with a {subject} place and original.subject in the readiness of a "
            "superseding Target",
        )
    assert isinstance(typed, list)
    rules.r11_paths_in_scope(typed, target.definition.scope)


#: The prefix of a content hash perfledger computed from a snapshot (``blake3:<tree digest>``).
COMPUTED_HASH_PREFIX = "blake3:"


def computed_hash(snap: Snapshot) -> str:
    """The content hash perfledger records for a snapshot: ``blake3:`` and its tree digest."""
    return COMPUTED_HASH_PREFIX + snap.digest


def _driver_unchanged(original: Snapshot, *snaps: Snapshot) -> None:
    """R11: the driver files outside the subject are those recorded at readiness in every one of
    ``snaps``. Raises: RuleRefused naming the files that differ."""
    for snap in snaps:
        drifted = differing_paths(original.driver, snap.driver)
        if drifted:
            raise refuse(
                "R11",
                f"the driver's files differ from those recorded at readiness: {_named(drifted)}",
                "restore the readiness driver, or record new readiness",
            )


def no_subject_directory(target: TargetView) -> Exception:
    """The refusal (R11) of a candidate directory named for a Target without a subject
    directory (its readiness driver declares no ``{subject}`` place)."""
    return refuse(
        "R11",
        "candidate.subject names a directory, but Target "
        f"{target.definition.target_id!r} has no subject directory (its readiness driver "
        "declares no {subject} place): perfledger cannot bind the candidate's code",
        "leave candidate.subject out and type candidate.content_hash (recorded as declared); "
        "or bind results to code: a superseding Target whose readiness driver has a {subject} "
        "place and names original.subject",
    )


def r11_experiment_candidate(
    state: WorkflowState,
    target: TargetView,
    req: rq.ExperimentCreate,
    payload_of: Callable[[str], Any] | None,
) -> dict[str, Any]:
    """R11 at ``experiment create`` from ``ExperimentCreated`` schema
    :data:`~perfledger.events.workflow.R11_CANDIDATE_SNAPSHOT`: the candidate's identity to
    record (the ``candidate`` of the payload, as builtins).

    On a Target bound to code (its readiness recorded the original's snapshot) the request
    carries the candidate directory's snapshot (``candidate.subject``, snapshotted by the
    application layer): it is consistent and of the readiness driver; its content hash is
    computed (a typed one must equal it); it differs from the current reference's code (the
    champion's, else the original's); its changed paths against that reference lie inside the
    scope and are recorded. On a Target without a subject directory the typed ``content_hash``
    is recorded as ``declared``. Raises: RuleRefused (R11), BadRequest (an inconsistent snapshot).
    """
    cand = req.candidate
    typed = None if cand.content_hash is msgspec.UNSET else cand.content_hash
    original = original_snapshot(target)
    out: dict[str, Any] = {"label": cand.label}
    if original is None:
        if cand.snapshot is not msgspec.UNSET:
            raise no_subject_directory(target)
        if typed is None:
            raise refuse(
                "R11",
                "candidate.content_hash is needed: Target "
                f"{target.definition.target_id!r} has no subject directory, so perfledger "
                "cannot compute it",
                "type the candidate's content hash (e.g. its git commit as "
                '"git:<sha>"); it is recorded and shown as declared',
            )
        return {**out, "content_hash": typed, "content_hash_source": "declared"}
    if cand.snapshot is msgspec.UNSET:
        raise refuse(
            "R11",
            "name the candidate's directory: Target "
            f"{target.definition.target_id!r} is bound to code, so perfledger snapshots the "
            "candidate at creation and computes its content hash (a typed hash proves nothing)",
            '"candidate": {"subject": "DIR", ...}: the directory of the candidate\'s code, '
            "put in the readiness driver's {subject} place; a copy of the original's code is "
            f"written by `perfledger checkout {original.digest} DIR`",
        )
    assert target.readiness is not None and target.readiness.driver is not None
    snap = _as_snapshot(cand.snapshot)
    check_snapshot(snap, target.readiness.driver.argv, "candidate")
    if snap.coverage != original.coverage:
        raise refuse(
            "R11",
            "the candidate's snapshot does not cover what the original's covers "
            f"({snap.coverage!r} vs {original.coverage!r})",
            "pass candidate.subject to `perfledger experiment create`, which snapshots it",
        )
    computed = computed_hash(snap)
    if typed is not None and typed != computed:
        raise refuse(
            "R11",
            f"candidate.content_hash {typed!r} is not the hash of the candidate's directory "
            f"{snap.subject!r}: perfledger computed {computed}",
            "leave candidate.content_hash out (perfledger computes it), or pass the computed value",
        )
    champion = target.champion
    reference = subject_snapshot(state, target, champion, payload_of) or original
    what = "the original" if champion is None else f"champion {champion!r}"
    if snap.digest in (reference.digest, original.digest):
        same = what if snap.digest == reference.digest else "the original"
        raise refuse(
            "R11",
            f"the candidate's directory {snap.subject!r} holds the same code as {same} "
            f"(snapshot {snap.digest[:16]}): a candidate must differ from its reference",
            "make the change in the candidate's directory first (start from a copy: "
            f"`perfledger checkout {reference.digest} DIR`), then create the experiment naming "
            "that directory as candidate.subject",
        )
    _driver_unchanged(original, snap)
    changed = differing_paths(reference.files, snap.files)
    rules.r11_paths_in_scope(changed, target.definition.scope)
    return {
        **out,
        "content_hash": computed,
        "content_hash_source": "computed",
        "changed_paths": changed,
        "snapshot": snap,
    }


def created_candidate(state: WorkflowState, experiment_id: str) -> Snapshot | None:
    """The candidate snapshot ``experiment create`` recorded for ``experiment_id`` (schema
    :data:`~perfledger.events.workflow.R11_CANDIDATE_SNAPSHOT` on a Target bound to code), or
    None (an experiment created before, or of a Target without a subject directory)."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None:
        return None
    snap = experiment.created.candidate.snapshot
    return snap if isinstance(snap, Snapshot) else None


def subject_snapshot(
    state: WorkflowState,
    target: TargetView,
    champion: str | None,
    payload_of: Callable[[str], Any] | None,
) -> Snapshot | None:
    """The snapshot of a reference: the original's (``champion`` None) or the candidate
    snapshot of the target-stage samples that made ``champion`` a champion (the latest such
    lineage step). None when it is unknown (old-rule samples, or no way to read events)."""
    if champion is None:
        return original_snapshot(target)
    if payload_of is None:
        return None
    for step in reversed(target.lineage):
        if step.champion != champion or step.samples_id is None:
            continue
        view = state.samples.get(step.samples_id)
        if view is None:
            return None
        identity = getattr(payload_of(view.event_id), "identity", msgspec.UNSET)
        return None if identity is msgspec.UNSET else identity.candidate
    return None


def _first_candidate(
    state: WorkflowState, experiment_id: str, payload_of: Callable[[str], Any] | None
) -> Snapshot | None:
    """The candidate snapshot of an experiment's first screen or target samples, or None."""
    experiment = state.experiments.get(experiment_id)
    if experiment is None or payload_of is None:
        return None
    for stage in ("screen", "target"):
        for samples_id in experiment.samples.get(stage, []):
            view = state.samples.get(samples_id)
            if view is None:
                continue
            identity = getattr(payload_of(view.event_id), "identity", msgspec.UNSET)
            if isinstance(identity, SamplesIdentity):
                return identity.candidate
    return None


def unattached_files(payload: Any, artifacts: Mapping[str, Any]) -> list[str]:
    """The snapshot files of a ReadinessRecorded, ExperimentCreated or SamplesRecorded ``payload`` whose bytes are
    not attached to its event (``artifacts``: name -> ArtifactRef with ``blake3`` and ``size``)
    as ``file-<blake3>``: a snapshot that ``checkout`` could not reproduce (R11). Returns the
    paths, sorted; empty for events without snapshots."""
    snaps: list[Snapshot] = []
    for holder in ("original", "candidate"):  # readiness's original, experiment's candidate
        snap = getattr(getattr(payload, holder, None), "snapshot", msgspec.UNSET)
        if isinstance(snap, Snapshot):
            snaps.append(snap)
    identity = getattr(payload, "identity", msgspec.UNSET)
    if isinstance(identity, SamplesIdentity):
        snaps += [identity.reference, identity.candidate]
    missing = set()
    for snap in snaps:
        for path, entry in {**snap.files, **snap.driver}.items():
            ref = artifacts.get(file_artifact_name(entry.blake3))
            if ref is None or ref.blake3 != entry.blake3 or ref.size != entry.size:
                missing.add(path)
    return sorted(missing)


def describe_difference(expected: Snapshot, snap: Snapshot) -> str:
    """The paths (and driver files) whose entries differ between two snapshots, in words."""
    paths = differing_paths(expected.files, snap.files)
    driver = differing_paths(expected.driver, snap.driver)
    text = f"paths that differ: {_named(paths)}" if paths else "no file differs"
    if driver:
        text += f"; driver files that differ: {_named(driver)}"
    return text


def r11_samples_identity(
    state: WorkflowState,
    target: TargetView,
    req: rq.SamplesRecord,
    payload_of: Callable[[str], Any] | None,
) -> SamplesIdentity | None:
    """:func:`r11_check_identity` of a ``samples.record`` request."""
    return r11_check_identity(
        state,
        target,
        req.identity,
        reference_kind=req.reference.kind,
        champion=req.reference.experiment_id if req.reference.kind == "champion" else None,
        stage=req.stage,
        experiment_id=req.experiment_id,
        payload_of=payload_of,
    )


#: The provenance protocol whose calls run from perfledger's copies (``measure workload``).
_COPIED_PROTOCOL = "workload_abba"


def r11_calls_from_copies(
    req: rq.SamplesRecord, code: SamplesIdentity | None, *, observed: bool = False
) -> None:
    """R11 (``SamplesRecorded`` from :data:`~perfledger.events.workflow.R11_CALLS_FROM_COPIES`):
    samples the workload driver measured (and with ``observed``, ``SamplesRecorded`` from
    :data:`~perfledger.events.workflow.R11_OBSERVED_CALLS_FROM_COPIES`, samples of the worker
    and whole-command protocols too) for a Target bound to code name, in their provenance's
    settings, the snapshot digests of the copies their calls ran from (``subject_copies``: the
    samples' own snapshots) and both subjects' call environments (``call_environment``: every
    variable's name and its value's hash), which are equal. Samples of another protocol, from
    outside, or of a Target under the old rule are not concerned. Raises: RuleRefused (R11)
    naming what is missing or the variables that differ."""
    provenance = req.provenance
    if code is None or provenance is None or provenance.source != "perfledger":
        return
    if provenance.protocol != _COPIED_PROTOCOL and not (
        observed and provenance.protocol in OBSERVING_PROTOCOLS
    ):
        return
    settings = provenance.settings or {}
    copies = settings.get("subject_copies")
    want = {"ref": code.reference.digest, "cand": code.candidate.digest}
    if copies != want:
        raise refuse(
            "R11",
            "the samples' calls did not run from copies of their snapshots (their provenance's "
            f"subject_copies is {copies!r}, the snapshots are {want!r})",
            "measure with `perfledger measure workload`, which runs each call from its copy",
        )
    environment = settings.get("call_environment")
    if not isinstance(environment, dict) or not all(
        isinstance(environment.get(label), dict) and environment.get(label)
        for label in ("ref", "cand")
    ):
        raise refuse(
            "R11",
            "the samples do not record their calls' environments (provenance settings "
            "call_environment: ref and cand)",
            "measure with `perfledger measure workload`, which records them",
        )
    differ = environment_difference(environment["ref"], environment["cand"])
    if differ:
        raise refuse(
            "R11",
            "the reference's and the candidate's calls ran with different environments: "
            + ", ".join(differ[:NAMED_PATHS])
            + (f" and {len(differ) - NAMED_PATHS} more" if len(differ) > NAMED_PATHS else ""),
            "give both subjects the same environment and measure again",
        )


def r11_check_identity(
    state: WorkflowState,
    target: TargetView,
    ident: rq.SamplesIdentity | msgspec.UnsetType,
    *,
    reference_kind: str,
    champion: str | None,
    stage: str,
    experiment_id: str,
    payload_of: Callable[[str], Any] | None,
) -> SamplesIdentity | None:
    """R11 on samples: under snapshots, both subjects' snapshots are required and consistent,
    each the readiness driver with its subject in place; the reference's is the original's
    (reference ``original``) or the champion's (``champion``), else refused naming the paths that
    differ; the changed paths (computed) are non-empty and inside the scope; a final audit's
    candidate is the champion's snapshot. Returns the identity to record (changed paths
    derived), or None under the old rule (no snapshot at readiness)."""
    original = original_snapshot(target)
    if original is None:
        if ident is not msgspec.UNSET:
            raise refuse(
                "R11",
                "the samples carry snapshots but the Target's readiness recorded none (its "
                "driver declares no {subject} place)",
                "leave identity out of these samples (their Target binds no code)",
            )
        return None
    if not isinstance(ident, rq.SamplesIdentity):
        raise refuse(
            "R11",
            f"samples of Target {target.definition.target_id!r} must carry both subjects' "
            "snapshots (its driver declares a {subject} place)",
            "measure with `perfledger measure workload`, which takes them",
        )
    assert target.readiness is not None and target.readiness.driver is not None
    driver_argv = target.readiness.driver.argv
    ref = _as_snapshot(ident.reference)
    cand = _as_snapshot(ident.candidate)
    check_snapshot(ref, driver_argv, "reference")
    check_snapshot(cand, driver_argv, "candidate")
    for role, snap in (("reference", ref), ("candidate", cand)):
        # snapshots of other coverage would differ by what was taken, not by the code
        if snap.coverage != original.coverage:
            raise refuse(
                "R11",
                f"the {role}'s snapshot does not cover what the original's covers "
                f"({snap.coverage!r} vs {original.coverage!r})",
                "measure with `perfledger measure workload`, which takes the snapshots",
            )
    expected = subject_snapshot(state, target, champion, payload_of)
    what = "the original recorded at readiness" if champion is None else f"champion {champion!r}"
    if expected is not None and ref.digest != expected.digest:
        raise refuse(
            "R11",
            f"the reference ({reference_kind}) is not the code of {what}: its snapshot "
            f"{ref.digest[:16]} differs from {expected.digest[:16]}; "
            f"{describe_difference(expected, ref)}",
            f"measure the reference from {expected.subject!r} (or a copy of that code: "
            f"`perfledger checkout {expected.digest} DIR`)",
        )
    if stage != "final_audit":
        first = _first_candidate(state, experiment_id, payload_of)
        if first is not None and cand.digest != first.digest:
            raise refuse(
                "R11",
                f"experiment {experiment_id!r} measured another candidate before: its snapshot "
                f"{cand.digest[:16]} differs from {first.digest[:16]}; "
                f"{describe_difference(first, cand)}",
                "an experiment is one candidate: create a new experiment for changed code",
            )
    if stage == "final_audit":
        audited = subject_snapshot(state, target, experiment_id, payload_of)
        if audited is not None and cand.digest != audited.digest:
            raise refuse(
                "R11",
                f"a final audit measures the champion's code: the candidate's snapshot "
                f"{cand.digest[:16]} differs from champion {experiment_id!r}'s "
                f"{audited.digest[:16]}; {describe_difference(audited, cand)}",
                f"`perfledger checkout {audited.digest} DIR` gives the champion's files",
            )
    _driver_unchanged(original, cand, ref)
    changed = differing_paths(ref.files, cand.files)
    if not changed:
        raise refuse(
            "R11",
            f"a candidate must differ from its reference: both snapshots hold the same files "
            f"(digest {ref.digest[:16]})",
            "pass the candidate's own directory as --cand (the one named at `experiment "
            "create`), and the reference's as --ref",
        )
    rules.r11_paths_in_scope(changed, target.definition.scope)
    # last: the checks above name what is wrong with the code itself
    created = created_candidate(state, experiment_id)
    if created is not None and cand.digest != created.digest:
        raise refuse(
            "R11",
            f"experiment {experiment_id!r} was created for the code snapshotted at "
            f"`experiment create` ({created.digest[:16]}); the candidate measured now "
            f"({cand.digest[:16]}) differs: {describe_difference(created, cand)}",
            f"measure the candidate from {created.subject!r} as it was (`perfledger checkout "
            f"{created.digest} DIR` writes it); changed code is a new experiment",
        )
    return SamplesIdentity(reference=ref, candidate=cand, changed_paths=tuple(changed))


__all__ = [
    "COMPUTED_HASH_PREFIX",
    "check_snapshot",
    "computed_hash",
    "created_candidate",
    "describe_difference",
    "driver_with_subject",
    "no_subject_directory",
    "original_snapshot",
    "r11_check_identity",
    "r11_experiment_candidate",
    "r11_experiment_changed_paths",
    "r11_readiness_snapshot",
    "r11_samples_identity",
    "r11_subject_owed",
    "subject_snapshot",
    "unattached_files",
]
