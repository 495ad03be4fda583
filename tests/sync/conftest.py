"""Fixtures of the sync suite: an isolated environment for real git and perfledger
subprocesses, a served directory behind a real ``git daemon`` on 127.0.0.1, repository
snapshots. Nothing is mocked."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # subprocess_env
sys.path.insert(0, str(HERE.parent / "workflow"))  # wf_scenario

from gitservers import git_daemon  # noqa: E402

from subprocess_env import isolated_env, perfledger_command  # noqa: E402


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The isolated environment every subprocess of this suite runs in."""
    return isolated_env(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def git(env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[bytes]]:
    """The real git CLI: ``git("-C", repo, "log")``; raises AssertionError on failure unless
    ``check=False``."""

    def run(
        *args: str | os.PathLike[str], check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        argv = ["git", *map(os.fspath, args)]
        proc = subprocess.run(argv, env=env, capture_output=True, check=False, timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"{argv} exited {proc.returncode}: {proc.stderr.decode()}")
        return proc

    return run


@pytest.fixture(scope="session")
def cli(env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """The perfledger console script; asserts no traceback reaches stderr."""
    prefix = perfledger_command()

    def run(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*prefix, *map(os.fspath, args)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        return proc

    return run


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """The directory the git daemon serves (``--base-path``)."""
    path = tmp_path / "served"
    path.mkdir()
    return path


@pytest.fixture
def daemon(served: Path, env: dict[str, str]) -> Iterator[str]:
    """``git daemon --export-all --enable=receive-pack`` on a free loopback port serving
    :func:`served`; yields ``git://127.0.0.1:PORT``."""
    with git_daemon(str(served), env) as prefix:
        yield prefix
