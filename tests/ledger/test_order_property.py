"""The total order of events and the folded state depend on the DAG only, never on the order in
which its branches were written or merged (SPEC.md section 2, Order)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.api import Ledger
from perfledger.events.envelope import compute_event_id
from perfledger.ledger.base import EventDraft
from perfledger.ledger.store import GitStore
from perfledger.projections.ledger_state import state_hash

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)

Note = Callable[..., EventDraft]
Git = Callable[..., Any]


@dataclass(frozen=True)
class Plan:
    """One way of writing the same DAG.

    Attributes:
        order: the order in which the branches are written (a permutation of their indices).
        nested: merge the branches pairwise, one after another, instead of in one merge.
        cache_midway: fold (and cache) the state after the first branch is on the ref.
        clone: make the ledger with ``git clone --bare --no-local`` instead of a file copy.
    """

    order: tuple[int, ...]
    nested: bool
    cache_midway: bool
    clone: bool


@pytest.fixture(scope="module")
def base_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ledger (root + a common event at a fixed time) that every variant starts from."""
    path = tmp_path_factory.mktemp("order") / "base"
    store = GitStore.init(path, name="order", actor="tester")
    try:
        store.append(EventDraft("NoteRecorded", {"text": "common", "tags": []}, "tester", ts=EPOCH))
    finally:
        store.close()
    return path


def _copy(base: Path, git: Git, clone: bool) -> Path:
    """A fresh ledger holding exactly the base DAG."""
    target = Path(tempfile.mkdtemp(dir=base.parent)) / "ledger"
    if clone:
        git("clone", "--quiet", "--bare", "--no-local", base, target)
    else:
        shutil.copytree(base, target)
    return target


def _write(path: Path, branches: list[list[EventDraft]], final: EventDraft, plan: Plan) -> None:
    """Write the fork-and-merge DAG into the ledger at ``path`` following ``plan``."""
    store = GitStore.open(path)
    try:
        base = store.read_head()
        tips: dict[int, bytes] = {}
        for index in plan.order:
            _, tips[index] = store.build_on(base, branches[index])
        first = tips[plan.order[0]]
        assert store.set_head(base, first)  # the first branch lands like local appends
        if plan.cache_midway:
            assert Ledger(store).state().event_count == 2 + len(branches[plan.order[0]])
        if plan.nested:
            merge = first
            for index in plan.order[1:]:
                merge = store.write_merge([merge, tips[index]])
        else:
            merge = store.write_merge([tips[i] for i in plan.order])
        assert not store.set_head(base, merge)  # a stale expectation loses the race
        assert store.set_head(first, merge)
        store.append(final)
    finally:
        store.close()


def _observe(path: Path) -> tuple[list[str], str, str, int]:
    """(event ids in order, verify's state_hash, state()'s state_hash, merges) of a fresh open."""
    ledger = Ledger.open(path)
    try:
        events = list(ledger.events())
        keys = [(e.envelope.lamport, e.id) for e in events]
        assert keys == sorted(keys)
        for event in events:
            assert compute_event_id(event.envelope) == event.id
        report = ledger.verify()
        assert report.ok, report.error
        assert report.events == len(events)
        hashed = state_hash(ledger.state())
        return [e.id for e in events], str(report.extra["state_hash"]), hashed, report.merges
    finally:
        ledger.close()


@st.composite
def dags(draw: st.DrawFn) -> tuple[list[list[EventDraft]], EventDraft, Plan, Plan]:
    """A fork into 2-3 branches of 1-4 events (fixed, shuffled timestamps), the event appended
    after the merge, and two ways of writing it all."""
    lengths = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    seconds = st.integers(0, 10**6)
    branches = [
        [
            EventDraft(
                "NoteRecorded",
                {"text": f"branch {b} event {i}", "tags": [f"b{b}"]},
                f"agent-{b}",
                ts=EPOCH + timedelta(seconds=draw(seconds)),
            )
            for i in range(length)
        ]
        for b, length in enumerate(lengths)
    ]
    final = EventDraft("NoteRecorded", {"text": "after merge", "tags": []}, "tester", ts=EPOCH)
    plans = st.builds(
        Plan,
        order=st.permutations(range(len(lengths))).map(tuple),
        nested=st.booleans(),
        cache_midway=st.booleans(),
        clone=st.booleans(),
    )
    return branches, final, draw(plans), draw(plans)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(dags())
def test_order_and_state_hash_independent_of_write_order(
    base_ledger: Path, git: Git, dag: tuple[list[list[EventDraft]], EventDraft, Plan, Plan]
) -> None:
    """Two ledgers holding the same DAG, written in different orders, yield the same event order,
    the same verified state_hash and the same state() hash."""
    branches, final, plan_a, plan_b = dag
    observed = []
    for plan in (plan_a, plan_b):
        path = _copy(base_ledger, git, plan.clone)
        _write(path, branches, final, plan)
        observed.append(_observe(path))
        shutil.rmtree(path.parent)
    (ids_a, verified_a, state_a, merges_a), (ids_b, verified_b, state_b, merges_b) = observed
    assert ids_a == ids_b
    assert verified_a == verified_b == state_a == state_b
    assert len(ids_a) == 3 + sum(len(b) for b in branches)
    assert merges_a == (len(branches) - 1 if plan_a.nested else 1)
    assert merges_b == (len(branches) - 1 if plan_b.nested else 1)


def test_merge_heads_and_lamport_of_event_after_merge(tmp_path: Path, note: Note) -> None:
    """The event appended on a merge lists every branch tip as a parent (sorted) and its clock is
    one more than the largest of theirs; ties between branches are ordered by id."""
    store = GitStore.init(tmp_path / "l", actor="tester")
    try:
        base = store.read_head()
        short, tip_short = store.build_on(base, [note("s0", ts=EPOCH)])
        long, tip_long = store.build_on(
            base, [note(f"l{i}", ts=EPOCH - timedelta(days=i)) for i in range(3)]
        )
        merge = store.write_merge([tip_short, tip_long])
        assert store.set_head(base, merge)
        after = store.append(note("after"))
        assert after.parents == tuple(sorted([short[-1].id, long[-1].id]))
        assert after.lamport == long[-1].lamport + 1 == 5
        events = list(store.iter_events())
        at_two = [e.id for e in events if e.lamport == 2]
        assert at_two == sorted([short[0].id, long[0].id])
        assert [e.id for e in events][-1] == after.id
    finally:
        store.close()


def test_branch_built_off_the_ref_is_invisible_until_the_ref_moves(
    tmp_path: Path, note: Note
) -> None:
    """Events written by build_on (not on the ledger ref) are not part of the ledger: not
    counted, not iterated, not found by idempotency key, not in state() - in this process and
    after a reopen - until set_head moves the ref onto them."""
    path = tmp_path / "l"
    store = GitStore.init(path, actor="tester")
    store.append(note("on the ref"))
    base = store.read_head()
    side, _ = store.build_on(base, [note("side", idempotency_key="side-key")])
    assert store.read_head() == base
    assert store.count() == 2
    assert [e.payload["text"] for e in list(store.iter_events())[1:]] == ["on the ref"]
    assert store.find_by_idempotency_key("side-key") is None
    store.close()

    ledger = Ledger.open(path)
    try:
        assert ledger.store.count() == 2
        assert len(list(ledger.events())) == ledger.verify().events == 2
        assert ledger.state().event_count == 2
        appended = ledger.append(
            "NoteRecorded",
            {"text": "main", "tags": []},
            actor="tester",
            idempotency_key="side-key",
        )
        assert appended.id != side[0].id
        assert ledger.head() != base.decode()
    finally:
        ledger.close()
