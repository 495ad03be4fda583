"""Code identity of kernel subjects (R11): ``measure kernel --ref DIR --cand DIR`` and
``measure aa --dir DIR`` on a Target whose readiness bound the original to a snapshot.

The design (``docs/code-identity.md``, "Kernel subjects"): a kernel Target's readiness driver is
the spec's path with the subject's place, one word such as ``["{subject}/spec.py"]``. Each
version of the code is a directory holding its own copy of the spec, which defines ``PROBLEMS``
and ``SUBJECT`` (the kernel of that directory). Each subject's worker process runs in its own
directory (:class:`perfledger.kernels.isolation.isolated.WorkerProcess`), so the reference worker loads
the original's (or the champion's) code and the candidate worker the candidate's. Both
directories are snapshotted like a workload's subjects (:func:`perfledger.app.identity.
subjects_identity`: every file under the directory, so the spec and what it reads), checked
before anything runs, before every batch and after each case, and the snapshots travel with the
samples as artifacts; the candidate's changed paths are computed from them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfledger.app.identity import check_original_subject, subjects_identity
from perfledger.commands.workflow import identity
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest
from perfledger.events.identity import SUBJECT_PLACEHOLDER
from perfledger.kernels.workload.startup_surface import StartupWatch

#: How a kernel Target's readiness driver starts: the spec lies in the subject directory.
SPEC_PREFIX = SUBJECT_PLACEHOLDER + "/"
#: The driver a kernel Target's readiness names, as an example in messages.
EXAMPLE_DRIVER = '{"argv": ["{subject}/spec.py"]}'


@dataclass(frozen=True)
class KernelSubjects:
    """Both kernel subjects bound to code (R11).

    Attributes:
        spec: the spec's path relative to each subject directory (``spec.py``).
        directories: the reference's and the candidate's directories (absolute paths).
        identity: the samples' ``identity`` (both snapshots), as ``samples.record`` takes it.
        artifacts: the snapshots' files (``file-<blake3>`` -> Artifact).
    """

    spec: str
    directories: tuple[str, str]
    identity: dict[str, Any]
    artifacts: dict[str, Any]


def kernel_spec(target: Any) -> str:
    """The spec's path inside a subject directory, from the Target's readiness driver (one
    word: ``{subject}/PATH.py``, or ``.json`` for host-launched ``solve`` subjects, whose
    ``reference`` source is then the directory's kernel). Raises: BadRequest when the driver
    is not of that form."""
    argv = list(target.readiness.driver.argv)
    word = argv[0] if len(argv) == 1 else ""
    rel = word[len(SPEC_PREFIX) :] if word.startswith(SPEC_PREFIX) else ""
    if not rel.endswith((".py", ".json")) or SUBJECT_PLACEHOLDER in rel or rel.startswith("/"):
        raise BadRequest(
            f"Target {target.definition.target_id!r}'s readiness driver {argv} is not a kernel "
            "spec's path in the subject directory",
            hint=f"a kernel Target bound to code records readiness with a driver such as "
            f"{EXAMPLE_DRIVER} (each code directory holds its spec, which defines PROBLEMS and "
            "SUBJECT); a workload is measured with `perfledger measure workload`",
        )
    return rel


def _directory(target: Any, subject: str) -> str:
    """The subject directory as the snapshot resolves it (relative to the driver's cwd)."""
    base = target.readiness.driver.cwd or os.getcwd()
    return os.path.abspath(os.path.join(base, subject))


def bound_kernel_subjects(
    ledger: Any,
    info: dict[str, Any],
    spec_path: str | None,
    ref_dir: str | None,
    cand_dir: str | None,
    stage: str,
    experiment_id: str,
) -> KernelSubjects | None:
    """Check how ``measure kernel`` names its subjects against the Target's rule and, on a
    Target bound to code, snapshot both directories and run the R11 checks before anything is
    measured (reference = the original's or the champion's code, changed paths inside the
    scope, a final audit's candidate = the champion's code).

    Returns: the bound subjects, or None on a Target under the old rule (``--spec``, no
    snapshot). Raises: RuleRefused (R11) for a mismatch or missing directories on a bound
    Target; BadRequest for ``--spec`` on a bound Target, directories on an unbound one, or a
    driver that is not a spec's path."""

    target = info["target"]
    if identity.original_snapshot(target) is None:
        if ref_dir is not None or cand_dir is not None:
            raise BadRequest(
                f"--ref/--cand name code directories, but Target {target.definition.target_id!r}"
                "'s readiness declares no {subject} place (no snapshot to bind them to)",
                hint="pass --spec (one spec with REFERENCE and CANDIDATE), or record readiness "
                f"of a superseding Target with a driver such as {EXAMPLE_DRIVER} and "
                "original.subject",
            )
        if spec_path is None:
            raise BadRequest(
                "pass --spec (a kernel spec with REFERENCE and CANDIDATE)",
                hint="docs/code-identity.md: a Target bound to code measures directories (--dir, --ref/--cand), any other a --spec file",
            )
        return None
    spec = kernel_spec(target)
    if spec_path is not None:
        raise BadRequest(
            f"Target {target.definition.target_id!r} binds samples to code: the spec is the "
            f"readiness driver's ({spec!r} in each subject directory); leave --spec out",
            hint="pass --ref DIR --cand DIR",
        )
    if ref_dir is None or cand_dir is None:
        raise refuse(
            "R11",
            f"Target {target.definition.target_id!r} binds samples to code snapshots: pass the "
            "reference's and the candidate's code directories; nothing was measured",
            f"--ref DIR (the original's, or the current champion's code) --cand DIR (the "
            f"candidate's), each holding {spec!r}",
        )
    body, artifacts = subjects_identity(ledger, info, ref_dir, cand_dir, stage, experiment_id)
    dirs = (_directory(target, ref_dir), _directory(target, cand_dir))
    return KernelSubjects(spec=spec, directories=dirs, identity=body, artifacts=artifacts)


def kernel_batch_checks(
    watch: Callable[[], None], worker_argv: Sequence[str] | None = None
) -> Callable[[str], None]:
    """The R11 check ``measure kernel`` runs before every batch of a bound comparison (both
    workers quiet): the start-up files of the workers' Python (``.pth``, ``sitecustomize``:
    :class:`~perfledger.kernels.workload.startup_surface.StartupWatch`) unchanged since the run began,
    then ``watch`` (both subject directories, strict). A candidate worker that adds a ``.pth``
    runs code at the start of every later worker, the next case's reference worker included,
    and no snapshot holds it.

    Args:
        watch: the subjects' files check (raises RuleRefused).
        worker_argv: the workers' command (None: :data:`perfledger.kernels.isolation.isolated.WORKER`).
    Returns: ``check(role)``, which raises RuleRefused (R11) on a change (an added start-up
        entry is moved aside).
    """
    from perfledger.kernels.isolation.isolated import WORKER  # noqa: PLC0415 (numpy via perfledger.kernels.isolation.isolated)

    startup = StartupWatch([list(WORKER if worker_argv is None else worker_argv)])

    def check(_role: str) -> None:
        startup.check()
        watch()

    return check


def unbound_note(target: Any) -> str:
    """The warning ``measure kernel --spec`` prints on a Target under the old rule: the spec's
    subjects are bound to no snapshot (R11 not enforced), and how to bind them."""
    return (
        f"R11 (code identity) is not enforced for Target {target.definition.target_id!r}: its "
        "readiness declares no {subject} place, so the spec's subjects are bound only to the "
        "content hash they report about themselves; record readiness of a superseding Target "
        f"with a driver such as {EXAMPLE_DRIVER} and original.subject, then measure with "
        "--ref DIR --cand DIR"
    )


def original_kernel_directory(target: Any, spec_path: str | None, directory: str | None) -> Any:
    """``measure aa`` of a kernel on a Target bound to code: the directory must hold the
    original's code (its snapshot equal to the one readiness recorded). Returns
    ``(spec relative to the directory, absolute directory)``, or None under the old rule.
    Raises: RuleRefused (R11), BadRequest (the options do not fit the Target's rule)."""

    if identity.original_snapshot(target) is None:
        if directory is not None:
            raise BadRequest(
                "--dir names a code directory, but the Target's readiness declares no {subject} "
                "place; pass --spec",
                hint="docs/code-identity.md: a Target bound to code measures directories (--dir, --ref/--cand), any other a --spec file",
            )
        return None
    spec = kernel_spec(target)
    if spec_path is not None or directory is None:
        raise BadRequest(
            f"Target {target.definition.target_id!r} binds samples to code: pass --dir DIR (the "
            f"original's directory, holding {spec!r}) instead of --spec",
            hint="docs/code-identity.md: a Target bound to code measures directories (--dir, --ref/--cand), any other a --spec file",
        )
    check_original_subject(target, directory, "A/A")
    return spec, _directory(target, directory)


__all__ = [
    "KernelSubjects",
    "bound_kernel_subjects",
    "kernel_batch_checks",
    "kernel_spec",
    "original_kernel_directory",
    "unbound_note",
]
