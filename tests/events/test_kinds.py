"""Schema versions per kind and the upcaster hook: stored bytes never change, reads see the
current version, and what this code cannot read is reported, not guessed."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import pytest

from perfledger.api import Ledger
from perfledger.errors import BadRequest, IntegrityError
from perfledger.events import kinds
from perfledger.events.envelope import compute_event_id
from perfledger.events.kinds import KindSpec, get_kind, register_kind, registered_kinds, upcast
from perfledger.projections.base import Projection
from perfledger.projections.ledger_state import state_hash

KIND = "TestWidgetMeasured"


class WidgetV1(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Version 1: a label and a size in millimetres."""

    label: str
    size_mm: int


class WidgetV2(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Version 2: renamed to ``name``, size in micrometres."""

    name: str
    size_um: int


class WidgetV3(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Version 3: adds tags."""

    name: str
    size_um: int
    tags: tuple[str, ...]


def v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Rename ``label`` and convert millimetres to micrometres."""
    return {"name": payload["label"], "size_um": payload["size_mm"] * 1000}


def v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    """Add empty tags."""
    return {**payload, "tags": []}


SPEC_V1 = KindSpec(KIND, 1, WidgetV1)
SPEC_V2 = KindSpec(KIND, 2, WidgetV2, upcasters={1: v1_to_v2})
SPEC_V3 = KindSpec(KIND, 3, WidgetV3, upcasters={1: v1_to_v2, 2: v2_to_v3})

Use = Callable[[KindSpec | None], None]


@pytest.fixture
def use_kind() -> Iterator[Use]:
    """Switch the test kind's registration (``None`` unregisters it); the registry is restored
    afterwards, so no other test sees the test kind."""
    saved = dict(kinds._REGISTRY)

    def use(spec: KindSpec | None) -> None:
        kinds._REGISTRY.pop(KIND, None)
        if spec is not None:
            register_kind(spec)

    try:
        yield use
    finally:
        kinds._REGISTRY.clear()
        kinds._REGISTRY.update(saved)


def _event_json(git: Callable[..., Any], ledger: Ledger, event_id: str) -> str:
    """The stored event.json of ``event_id``, read with the real git CLI."""
    commit = ledger.store.event_commit(event_id).decode()
    return git("show", f"{commit}:event.json", cwd=ledger.path).stdout


def test_upcast_on_read_leaves_stored_bytes_and_id(
    git_ledger: Ledger, use_kind: Use, git: Callable[..., Any]
) -> None:
    """An event written at version 1 reads as version 2 once an upcaster exists; its stored
    bytes, its id, the head and verification are unchanged."""
    use_kind(SPEC_V1)
    old = git_ledger.append(KIND, {"label": "w", "size_mm": 3}, actor="tester")
    assert old.schema == 1
    stored = _event_json(git, git_ledger, old.id)
    head = git_ledger.head()
    assert [e.payload for e in git_ledger.events()][-1] == WidgetV1("w", 3)
    assert git_ledger.verify().ok

    use_kind(SPEC_V2)
    for ledger in (git_ledger, Ledger.open(git_ledger.path)):
        event = list(ledger.events())[-1]
        assert event.payload == WidgetV2(name="w", size_um=3000)
        assert event.envelope.schema == 1
        assert event.envelope.payload == {"label": "w", "size_mm": 3}
        assert event.envelope.id == old.id == compute_event_id(event.envelope)
        report = ledger.verify()
        assert report.ok, report.error
        assert report.events == 2
    assert git_ledger.head() == head
    assert _event_json(git, git_ledger, old.id) == stored
    assert json.loads(stored)["schema"] == 1


def test_verify_folds_upcast_payloads(git_ledger: Ledger, use_kind: Use) -> None:
    """verify hands the projection the upcast payload, so its fold sees only version 2."""
    use_kind(SPEC_V1)
    git_ledger.append(KIND, {"label": "a", "size_mm": 1}, actor="tester")
    use_kind(SPEC_V2)
    git_ledger.append(KIND, {"name": "b", "size_um": 5}, actor="tester")
    seen: list[Any] = []

    def evolve(state: _Total, event: Any) -> _Total:
        if event.kind == KIND:
            seen.append(event.payload)
            state.total_um += event.payload.size_um
        return state

    ledger = Ledger(git_ledger.store, _total_projection(evolve))
    report = ledger.verify()
    assert report.ok, report.error
    assert seen == [WidgetV2("a", 1000), WidgetV2("b", 5)]
    assert report.extra["state_hash"] == state_hash(_Total(total_um=1005))


def test_new_appends_use_the_current_version(git_ledger: Ledger, use_kind: Use) -> None:
    """After an upgrade, appends are stored at the new version and must fit its schema."""
    use_kind(SPEC_V2)
    envelope = git_ledger.append(KIND, {"name": "n", "size_um": 7}, actor="tester")
    assert envelope.schema == 2
    with pytest.raises(BadRequest, match=KIND):
        git_ledger.append(KIND, {"label": "old shape", "size_mm": 1}, actor="tester")
    assert git_ledger.store.count() == 2


def test_upcasters_chain_across_versions(git_ledger: Ledger, use_kind: Use) -> None:
    """A version-1 and a version-2 event both read as version 3 through the chain."""
    use_kind(SPEC_V1)
    git_ledger.append(KIND, {"label": "one", "size_mm": 2}, actor="tester")
    use_kind(SPEC_V2)
    git_ledger.append(KIND, {"name": "two", "size_um": 9}, actor="tester")
    use_kind(SPEC_V3)
    payloads = [e.payload for e in git_ledger.events() if e.kind == KIND]
    assert payloads == [WidgetV3("one", 2000, ()), WidgetV3("two", 9, ())]
    assert [e.envelope.schema for e in git_ledger.events() if e.kind == KIND] == [1, 2]
    assert git_ledger.verify().ok


def test_unknown_kind_is_reported(git_ledger: Ledger, use_kind: Use) -> None:
    """An event of a kind this code does not know fails verify and reading, naming the kind."""
    use_kind(SPEC_V1)
    event = git_ledger.append(KIND, {"label": "w", "size_mm": 1}, actor="tester")
    use_kind(None)
    report = git_ledger.verify()
    assert not report.ok
    assert isinstance(report.error, IntegrityError)
    assert f"unknown event kind {KIND!r}" in report.error.message
    assert report.error.event_id == event.id
    assert report.error.hint
    with pytest.raises(IntegrityError, match=f"unknown event kind {KIND!r}"):
        list(git_ledger.events())


def test_unknown_kind_fails_cli_verify(git_ledger: Ledger, use_kind: Use) -> None:
    """A real ``perfledger verify`` process (which never registered the test kind) exits 7 (a
    ledger written by a newer perfledger, not an integrity failure) with one JSON error naming
    the kind and the event."""
    use_kind(SPEC_V1)
    event = git_ledger.append(KIND, {"label": "w", "size_mm": 1}, actor="tester")
    proc = subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", git_ledger.path, "--json", "verify"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 7, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["ok"] is False
    assert answer["error"]["code"] == "newer_ledger"
    assert KIND in answer["error"]["message"]
    assert answer["error"]["event_id"] == event.id
    assert "Traceback" not in proc.stderr


def test_schema_newer_than_code_is_reported(git_ledger: Ledger, use_kind: Use) -> None:
    """An event written by a newer schema fails verify and reading with an upgrade hint."""
    use_kind(SPEC_V2)
    event = git_ledger.append(KIND, {"name": "n", "size_um": 1}, actor="tester")
    use_kind(SPEC_V1)
    report = git_ledger.verify()
    assert not report.ok and report.error is not None
    assert "schema version 2 is newer than this perfledger knows (1)" in report.error.message
    assert report.error.event_id == event.id
    assert "upgrade" in report.error.hint
    with pytest.raises(IntegrityError, match="newer"):
        list(git_ledger.events())


def test_upcaster_yielding_a_bad_payload_is_reported(git_ledger: Ledger, use_kind: Use) -> None:
    """An upcast payload that does not fit the current schema is an IntegrityError."""
    use_kind(SPEC_V1)
    git_ledger.append(KIND, {"label": "w", "size_mm": 1}, actor="tester")
    use_kind(KindSpec(KIND, 2, WidgetV2, upcasters={1: lambda p: {"name": p["label"]}}))
    report = git_ledger.verify()
    assert not report.ok and report.error is not None
    assert "does not fit" in report.error.message


def test_state_cache_is_invalidated_by_a_schema_upgrade(git_ledger: Ledger, use_kind: Use) -> None:
    """The state cache is keyed by code/schema version (SPEC.md s.2, Cache): after a kind gains
    an upcaster, state() must agree with a fold from zero (verify), not serve the old fold."""

    def evolve(state: _Total, event: Any) -> _Total:
        if event.kind == KIND:
            state.total_um += event.payload.size_um
        return state

    same_shape_v1 = KindSpec(KIND, 1, _Size)
    fixed_v2 = KindSpec(KIND, 2, _Size, upcasters={1: lambda p: {"size_um": p["size_um"] * 1000}})
    use_kind(same_shape_v1)
    git_ledger.append(KIND, {"size_um": 3}, actor="tester")
    ledger = Ledger(git_ledger.store, _total_projection(evolve))
    assert ledger.state().total_um == 3  # folded and cached at this head

    use_kind(fixed_v2)
    report = ledger.verify()
    assert report.ok, report.error
    assert ledger.state().total_um == 3000
    assert ledger.state_hash() == report.extra["state_hash"]


# ------------------------------------------------------------------------------- registry


def test_kind_spec_needs_every_upcaster() -> None:
    """A spec at version n must bring upcasters from every version below n."""
    with pytest.raises(ValueError, match=r"\[1\]"):
        KindSpec(KIND, 2, WidgetV2)
    with pytest.raises(ValueError, match=r"\[2\]"):
        KindSpec(KIND, 3, WidgetV3, upcasters={1: v1_to_v2})


def test_register_kind_is_idempotent_but_refuses_a_different_spec(use_kind: Use) -> None:
    """Registering the same spec twice is fine; another spec under the same name is refused."""
    use_kind(SPEC_V1)
    assert register_kind(SPEC_V1) is SPEC_V1
    with pytest.raises(ValueError, match="already registered"):
        register_kind(SPEC_V2)
    assert get_kind(KIND) is SPEC_V1
    assert KIND in registered_kinds()


def test_registry_is_restored_after_the_fixture() -> None:
    """No test kind leaks out of the tests that register one."""
    assert KIND not in registered_kinds()
    with pytest.raises(BadRequest, match="unknown event kind"):
        get_kind(KIND)


def test_core_kinds_are_registered_at_version_one() -> None:
    """The ledger core's kinds exist, each with its schema version."""
    assert get_kind("LedgerInitialized").version == 1
    assert get_kind("NoteRecorded").version == 1


def test_upcast_function_directly(use_kind: Use) -> None:
    """upcast lifts a stored payload to the current Struct; the input dict is not modified."""
    use_kind(SPEC_V3)
    stored = {"label": "x", "size_mm": 4}
    assert upcast(KIND, 1, stored) == WidgetV3("x", 4000, ())
    assert stored == {"label": "x", "size_mm": 4}
    assert upcast(KIND, 3, {"name": "y", "size_um": 1, "tags": ["t"]}) == WidgetV3("y", 1, ("t",))
    with pytest.raises(IntegrityError, match="newer"):
        upcast(KIND, 4, {})


# ------------------------------------------------------------------------------- helpers


class _Size(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    size_um: int


class _Total(msgspec.Struct, kw_only=True):
    total_um: int = 0


def _total_projection(evolve: Callable[[_Total, Any], _Total]) -> Projection:
    """A small projection summing widget sizes."""
    return Projection(
        name="test-total", version=1, state_type=_Total, initial=_Total, evolve=evolve
    )
