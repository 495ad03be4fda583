"""The start-up files of a subject's Python interpreter, watched during a measurement (R11).

Every Python process runs, before any of its own code, the ``import`` lines of the ``.pth``
files in its site-packages and the ``sitecustomize`` / ``usercustomize`` modules on its path.
Those files lie outside both subjects, so no snapshot holds them. A candidate that adds one in
its own call runs code in every later call, the reference's included: it can slow only the
processes whose command line names the reference's directory, then remove the file on its own
last call. Measured on the workload of ``tests/workflow/test_code_identity.py``: the champion's own
code measured 96 % faster than the champion, with nothing flagged.

:class:`StartupWatch` finds those directories once per run for each subject whose command
starts with a Python interpreter (``python``, ``python3``, ``python3.11``, ...). It asks the
interpreter itself, once, before any call (``-S`` would hide a virtual environment's
site-packages: Python finds those in ``site``). Before every
call it compares what it found then (name, size, change and modification times of each
``.pth``, ``sitecustomize*`` and ``usercustomize*`` entry) with what is there now. A change
refuses the run (R11). The change time cannot be set back by a user process.

What was there before the run is what readiness recorded: :func:`startup_code` reads the
executable start-up code of the readiness driver's Python (each ``.pth`` file's ``import``
lines, which ``site`` executes, and ``sitecustomize`` / ``usercustomize``), which readiness
records with its event (:data:`STARTUP_CODE_ARTIFACT`), and :func:`unrecorded_startup_code` names
what a measurement's subjects' Python runs beyond it (R11: a ``.pth`` that slows only the
reference, installed after readiness, or in another interpreter the driver's ``python3`` finds
on ``PATH``, is refused before anything runs; one installed before readiness is in its record,
for the auditor to read).

Not covered: other files of installed packages (an edited ``numpy/__init__.py`` runs only in
processes that import it), and subjects whose command is not a Python interpreter, directly or
through ``env`` (a shell script that starts one). docs/code-identity.md states these limits.

Imports: the standard library and :mod:`perfledger.errors` (SPEC.md section 1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence

from perfledger.errors import RuleRefused

#: Module names Python imports at start-up from its path (``site``).
STARTUP_MODULES = ("sitecustomize", "usercustomize")
#: Suffix given to a start-up entry added during a refused run (Python ignores it then).
QUARANTINE_SUFFIX = ".perfledger-quarantine"
#: Seconds the interpreter may take to say where its start-up files are.
QUERY_TIMEOUT_S = 30.0
_PYTHON = re.compile(r"python[0-9.]*")
_QUERY = (
    "import json, site, sys; "
    "print(json.dumps([p for p in sys.path if p] + site.getsitepackages() "
    "+ [site.getusersitepackages()]))"
)

#: path of a start-up file -> (size, ctime_ns, mtime_ns)
Fingerprint = dict[str, tuple[int, int, int]]
#: The artifact of a readiness event holding the start-up code of its driver's Python (R11):
#: JSON ``{"interpreter": PATH, "code": {file: code}}`` (:func:`startup_code`).
STARTUP_CODE_ARTIFACT = "startup-code.json"
#: The lines of a ``.pth`` file that ``site`` executes (the others it adds to ``sys.path``).
_EXECUTED = ("import ", "import\t")


def is_python_program(argv0: str) -> bool:
    """Whether the program ``argv0`` is a Python interpreter by its name (``python``,
    ``python3``, ``python3.11``, a path to one)."""
    return _PYTHON.fullmatch(os.path.basename(argv0)) is not None


def python_site_dirs(argv0: str) -> list[str]:
    """The directories where the interpreter ``argv0`` looks for start-up files (its path and
    site-packages, the user's included); [] when ``argv0`` is not a Python interpreter or does
    not answer (then nothing is watched for it)."""
    if not is_python_program(argv0):
        return []
    exe = shutil.which(argv0) or argv0
    try:
        done = subprocess.run(
            [exe, "-c", _QUERY],
            capture_output=True,
            text=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
        )
        dirs = json.loads(done.stdout) if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    return sorted({os.path.abspath(d) for d in dirs if isinstance(d, str)})


def interpreter_of(argv: Sequence[str]) -> str | None:
    """The program a command line runs, past ``env`` and its options and assignments
    (``env -i X=1 python3 run.py`` -> ``python3``); None for an empty command."""
    words = list(argv)
    if words and os.path.basename(words[0]) == "env":
        words = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return words[0] if words else None


def _is_startup(name: str) -> bool:
    return name.endswith(".pth") or name.split(".")[0] in STARTUP_MODULES


def fingerprint(dirs: Sequence[str]) -> Fingerprint:
    """The start-up files under ``dirs`` (``.pth``, ``sitecustomize*``, ``usercustomize*``; a
    package of that name with every file in it), each with its size and change and modification
    times (ns). A missing directory holds none."""
    out: Fingerprint = {}
    for directory in dirs:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if not _is_startup(entry.name):
                continue
            paths = [entry.path]
            if entry.is_dir(follow_symlinks=False):
                paths = [os.path.join(d, f) for d, _s, fs in os.walk(entry.path) for f in fs]
                paths.append(entry.path)
            for path in paths:
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                out[path] = (st.st_size, st.st_ctime_ns, st.st_mtime_ns)
    return out


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def startup_code(argv: Sequence[str]) -> dict[str, str]:
    """The executable start-up code of the Python interpreter the command line ``argv`` runs
    (:func:`interpreter_of`, found on ``PATH`` as the calls find it), read from the directories
    of :func:`python_site_dirs`: file path -> code, for each ``.pth`` file with ``import`` lines
    (those lines: ``site`` executes them in every process, before any of its own code) and each
    ``sitecustomize*`` / ``usercustomize*`` module (its text; a package: each of its ``.py``
    files). Empty for a command that is not a Python interpreter, or one that does not answer
    (R11)."""
    program = interpreter_of(argv)
    if program is None:
        return {}
    out: dict[str, str] = {}
    for path in sorted(fingerprint(python_site_dirs(program))):
        name = os.path.basename(path)
        if name.endswith(".pth") and os.path.isfile(path):
            text = _read_text(path) or ""
            lines = [line.rstrip("\n") for line in text.splitlines() if line.startswith(_EXECUTED)]
            if lines:
                out[path] = "\n".join(lines)
        elif name.endswith(".py") and os.path.isfile(path):
            text = _read_text(path)
            if text is not None:
                out[path] = text
    return out


def resolved_interpreter(argv: Sequence[str]) -> str | None:
    """The interpreter file the command line ``argv`` runs (found on ``PATH``, links
    resolved), or None when it is not a Python interpreter."""
    program = interpreter_of(argv)
    if program is None or not is_python_program(program):
        return None
    return os.path.realpath(shutil.which(program) or program)


def unrecorded_startup_code(argv: Sequence[str], recorded: dict[str, str]) -> dict[str, str]:
    """The start-up code of ``argv``'s Python (:func:`startup_code`) that ``recorded`` (what
    readiness recorded) does not hold: file -> code now, for each file added or whose code
    changed since (a file removed runs nothing, so it is not named)."""
    return {path: code for path, code in startup_code(argv).items() if recorded.get(path) != code}


class StartupWatch:
    """The start-up files of the subjects' interpreters as found when the run began (R11)."""

    def __init__(self, argvs: Sequence[Sequence[str]]) -> None:
        """Find the start-up directories of the interpreter of each command line
        (:func:`interpreter_of`) and fingerprint them."""
        dirs: set[str] = set()
        for program in dict.fromkeys(interpreter_of(a) for a in argvs):
            if program is not None:
                dirs.update(python_site_dirs(program))
        self.dirs = sorted(dirs)
        self.before = fingerprint(self.dirs)

    def check(self) -> None:
        """Raises: RuleRefused (R11) naming the start-up files added, removed or changed since
        the run began; nothing is recorded by the caller."""
        now = fingerprint(self.dirs)
        changed = sorted(p for p in set(now) | set(self.before) if now.get(p) != self.before.get(p))
        if not changed:
            return
        shown = ", ".join(
            f"{p} ({'added' if p not in self.before else 'removed' if p not in now else 'changed'})"
            for p in changed[:5]
        )
        moved = self._quarantine([p for p in changed if p not in self.before])
        raise RuleRefused(
            f"R11: start-up files of the subjects' Python changed while measuring: {shown}. "
            "Code in them runs at the start of every later call, the other subject's "
            "included, and no snapshot holds it; the samples were not recorded"
            + (f"; added during this run, so moved aside: {', '.join(moved)}" if moved else ""),
            rule="R11",
            hint="restore what changed in the interpreter's site-packages (install nothing "
            "during a measurement), then measure again",
        )

    def _quarantine(self, added: list[str]) -> list[str]:
        """Move start-up entries added during the run aside (``NAME`` ->
        ``NAME.perfledger-quarantine``): Python no longer runs them, so a file left behind by a
        refused run cannot act in the next run (whose watch would take it as found). Returns:
        the new names; an entry that cannot be moved is left, and named in the refusal."""
        moved: list[str] = []
        for top in dict.fromkeys(self._top_entry(p) for p in added):
            if top is None or not os.path.lexists(top):
                continue
            target = top + QUARANTINE_SUFFIX
            if os.path.lexists(target):
                continue  # never overwrite an earlier one
            try:
                os.rename(top, target)
            except OSError:
                continue
            moved.append(target)
        return moved

    def _top_entry(self, path: str) -> str | None:
        """The entry directly under a watched directory that holds ``path``."""
        for directory in self.dirs:
            rel = os.path.relpath(path, directory)
            if not rel.startswith(os.pardir):
                return os.path.join(directory, rel.split(os.sep)[0])
        return None


__all__ = [
    "QUARANTINE_SUFFIX",
    "QUERY_TIMEOUT_S",
    "STARTUP_CODE_ARTIFACT",
    "STARTUP_MODULES",
    "Fingerprint",
    "StartupWatch",
    "fingerprint",
    "interpreter_of",
    "is_python_program",
    "python_site_dirs",
    "resolved_interpreter",
    "startup_code",
    "unrecorded_startup_code",
]
