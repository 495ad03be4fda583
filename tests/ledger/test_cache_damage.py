"""Damage to the sectioned state cache (ledger/cache.py, api.py).

The rule: derived data may only cost speed, never change an answer or fail a command. Each
test damages the cache of a real git ledger on disk, then drives the real CLI as a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_scenario import Session, evidence, experiment

from perfledger.api import Ledger
from subprocess_env import isolated_env, perfledger_command


def _cli(ledger: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args], capture_output=True, text=True,
        env={**isolated_env(tmp), "PERFLEDGER_ACTOR": "agent"}, timeout=120, check=False,
    )  # fmt: skip


def _body(tmp: Path, name: str, body: dict[str, Any]) -> str:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(body))
    return str(path)


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A ledger with a ready Target and a screened experiment e1; closed, so its state cache
    (manifest + section files) is written at the head."""
    path = tmp_path / "ledger"
    session = Session(Ledger.init(path, name="breaker", actor="agent")).ready().screened("e1")
    session.ledger.close()
    return path


def _cache(ledger_path: Path) -> tuple[Path, dict[str, str]]:
    directory = ledger_path / "perfledger" / "cache"
    manifest = msgspec.msgpack.decode((directory / "workflow.msgpack").read_bytes())
    return directory, manifest["sections"]


