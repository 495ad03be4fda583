"""Each call of a measured subject runs from a read-only copy of its snapshot that perfledger
makes (R11; docs/code-identity.md, "Where a call runs").

:func:`prepare_subject` writes the snapshot's files, from the bytes recorded with it and checked
against their digests, into a fresh private directory per subject and run, and makes them
read-only. Beside the copy lie (``root`` is the copy's private directory, a random name):

- ``root/subject``: the copy; its path is what ``{subject}`` becomes in the driver's argv;
- ``root/pycache``: the subject's own bytecode cache (``PYTHONPYCACHEPREFIX``): Python then
  reads and writes compiled modules there only, never in a ``__pycache__`` of the sources, so a
  ``.pyc`` planted anywhere else is never loaded. The subject's first call compiles what it
  imports, later calls reuse it (once per run), and the other subject never uses it;
- ``root/tmp``: the subject's ``TMPDIR``;
- ``root/boot/sitecustomize.py``: perfledger's bootstrap, first on ``PYTHONPATH``. Python imports
  it before the subject's code; it installs an audit hook (``sys.addaudithook``: a hook cannot be
  removed once added) that writes to ``root/report`` every file the process opens for reading,
  or loads as an extension module, outside the copy's directory, what the environment identity
  hashes (the interpreter, its standard library, site-packages and editable installs' sources:
  never a whole prefix), the call's output place and ``/dev``, ``/proc``, ``/sys`` (of
  ``/proc``, only the process's own entry and the system-wide files: another process's
  ``/proc/<pid>/...``, and ``/proc`` itself, are reported); it reports every socket
  ``connect``, ``sendto``, ``sendmsg`` and ``bind`` too (a process outside the subject could
  hand it code); then it runs the interpreter's own ``sitecustomize``, if any.

:class:`CopyGuard` checks, before every call and after the run, that nothing changed in either
copy (each entry's ``lstat``, change time included: no process can set it back), that a
subject's private cache and ``TMPDIR`` changed only during its own calls, and that the call
before opened nothing outside those roots except the driver files of the snapshot (a file
outside is refused, naming it; for a Python subject a call whose bootstrap did not run is
refused too). Any finding raises :class:`~perfledger.errors.RuleRefused` (R11).

Use (a call launcher; ``measure workload`` does this in
:func:`perfledger.app.identity.subject_copies`)::

    copy = prepare_subject(snapshot, blobs, label="ref")   # blobs: blake3 hex -> bytes
    argv = substitute(driver_argv, copy.path)              # {subject} -> the copy
    env, dropped = closed_environment(os.environ, declared, copy.env)  # subject_env; R11
    guard = CopyGuard({"ref": ref_copy, "cand": cand_copy}, {"ref": argv, "cand": ...})
    guard("ref")  # before each call of that subject ... then guard(None) after the last
    copy.close()

The samples record ``subject_copies`` (label -> ``copy.digest``) and ``call_environment``
(:func:`perfledger.kernels.workload.subject_env.call_environment` of each subject's environment, with
``copy.root`` as its private directory) in their provenance's settings (R11, schema 7).

What it cannot see: files opened by native code (``ctypes``, a C extension's ``fopen``, the
dynamic loader), subjects whose processes are not Python, and a Python subject written to
defeat the hook from inside its own process (it runs in that process). Subjects run as the same
user as perfledger: read-only modes stop mistakes, the change-time check finds the rest.

Imports: the standard library, blake3, :mod:`perfledger.errors`, events and
:mod:`perfledger.kernels.workload.startup_surface` (SPEC.md section 1).
"""

from __future__ import annotations

import ast
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath

import blake3

from perfledger.errors import IntegrityError, RuleRefused
from perfledger.events.identity import Snapshot
from perfledger.kernels.workload.startup_surface import interpreter_of, is_python_program

