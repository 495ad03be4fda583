"""The storage format's limits on an event's shape (events/limits.py, docs/storage.md "Limits"):
an event forged past them, with a correct id, trailers and commit, is an integrity failure
(exit 5) naming it for every reader (verify, audit, state, a pull, a clone), never exit 1 and
never a traceback; an event just inside them reads; the writer refuses an event past them
(BadRequest) and writes nothing."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
from hostile_forge import forge_event, git, nested, run_cli

from perfledger.api import Ledger
from perfledger.errors import BadRequest
from perfledger.events.limits import (
    MAX_CONTAINER_ITEMS,
    MAX_DEPTH,
    MAX_PARENTS,
    MAX_STRING_CHARS,
    has_long_digits,
    shape_problem,
)
from perfledger.ledger.base import EventDraft

NOTE = {"text": "deep", "tags": []}
#: name -> the raw JSON of a forged request just past one limit (the request is level 2)
PAST = {
    "depth-1000": nested(1000),
    "depth-100000": nested(100_000),
    "depth-one-past": nested(MAX_DEPTH),  # arrays at levels 2..MAX_DEPTH + 1
    "string-one-past": b'"' + b"x" * (MAX_STRING_CHARS + 1) + b'"',
    "array-one-past": b"[" + b"0," * MAX_CONTAINER_ITEMS + b"0]",
    "integer-2^70": str(2**70).encode(),
}
#: the same, just inside (the control: these read)
INSIDE = {
    "depth-at-limit": nested(MAX_DEPTH - 1),
    "string-at-limit": b'"' + b"x" * MAX_STRING_CHARS + b'"',
    "integer-2^64-1": str(2**64 - 1).encode(),
}


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """name -> (a ledger holding one forged event with that request, the event's id)."""
    base = tmp_path_factory.mktemp("limits")
    out = {}
    for name, request in {**PAST, **INSIDE}.items():
        path = base / name
        Ledger.init(path, name=name, actor="t").close()
        out[name] = (path, forge_event(path, request_json=request)[0])
    return out


@pytest.mark.parametrize("name", sorted(PAST))
@pytest.mark.parametrize("command", ["verify", "audit", "state"])
def test_an_event_past_the_limits_is_an_integrity_failure_naming_it(
    tmp_path: Path, ledgers: dict[str, tuple[Path, str]], name: str, command: str
) -> None:
    path, event_id = ledgers[name]
    proc = run_cli(tmp_path, "--ledger", path, command)
    assert proc.returncode == 5, proc.stdout + proc.stderr
    said = proc.stdout + proc.stderr
    assert "limits" in said, said
    if command != "state":
        assert event_id in said, said
    if command == "verify":
        assert "hint:" in proc.stderr


@pytest.mark.parametrize("name", sorted(INSIDE))
def test_an_event_just_inside_the_limits_verifies(
    tmp_path: Path, ledgers: dict[str, tuple[Path, str]], name: str
) -> None:
    path, _ = ledgers[name]
    proc = run_cli(tmp_path, "--ledger", path, "verify")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("how", ["clone", "pull"])
def test_a_pull_or_clone_of_a_forged_deep_event_is_refused_and_moves_nothing(
    tmp_path: Path, how: str
) -> None:
    remote = tmp_path / "remote"
    Ledger.init(remote, name="r", actor="t").close()
    local = tmp_path / "local"
    assert run_cli(tmp_path, "clone", remote, local).returncode == 0
    before = git(local, "rev-parse", "refs/heads/ledger")
    event_id, _ = forge_event(remote, request_json=nested(1000))
    if how == "clone":
        proc = run_cli(tmp_path, "clone", remote, tmp_path / "second")
        assert not (tmp_path / "second" / "refs" / "heads" / "ledger").exists()
    else:
        proc = run_cli(tmp_path, "--ledger", local, "pull")
        assert git(local, "rev-parse", "refs/heads/ledger") == before
    assert proc.returncode == 5, proc.stderr
    assert event_id in proc.stderr and "limits" in proc.stderr


def test_a_commit_with_more_parents_than_the_limit_is_an_integrity_failure(
    tmp_path: Path,
) -> None:
    path = tmp_path / "l"
    Ledger.init(path, name="p", actor="t").close()
    head = git(path, "rev-parse", "refs/heads/ledger").decode()
    parents = "".join(f"parent {head}\n" for _ in range(MAX_PARENTS + 1))
    stamp = "t <perfledger> 1767225600 +0000"
    empty = git(path, "mktree", data=b"").decode()
    raw = f"tree {empty}\n{parents}author {stamp}\ncommitter {stamp}\n\nMerge divergent ledger heads\n"
    merge = git(path, "hash-object", "-t", "commit", "-w", "--stdin", data=raw.encode()).decode()
    git(path, "update-ref", "refs/heads/ledger", merge, head)
    for command in ("verify", "state", "log"):
        proc = run_cli(tmp_path, "--ledger", path, command)
        assert proc.returncode == 5, (command, proc.stderr)
        assert "parents" in proc.stderr and merge in proc.stderr


@pytest.mark.parametrize("request_", [nested(5000), nested(MAX_DEPTH)], ids=["5000", "one-past"])
def test_the_writer_refuses_an_event_past_the_limits_and_writes_nothing(
    tmp_path: Path, request_: bytes
) -> None:
    import json

    deep = json.loads(request_) if len(request_) < 2000 else None
    if deep is None:  # built without recursion: json.loads would itself refuse it
        deep = 0
        for _ in range(5000):
            deep = [deep]
    with Ledger.init(tmp_path / "l", name="w", actor="t") as ledger:
        head = ledger.head()
        with pytest.raises(BadRequest, match="limits"):
            ledger.store.append(EventDraft("NoteRecorded", NOTE, "t", request={"d": deep}))
        assert ledger.head() == head


def test_shape_problem_names_the_path_and_walks_any_depth_without_recursion() -> None:
    deep: list[object] = []
    for _ in range(200_000):
        deep = [deep]
    problem = shape_problem({"request": deep}, "$", 1)
    assert problem is not None and problem.startswith("$.request[0]")
    assert f"deeper than {MAX_DEPTH}" in problem
    assert shape_problem({"a": [1, "x", {"b": None}]}) is None


#: The event-shape limits of each storage format version (docs/storage.md, "Limits"): they are
#: part of the format, so changing one without a new ``FORMAT_VERSION`` fails here.
LIMITS_OF_FORMAT = {
    1: {"MAX_EVENT_BYTES": 64 * 1024 * 1024, "MAX_DEPTH": 64, "MAX_STRING_CHARS": 1024 * 1024,
        "MAX_CONTAINER_ITEMS": 1_000_000, "INT_MIN": -(2**63), "INT_MAX": 2**64 - 1,
        "MAX_PARENTS": 256, "MAX_ARTIFACTS": 10_000, "MAX_COMMIT_BYTES": 256 * 1024,
        "MAX_TREE_BYTES": 2 * 1024 * 1024, "MAX_REF_NAME_BYTES": 1024},
}  # fmt: skip


def test_event_limits_are_those_of_the_storage_format_version() -> None:
    from perfledger.events import limits
    from perfledger.ledger.layout import FORMAT_VERSION

    current = {name: getattr(limits, name) for name in LIMITS_OF_FORMAT[FORMAT_VERSION]}
    assert current == LIMITS_OF_FORMAT[FORMAT_VERSION]


def test_long_digit_test_matches_the_regular_expression() -> None:
    """``has_long_digits`` (a translation and a substring search) finds exactly the runs of 19
    or more ASCII digits that ``[0-9]{19}`` finds: the fast proof that an event holds no
    integer outside 64 bits must not miss one. Hypothesis-free: every edge is enumerated."""
    pattern = re.compile(rb"[0-9]{19}")
    samples = [b"", b"1" * 18, b"1" * 19, b"-" + b"9" * 19, b"x" + b"0" * 20 + b"y"]
    samples += [b"1" * k + bytes([c]) + b"2" * (19 - k) for k in range(20) for c in range(256)]
    samples += [string.digits.encode() * 2, "١٢٣".encode() * 10]  # non-ASCII digits are no JSON
    for data in samples:
        assert has_long_digits(data) == (pattern.search(data) is not None), data
