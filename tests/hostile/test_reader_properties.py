"""Property tests of every reader of outside bytes (tests/hostile/readers.py): on any hostile
input, shaped by structure (depth, size, count, long strings, huge integers, many parents, long
ref names, mutated profiler reports), a reader returns or raises its documented error with a
message; nothing else (the CLI's exit 1), never a RecursionError. Small budgets, each a few
seconds; ``bench/fuzz_readers.py`` runs the same properties longer and in a subprocess that
measures memory. A forged event in a real ledger: verify and state answer exit 0, 5 or 7 and
an append attempted on top of a refused ledger leaves the head where it was."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_forge import forge_event, git
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from readers import READERS, check, hostile_json

from perfledger.api import Ledger
from perfledger.errors import PerfledgerError

_FAST = settings(
    max_examples=25,
    deadline=None,  # a 200,000-deep input or a 3 MiB line takes a while on a loaded machine
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_reader_answers_hostile_input_with_its_documented_error(name: str) -> None:
    reader = READERS[name]

    @_FAST
    @given(reader.inputs)
    def prop(data: bytes) -> None:
        broken = check(reader, data)
        assert broken is None, f"{name} on {data[:200]!r}...: {broken}"

    prop()


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("forged") / "template"
    Ledger.init(path, name="t", actor="t").close()
    return path


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(request_json=hostile_json())
def test_a_forged_event_in_a_ledger_is_read_or_refused_never_otherwise(
    template: Path, tmp_path: Path, request_json: bytes
) -> None:
    import shutil
    import uuid

    path = tmp_path / uuid.uuid4().hex
    shutil.copytree(template, path)
    forge_event(path, request_json=request_json)
    head = git(path, "rev-parse", "refs/heads/ledger")
    with Ledger.open(path) as ledger:
        report = ledger.verify()
        assert report.ok or (report.error is not None and report.error.exit_code in (5, 7))
        try:
            ledger.state()
            state_ok = True
        except PerfledgerError as exc:
            assert exc.exit_code in (5, 7), exc.message
            state_ok = False
        if not state_ok:
            with pytest.raises(PerfledgerError):
                ledger.append("NoteRecorded", {"text": "on top", "tags": []}, actor="t")
            assert git(path, "rev-parse", "refs/heads/ledger") == head
    shutil.rmtree(path)


def test_control_the_property_catches_a_reader_that_recurses() -> None:
    """The check can fail: the json module on a deep input raises RecursionError, which no
    reader may let out."""
    import json

    from readers import Reader

    naive = Reader("naive", hostile_json(), lambda data: json.loads(b"[" * 100_000), ())
    broken = check(naive, b"")
    assert broken is not None and broken.startswith("RecursionError")


def _deep(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    database=None,
)
@given(
    tool=st.sampled_from(["target_freeze", "experiment_create", "samples_record", "state"]),
    body=st.one_of(
        st.builds(lambda d: {"target_id": _deep(d)}, st.integers(0, 50_000)),
        st.dictionaries(st.text(max_size=10), st.from_regex(r"\A.{0,5}\Z"), max_size=4),
        st.builds(lambda n: {"title": "x" * n}, st.integers(0, 3_000_000)),
    ),
)
def test_an_mcp_tool_answers_hostile_arguments_with_a_perfledger_error(
    template: Path, tool: str, body: dict[str, object]
) -> None:
    from perfledger.commands.mcp import Tools

    head = git(template, "rev-parse", "refs/heads/ledger")
    try:
        Tools(str(template), "agent").call(tool, body)
    except PerfledgerError as exc:
        assert exc.exit_code in (2, 3), exc.message
    except TypeError:  # a read tool given fields it has none of: the MCP server's schema refuses
        assert tool == "state"
    assert git(template, "rev-parse", "refs/heads/ledger") == head