#: The variable naming the file the bootstrap reports to.
REPORT_ENV = "PERFLEDGER_BOOT_REPORT"
#: The variable naming the copy's private directory (the bootstrap's first allowed root).
ROOT_ENV = "PERFLEDGER_SUBJECT_ROOT"
#: The line the bootstrap writes first (one per Python process that ran it).
BOOT_LINE = "boot"
#: Most files named in one refusal.
NAMED_FILES = 5
#: The bootstrap, written as ``root/boot/sitecustomize.py`` (module docstring).
BOOT_SOURCE = '''\
"""perfledger's bootstrap (R11), written by perfledger.kernels.workload.subject_copy: reports
the files this process reads from outside the subject's copy and the interpreter."""


def _perfledger_boot():
    import os
    import sys
    import sysconfig

    report = os.environ.get("PERFLEDGER_BOOT_REPORT")
    if not report:
        return
    try:
        fd = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except OSError:
        return
    write, fspath, fsdecode = os.write, os.fspath, os.fsdecode
    abspath, realpath = os.path.abspath, os.path.realpath
    # what the environment identity hashes (perfledger.kernels.python_tree): the standard
    # library, site-packages and editable installs' sources; never whole prefixes, whose other
    # directories (bin/, share/, the venv's root) anyone who installs may write unhashed
    paths = sysconfig.get_paths()
    sites = [paths.get(k) or "" for k in ("purelib", "platlib")]
    try:
        import site
        sites += list(site.getsitepackages())
        if site.ENABLE_USER_SITE:
            sites.append(site.getusersitepackages())
    except Exception:
        pass
    roots = {os.environ.get("PERFLEDGER_SUBJECT_ROOT") or "", paths.get("stdlib") or "",
             paths.get("platstdlib") or ""}
    roots.update(sites)
    for directory in sites:  # editable installs: .pth path lines and editable finders
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(directory, name), encoding="utf-8", errors="replace") as f:
                    if name.endswith(".pth"):
                        for line in f:
                            line = line.strip()
                            if line and not line.startswith(("#", "import ", "import\t")):
                                roots.add(os.path.join(directory, line))
                    elif name.startswith("__editable__") and name.endswith("_finder.py"):
                        text = f.read()
                        for quote in ("'", '"'):
                            for part in text.split(quote)[1::2]:
                                if part.startswith("/") and os.path.isdir(part):
                                    roots.add(part)
            except OSError:
                continue
    interpreter = realpath(sys.executable) if sys.executable else ""
    # the standard library's zip that CPython puts on sys.path: allowed while it does not exist
    # (a failed probe reads nothing); one planted there would shadow the standard library
    stdzips = {realpath(p) for p in sys.path
               if p.endswith(".zip") and os.path.basename(p).startswith("python")}
    output = os.environ.get("PERFLEDGER_OUTPUT")
    if output:
        roots.add(os.path.dirname(output))
    prefixes = set()
    for root in roots:
        if root:
            prefixes.add(abspath(root).rstrip("/") + "/")
            prefixes.add(realpath(root).rstrip("/") + "/")
    prefixes = tuple(sorted(prefixes))
    system = ("/dev/", "/proc/", "/sys/")
    writable = ("/dev/shm/", "/dev/mqueue/")
    seen = set()

    def note(path):
        try:
            path = fspath(path)
        except TypeError:
            return
        if isinstance(path, bytes):
            path = fsdecode(path)
        if not isinstance(path, str):
            return
        full = abspath(path)
        if full in seen:
            return
        seen.add(full)
        real = realpath(full)
        if (full + "/").startswith(prefixes) or (real + "/").startswith(prefixes):
            return
        if real == interpreter:
            return
        if real in stdzips and not os.path.exists(real):
            return
        # another process's /proc entry (its command line, environment, memory) carries what
        # that process holds, code included (red36 E2): only this process's own entry and the
        # kernel's system-wide files; /proc itself is refused too (a directory descriptor
        # would reach any entry by a relative name the hook cannot resolve)
        if real == "/proc" or real.startswith("/proc/"):
            entry = real[6:].split("/", 1)[0]
            if entry.isdigit() and not own(entry):
                write(fd, (repr(real) + "\\n").encode("utf-8", "surrogateescape"))
                return
            if real == "/proc":
                write(fd, (repr(real) + "\\n").encode("utf-8", "surrogateescape"))
                return
        # the system's devices and kernel files, but not /dev/shm: anyone may write there
        if (real + "/").startswith(system) and not (real + "/").startswith(writable):
            return
        write(fd, (repr(real) + "\\n").encode("utf-8", "surrogateescape"))

    def own(entry):
        # this process or one of its threads (/proc/self and /proc/thread-self resolve there)
        pid = os.getpid()
        return entry == str(pid) or os.path.isdir("/proc/%d/task/%s" % (pid, entry))

    def address(event, where):
        # a socket reaches a process outside the subject (a local one the agent started
        # carries code as a variable does): every connect, send-to and bind is reported
        line = "socket:%s %r" % (event[7:], where)
        write(fd, (repr(line) + "\\n").encode("utf-8", "surrogateescape"))

    def hook(event, args):
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            if isinstance(path, int):
                return
            if mode is None:
                reading = (flags or 0) & 3 != os.O_WRONLY
            else:
                reading = "r" in mode or "+" in mode
            if reading:
                note(path)
        elif event == "import" and len(args) > 1 and args[1] is not None:
            note(args[1])
        elif event == "ctypes.dlopen" and args and args[0] and "/" in str(args[0]):
            note(args[0])
        elif event in ("socket.connect", "socket.bind") and len(args) > 1:
            address(event, args[1])
        elif event == "socket.sendto" and len(args) > 1:
            address(event, args[1])
        elif event == "socket.sendmsg" and len(args) > 1 and args[1]:
            address(event, args[1])

    sys.addaudithook(hook)
    write(fd, b"boot\\n")


def _perfledger_chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_perfledger_boot()
_perfledger_chain()
'''


