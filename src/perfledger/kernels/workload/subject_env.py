"""The environment that can change how a subject runs (SPEC.md section 5; rules R5, R11).

Subjects inherit the driver's environment; a variable such as ``PYTHONPATH`` or ``LD_PRELOAD``
can load code that is in neither subject's snapshot, and change what is measured without a file
of either subject differing. The driver therefore records the variables of
:data:`INFLUENCING_NAMES` and :data:`INFLUENCING_PREFIXES` in the samples' provenance settings
(:func:`influencing_environment`), and ``measure`` warns, in a formal stage, about path
variables (:data:`PATH_VARIABLES`) that point outside both subjects and the driver's Python
(:func:`foreign_paths`). Subjects are never told their role (only the case).

Imports: the standard library and events (kernels imports events at most, SPEC.md section 1).
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import blake3

from perfledger.events.workflow import FORMAL_STAGES

#: Variables recorded by name: the Python start-up and the dynamic loader.
INFLUENCING_NAMES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONNOUSERSITE",
    "PYTHONSAFEPATH",
    "PYTHONOPTIMIZE",
    "PYTHONHASHSEED",
    "PYTHONMALLOC",
    "PYTHONWARNINGS",
    "PYTHONDONTWRITEBYTECODE",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "LD_BIND_NOW",
    "MALLOC_ARENA_MAX",
)
#: Variables recorded by prefix: Python's own settings (``PYTHONTRACEMALLOC`` slows every
#: allocation), GPU, threading and numeric-library settings.
INFLUENCING_PREFIXES = (
    "PYTHON",
    "CUDA_",
    "CUBLAS_",
    "CUDNN_",
    "NCCL_",
    "NVIDIA_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "GOMP_",
    "KMP_",
    "TORCH_",
    "PYTORCH_",
    "TRITON_",
    "CUPY_",
    "XLA_",
    "JAX_",
    "TF_",
    "DYLD_",
)
#: Parts of a name that mark a secret: such variables are never recorded (events live in git).
SECRET_MARKERS = ("TOKEN", "SECRET", "KEY", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
#: Variables whose values are paths (``os.pathsep``- or space-separated) that load code.
PATH_VARIABLES = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
)


def influencing_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``environ`` (default: this process's) that can change how a subject runs
    (:data:`INFLUENCING_NAMES`, :data:`INFLUENCING_PREFIXES`), sorted by name; names holding
    a :data:`SECRET_MARKERS` part are left out (what is recorded stays in the ledger's git)."""
    env = os.environ if environ is None else environ
    return {
        name: env[name]
        for name in sorted(env)
        if (name in INFLUENCING_NAMES or name.startswith(INFLUENCING_PREFIXES))
        and not any(marker in name.upper() for marker in SECRET_MARKERS)
    }


#: What a subject's private directory becomes in the recorded values (R11): the two subjects'
#: environments then compare equal where they differ by that directory alone.
SUBJECT_ROOT_TOKEN = "{subject_root}"
#: The key of the hashes of secret variables' values: drawn once per process, never recorded,
#: so the two subjects' values compare within a run and a recorded hash reveals nothing.
_SECRET_KEY = secrets.token_bytes(32)


def call_environment(environ: Mapping[str, str], subject_root: str | None = None) -> dict[str, str]:
    """The full environment of a subject's calls as recorded with its samples (R11): every
    variable's name -> ``blake3:<hex>`` of its value, where every occurrence of the subject's
    private directory ``subject_root`` (its copy, bytecode cache, bootstrap) is replaced by
    :data:`SUBJECT_ROOT_TOKEN` first. Variables whose names hold a :data:`SECRET_MARKERS` part
    get ``keyed:<hex>``, a hash keyed by a per-process secret: equal values compare equal
    within a run, and no recorded hash can be tested against guesses. Sorted by name."""
    out: dict[str, str] = {}
    for name in sorted(environ):
        value = environ[name]
        if subject_root:
            value = value.replace(subject_root, SUBJECT_ROOT_TOKEN)
        data = value.encode("utf-8", "surrogateescape")
        if any(marker in name.upper() for marker in SECRET_MARKERS):
            out[name] = "keyed:" + blake3.blake3(data, key=_SECRET_KEY).hexdigest()
        else:
            out[name] = "blake3:" + blake3.blake3(data).hexdigest()
    return out


