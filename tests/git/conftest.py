"""Fixtures for the real-git suites: the git CLI and the perfledger CLI as subprocesses, in an
environment isolated from the user's git configuration, plus repository snapshots and
``git fsck``. Nothing is mocked: every ledger is a repository on disk under ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from subprocess_env import isolated_env, perfledger_command

#: Runs ``git -C REPO ARGS...``: ``git_run(repo, "fsck", input=b"...", check=True)``.
GitRun = Callable[..., "subprocess.CompletedProcess[bytes]"]
#: Runs the perfledger CLI: ``perfledger_run("--ledger", path, "verify", "--json")``.
CliRun = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def subprocess_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The isolated environment every subprocess of these suites runs in."""
    return isolated_env(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def git_run(subprocess_env: dict[str, str]) -> GitRun:
    """The real git CLI on one repository; raises AssertionError (with stderr) on failure."""

    def run(
        repo: str | os.PathLike[str],
        *args: str | os.PathLike[str],
        input: bytes | None = None,
        check: bool = True,
    ) -> subprocess.CompletedProcess[bytes]:
        argv = ["git", "-C", os.fspath(repo), *map(os.fspath, args)]
        proc = subprocess.run(
            argv, input=input, env=subprocess_env, capture_output=True, check=False, timeout=120
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {proc.returncode}:\n"
                f"{proc.stdout.decode(errors='replace')}{proc.stderr.decode(errors='replace')}"
            )
        return proc

    return run


@pytest.fixture(scope="session")
def perfledger_run(subprocess_env: dict[str, str]) -> CliRun:
    """The perfledger console script as a subprocess; asserts no traceback reaches stderr."""
    prefix = perfledger_command()

    def run(
        *args: str | os.PathLike[str],
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*prefix, *map(os.fspath, args)],
            cwd=cwd,
            env={**subprocess_env, **(env or {})},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    return run


@pytest.fixture(scope="session")
def cli_verify(perfledger_run: CliRun) -> Callable[[str | os.PathLike[str]], tuple[int, Any]]:
    """Run ``perfledger --ledger PATH verify --json``; return (exit code, the one JSON object)."""

    def verify(path: str | os.PathLike[str]) -> tuple[int, Any]:
        proc = perfledger_run("--ledger", path, "verify", "--json")
        return proc.returncode, json.loads(proc.stdout)

    return verify


@pytest.fixture(scope="session")
def assert_fsck_clean(git_run: GitRun) -> Callable[[str | os.PathLike[str]], None]:
    """Assert ``git fsck --strict --full`` exits 0 and reports nothing at all (no error, no
    warning, no dangling object)."""

    def check(repo: str | os.PathLike[str]) -> None:
        proc = git_run(repo, "fsck", "--strict", "--full", "--no-progress", check=False)
        output = (proc.stdout + proc.stderr).decode(errors="replace")
        assert proc.returncode == 0 and output.strip() == "", output

    return check


def snapshot_repository(gitdir: Path) -> dict[str, tuple[int, bytes]]:
    """Return relative path -> (mode, bytes) of every file of a git directory except the derived
    ``perfledger/`` data: refs, packed-refs, HEAD, config, every loose object and pack file."""
    files: dict[str, tuple[int, bytes]] = {}
    for root, dirs, names in os.walk(gitdir):
        rel_root = Path(root).relative_to(gitdir)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d != "perfledger"]
        for name in names:
            path = Path(root) / name
            files[str(rel_root / name)] = (path.stat().st_mode, path.read_bytes())
    return files


@pytest.fixture(scope="session")
def snapshot() -> Callable[[Path], dict[str, tuple[int, bytes]]]:
    """The :func:`snapshot_repository` helper."""
    return snapshot_repository