def _fold_json(ledger_path: Path, tmp: Path) -> dict[str, Any]:
    """``state --json`` of a copy of the ledger without any cache: a fold from zero."""
    import shutil

    copy = tmp / "fresh"
    shutil.copytree(ledger_path, copy)
    shutil.rmtree(copy / "perfledger" / "cache")
    out = _cli(copy, tmp, "state", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_damaged_section_file_is_a_miss_not_a_failed_command(
    ledger_path: Path, tmp_path: Path, damage: str
) -> None:
    """A section file that is empty (a rename without fsync before a power cut) or truncated
    was decoded inside ``load_snapshot``'s try in format 1 (a miss); now it is decoded lazily,
    outside it, so every command that reads the state fails with exit 1 'unexpected
    DecodeError: Input data was truncated' (decisions, ``state``, ``claims``, ``handoff``), and
    keeps failing: nothing rewrites the manifest."""
    directory, sections = _cache(ledger_path)
    section = directory / sections["targets"]
    data = section.read_bytes()
    section.write_bytes(b"" if damage == "empty" else data[: len(data) // 2])
    decision = _cli(ledger_path, tmp_path, "evidence", "add", "--request",
                    _body(tmp_path, "ev", evidence("ev-2")))  # fmt: skip
    assert decision.returncode == 0, decision.stdout + decision.stderr
    state = _cli(ledger_path, tmp_path, "state", "--json")
    assert state.returncode == 0, state.stdout + state.stderr
    assert json.loads(state.stdout) == _fold_json(ledger_path, tmp_path)


@pytest.mark.slow
def test_a_section_file_holding_other_valid_bytes_does_not_change_a_decision(
    ledger_path: Path, tmp_path: Path
) -> None:
    """Section files are content-addressed by name (blake3 of their bytes), but the bytes are
    never checked against the name. A section whose file holds other valid msgpack of its type
    (here: the empty map another field's file holds: swapped or stale files) silently becomes
    that value: ``experiments`` reads as empty, so re-creating experiment e1 is accepted and
    appended; ``perfledger audit`` then refuses it (exit 5). Checking blake3(bytes) against the
    name on load would make it a miss."""
    directory, sections = _cache(ledger_path)
    empty_map = next(name for field, name in sections.items() if field == "host_advice")
    (directory / sections["experiments"]).write_bytes((directory / empty_map).read_bytes())
    head = _cli(ledger_path, tmp_path, "log", "-n", "1", "--json").stdout
    again = _cli(ledger_path, tmp_path, "experiment", "create", "--request",
                 _body(tmp_path, "e1", experiment("e1")))  # fmt: skip
    assert again.returncode == 2, again.stdout + again.stderr  # 'experiment e1 already exists'
    assert _cli(ledger_path, tmp_path, "log", "-n", "1", "--json").stdout == head
    assert _cli(ledger_path, tmp_path, "audit").returncode == 0


_KILL_IN_SAVE = """
import os, signal, sys
from perfledger.api import Ledger
real_replace = os.replace
def replace(src, dst):
    if ".tmp" in str(src) and "/cache/" in str(src):
        os.kill(os.getpid(), signal.SIGKILL)  # the writer dies between write and rename
    return real_replace(src, dst)
os.replace = replace
ledger = Ledger.open(sys.argv[1])
ledger.state()
ledger._memo.dirty = 1
ledger._maybe_save(force=True)
"""


def test_temp_files_of_killed_cache_writers_are_collected(
    ledger_path: Path, tmp_path: Path
) -> None:
    """A writer SIGKILLed inside ``save_snapshot`` leaves ``<section>.msgpack.<pid>.tmp`` (up to
    the size of the whole state per kill: 6.8 MB on a 10k-event session). The collector only
    looks at names ending in ``.msgpack`` and a later save never removes them, so they grow
    without bound with every crash. Expected: a later save removes temp files of dead writers
    (e.g. ones older than the grace)."""
    directory, sections = _cache(ledger_path)
    for name in set(sections.values()):  # force the sections to be written again
        (directory / name).unlink()
    proc = subprocess.run([sys.executable, "-c", _KILL_IN_SAVE, str(ledger_path)], check=False,
                          env=isolated_env(tmp_path), timeout=120)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL
    leftovers = list(directory.glob("*.tmp"))
    assert leftovers
    old = 1_000_000_000  # 2001: far older than any grace
    for path in leftovers:
        os.utime(path, (old, old))
    decision = _cli(ledger_path, tmp_path, "evidence", "add", "--request",
                    _body(tmp_path, "ev", evidence("ev-3")))  # fmt: skip
    assert decision.returncode == 0, decision.stderr
    assert not [p for p in leftovers if p.exists()], [p.name for p in leftovers]


@pytest.mark.slow
def test_concurrent_cli_writers_with_aggressive_collection_keep_the_state_exact(
    ledger_path: Path, tmp_path: Path
) -> None:
    """What held up: 3 CLI processes appending 3 decisions each at once, every section file
    back-dated after each write (so each writer's collector deletes the others' unreferenced
    sections), a reader running ``state --json`` meanwhile: every write succeeds and the final
    ``state --json`` equals a fold from zero."""
    directory = ledger_path / "perfledger" / "cache"
    old = 1_000_000_000

    def backdate() -> None:
        for path in directory.glob("workflow.s.*.msgpack"):
            with contextlib.suppress(OSError):  # collected meanwhile
                os.utime(path, (old, old))

    bodies = []
    for i in range(3):
        for j in range(3):
            bodies.append(_body(tmp_path, f"ev-{i}-{j}", evidence(f"ev-{i}-{j}")))
    backdate()
    env = {**isolated_env(tmp_path), "PERFLEDGER_ACTOR": "agent"}
    cmd = [*perfledger_command(), "--ledger", str(ledger_path)]
    procs = []
    for i in range(3):
        script = tmp_path / f"writer{i}.sh"
        lines = [" ".join([*cmd, "evidence", "add", "--request", bodies[3 * i + j], ">/dev/null",
                           "||", "exit", "1;", "touch", "-d", "'1 hour ago'",
                           f"{directory}/workflow.s.*", "2>/dev/null;"])
                 for j in range(3)]  # fmt: skip
        script.write_text("\n".join(lines) + "\n")
        procs.append(subprocess.Popen(["bash", str(script)], env=env))
    reader = subprocess.Popen(["bash", "-c", f"for i in 1 2 3; do {' '.join(cmd)} state --json"
                               " >/dev/null || exit 1; done"], env=env)  # fmt: skip
    assert all(p.wait(timeout=300) == 0 for p in procs)
    assert reader.wait(timeout=300) == 0
    state = _cli(ledger_path, tmp_path, "state", "--json")
    assert json.loads(state.stdout) == _fold_json(ledger_path, tmp_path)
    assert len(json.loads(state.stdout)["state"]["evidence"]) == 1 + 9