def safe_relative(rel: str) -> PurePosixPath:
    """A snapshot's path ``rel`` as a relative path that stays inside the directory it is
    written to (a copy, a checkout). Raises: IntegrityError."""
    path = PurePosixPath(rel)
    if path.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/")):
        raise IntegrityError(f"the snapshot holds a path that would leave the directory: {rel!r}")
    return path


def link_inside(rel: str, text: str) -> bool:
    """Whether a snapshot's symbolic link ``rel -> text`` resolves inside the directory it is
    written to (R11: links out of a subject are refused when snapshotted)."""
    depth = 0
    for part in [*PurePosixPath(rel).parent.parts, *text.split("/")]:
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return False
    return not text.startswith("/")


def _lstat(path: str) -> tuple[int, ...]:
    try:
        st = os.lstat(path)
    except OSError:
        return ()
    return (st.st_mode, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _tree(top: str, skip: Iterable[str] = ()) -> dict[str, tuple[int, ...]]:
    """Every entry under ``top`` (``top`` itself included) with its lstat, not entering or
    listing the directories ``skip``."""
    skipped = set(skip)
    out = {top: _lstat(top)}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skipped]
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            if path not in skipped:
                out[path] = _lstat(path)
    return out


class SubjectCopy:
    """A subject's read-only copy and its private places (module docstring).

    Attributes:
        label: the subject's label in the driver (``ref``, ``cand``).
        root: the private directory holding everything below (a random name).
        path: the copy of the subject directory: what ``{subject}`` becomes.
        pycache: the subject's own bytecode cache (``PYTHONPYCACHEPREFIX``).
        tmp: the subject's ``TMPDIR``.
        report: the file the bootstrap reports to.
        env: the variables to add to the driver's environment for this subject's calls.
        digest: the tree digest of the snapshot it copies.
    """

    def __init__(self, label: str, root: str, digest: str, base_path: str | None) -> None:
        self.label = label
        self.root = root
        self.path = os.path.join(root, "subject")
        self.pycache = os.path.join(root, "pycache")
        self.tmp = os.path.join(root, "tmp")
        self.boot = os.path.join(root, "boot")
        self.report = os.path.join(root, "report")
        self.digest = digest
        python_path = self.boot + (os.pathsep + base_path if base_path else "")
        self.env = {
            "PYTHONPYCACHEPREFIX": self.pycache,
            "PYTHONPATH": python_path,
            "TMPDIR": self.tmp,
            REPORT_ENV: self.report,
            ROOT_ENV: self.root,
        }

    @property
    def private(self) -> tuple[str, str]:
        """The directories only this subject's own calls may change."""
        return (self.pycache, self.tmp)

    def files(self) -> dict[str, tuple[int, ...]]:
        """Every entry of the copy and the bootstrap with its lstat (change time included)."""
        return _tree(self.root, skip=(*self.private, self.report))

    def private_files(self) -> dict[str, tuple[int, ...]]:
        """Every entry of the private cache and ``TMPDIR`` with its lstat."""
        out: dict[str, tuple[int, ...]] = {}
        for top in self.private:
            out.update(_tree(top))
        return out

    def read_report(self) -> tuple[int, list[str]]:
        """What the bootstrap reported since the last read, then emptied: (the number of
        processes it ran in, the files opened outside the allowed roots, in order)."""
        try:
            with open(self.report, "r+b") as handle:
                data = handle.read()
                handle.truncate(0)
        except OSError:
            return 0, []
        boots, paths = 0, []
        for line in data.decode("utf-8", "surrogateescape").splitlines():
            if line == BOOT_LINE:
                boots += 1
                continue
            try:
                value = ast.literal_eval(line)
            except (ValueError, SyntaxError):
                value = line
            paths.append(str(value))
        return boots, list(dict.fromkeys(paths))

    def close(self) -> None:
        """Remove the copy and its private places (never raises)."""
        for dirpath, dirnames, _files in os.walk(self.root):
            for name in ["", *dirnames]:
                path = os.path.join(dirpath, name) if name else dirpath
                if not os.path.islink(path):
                    with contextlib.suppress(OSError):
                        os.chmod(path, 0o700)
        shutil.rmtree(self.root, ignore_errors=True)


