"""Rule conflicts from concurrent work on two clones (SPEC.md section 2): they appear in
the state after a sync, block further decisions of their kind, and ``resolve`` clears them; the
outcome does not depend on which clone merges first."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from wf_scenario import T1, Session, experiment, samples, target_freeze

from perfledger.api import Ledger


def _ready_origin(path: Path, passed: tuple[str, ...] = ("e1", "e2")) -> None:
    origin = Ledger.init(path, name="wf", actor="agent")
    session = Session(origin).ready()
    candidates = {"e1": "sha256:" + "1" * 64, "e2": "sha256:" + "2" * 64}
    for experiment_id in passed:
        session.passed(experiment_id, candidates[experiment_id])
    origin.close()


def _sessions(tmp_path: Path, url: str, names: tuple[str, str]) -> list[Session]:
    return [Session(Ledger.clone(url, tmp_path / name)[0]) for name in names]


def _champion_conflict(state: Any) -> Any:
    (conflict,) = state.conflicts.values()
    assert conflict.kind == "champion" and conflict.resolved_by is None
    return conflict


@pytest.mark.slow
def test_two_champions_chosen_concurrently_conflict_until_resolved_whichever_merges_first(
    tmp_path: Path, served: Path, daemon: str, cli: Any
) -> None:
    _ready_origin(served / "ledger.git")
    a, b = _sessions(tmp_path, f"{daemon}/ledger.git", ("a", "b"))
    a.champion("e1")  # both decide against the champion they saw: the original
    b.champion("e2")
    for session in (a, b):
        session.ledger.close()
    # A second world, byte-identical so far, where the other clone merges first.
    shutil.copytree(served / "ledger.git", served / "ledger2.git")
    for name in ("a", "b"):
        shutil.copytree(tmp_path / name, tmp_path / f"{name}2")

    outcomes = []
    for suffix, first, second in (("", "a", "b"), ("2", "b", "a")):
        url = f"{daemon}/ledger{suffix}.git"
        opened = {n: Ledger.open(tmp_path / f"{n}{suffix}") for n in ("a", "b")}
        opened[first].sync(url)  # pushes its champion
        merged = opened[second].sync(url)  # pulls the other: a merge, then pushes it
        assert merged.pull.action == "merged"
        assert opened[first].pull(url).action == "fast_forward"
        heads = {n: ledger.head() for n, ledger in opened.items()}
        assert heads["a"] == heads["b"]
        states = {n: ledger.state() for n, ledger in opened.items()}
        conflict = _champion_conflict(states["a"])
        assert sorted(conflict.options) == ["e1", "e2"]
        assert states["a"].targets[T1].champion == states["b"].targets[T1].champion
        hashes = {ledger.state_hash() for ledger in opened.values()}
        assert len(hashes) == 1
        outcomes.append((heads["a"], hashes.pop(), copy.deepcopy(conflict)))
        for ledger in opened.values():
            ledger.close()
    # the same DAG (to the merge commit), state and conflict whichever clone merged first
    assert outcomes[0] == outcomes[1]

    # Further champion decisions are refused (R13) until `perfledger resolve` records which
    # stands; then both clones agree on the champion.
    a = Session(Ledger.open(tmp_path / "a"))
    a.refused(
        "champion.select",
        {"target_id": T1, "decision": "restore_original", "expected_current": "e1"},
        "R13",
    )
    a.ledger.close()
    conflict = outcomes[0][2]
    proc = cli(
        "--ledger", tmp_path / "b", "--json", "resolve", "--target", T1,
        "--conflict", conflict.conflict_id, "--keep", "e2", "--reason", "e2 is faster",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["kind"] == "ConflictResolved"
    assert cli("--ledger", tmp_path / "b", "sync").returncode == 0
    assert cli("--ledger", tmp_path / "a", "pull").returncode == 0
    for name in ("a", "b"):
        proc = cli("--ledger", tmp_path / name, "--json", "state")
        state = json.loads(proc.stdout)["state"]
        (resolved,) = state["conflicts"].values()
        assert resolved["resolved_by"] is not None and resolved["kept"] == "e2"
        assert state["targets"][T1]["champion"] == "e2"
    # the long name of the same command still works (and refuses a second resolution)
    proc = cli(
        "--ledger",
        tmp_path / "a",
        "conflict",
        "resolve",
        "--target",
        T1,
        "--request",
        "-",
    )
    assert proc.returncode == 2


def _new_target(target_id: str) -> dict[str, Any]:
    return {"target_id": T1, "reason": "a new primary metric",
            "new_target": target_freeze(target_id)}  # fmt: skip


def test_two_supersessions_of_one_target_conflict_until_resolved(tmp_path: Path) -> None:
    _ready_origin(tmp_path / "origin.git", passed=())
    a, b = _sessions(tmp_path, str(tmp_path / "origin.git"), ("a", "b"))
    try:
        a.run("target.supersede", _new_target("t-a"))
        b.run("target.supersede", _new_target("t-b"))
        a.ledger.sync()
        b.ledger.sync()
        a.ledger.pull()
        assert a.ledger.head() == b.ledger.head()
        state = a.state()
        (conflict,) = state.conflicts.values()
        assert conflict.kind == "supersession" and sorted(conflict.options) == ["t-a", "t-b"]
        assert {state.targets[t].status for t in ("t-a", "t-b")} == {"contested"}
        # no decision goes to either contested Target (R1) until the conflict is resolved
        b.refused("readiness.record", {**_readiness_of(b, "t-b")}, "R1")
        b.run("conflict.resolve", {"target_id": T1, "conflict_id": conflict.conflict_id,
                                   "keep": "t-b", "reason": "t-b's metric is the real one"})  # fmt: skip
        b.ledger.sync()
        a.ledger.pull()
        for session in (a, b):
            state = session.state()
            assert state.targets["t-b"].status == "current"
            assert state.targets["t-a"].status == "superseded"
            assert state.targets[T1].superseded_by == "t-b"
        b.run("readiness.record", _readiness_of(b, "t-b"))
        assert a.ledger.state_hash() != b.ledger.state_hash()  # b has one more event
        b.ledger.sync()
        a.ledger.pull()
        assert a.ledger.state_hash() == b.ledger.state_hash()
    finally:
        a.ledger.close()
        b.ledger.close()


def _readiness_of(session: Session, target_id: str) -> dict[str, Any]:
    from wf_scenario import readiness

    return readiness(target_id)


def test_an_experiment_created_while_a_reconciliation_was_pending_elsewhere_conflicts(
    tmp_path: Path,
) -> None:
    origin = Ledger.init(tmp_path / "origin.git", name="wf", actor="agent")
    Session(origin).ready().screened("e1")
    origin.close()
    a, b = _sessions(tmp_path, str(tmp_path / "origin.git"), ("a", "b"))
    try:
        # a: the target result contradicts e1's claim (a loss): a reconciliation is pending
        a.run("samples.record", samples("e1-target", "target", experiment_id="e1", gain=-0.1))
        verdict = a.run("verdict.record", {"samples_id": "e1-target"})
        assert verdict["contradicts_claim"] is True
        # b, concurrently, has not seen it: it records evidence, then creates e2 (its events
        # sort after a's verdict in the total order)
        b.run("evidence.add", {**_evidence("ev-2")})
        b.run("evidence.add", {**_evidence("ev-3")})
        b.run("evidence.add", {**_evidence("ev-4")})  # a's run start, samples and verdict: 3
        b.run("experiment.create", experiment("e2", candidate="sha256:" + "2" * 64))
        a.ledger.sync()
        b.ledger.sync()
        a.ledger.pull()
        state = a.state()
        (conflict,) = state.conflicts.values()
        assert conflict.kind == "reconciliation" and conflict.options == ["e2", "withdraw"]
        assert "e1" in state.targets[T1].pending
        # R14 still holds: no new experiment until the reconciliation is recorded
        a.refused("experiment.create", experiment("e3", candidate="sha256:" + "3" * 64), "R14")
        a.run("conflict.resolve", {"target_id": T1, "conflict_id": conflict.conflict_id,
                                   "keep": "withdraw", "reason": "created before e1's result"})  # fmt: skip
        a.ledger.sync()
        b.ledger.pull()
        state = b.state()
        assert state.conflicts[conflict.conflict_id].kept == "withdraw"
        assert state.experiments["e2"].status == "rejected"
        assert a.ledger.state_hash() == b.ledger.state_hash()
    finally:
        a.ledger.close()
        b.ledger.close()


def _evidence(evidence_id: str) -> dict[str, Any]:
    from wf_scenario import evidence

    return evidence(evidence_id)


def test_r14_a_champion_selected_while_a_reconciliation_was_owed_elsewhere_conflicts(
    tmp_path: Path,
) -> None:
    origin = Ledger.init(tmp_path / "origin.git", name="wf", actor="agent")
    session = Session(origin).ready()
    session.passed("e2", "sha256:" + "2" * 64)
    session.screened("e1")
    origin.close()
    a, b = _sessions(tmp_path, str(tmp_path / "origin.git"), ("a", "b"))
    try:
        # a: e1's target result contradicts its claim (a loss): a reconciliation is owed
        a.run("samples.record", samples("e1-target", "target", experiment_id="e1", gain=-0.1))
        assert a.run("verdict.record", {"samples_id": "e1-target"})["contradicts_claim"]
        # b, concurrently, has not seen it and selects e2 (its event sorts after a's verdict)
        # (a's target stage is three events: its run's start, the samples, the verdict; b's
        # champion follows three of its own, so its Lamport clock is past a's verdict's)
        b.run("evidence.add", _evidence("ev-2"))
        b.run("evidence.add", _evidence("ev-3"))
        b.run("evidence.add", _evidence("ev-4"))
        b.champion("e2")
        a.ledger.sync()
        b.ledger.sync()
        a.ledger.pull()
        state = a.state()
        (conflict,) = state.conflicts.values()
        assert conflict.kind == "owed_champion" and conflict.options == ["original", "e2"]
        assert state.targets[T1].champion is None  # not applied until resolved
        # it blocks champion decisions, and keeping e2 is a selection: R14 holds until reconciled
        keep_e2 = {"target_id": T1, "conflict_id": conflict.conflict_id, "keep": "e2",
                   "reason": "e2 passed"}  # fmt: skip
        a.refused("conflict.resolve", keep_e2, "R14")
        a.run("reconcile", {"experiment_id": "e1", "premise": "coverage", "explanation": "x",
                            "corrected_model": {"description": "f was 0.1", "coverage": 0.1}})  # fmt: skip
        a.run("conflict.resolve", keep_e2)
        assert a.state().targets[T1].champion == "e2"
        a.ledger.sync()
        b.ledger.pull()
        assert a.ledger.state_hash() == b.ledger.state_hash()
    finally:
        a.ledger.close()
        b.ledger.close()
