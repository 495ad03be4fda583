"""A closed pipe on stdout (``perfledger log | head -1``) ends every command quietly with exit 0:
no message, no traceback, nothing else changed. The reader closes its end after the first line,
and each command prints far more than a pipe holds (64 KiB), so it must meet the closed pipe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.ledger.base import EventDraft
from subprocess_env import isolated_env, perfledger_command


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger whose log is about 300 KB of text."""
    path = tmp_path_factory.mktemp("pipe") / "ledger"
    Ledger.init(path, name="pipe", actor="t").close()
    with Ledger.open(path) as ledger:
        ledger.append_batch(
            [EventDraft("NoteRecorded", {"text": f"note {i} " + "x" * 80, "tags": []}, "t")
             for i in range(3000)]
        )  # fmt: skip
    return path


@pytest.mark.parametrize(
    "argv",
    [["log"], ["--json", "log"], ["state"], ["--help"], ["schema", "samples.record"]],
    ids=["log", "log-json", "state", "help", "schema"],
)
@pytest.mark.slow
def test_a_closed_pipe_ends_the_command_quietly_with_exit_0(
    big: Path, tmp_path: Path, argv: list[str]
) -> None:
    proc = subprocess.Popen(
        [*perfledger_command(), "--ledger", str(big), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=isolated_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # `| head -1`
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert stderr == ""


def test_control_the_whole_output_read_is_exit_0_too(big: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [*perfledger_command(), "--ledger", str(big), "log"],
        capture_output=True, env=isolated_env(tmp_path), check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.count(b"\n") == 3001
    assert os.path.isdir(big)
