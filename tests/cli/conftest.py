"""Fixtures for the CLI contract suite (SPEC.md section 6): the perfledger console script and
the git CLI as real subprocesses, in an environment free of the user's git configuration and of
``PERFLEDGER_*`` variables, and ledgers created through the CLI in ``tmp_path``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from subprocess_env import isolated_env, perfledger_command

#: Runs the CLI: ``cli("--ledger", path, "log", cwd=..., env={...})``.
Cli = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def cli_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """An environment with no user/system git config, no GIT_* and no PERFLEDGER_* variables."""
    return isolated_env(tmp_path_factory.mktemp("home"))


@pytest.fixture(scope="session")
def cli(cli_env: dict[str, str]) -> Cli:
    """The perfledger console script as a subprocess. Every call asserts that no traceback
    reached stderr (SPEC.md section 6), whatever the exit code."""
    prefix = perfledger_command()

    def run(
        *args: str | os.PathLike[str],
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [*prefix, *map(os.fspath, args)],
            cwd=cwd,
            env={**cli_env, **(env or {})},
            input=input,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert "Traceback" not in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stdout, proc.stdout
        return proc

    return run


@pytest.fixture(scope="session")
def git_cli(cli_env: dict[str, str]) -> Callable[..., str]:
    """The real git CLI: ``git_cli("-C", path, "rev-parse", "ledger")`` returns stripped stdout;
    raises AssertionError with stderr when git fails."""

    def run(*args: str | os.PathLike[str], cwd: str | os.PathLike[str] | None = None) -> str:
        proc = subprocess.run(
            ["git", *map(os.fspath, args)],
            cwd=cwd,
            env=cli_env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert proc.returncode == 0, f"git {args} failed:\n{proc.stdout}{proc.stderr}"
        return proc.stdout.strip()

    return run


def one_json_object(stdout: str) -> Any:
    """Parse stdout as exactly one JSON value (nothing before or after it)."""
    decoder = json.JSONDecoder()
    text = stdout.strip()
    value, end = decoder.raw_decode(text)
    assert end == len(text), f"more than one JSON value on stdout: {stdout!r}"
    return value


@pytest.fixture(scope="session")
def parse_json() -> Callable[[str], Any]:
    """The :func:`one_json_object` helper."""
    return one_json_object


@dataclass(frozen=True)
class CliLedger:
    """A ledger created through the CLI: its path, the root event id and the note ids appended
    after it (oldest first)."""

    path: Path
    root: str
    notes: list[str]

    @property
    def ids(self) -> list[str]:
        """Every event id, oldest first."""
        return [self.root, *self.notes]


@pytest.fixture(scope="session")
def cli_ledger_template(tmp_path_factory: pytest.TempPathFactory, cli: Cli) -> CliLedger:
    """A bare ledger made with ``perfledger init``, then three notes appended with ``note``
    (built once per session; tests get a copy)."""
    path = tmp_path_factory.mktemp("template") / "ledger.git"
    proc = cli("init", path, "--name", "cli-test", "--actor", "alice", "--json")
    assert proc.returncode == 0, proc.stderr
    root = one_json_object(proc.stdout)["root"]
    notes = []
    for i in range(3):
        proc = cli("--ledger", path, "note", f"note {i}", "--tag", "t", "--actor", "bob")
        assert proc.returncode == 0, proc.stderr
        notes.append(proc.stdout.strip())
    return CliLedger(path, root, notes)


@pytest.fixture
def cli_ledger(tmp_path: Path, cli_ledger_template: CliLedger) -> CliLedger:
    """A private copy of the template ledger (root + three notes) at ``tmp_path/"ledger.git"``."""
    path = tmp_path / "ledger.git"
    shutil.copytree(cli_ledger_template.path, path)
    return CliLedger(path, cli_ledger_template.root, list(cli_ledger_template.notes))
