"""Code snapshots taken for a use case (R11): a subject directory as the readiness driver runs
it, its files' bytes as artifacts, and the candidate's directory at ``experiment create``.

Taking a snapshot reads files (:mod:`perfledger.kernels.workload.snapshot`); the rules it must
satisfy are the pure checks of :mod:`perfledger.commands.workflow.identity`, which the deciders
run on the recorded request (and an auditor on replay). The CLI and the MCP server both call
:func:`candidate_edge` before ``experiment.create`` is decided.
"""

from __future__ import annotations

from typing import Any

import msgspec

from perfledger.commands.registry import operations
from perfledger.commands.workflow import identity
from perfledger.commands.workflow.rules import path_in_scope
from perfledger.errors import BadRequest
from perfledger.events.identity import COVERAGE_SUBJECT, file_artifact_name, substitute
from perfledger.ledger.base import Artifact


def _in_scope(scope: Any) -> Any:
    globs = list(scope)
    return lambda rel: any(path_in_scope(rel, g) for g in globs)


def take(target_scope: Any, driver: Any, subject: str, *, whole: bool = True) -> Any:
    """Snapshot ``subject`` as the readiness ``driver`` (its argv with ``{subject}`` and its
    optional cwd; a Driver Struct or its dict) runs it, taking every file under it (``whole``)
    or, for a Target whose original was snapshotted before that rule, the files inside
    ``target_scope`` (globs). Returns a :class:`~perfledger.kernels.workload.snapshot.TakenSnapshot`.
    Raises: BadRequest, RuleRefused (R11: a symbolic link out of the subject)."""
    from perfledger.kernels.workload.snapshot import take_snapshot  # noqa: PLC0415 (off `perfledger status`'s start-up path)

    fields = driver if isinstance(driver, dict) else msgspec.to_builtins(driver)
    argv = substitute([str(w) for w in fields["argv"]], subject)
    return take_snapshot(
        subject, argv, _in_scope(target_scope), fields.get("cwd") or None, whole=whole
    )


def take_as_original(target: Any, subject: str) -> Any:
    """:func:`take` of ``subject`` for a snapshot Target, covering what the original's snapshot
    covers (every file under the subject, or the scope's files for an original recorded
    before that rule), so the two compare."""

    original = identity.original_snapshot(target)
    whole = original is None or original.coverage == COVERAGE_SUBJECT
    return take(target.definition.scope, target.readiness.driver, subject, whole=whole)


def artifacts_of(*taken: Any) -> dict[str, Any]:
    """The artifacts holding the files of snapshots: ``file-<blake3>`` -> Artifact."""

    out: dict[str, Any] = {}
    for t in taken:
        for digest, data in t.blobs.items():
            out[file_artifact_name(digest)] = Artifact(data, "application/octet-stream")
    return out


def candidate_edge(ledger: Any, body: Any) -> tuple[Any, dict[str, Any]]:
    """``experiment.create`` before it is decided (R11, ``ExperimentCreated`` schema
    :data:`~perfledger.events.workflow.R11_CANDIDATE_SNAPSHOT`): where ``candidate.subject``
    names the candidate's directory, replace it by ``candidate.snapshot``, taken now as the
    Target's readiness driver runs it (covering what the original's snapshot covers), and
    return its files as artifacts, so the code travels with the ledger. The decider computes
    the content hash from the snapshot and checks it; a request without ``candidate.subject``
    is returned unchanged.

    Returns: ``(body, artifacts)``. Raises: BadRequest (the subject is not a directory, or the
    Target is unknown), RuleRefused (R11: a symbolic link out of the directory, or a Target
    without a subject directory)."""
    if not isinstance(body, dict) or not isinstance(body.get("candidate"), dict):
        return body, {}
    candidate = dict(body["candidate"])
    if "subject" not in candidate:
        return body, {}
    subject = candidate.pop("subject")
    if not isinstance(subject, str) or not subject:
        raise BadRequest(
            "candidate.subject must be the candidate's directory (a path)",
            hint="the directory of the candidate's code, put in the readiness driver's "
            "{subject} place",
        )
    target = ledger.state().targets.get(body.get("target_id"))
    if target is None:
        raise BadRequest(
            f"no Target {body.get('target_id')!r}",
            hint="`perfledger target show` lists the Targets",
        )
    if identity.original_snapshot(target) is None:
        raise identity.no_subject_directory(target)
    taken = take_as_original(target, subject)
    candidate["snapshot"] = msgspec.to_builtins(taken.snapshot)
    return {**body, "candidate": candidate}, artifacts_of(taken)


__all__ = ["artifacts_of", "candidate_edge", "champion_snapshot", "take", "take_as_original"]


def champion_snapshot(ledger: Any, state: Any, target: Any) -> dict[str, Any] | None:
    """The current champion's (or the original's) snapshot of ``target`` as JSON: ``digest``,
    ``subject``, ``git``, ``files`` (count) and ``checkout`` (the command that writes its files),
    or None when none was recorded (a Target under the old rule)."""

    snap = identity.subject_snapshot(
        state, target, target.champion, operations.payload_reader(ledger)
    )
    if snap is None:
        return None
    return {
        "of": target.champion or "original",
        "digest": snap.digest,
        "subject": snap.subject,
        "files": len(snap.files),
        "git": msgspec.to_builtins(snap.git),
        "checkout": f"perfledger checkout {snap.digest} DIR",
    }
