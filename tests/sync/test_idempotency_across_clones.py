"""Idempotency is a function of the DAG (SPEC.md section 2): one key used with different content
on two clones, then merged through ``perfledger sync``/``pull``, answers the same on every clone
(the writers', a fresh clone), with or without the derived index and cache: the event first in
the total order (lamport, id) wins; ``audit`` reports the other as a finding while ``verify``
stays clean."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

#: The retried key, and each clone's note text under it.
KEY = "retry-1"
TEXTS = {"a": "from clone a", "b": "from clone b"}


def _note(cli: Any, ledger: Path, text: str) -> tuple[int, dict[str, Any]]:
    """``perfledger note TEXT --idempotency-key KEY --json``: (exit code, its JSON answer)."""
    proc = cli("--ledger", ledger, "note", text, "--idempotency-key", KEY, "--actor", "bot",
               "--json")  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def _merged_clones(tmp_path: Path, cli: Any) -> tuple[dict[str, Path], dict[str, str]]:
    """origin, clones a and b each writing KEY with its own text, joined through origin
    (a syncs, b syncs and merges, a pulls), plus a fresh clone c. Returns the paths and
    clone name -> the event id it wrote."""
    origin = tmp_path / "origin.git"
    assert cli("init", origin).returncode == 0
    paths = {name: tmp_path / name for name in ("a", "b")}
    for path in paths.values():
        assert cli("clone", origin, path).returncode == 0
    written = {}
    for name, path in paths.items():
        code, answer = _note(cli, path, TEXTS[name])
        assert code == 0, answer
        written[name] = answer["event_id"]
    assert written["a"] != written["b"]
    assert cli("--ledger", paths["a"], "sync").returncode == 0
    proc = cli("--ledger", paths["b"], "sync")
    assert proc.returncode == 0 and "merged" in proc.stdout, proc.stdout
    assert cli("--ledger", paths["a"], "pull").returncode == 0
    paths["c"] = tmp_path / "c"
    assert cli("clone", origin, paths["c"]).returncode == 0
    return paths, written


@pytest.fixture(scope="module")
def _merged_template(
    tmp_path_factory: pytest.TempPathFactory, cli: Any
) -> tuple[Path, dict[str, Path], dict[str, str]]:
    """:func:`_merged_clones` made once for the module: its directory, paths and ids (the tests
    read copies: one retries keys and removes derived data, the other audits)."""
    root = tmp_path_factory.mktemp("merged")
    paths, written = _merged_clones(root, cli)
    return root, paths, written


@pytest.fixture
def merged(
    tmp_path: Path, _merged_template: tuple[Path, dict[str, Path], dict[str, str]]
) -> tuple[dict[str, Path], dict[str, str]]:
    """A private copy of the merged clones a, b, c (and their origin) in ``tmp_path``."""
    root, paths, written = _merged_template
    copy = tmp_path / "merged"
    shutil.copytree(root, copy, symlinks=True)
    return {name: copy / path.relative_to(root) for name, path in paths.items()}, dict(written)


def _answers(cli: Any, ledger: Path) -> dict[str, tuple[int, str]]:
    """Retry KEY with each clone's text: text owner -> (exit code, event id or error)."""
    out = {}
    for name, text in TEXTS.items():
        code, answer = _note(cli, ledger, text)
        out[name] = (code, answer.get("event_id") or answer["error"]["message"])
    return out


@pytest.mark.slow
def test_retried_key_answers_the_same_on_every_clone_cache_or_not(
    merged: tuple[dict[str, Path], dict[str, str]], cli: Any
) -> None:
    """After the merge, a retry returns the event first in the total order on both writers'
    clones and on a fresh clone (exit 0), and the other content is refused (exit 2, naming the
    winner) on all of them; deleting the derived data (index and state cache) changes
    nothing; no retry appends anything."""
    paths, written = merged
    # both were appended on the root (Lamport 2): the smaller id is first in the total order
    winner = min(written, key=written.__getitem__)
    loser = "b" if winner == "a" else "a"
    heads = {name: cli("--ledger", p, "--json", "log").stdout for name, p in paths.items()}
    for name, path in paths.items():
        for derived_removed in (False, True):
            if derived_removed:
                shutil.rmtree(path / "perfledger", ignore_errors=True)
            answers = _answers(cli, path)
            where = f"clone {name}, derived data removed: {derived_removed}"
            assert answers[winner] == (0, written[winner]), where
            code, message = answers[loser]
            assert code == 2 and written[winner] in message, where
        assert cli("--ledger", path, "--json", "log").stdout == heads[name]  # nothing appended


@pytest.mark.slow
def test_audit_reports_the_key_used_on_concurrent_branches_and_verify_stays_clean(
    merged: tuple[dict[str, Path], dict[str, str]], cli: Any
) -> None:
    """The event that lost the key is an audit finding (rule ``idempotency``) naming the
    winner, on every clone alike; the ledger itself verifies (exit 0)."""
    paths, written = merged
    winner, loser = sorted(written.values())  # same Lamport clock: the smaller id is first
    findings = []
    for path in paths.values():
        assert cli("--ledger", path, "verify").returncode == 0
        proc = cli("--ledger", path, "--json", "audit")
        assert proc.returncode == 5, proc.stdout
        report = json.loads(proc.stdout)
        findings.append(report["findings"])
    assert findings[0] == findings[1] == findings[2]
    [finding] = findings[0]
    assert finding["event_id"] == loser and finding["rule"] == "idempotency"
    assert winner in finding["message"] and "concurrent" in finding["message"]
