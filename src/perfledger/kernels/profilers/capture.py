"""Running Nsight Compute: ``evidence ncu -- CMD`` captures, ``.ncu-rep`` exports.

The capture runs ``ncu --csv --print-units base --page details --clock-control none`` with the
chosen sections under ``LC_ALL=C`` (so numbers carry no digit grouping), records ``ncu --version``,
the exact argv and the exit status. perfledger never changes clocks or counter permissions (R16):
``--clock-control none`` leaves the GPU as it is, and ``ERR_NVGPUCTRPERM`` becomes a limitation.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from perfledger.errors import EvidenceError

#: Sections captured by default: the Speed-of-Light digest's inputs.
DEFAULT_SECTIONS = (
    "SpeedOfLight", "LaunchStats", "Occupancy", "ComputeWorkloadAnalysis",
    "MemoryWorkloadAnalysis",
)  # fmt: skip


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "`perfledger evidence ncu -- CMD ...` needs Nsight Compute (`ncu`) on PATH and a command it can run; or pass a report exported with `ncu --csv` (docs/profilers.md)"


@dataclass(frozen=True)
class NcuCapture:
    """One ncu run: ``argv`` as run, ``exit_status``, ``version_text`` (``ncu --version``) and
    ``output`` (stdout then stderr bytes: the ``==PROF==`` lines, the program's output and the
    CSV)."""

    argv: list[str]
    exit_status: int
    version_text: str
    output: bytes


def find_ncu(ncu: str | None = None) -> str:
    """Return the ncu executable (``ncu`` argument, ``$PERFLEDGER_NCU``, else ``ncu`` on PATH).

    Raises: EvidenceError when it is not found."""
    candidate = ncu or os.environ.get("PERFLEDGER_NCU") or "ncu"
    found = shutil.which(candidate)
    if found is None:
        raise EvidenceError(
            f"ncu not found ({candidate!r})",
            hint="install Nsight Compute or point PERFLEDGER_NCU at it",
        )
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env["LANG"] = "C"
    return env


def ncu_version(ncu: str) -> str:
    """Return ``ncu --version`` output. Raises: EvidenceError when it fails."""
    try:
        done = subprocess.run(
            [ncu, "--version"], capture_output=True, env=_env(), timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EvidenceError(f"`{ncu} --version` failed: {exc}", hint=_HINT) from None
    return done.stdout.decode("utf-8", "replace")


def capture_ncu(
    command: list[str],
    *,
    ncu: str | None = None,
    sections: tuple[str, ...] = DEFAULT_SECTIONS,
    extra: tuple[str, ...] = (),
    timeout_s: float | None = None,
) -> NcuCapture:
    """Profile ``command`` with ncu (details page, base units, ``LC_ALL=C``, no clock control).

    Args:
        command: the program and its arguments.
        ncu: the ncu executable (see :func:`find_ncu`).
        sections: ncu section identifiers to collect.
        extra: further ncu options (e.g. ``-k`` kernel filters, ``-c`` counts).
        timeout_s: wall-clock limit in seconds (None: no limit).
    Returns: the :class:`NcuCapture`; a non-zero exit status is recorded, not raised (its
        output may still hold a report, or ERR_NVGPUCTRPERM).
    Raises: EvidenceError when ncu cannot be started or times out, or ``command`` is empty.
    """
    if not command:
        raise EvidenceError(
            "no command to profile: use `perfledger evidence ncu -- CMD ...`", hint=_HINT
        )
    exe = find_ncu(ncu)
    version = ncu_version(exe)
    argv = [exe, "--csv", "--print-units", "base", "--page", "details", "--clock-control", "none"]
    for section in sections:
        argv += ["--section", section]
    argv += [*extra, *command]
    try:
        done = subprocess.run(argv, capture_output=True, env=_env(), timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EvidenceError(f"ncu could not run the command: {exc}", hint=_HINT) from None
    return NcuCapture(argv, done.returncode, version, done.stdout + done.stderr)


def export_ncu_rep(path: str | Path, *, ncu: str | None = None) -> tuple[bytes, str]:
    """Export an ``.ncu-rep`` report with ``ncu --import FILE --csv --print-units base --page
    details`` (``LC_ALL=C``). Returns: (the CSV bytes, ``ncu --version`` output).

    Raises: EvidenceError when ncu is missing (its hint gives the export command to run where
    ncu is installed) or the import fails."""
    try:
        exe = find_ncu(ncu)
    except EvidenceError as exc:
        # a binary report cannot be read without ncu: say how to make the CSV elsewhere
        raise EvidenceError(
            f"{path}: a binary .ncu-rep report needs Nsight Compute to be read, and {exc.message}",
            hint=f"where ncu is installed, run `{export_command(path)}` and add that CSV with "
            "`perfledger evidence add --kind ncu FILE.csv`; or point PERFLEDGER_NCU (--ncu) "
            "at ncu",
        ) from None
    argv = [exe, "--import", str(path), "--csv", "--print-units", "base", "--page", "details"]
    try:
        done = subprocess.run(argv, capture_output=True, env=_env(), timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EvidenceError(f"ncu --import failed: {exc}", hint=_HINT) from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise EvidenceError(
            f"ncu --import {path} failed (exit {done.returncode}): {message}", hint=_HINT
        )
    return done.stdout, ncu_version(exe)


def export_command(path: str | Path) -> str:
    """The shell command that exports the ``.ncu-rep`` at ``path`` to the CSV perfledger reads
    (``--page details``, base units, ``LC_ALL=C``), for a hint where ncu is not installed."""

    name = str(path)
    target = (name[: -len(".ncu-rep")] if name.endswith(".ncu-rep") else name) + ".csv"
    return (
        f"LC_ALL=C ncu --import {shlex.quote(name)} --csv --print-units base --page details "
        f"> {shlex.quote(target)}"
    )
