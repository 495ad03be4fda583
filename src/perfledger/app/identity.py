"""Code identity at the application edge (R11): snapshots taken for ``readiness record`` and
``measure workload``, the champion's snapshot for the read models, and the files that
``perfledger checkout`` writes back.

Taking a snapshot reads files (:mod:`perfledger.kernels.workload.snapshot`); the rules it must satisfy are
the pure checks of :mod:`perfledger.commands.workflow.identity`, which the deciders run again on the
recorded request (and an auditor on replay). The files' bytes are attached to the event as
artifacts named ``file-<blake3 hex>`` (stored once per content), so ``checkout`` can write a
recorded subject back byte for byte from any clone of the ledger.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from perfledger.app.snapshots import artifacts_of, champion_snapshot, take, take_as_original
from perfledger.commands.registry import operations
from perfledger.commands.workflow import identity
from perfledger.commands.workflow import requests as rq
from perfledger.commands.workflow.identity import NAMED_PATHS
from perfledger.commands.workflow.identity import driver_with_subject as suggest
from perfledger.commands.workflow.rules import refuse
from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.identity import (
    SamplesIdentity,
    Snapshot,
    declares_subject,
    file_artifact_name,
    subject_of,
    substitute,
)
from perfledger.kernels.workload.snapshot import SKIPPED_DIRS, remove_bytecode_caches
from perfledger.kernels.workload.startup_surface import (
    STARTUP_CODE_ARTIFACT,
    resolved_interpreter,
    startup_code,
    unrecorded_startup_code,
)
from perfledger.kernels.workload.subject_copy import (
    CopyGuard,
    link_inside,
    prepare_subject,
    safe_relative,
)
from perfledger.ledger.base import Artifact

#: Where ``perfledger checkout`` writes nothing: a directory that exists and is not empty.
CHECKOUT_HINT = "pass a new (or empty) directory"


def driver_with_subject(argv: Any) -> list[str]:
    """:func:`perfledger.commands.workflow.identity.driver_with_subject` (imported when used)."""

    return suggest(argv)


def unenforced_note(target: Any) -> str | None:
    """The warning ``measure`` prints where R11 is not enforced: the Target's readiness driver
    declares no ``{subject}`` place (readiness recorded under the old rule), so the reference and
    candidate commands are not bound to any code snapshot. None where it is enforced (or the
    Target has no driver)."""
    readiness = target.readiness
    if readiness is None or readiness.driver is None:
        return None
    if declares_subject(readiness.driver.argv):
        return None
    suggestion = driver_with_subject(readiness.driver.argv)
    return (
        f"R11 (code identity) is not enforced for Target {target.definition.target_id!r}: its "
        "readiness driver declares no {subject} place, so the reference and candidate commands "
        "are not checked to be the original's (or the champion's) code and no snapshot is "
        f"recorded; record readiness with a driver such as {json.dumps(suggestion)} and "
        "original.subject (the code directory) to bind results to code"
    )


def readiness_edge(ledger: Any, body: Any) -> tuple[Any, dict[str, Any]]:
    """``readiness.record`` at the edge: where ``original.subject`` names the original's
    directory and the driver declares a ``{subject}`` place, replace it by ``original.snapshot``
    (taken now: every file under it) and return the files as artifacts. Returns
    ``(body, artifacts)``; the body unchanged (no artifacts) otherwise. Raises: BadRequest."""
    if not isinstance(body, dict) or not isinstance(body.get("original"), dict):
        return body, {}
    original = dict(body["original"])
    subject = original.pop("subject", None)
    if subject is None:
        driver = body.get("driver")
        argv = driver.get("argv") if isinstance(driver, dict) else None
        if isinstance(argv, list) and not declares_subject([str(w) for w in argv]):
            # the old rule still records; say what it gives up (R11)
            print(
                "warning: the driver declares no {subject} place: R11 (code identity) will "
                "not be enforced for this Target; a driver such as "
                f"{json.dumps(driver_with_subject(argv))} with original.subject (the code "
                "directory) binds results to code",
                file=sys.stderr,
                flush=True,
            )
        return body, {}
    driver = body.get("driver")
    if not isinstance(subject, str) or not subject:
        raise BadRequest(
            "original.subject must be the original's directory (a path)",
            hint='set original.subject to the original\'s code directory, e.g. "work/original"',
        )
    if not isinstance(driver, dict) or not isinstance(driver.get("argv"), list):
        raise BadRequest(
            "original.subject needs a driver whose argv has a {subject} place",
            hint='write the driver\'s argv with {subject} where the code directory goes, e.g. ["python", "{subject}/bench.py"]',
        )
    if not declares_subject([str(w) for w in driver["argv"]]):
        raise BadRequest(
            "original.subject given, but the driver's argv declares no {subject} place",
            hint='put "{subject}" in the driver argv where the code directory goes',
        )
    state = ledger.state()
    target = state.targets.get(body.get("target_id"))
    if target is None:
        raise BadRequest(
            f"no Target {body.get('target_id')!r}", hint="`perfledger status` lists the Targets"
        )
    taken = take(target.definition.scope, driver, subject)
    original["snapshot"] = msgspec.to_builtins(taken.snapshot)
    return {**body, "original": original}, {**artifacts_of(taken), **startup_record(driver)}


def startup_record(driver: dict[str, Any]) -> dict[str, Artifact]:
    """The start-up code of the Python the readiness ``driver`` runs (R11,
    :func:`~perfledger.kernels.workload.startup_surface.startup_code`: each ``.pth`` file's
    ``import`` lines, ``sitecustomize``, ``usercustomize``), as the readiness event's artifact
    :data:`~perfledger.kernels.workload.startup_surface.STARTUP_CODE_ARTIFACT`: Python runs it
    in every call before perfledger's bootstrap, so the ledger shows what ran there and a later
    measurement is checked against it (:func:`check_startup_code`). Empty for a driver that is
    not a Python interpreter."""
    argv = [str(w) for w in driver["argv"]]
    interpreter = resolved_interpreter(argv)
    if interpreter is None:
        return {}
    record = {"interpreter": interpreter, "code": startup_code(argv)}
    data = json.dumps(record, indent=1, sort_keys=True).encode()
    return {STARTUP_CODE_ARTIFACT: Artifact(data, "application/json")}


def _recorded_startup(ledger: Any, target_id: str) -> dict[str, str] | None:
    """The start-up code the latest readiness of ``target_id`` recorded (file -> code), or
    None when it recorded none (readiness recorded before, or a driver that is not Python)."""
    found: str | None = None
    for event in ledger.events():
        if event.kind == "ReadinessRecorded" and event.payload.target_id == target_id:
            found = event.id
    if found is None or STARTUP_CODE_ARTIFACT not in ledger.get(found).artifacts:
        return None
    code = json.loads(ledger.artifact(found, STARTUP_CODE_ARTIFACT)).get("code")
    return code if isinstance(code, dict) else None


def check_startup_code(ledger: Any, target: Any) -> None:
    """R11 before a measurement through snapshots runs: the Python the readiness driver runs
    now (found on ``PATH`` as the calls will find it) runs no start-up code the Target's
    readiness did not record (:func:`startup_record`). Python executes a ``.pth`` file's
    ``import`` lines and ``sitecustomize`` in every process before perfledger's bootstrap,
    outside both subjects' snapshots: installed after readiness (or in another interpreter on
    ``PATH``) it can slow the reference alone. Readiness recorded without that record is not
    checked. Raises: RuleRefused (R11) naming each such file; nothing has run."""
    recorded = _recorded_startup(ledger, target.definition.target_id)
    driver = target.readiness.driver if target.readiness is not None else None
    if recorded is None or driver is None:
        return
    argv = list(driver.argv)
    extra = unrecorded_startup_code(argv, recorded)
    if not extra:
        return
    shown = "; ".join(f"{path} ({code.splitlines()[0][:80]!r})" for path, code in extra.items())
    raise refuse(
        "R11",
        f"the subjects' Python ({resolved_interpreter(argv)}) runs start-up code the "
        f"Target's readiness did not record: {shown}. Python runs it at the start of every "
        "call, before perfledger's bootstrap and outside both snapshots, so it can act on one "
        "subject alone; nothing was measured",
        "remove it (or put the Python readiness recorded first on PATH) and measure "
        "again; start-up code you mean to keep is recorded by recording the Target's readiness "
        "again with it installed (`perfledger readiness record`), where the ledger shows it",
    )


def split_command(command: str, role: str = "") -> list[str]:
    """``command`` as shell words (:func:`shlex.split`). ``role`` names it in the error
    (``"reference"``, ...). Raises: BadRequest when its quotes do not balance."""
    try:
        return shlex.split(command)
    except ValueError as exc:
        what = f"the {role} command" if role else "the command"
        raise BadRequest(
            f"cannot parse {what}: {exc}",
            hint="quote the command as shell words (balanced quotes)",
        ) from None


def _subject(target: Any, command: str, role: str) -> str:

    driver = target.readiness.driver
    argv = split_command(command, role)
    subject = subject_of(driver.argv, argv)
    if subject is None:
        raise refuse(
            "R11",
            f"the {role} command is not the readiness driver with a subject in its place: "
            f"{argv}; nothing was measured",
            f"the driver is {list(driver.argv)}: pass it with the {role}'s directory in place "
            "of {subject}",
        )
    return subject


def measure_identity(
    ledger: Any, info: dict[str, Any], ref_cmd: str, cand_cmd: str, stage: str, experiment_id: str
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Before ``measure workload`` runs: where the Target's readiness recorded the original's
    snapshot, check that both commands are the readiness driver with a subject in its place,
    snapshot both subjects and run the R11 checks (reference = original or champion, changed
    paths inside the scope, a final audit's candidate = the champion), so a refusal comes before
    anything is measured. Returns ``(identity request dict, artifacts)``, or ``(None, {})``
    under the old rule. Raises: RuleRefused (R11), BadRequest."""

    target = info["target"]
    if identity.original_snapshot(target) is None:
        return None, {}
    ref_subject = _subject(target, ref_cmd, "reference")
    cand_subject = _subject(target, cand_cmd, "candidate")
    return subjects_identity(ledger, info, ref_subject, cand_subject, stage, experiment_id)


