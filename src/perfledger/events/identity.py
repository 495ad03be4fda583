"""Code identity (R11): the content-addressed snapshot of what a measured subject ran.

A *subject* is the value a readiness driver declares a place for with the placeholder
``{subject}`` in its argv (``python bench.py --code {subject}``): a directory holding the user's
code, the root the Target's modification scope (path globs) is relative to. Its snapshot holds:

- ``files``: every file under the subject directory whose path relative to it lies inside the
  Target's scope, plus every file named on the command line that lies under the directory (the
  driver script, a spec), each as path -> (blake3 hex, size in bytes, git-style mode);
- ``driver``: the files named on the command line that lie outside the subject directory
  (a shared driver script), path as named -> the same entry;
- ``argv``: the exact command that ran (the driver's argv with the subject in its place);
- ``digest``: the tree digest, blake3 of the canonical JSON of ``{"driver": ..., "files": ...}``
  under a domain prefix, so two snapshots are the same code exactly when their digests are equal;
- ``git``: where the subject lives in a git work tree, its commit and whether it is dirty.

This module is pure (no file system): the digest and the comparisons an auditor re-runs. Taking a
snapshot from disk is :mod:`perfledger.kernels.workload.snapshot`; the rules are
:mod:`perfledger.commands.workflow.identity`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import msgspec

from perfledger.events.canonical import canonical_bytes

#: The placeholder a readiness driver's argv puts where the subject goes (R11).
SUBJECT_PLACEHOLDER = "{subject}"
#: Domain prefix of a tree digest.
TREE_DIGEST_DOMAIN = b"perfledger/tree/v1\x00"
#: Git-style modes of a snapshot entry: regular file, executable file, symbolic link.
FILE_MODES = ("100644", "100755", "120000")
#: ``Snapshot.coverage`` of a snapshot holding every file under its subject directory (R11); a
#: snapshot without the field (recorded before) holds the files inside the Target's scope only.
COVERAGE_SUBJECT = "subject"
#: Artifact name prefix of a snapshot file's bytes (``file-<blake3 hex>``).
FILE_ARTIFACT_PREFIX = "file-"


class FileEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One file of a snapshot: ``blake3`` (hex of its bytes; of the link target for a symbolic
    link), ``size`` (bytes) and ``mode`` (``100644``, ``100755`` or ``120000``)."""

    blake3: str
    size: int
    mode: str


class GitState(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Where a subject lives in a git work tree: ``commit`` (hex of HEAD, None before the first
    commit), ``dirty`` (changes or untracked files under the subject directory) and ``path`` (the
    subject directory relative to the work tree's top, ``""`` at the top)."""

    commit: str | None
    dirty: bool
    path: str = ""


class Snapshot(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The snapshot of one measured subject (R11); see the module docstring."""

    subject: str
    argv: tuple[str, ...]
    files: dict[str, FileEntry]
    driver: dict[str, FileEntry] = {}
    digest: str
    git: GitState | None = None
    #: What the snapshot holds: :data:`COVERAGE_SUBJECT` (every file under the subject), or
    #: absent for snapshots recorded before (the files inside the scope); absent, not null, so
    #: those events encode and hash as they were recorded.
    coverage: str | msgspec.UnsetType = msgspec.UNSET


class SamplesIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The code identity of a samples event (R11): both subjects' snapshots and
    ``changed_paths`` (derived: the paths whose entries differ between the two snapshots)."""

    reference: Snapshot
    candidate: Snapshot
    changed_paths: tuple[str, ...] = ()


def tree_digest(files: Mapping[str, Any], driver: Mapping[str, Any]) -> str:
    """The tree digest of a snapshot: blake3 hex over the domain prefix and the canonical JSON
    of ``{"driver": driver, "files": files}`` (entries as FileEntry or their dicts)."""
    body = canonical_bytes({"driver": _plain(driver), "files": _plain(files)})
    return blake3.blake3(TREE_DIGEST_DOMAIN + body).hexdigest()


def _plain(entries: Mapping[str, Any]) -> dict[str, Any]:
    return {path: msgspec.to_builtins(entry) for path, entry in entries.items()}


def differing_paths(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The paths whose entries differ between two manifests (path -> entry): added, removed or
    changed (content, size or mode), sorted."""
    plain_a, plain_b = _plain(a), _plain(b)
    return sorted(p for p in set(plain_a) | set(plain_b) if plain_a.get(p) != plain_b.get(p))


def substitute(argv: Sequence[str], subject: str) -> list[str]:
    """The driver's argv with ``subject`` put in place of every ``{subject}``."""
    return [word.replace(SUBJECT_PLACEHOLDER, subject) for word in argv]


def declares_subject(argv: Sequence[str]) -> bool:
    """True when a driver's argv declares the subject's place (a ``{subject}`` placeholder)."""
    return any(SUBJECT_PLACEHOLDER in word for word in argv)


def subject_of(template: Sequence[str], argv: Sequence[str]) -> str | None:
    """The subject that turns the driver ``template`` into ``argv``, or None when ``argv`` is
    not the driver with one subject in its declared place (other words differ, word counts
    differ, or two placeholders would take different subjects)."""
    if len(template) != len(argv):
        return None
    subject: str | None = None
    for pattern, word in zip(template, argv, strict=True):
        if SUBJECT_PLACEHOLDER not in pattern:
            if pattern != word:
                return None
            continue
        parts = [re.escape(part) for part in pattern.split(SUBJECT_PLACEHOLDER)]
        match = re.fullmatch("(.+)".join(parts), word, flags=re.DOTALL)
        if match is None or len(set(match.groups())) != 1:
            return None
        if subject is not None and match.group(1) != subject:
            return None
        subject = match.group(1)
    return subject


def environment_difference(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The variables whose recorded values (hashes) differ between two subjects' call
    environments, or that only one of them has, sorted (R11: empty for a fair pair)."""
    return sorted(name for name in set(a) | set(b) if a.get(name) != b.get(name))


def file_artifact_name(blake3_hex: str) -> str:
    """The artifact name under which a snapshot file's bytes are attached to its event."""
    return FILE_ARTIFACT_PREFIX + blake3_hex


__all__ = [
    "COVERAGE_SUBJECT",
    "FILE_MODES",
    "SUBJECT_PLACEHOLDER",
    "FileEntry",
    "GitState",
    "SamplesIdentity",
    "Snapshot",
    "declares_subject",
    "differing_paths",
    "environment_difference",
    "file_artifact_name",
    "subject_of",
    "substitute",
    "tree_digest",
]
