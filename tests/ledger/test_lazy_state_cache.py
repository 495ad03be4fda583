"""The sectioned state cache and the field-by-field state it feeds the deciders
(:mod:`perfledger.ledger.cache`), on a real git ledger.

What must hold: a lazily read state is the state (same Struct once materialized, same
``state_hash``); a decision taken on it appends exactly what a decision on the fully decoded
state appends; untouched fields go back to the cache byte for byte (their files are not
rewritten); a damaged or partial cache is a miss, never a wrong state.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from wf_scenario import CAND2, CAND3, ENV_ID, Session, evidence, experiment, measured, samples

from perfledger.api import Ledger
from perfledger.commands.registry.operations import decider, stored_request, validate
from perfledger.commands.workflow.deciders import DecisionContext
from perfledger.errors import PerfledgerError
from perfledger.ledger import cache
from perfledger.ledger.cache import LazyStruct, encode_fields
from perfledger.projections.ledger_state import state_hash
from perfledger.projections.workflow import WorkflowState


@pytest.fixture
def session(tmp_path: Path) -> Session:
    ledger = Ledger.init(tmp_path / "ledger", name="lazy", actor="agent")
    return Session(ledger).ready().screened("e1").screened("e2", candidate=CAND2)


def _reopen(session: Session) -> Ledger:
    """Close (which writes the cache at the head) and open the ledger again, memo-less."""
    session.ledger.close()
    session.ledger = Ledger.open(session.ledger.path)
    return session.ledger


def test_lazy_state_materializes_to_the_folded_state(session: Session) -> None:
    folded = session.state()
    lazy = LazyStruct(WorkflowState, encode_fields(folded))
    assert "evidence" not in vars(lazy)  # decoded on first access only
    assert lazy.evidence == folded.evidence and "evidence" in vars(lazy)
    assert lazy.materialize() == folded
    assert state_hash(lazy.materialize()) == state_hash(folded)


def test_untouched_fields_keep_their_bytes_and_updates_are_encoded(session: Session) -> None:
    sections = encode_fields(session.state())
    lazy = LazyStruct(WorkflowState, sections)
    lazy.evidence.pop("ev-ncu")  # an in-place update of a decoded field ...
    lazy.event_count = 7  # ... and an assignment
    out = lazy.encode_fields()
    changed = {name for name in sections if out[name] is not sections[name]}
    assert changed == {"evidence", "event_count"}
    state = LazyStruct(WorkflowState, out).materialize()
    assert "ev-ncu" not in state.evidence and state.event_count == 7
    assert state.experiments == session.state().experiments


def test_lazy_state_refuses_names_that_are_not_fields(session: Session) -> None:
    lazy = LazyStruct(WorkflowState, encode_fields(session.state()))
    with pytest.raises(AttributeError, match="no field 'evidnce'"):
        _ = lazy.evidnce
    with pytest.raises(AttributeError):
        lazy.evidnce = {}


def test_a_field_without_a_section_takes_its_default(session: Session) -> None:
    sections = encode_fields(session.state())
    del sections["anomalies"], sections["loop"]
    state = LazyStruct(WorkflowState, sections).materialize()
    assert state.anomalies == [] and state.loop == WorkflowState().loop


def _decide(ledger: Ledger, state: object, op: str, body: dict[str, Any]) -> object:
    """The drafts (or the refusal) of ``op`` decided on ``state``, at a fixed time."""
    request = validate(op, copy.deepcopy(body))
    ctx = DecisionContext(
        op=op, actor="agent", ts=datetime(2026, 2, 1, tzinfo=UTC), idempotency_key=None,
        request=stored_request(op, request), payload_of=ledger.payload,
    )  # fmt: skip
    try:
        return decider(op)(state, request, ctx)
    except PerfledgerError as refusal:  # RuleRefused (exit 3) or BadRequest (exit 2)
        return ("refused", refusal.exit_code, getattr(refusal, "rule", None), refusal.message)


DECISIONS = [  # (operation, body, refused?)
    ("evidence.add", evidence("ev-2"), False),
    ("evidence.add", evidence("ev-ncu"), True),  # a duplicate id
    ("experiment.create", experiment("e3", candidate=CAND3), False),
    ("experiment.create", experiment("e1", candidate=CAND3), True),  # a duplicate experiment
    # measured (R5: the Target's primary is observed): a second screen of e2
    (
        "samples.record",
        measured(samples("e2-screen-2", "screen", experiment_id="e2", candidate=CAND2))[0],
        False,
    ),
    ("verdict.record", {"samples_id": "e2-screen"}, True),  # already derived
    ("reject", {"experiment_id": "e1", "closes": "implementation", "reason": "slower"}, False),
]


@pytest.mark.parametrize(("op", "body", "refused"), DECISIONS,
                         ids=[f"{op}-{i}" for i, (op, *_) in enumerate(DECISIONS)])  # fmt: skip
def test_a_decision_on_the_cached_state_equals_one_on_the_folded_state(
    session: Session, op: str, body: dict[str, Any], refused: bool
) -> None:
    """Each decider gives the same drafts, or the same refusal, on the lazily read cached state
    as on the state folded from zero."""
    ledger = _reopen(session)
    lazy = ledger.state_at(ledger.head(), lazy=True)
    assert isinstance(lazy, LazyStruct)
    outcome = _decide(ledger, lazy, op, body)
    assert outcome == _decide(ledger, _folded(ledger), op, body)
    assert (isinstance(outcome, tuple) and outcome[0] == "refused") == refused, outcome
    assert refused or outcome  # drafts to append


def test_the_cache_is_at_the_new_head_after_a_decision(session: Session) -> None:
    """A decision folds its own event in: the cache written at close is at the new head and
    holds the state folded from zero."""
    ledger = _reopen(session)
    session.run("evidence.add", evidence("ev-2"))
    ledger.close()
    with Ledger.open(ledger.path) as again:
        snapshot = cache.load_snapshot(again.store.derived_dir, "workflow", again._code_version())
        assert snapshot is not None and snapshot.head == again.head()
        cached = LazyStruct(WorkflowState, snapshot.sections).materialize()
        assert state_hash(cached) == state_hash(_folded(again))


def _folded(ledger: Ledger) -> WorkflowState:
    state = ledger.projection.initial()
    for event in ledger.events():
        state = ledger.projection.evolve(state, event)
    return state


def test_unchanged_sections_are_not_rewritten_and_stale_ones_are_collected(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = _reopen(session)
    directory = Path(ledger.store.derived_dir) / "cache"
    before = {p.name: p.stat().st_ino for p in directory.glob("workflow.s.*")}
    ledger.state_at(ledger.head(), lazy=True)
    monkeypatch.setattr(cache, "SECTION_GRACE_S", 0.0)
    session.run("evidence.add", evidence("ev-3"))
    ledger.close()
    after = {p.name: p.stat().st_ino for p in directory.glob("workflow.s.*")}
    kept = set(before) & set(after)
    assert kept and all(before[name] == after[name] for name in kept)  # same files
    manifest = msgspec.msgpack.decode((directory / "workflow.msgpack").read_bytes())
    assert set(after) == set(manifest["sections"].values())  # the old evidence section is gone
    assert len(set(after) - set(before)) >= 1  # evidence (and the counters) written anew


def test_a_missing_section_file_is_a_miss_not_a_wrong_state(session: Session) -> None:
    ledger = _reopen(session)
    expected = state_hash(ledger.state())
    ledger.close()
    directory = Path(ledger.store.derived_dir) / "cache"
    manifest = msgspec.msgpack.decode((directory / "workflow.msgpack").read_bytes())
    (directory / manifest["sections"]["experiments"]).unlink()
    assert cache.load_snapshot(str(directory.parent), "workflow", manifest["code_version"]) is None
    with Ledger.open(ledger.path) as reopened:
        assert state_hash(reopened.state()) == expected
        assert reopened.state().samples["e1-screen"].environment_id == ENV_ID