def subjects_identity(
    ledger: Any,
    info: dict[str, Any],
    ref_subject: str,
    cand_subject: str,
    stage: str,
    experiment_id: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Snapshot the two subject directories as the readiness driver runs them and run the R11
    checks of :func:`measure_identity` on a snapshot Target (``measure workload``, ``measure
    kernel --ref DIR --cand DIR``). Returns ``(identity request dict, artifacts)``. Raises:
    RuleRefused (R11), BadRequest (a subject that is not a directory)."""

    target = info["target"]
    check_startup_code(ledger, target)
    ref = take_as_original(target, ref_subject)
    cand = take_as_original(target, cand_subject)
    body = {
        "reference": msgspec.to_builtins(ref.snapshot),
        "candidate": msgspec.to_builtins(cand.snapshot),
    }
    reference = info["reference"]
    identity.r11_check_identity(
        info["state"],
        target,
        msgspec.convert(body, rq.SamplesIdentity),
        reference_kind=reference["kind"],
        champion=reference.get("experiment_id"),
        stage=stage,
        experiment_id=experiment_id,
        payload_of=operations.payload_reader(ledger),
    )
    return body, artifacts_of(ref, cand)


class SubjectsWatch:
    """Both subjects' files checked before every call of a run (R11), cheaply: each file's
    ``lstat`` (mode, size, inode, modification and change times; a process cannot set a change
    time back) is compared with the previous check, and only a difference re-takes the
    snapshots (:func:`confirm_unchanged`, which names what changed).

    Bytecode caches (``__pycache__``, not in a snapshot) are removed when the run begins; after
    that, a subject's caches may change only during its own calls (it compiles its own modules).
    Caches that changed during the other subject's call (a ``.pyc`` planted for them) are
    removed before the next call, so every call runs the source its snapshot holds, and honest
    subjects compile once per run, not once per call.

    ``strict`` (the kernel path, whose workers load and run their code while the other worker
    may be running: loading, correctness trials): any file written since the run began is
    refused, even with its content restored, since the other subject may have run the changed
    code in between; the change time tells, and no process can set it back."""

    #: The driver's subject label -> the identity's role.
    ROLES: ClassVar[dict[str, str]] = {"ref": "reference", "cand": "candidate"}

    def __init__(self, info: dict[str, Any], body: dict[str, Any], strict: bool = False) -> None:
        """``body``: the samples' identity as :func:`measure_identity` made it."""

        self.strict = strict
        self.info, self.body = info, body
        for role in self.ROLES.values():
            remove_bytecode_caches(body[role]["subject"])  # nothing planted before the run
        self.caches = {role: self._caches(role) for role in self.ROLES.values()}
        self.last: str | None = None
        self.seen = self._stat()

    def _caches(self, role: str) -> dict[str, tuple[int, ...]]:
        """Every file in the subject's ``__pycache__`` directories with its lstat."""
        out: dict[str, tuple[int, ...]] = {}
        for dirpath, dirnames, filenames in os.walk(self.body[role]["subject"]):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            if os.path.basename(dirpath) != "__pycache__":
                continue
            for name in filenames:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                out[os.path.join(dirpath, name)] = (
                    st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns
                )  # fmt: skip
        return out

    def _stat(self) -> dict[str, tuple[int, ...]]:

        out: dict[str, tuple[int, ...]] = {}
        paths: list[str] = []
        for role in self.ROLES.values():
            snap = self.body[role]
            paths += list(snap.get("driver") or {})
            for dirpath, dirnames, filenames in os.walk(snap["subject"]):
                dirnames[:] = [d for d in dirnames if d not in SKIPPED_DIRS]
                paths += [os.path.join(dirpath, f) for f in filenames]
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                out[path] = ()
                continue
            out[path] = (st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        return out

    def __call__(self, label: str | None = None) -> None:
        """Before the call of subject ``label`` (``ref`` or ``cand``). Raises: RuleRefused
        (R11) as :func:`confirm_unchanged`."""

        if self.last is not None:  # what the previous call compiled for itself
            self.caches[self.last] = self._caches(self.last)
        for role in self.ROLES.values():
            if self._caches(role) != self.caches[role]:  # written during the other's call
                remove_bytecode_caches(self.body[role]["subject"])
                self.caches[role] = {}
        now = self._stat()
        if now != self.seen and self.strict:
            touched = sorted(p for p in set(now) | set(self.seen) if now.get(p) != self.seen.get(p))
            more = len(touched) - NAMED_PATHS
            raise refuse(
                "R11",
                "files of the subjects were written while they were measured (their code may "
                "have differed for a while, even where the content is back): "
                + ", ".join(touched[:NAMED_PATHS])
                + (f" and {more} more" if more > 0 else "")
                + "; the samples were not recorded",
                "a subject must not write into its own or the other's directory; measure again",
            )
        if now != self.seen:  # something was touched: the snapshots say whether it changed
            confirm_unchanged(self.info, self.body)
            self.seen = now
        self.last = self.ROLES.get(label or "")


class SubjectCopies:
    """Both subjects' read-only copies for one ``measure workload`` run (R11,
    :mod:`perfledger.kernels.workload.subject_copy`): ``copies`` and ``argvs`` (the readiness
    driver with each copy in its ``{subject}`` place) by label, ``roots`` (label -> private
    directory), ``settings`` (recorded with the samples: each copy's snapshot digest) and
    ``guard`` (called before every call and after the run) and ``declared`` (the readiness
    driver's ``env``: with a short allow-list, the only variables of the caller's that reach
    the subjects, :func:`perfledger.kernels.workload.subject_env.closed_environment`)."""

    def __init__(
        self, copies: dict[str, Any], argvs: dict[str, list[str]], guard: Any,
        declared: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.copies, self.argvs, self.guard = copies, argvs, guard
        self.declared = dict(declared or {})
        self.roots = {label: c.root for label, c in copies.items()}
        self.settings = {"subject_copies": {label: c.digest for label, c in copies.items()}}

    def close(self) -> None:
        """Remove both copies."""
        for copy in self.copies.values():
            copy.close()


def subject_copies(
    target: Any, body: dict[str, Any], files: dict[str, Any], *, boot_per_call: bool = True
) -> SubjectCopies:
    """Make the read-only copies of both subjects of ``body`` (the samples' identity, as
    :func:`measure_identity` made it) from ``files`` (its ``file-<blake3>`` artifacts), each
    checked against its digest; ``boot_per_call``: as :class:`CopyGuard`'s (False for workers
    that serve many calls). Raises: IntegrityError (bytes that are not the snapshot's)."""

    blobs = {
        name.removeprefix("file-"): artifact.data
        for name, artifact in files.items()
        if name.startswith("file-")
    }
    template = target.readiness.driver.argv
    # R11 (red36 E1): the subjects see the readiness driver's declared variables, never the
    # caller's whole environment; a declared PYTHONPATH follows the bootstrap's directory
    declared = dict(target.readiness.driver.env or {})
    copies: dict[str, Any] = {}
    try:
        for label, role in SubjectsWatch.ROLES.items():
            snap = msgspec.convert(body[role], Snapshot)
            copy = prepare_subject(snap, blobs, label=label, base_env=declared)
            copy.env = {**declared, **copy.env}  # the copy's own places win
            copies[label] = copy
        argvs = {label: substitute(template, c.path) for label, c in copies.items()}
        drivers = [
            *body["reference"].get("driver", {}),
            *body["candidate"].get("driver", {}),
        ]
        guard = CopyGuard(copies, argvs, drivers, boot_per_call=boot_per_call)
    except BaseException:
        for copy in copies.values():
            copy.close()
        raise
    return SubjectCopies(copies, argvs, guard, declared)


def original_copies(
    target: Any, command: str, role: str, *, boot_per_call: bool = False
) -> SubjectCopies | None:
    """Read-only copies of the original for a measurement of the original against itself (the
    baseline, the A/A, R4, R11): ``command``'s subject is snapshotted, checked to be the
    original's code recorded at readiness, and copied twice (``ref`` and ``cand``, each with its
    own bytecode cache, under :class:`CopyGuard`) as :func:`subject_copies` copies a formal
    stage's subjects; ``boot_per_call``: as :class:`CopyGuard`'s (True where each call is a
    process of its own: the self-timed driver). ``role`` names the measurement in refusals.
    None where the readiness recorded no snapshot (the old rule: the original runs in place).
    Raises: RuleRefused (R11: not the original's code, or not the readiness driver),
    BadRequest (a command that does not parse, a subject that is not a directory)."""

    original = identity.original_snapshot(target)
    if original is None:
        return None
    taken = take_as_original(target, _subject(target, command, role))
    if taken.snapshot.digest != original.digest:
        check_original_subject(target, taken.snapshot.subject, role)  # refuses, naming paths
    snap = msgspec.to_builtins(taken.snapshot)
    return subject_copies(
        target, {"reference": snap, "candidate": snap}, artifacts_of(taken),
        boot_per_call=boot_per_call,
    )  # fmt: skip


def fresh_and_unchanged(info: dict[str, Any], body: dict[str, Any]) -> None:
    """Before every call and after the run (R11): both subjects' bytecode caches removed, so a
    call runs the source its snapshot holds and not a ``.pyc`` another call planted, then
    :func:`confirm_unchanged`. Raises: RuleRefused (R11) as that does."""

    for role in ("reference", "candidate"):
        remove_bytecode_caches(body[role]["subject"])
    confirm_unchanged(info, body)


def confirm_unchanged(info: dict[str, Any], body: dict[str, Any]) -> None:
    """After the measurement: each subject's files are still those snapshotted before it
    (R11: a subject whose code changed while it was measured, by itself or by anyone, measured
    code that no snapshot holds). Raises: RuleRefused (R11) naming the subject and the paths
    that changed; nothing is recorded."""

    target = info["target"]
    for role in ("reference", "candidate"):
        snap = body[role]
        again = take_as_original(target, snap["subject"])
        if again.snapshot.digest != snap["digest"]:
            before = msgspec.convert(snap, Snapshot)
            raise refuse(
                "R11",
                f"the {role}'s files changed while it was measured ({snap['subject']!r}): "
                f"{identity.describe_difference(before, again.snapshot)}; the samples were not "
                "recorded",
                "a subject must not modify its own code during the run; measure again",
            )


# ----------------------------------------------------------------------------- read models


# ----------------------------------------------------------------------------- checkout


def _recorded_snapshots(ledger: Any) -> list[tuple[str, str, Snapshot]]:
    """Every snapshot in the ledger: (label, event id, snapshot), in the ledger's order; the
    label is ``TARGET:original``, ``EXPERIMENT:created`` (the candidate snapshotted at
    ``experiment create``), ``SAMPLES:reference`` or ``SAMPLES:candidate``."""
    out: list[tuple[str, str, Snapshot]] = []
    for event in ledger.events():
        p = event.payload
        if event.kind == "ReadinessRecorded" and isinstance(p.original.snapshot, Snapshot):
            out.append((f"{p.target_id}:original", event.id, p.original.snapshot))
        elif event.kind == "ExperimentCreated" and isinstance(p.candidate.snapshot, Snapshot):
            out.append((f"{p.experiment_id}:created", event.id, p.candidate.snapshot))
        elif event.kind == "SamplesRecorded" and isinstance(p.identity, SamplesIdentity):
            out.append((f"{p.samples_id}:reference", event.id, p.identity.reference))
            out.append((f"{p.samples_id}:candidate", event.id, p.identity.candidate))
    return out


def resolve(ledger: Any, name: str) -> tuple[str, str, Snapshot]:
    """The snapshot ``name`` designates: a tree digest (or a prefix of at least 8 hex digits),
    ``SAMPLES:reference`` / ``SAMPLES:candidate`` / ``TARGET:original``, a samples id (its
    candidate), an experiment id (the candidate of its latest samples) or an event id (a
    samples event's candidate, a readiness event's original). Returns (label, event id,
    snapshot). Raises: BadRequest when nothing or more than one snapshot matches."""
    snaps = _recorded_snapshots(ledger)
    for label, event_id, snap in snaps:
        if name == label:
            return label, event_id, snap
    candidates = [s for s in snaps if s[0].endswith(":candidate") or s[0].endswith(":original")]
    by_samples = [s for s in candidates if s[0] == f"{name}:candidate"]
    if by_samples:
        return by_samples[-1]
    by_event = [s for s in candidates if s[1] == name]
    if by_event:
        return by_event[-1]
    state = ledger.state()
    experiment = state.experiments.get(name)
    if experiment is not None:
        mine = [s for s in candidates if s[0].rsplit(":", 1)[0] in state.samples
                and state.samples[s[0].rsplit(":", 1)[0]].experiment_id == name]  # fmt: skip
        if mine:
            return mine[-1]
        raise BadRequest(
            f"experiment {name!r} has no samples with a snapshot",
            hint="`perfledger experiment show ID` lists its samples; measure it with `perfledger measure workload` first",
        )
    lowered = name.lower()
    if len(lowered) >= 8 and all(c in "0123456789abcdef" for c in lowered):
        digests = {s[2].digest: s for s in snaps if s[2].digest.startswith(lowered)}
        if len(digests) == 1:
            return next(iter(digests.values()))
        if len(digests) > 1:
            raise BadRequest(
                f"snapshot prefix {name!r} is ambiguous: {sorted(digests)}",
                hint="give more characters of the snapshot's digest",
            )
    raise BadRequest(
        f"no recorded snapshot {name!r}",
        hint="name a tree digest (`perfledger champion show` prints the champion's), a samples "
        "id, SAMPLES:reference, TARGET:original, or an experiment id",
    )


def _safe_link(path: str, text: str) -> None:
    """A recorded symbolic link ``path -> text`` stays inside the directory written (R11: links
    out of a subject are refused when snapshotted; a snapshot recorded before may hold one).
    Raises: IntegrityError."""
    if not link_inside(path, text):
        raise IntegrityError(
            f"the snapshot's symbolic link {path!r} -> {text!r} leads out of the directory; "
            "nothing was written",
            hint="such a link was measured through code outside the subject: the snapshot cannot "
            "reproduce it",
        )


def checkout(ledger: Any, name: str, directory: str) -> dict[str, Any]:
    """Write the files of the recorded snapshot ``name`` (see :func:`resolve`) into
    ``directory`` (created; it must not exist or be empty), each checked against its blake3 and
    size, executables with mode 755, symbolic links as links. Returns a summary (label, event,
    digest, subject, argv, git, files written, driver files not written). Raises: BadRequest,
    IntegrityError (a missing or altered file)."""
    label, event_id, snap = resolve(ledger, name)
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadRequest(f"{directory!r} exists and is not an empty directory", hint=CHECKOUT_HINT)
    paths = {p: safe_relative(p) for p in snap.files}
    blobs = {}
    for path, entry in snap.files.items():
        data = ledger.artifact(event_id, file_artifact_name(entry.blake3))
        if len(data) != entry.size:
            raise IntegrityError(f"file {path!r} of snapshot {snap.digest} has the wrong size")
        blobs[path] = data
    for path, entry in snap.files.items():
        if entry.mode == "120000":
            _safe_link(path, os.fsdecode(blobs[path]))
    out.mkdir(parents=True, exist_ok=True)
    links = []
    for path, entry in sorted(snap.files.items()):
        target = out.joinpath(*paths[path].parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.mode == "120000":
            links.append((target, blobs[path]))
            continue
        target.write_bytes(blobs[path])
        os.chmod(target, 0o755 if entry.mode == "100755" else 0o644)
    for target, data in links:  # after the files, so no file is written through a link
        os.symlink(os.fsdecode(data), target)
    return {
        "snapshot": label,
        "event_id": event_id,
        "digest": snap.digest,
        "subject": snap.subject,
        "argv": list(snap.argv),
        "git": msgspec.to_builtins(snap.git),
        "directory": str(out),
        "files": len(snap.files),
        "driver_files": sorted(snap.driver),
    }


__all__ = [
    "SubjectCopies",
    "champion_snapshot",
    "check_original_command",
    "check_original_subject",
    "checkout",
    "measure_identity",
    "original_copies",
    "readiness_edge",
    "refuse_unsnapshotted",
    "resolve",
    "split_command",
    "subject_copies",
    "subjects_identity",
]


def check_original_command(target: Any, cmd: str) -> None:
    """``measure aa`` under snapshots (R11, R4): the A/A command is the readiness driver with a
    subject in its place, and that subject's snapshot is the original's; refused naming the
    paths that differ otherwise, before anything runs. No-op under the old rule."""

    if identity.original_snapshot(target) is None:
        return
    check_original_subject(target, _subject(target, cmd, "A/A"), "A/A")


def check_original_subject(target: Any, subject: str, role: str) -> None:
    """The subject directory ``subject`` holds the original's code: its snapshot equals the one
    readiness recorded (R11, R4), else refused naming the paths that differ. ``role`` names it
    in the message. Raises: RuleRefused (R11), BadRequest (not a directory)."""

    original = identity.original_snapshot(target)
    assert original is not None
    taken = take_as_original(target, subject)
    if taken.snapshot.digest != original.digest:
        raise refuse(
            "R11",
            f"the {role} subject {taken.snapshot.subject!r} is not the original's code recorded at "
            f"readiness; {identity.describe_difference(original, taken.snapshot)}; nothing was "
            "measured",
            f"measure the original from {original.subject!r} "
            f"(`perfledger checkout {original.digest} DIR` writes it)",
        )


def refuse_unsnapshotted(target: Any, command: str) -> None:
    """Refuse (R11) a measurement command that takes no snapshots on a Target whose readiness
    recorded the original's (its samples would be refused after measuring)."""

    if identity.original_snapshot(target) is not None:
        raise refuse(
            "R11",
            f"Target {target.definition.target_id!r} binds samples to code snapshots, which "
            f"`{command}` does not take yet; nothing was measured",
            "measure through the readiness driver with `perfledger measure workload`",
        )