#: What a subject copy's calls keep of the caller's environment (R11, SPEC section 1): the
#: program search path, the home directory and the locale. Everything else a subject sees is
#: set by perfledger (its private places, ``PERFLEDGER_*``) or declared by the readiness
#: driver's ``env`` (recorded in full in the ledger).
SUBJECT_ALLOWED_NAMES = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ")
#: Prefixes of the caller's variables a subject copy's calls keep: the locale's categories.
SUBJECT_ALLOWED_PREFIXES = ("LC_",)


def closed_environment(
    environ: Mapping[str, str], declared: Mapping[str, str], private: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The whole environment of a subject copy's calls (R11): the variables of ``environ`` (the
    caller's) named in :data:`SUBJECT_ALLOWED_NAMES` or starting with
    :data:`SUBJECT_ALLOWED_PREFIXES`, then ``declared`` (the readiness driver's ``env``), then
    ``private`` (the copy's places, which win). A variable of the caller outside that set never
    reaches a subject: its value could carry code that is in no snapshot (red36 E1).

    Returns: ``(environment, the caller's names dropped, sorted)``."""
    env = {
        name: value
        for name, value in environ.items()
        if name in SUBJECT_ALLOWED_NAMES or name.startswith(SUBJECT_ALLOWED_PREFIXES)
    }
    env.update(declared)
    env.update(private)
    dropped = sorted(name for name in environ if name not in env)
    return env, dropped


def recorded_environment(environ: Mapping[str, str], subject_root: str | None) -> dict[str, str]:
    """``environ`` as recorded in full with the samples (R11): every value, with the subject's
    private directory replaced by :data:`SUBJECT_ROOT_TOKEN` (the two subjects' records are
    then equal). Only for a closed environment (:func:`closed_environment`), whose values are
    the allow-list's, the readiness's and perfledger's own: no secret. Sorted by name."""
    return {
        name: environ[name].replace(subject_root, SUBJECT_ROOT_TOKEN)
        if subject_root
        else environ[name]
        for name in sorted(environ)
    }


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def subject_roots(argvs: Iterable[Iterable[str]]) -> list[Path]:
    """The directories of the existing paths named in the subjects' command words (a file's
    directory, or the directory itself), plus the driver's Python (``sys.prefix`` and
    ``sys.base_prefix``): where a code-loading variable may point without a finding."""
    roots = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    for argv in argvs:
        for word in argv:
            path = Path(word)
            if not path.is_absolute() or not path.exists():
                continue
            resolved = path.resolve()
            roots.add(resolved if resolved.is_dir() else resolved.parent)
    return sorted(roots)


def foreign_paths(environment: Mapping[str, str], roots: Iterable[Path]) -> dict[str, list[str]]:
    """Path variables (:data:`PATH_VARIABLES`) of ``environment`` with entries inside none of
    ``roots``: variable -> those entries (empty entries ignored)."""
    root_list = [Path(r) for r in roots]
    out: dict[str, list[str]] = {}
    for name in PATH_VARIABLES:
        value = environment.get(name)
        if not value:
            continue
        separators = value.replace(" ", os.pathsep) if name.startswith("LD_") else value
        entries = [e for e in separators.split(os.pathsep) if e]
        outside = [e for e in entries if not _inside(Path(e).resolve(), root_list)]
        if outside:
            out[name] = outside
    return out


def environment_warnings(
    environment: Mapping[str, str], argvs: Iterable[Iterable[str]], stage: str
) -> list[str]:
    """``measure``'s warnings (not blocking) about a formal (``target``, ``final_audit``) stage
    whose subjects ran with code-loading variables pointing outside both subjects and the
    driver's Python (:func:`foreign_paths`). Returns zero or one line saying what to do."""
    if stage not in FORMAL_STAGES:
        return []
    found = foreign_paths(environment, subject_roots(argvs))
    if not found:
        return []
    shown = "; ".join(f"{name}={':'.join(paths)}" for name, paths in found.items())
    return [
        f"the subjects ran with variables that load code from outside both subjects and the "
        f"driver ({shown}): that code is in neither snapshot, yet it ran in every call of this "
        f"{stage} stage (recorded in the samples' provenance settings, `environment`). Unset "
        "them and measure again, or move that code into the subjects"
    ]


__all__ = [
    "INFLUENCING_NAMES",
    "INFLUENCING_PREFIXES",
    "PATH_VARIABLES",
    "SECRET_MARKERS",
    "SUBJECT_ALLOWED_NAMES",
    "SUBJECT_ALLOWED_PREFIXES",
    "SUBJECT_ROOT_TOKEN",
    "call_environment",
    "closed_environment",
    "environment_warnings",
    "foreign_paths",
    "influencing_environment",
    "recorded_environment",
    "subject_roots",
]
