"""Who decides is always known: an event records a real name (``--actor``, the environment,
the ledger's ``perfledger.actor``, the OS user), and when none is known the command is refused
with a hint instead of writing a made-up name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfledger.api import Ledger


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME")}
    env = {k: v for k, v in env.items() if not k.startswith("PERFLEDGER_")}
    env["USER"] = ""  # set but empty: names no one
    return env


def _actors(path: Path) -> list[str]:
    ledger = Ledger.open(path)
    try:
        return [e.actor for e in ledger.log(None)]
    finally:
        ledger.close()


def test_without_user_variables_the_actor_is_the_os_user_not_a_default(tmp_path: Path) -> None:
    import pwd

    name = pwd.getpwuid(os.getuid()).pw_name
    ledger = tmp_path / "l"
    base = [sys.executable, "-m", "perfledger", "--ledger", str(ledger)]
    subprocess.run([*base, "init"], env=_env(), check=True, capture_output=True)
    subprocess.run([*base, "note", "x"], env=_env(), check=True, capture_output=True)
    assert _actors(ledger) == [name, name]


def test_an_actor_that_cannot_be_determined_is_refused_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A container user without a passwd entry and no user variables: the one thing that cannot
    be produced here without root is the nameless OS user, so only that lookup is replaced."""
    from perfledger.app import actors
    from perfledger.commands.cli import app as cli

    ledger = tmp_path / "l"
    Ledger.init(ledger, name="l", actor="setup").close()
    for name in ("USER", "LOGNAME", "PERFLEDGER_ACTOR", "PERFLEDGER_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(actors, "_os_user", lambda: None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--ledger", str(ledger), "note", "x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "who decides is not known" in err and "--actor NAME" in err
    assert _actors(ledger) == ["setup"]  # nothing appended