def prepare_subject(
    snapshot: Snapshot,
    blobs: Mapping[str, bytes],
    *,
    label: str = "subject",
    base_env: Mapping[str, str] | None = None,
) -> SubjectCopy:
    """Make the read-only copy of ``snapshot`` that every call of one subject runs from (R11).

    Args:
        snapshot: the subject's snapshot (every file under its directory).
        blobs: blake3 hex -> bytes of every file of the snapshot (as taken, or as recorded).
        label: the subject's label (``ref``, ``cand``), used in refusals.
        base_env: the environment the calls inherit (default: this process's); its
            ``PYTHONPATH`` is kept after the bootstrap's directory.
    Returns: the :class:`SubjectCopy`; call :meth:`SubjectCopy.close` when the run ends.
    Raises: IntegrityError when a file's bytes are missing or differ from its digest or size,
        or a path or link would leave the copy (nothing is left behind then).
    """
    env = os.environ if base_env is None else base_env
    root = tempfile.mkdtemp(prefix="perfledger-subject-")
    copy = SubjectCopy(label, root, snapshot.digest, env.get("PYTHONPATH"))
    try:
        _write(snapshot, blobs, copy)
    except BaseException:
        copy.close()
        raise
    return copy


def _write(snapshot: Snapshot, blobs: Mapping[str, bytes], copy: SubjectCopy) -> None:
    base = Path(copy.path)
    base.mkdir()
    links = []
    for rel, entry in sorted(snapshot.files.items()):
        target = base.joinpath(*safe_relative(rel).parts)
        data = blobs.get(entry.blake3)
        if (
            data is None
            or len(data) != entry.size
            or blake3.blake3(data).hexdigest() != (entry.blake3)
        ):
            raise IntegrityError(
                f"the bytes of {rel!r} in snapshot {snapshot.digest[:16]} are missing or are "
                "not the recorded ones; no copy was made"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.mode == "120000":
            text = os.fsdecode(data)
            if not link_inside(rel, text):
                raise IntegrityError(f"the snapshot's link {rel!r} -> {text!r} leaves its copy")
            links.append((target, text))
            continue
        target.write_bytes(data)
        target.chmod(0o555 if entry.mode == "100755" else 0o444)
    for target, text in links:  # after the files: nothing is written through a link
        os.symlink(text, target)
    boot = Path(copy.boot)
    boot.mkdir()
    (boot / "sitecustomize.py").write_text(BOOT_SOURCE)
    (boot / "sitecustomize.py").chmod(0o444)
    for private in copy.private:
        os.mkdir(private, 0o700)
    fd = os.open(copy.report, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(fd)
    for dirpath, _dirnames, _files in os.walk(copy.path, topdown=False):
        os.chmod(dirpath, 0o555)
    os.chmod(copy.boot, 0o555)
    os.chmod(copy.root, 0o555)


def is_python(argv: Sequence[str]) -> bool:
    """Whether a command line runs a Python interpreter (``python``, ``python3.11``, ... past
    ``env``): its calls must run the bootstrap."""
    program = interpreter_of(argv)
    return program is not None and is_python_program(program)


#: How the bootstrap reports a socket's connect, send-to or bind (not a file).
SOCKET_LINE = "socket:"


def _other_process(path: str) -> bool:
    # a /proc/<pid> entry the bootstrap reported is another process's: never an allowed file,
    # whatever the snapshot's driver files are
    return path == "/proc" or (path.startswith("/proc/") and path[6:].split("/")[0].isdigit())


class CopyGuard:
    """The checks around the calls of two (or more) subjects' copies (module docstring)."""

    ROLES: Mapping[str, str] = {"ref": "reference", "cand": "candidate"}

    def __init__(
        self,
        copies: Mapping[str, SubjectCopy],
        argvs: Mapping[str, Sequence[str]],
        allowed_files: Iterable[str] = (),
        *,
        boot_per_call: bool = True,
    ) -> None:
        """``copies`` and ``argvs``: by label; ``allowed_files``: files outside the copies a
        call may open (the snapshot's driver files), as paths this process can resolve;
        ``boot_per_call``: each call is a process of its own, whose bootstrap must have run
        (False: a worker serves many calls, and its bootstrap ran once when it started)."""
        self.copies = dict(copies)
        self.boot_per_call = boot_per_call
        self.boots: dict[str, int] = {}
        self.python = {label: is_python(argv) for label, argv in argvs.items()}
        self.allowed = {os.path.realpath(p) for p in allowed_files}
        self.files = {label: c.files() for label, c in self.copies.items()}
        self.private = {label: c.private_files() for label, c in self.copies.items()}
        self.last: str | None = None

    def _role(self, label: str) -> str:
        return self.ROLES.get(label, label)

    def __call__(self, label: str | None = None) -> None:
        """Before the call of ``label`` (None after the run). Raises: RuleRefused (R11)."""
        if self.last is not None:
            self._judge_report(self.last)
            self.private[self.last] = self.copies[self.last].private_files()
        for name, copy in self.copies.items():
            now = copy.files()
            if now != self.files[name]:
                self._refuse_changed(name, now, self.files[name], "copy")
            now = copy.private_files()
            if now != self.private[name]:  # changed outside its own calls
                self._refuse_changed(name, now, self.private[name], "private")
        self.last = label

    def _refuse_changed(
        self, label: str, now: Mapping[str, tuple[int, ...]], before: Mapping[str, tuple[int, ...]],
        what: str,
    ) -> None:  # fmt: skip
        touched = sorted(p for p in set(now) | set(before) if now.get(p) != before.get(p))
        # the files first: a directory changed because something in it did
        every = tuple(touched)  # (a list being sorted reads as empty)
        touched.sort(key=lambda p: any(q.startswith(p + "/") for q in every))
        shown = ", ".join(touched[:NAMED_FILES]) + (
            f" and {len(touched) - NAMED_FILES} more" if len(touched) > NAMED_FILES else ""
        )
        place = (
            f"the read-only copy the {self._role(label)} runs from were written"
            if what == "copy"
            else f"the {self._role(label)}'s private bytecode cache or TMPDIR were written "
            "outside its own calls"
        )
        raise RuleRefused(
            f"R11: files of {place} while it was measured: {shown}; code no snapshot holds "
            "could have run, so the samples were not recorded",
            rule="R11",
            hint="no process may write into perfledger's copies of the subjects (a subject "
            "that finds the other's and writes there is refused); measure again",
        )

    def _judge_report(self, label: str) -> None:
        copy = self.copies[label]
        boots, paths = copy.read_report()
        sockets = [p for p in paths if p.startswith(SOCKET_LINE)]
        if sockets:
            shown = _named(sockets)
            raise RuleRefused(
                f"R11: the {self._role(label)}'s call used a socket to reach a process outside "
                f"it ({shown}); what comes back through it is in no snapshot, so nothing was "
                "recorded",
                rule="R11",
                hint="a measured subject talks to no other process: put what it needs into the "
                "subject directory (then it is snapshotted)",
            )
        outside = [p for p in paths if os.path.realpath(p) not in self.allowed or _other_process(p)]
        if outside:
            shown = _named(outside)
            raise RuleRefused(
                f"R11: the {self._role(label)}'s call read files outside its snapshot, the "
                f"interpreter and its site-packages: {shown}; what they hold is in no "
                "snapshot, so nothing was recorded",
                rule="R11",
                hint="a subject reads no other process's /proc entry (its command line, "
                "environment or memory can hold code); move what it needs into the subject "
                "directory"
                if any(_other_process(p) for p in outside)
                else "move the file into the subject directory, or name it on the readiness "
                "driver's command line by a relative path (then it is snapshotted); data a "
                "call needs goes there too",
            )
        self.boots[label] = self.boots.get(label, 0) + boots
        if self.python.get(label) and (boots if self.boot_per_call else self.boots[label]) == 0:
            raise RuleRefused(
                f"R11: perfledger's bootstrap did not run in the {self._role(label)}'s call "
                "(python -S, -I or -E skip it), so the files it read are not known; nothing "
                "was recorded",
                rule="R11",
                hint="run the driver's Python without -S, -I or -E",
            )


__all__ = [
    "BOOT_SOURCE",
    "REPORT_ENV",
    "ROOT_ENV",
    "CopyGuard",
    "SubjectCopy",
    "is_python",
    "link_inside",
    "prepare_subject",
    "safe_relative",
]


def _named(paths: list[str]) -> str:
    """The first :data:`NAMED_FILES` of ``paths``, then how many more (a refusal's list)."""
    more = len(paths) - NAMED_FILES
    return ", ".join(paths[:NAMED_FILES]) + (f" and {more} more" if more > 0 else "")
