"""How many processes verify's pass 2 uses when the caller does not say (``_worker_count``):
the choice must not depend on the machine the test runs on, so the CPU set is fixed here."""

from __future__ import annotations

import os

import pytest

from perfledger.ledger import verify


@pytest.fixture
def cpus(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    chosen: list[int] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(chosen), raising=False)
    monkeypatch.delenv("PERFLEDGER_VERIFY_WORKERS", raising=False)
    monkeypatch.setattr(verify, "_FORK_OK", True)
    return chosen


@pytest.mark.parametrize(
    ("n_cpus", "events", "expected"),
    [(1, 100_000, 1), (2, 100_000, 2), (8, 100_000, verify.MAX_WORKERS), (2, 19_999, 1),
     (2, 400_001, 1), (2, 20_000, 2)],
)  # fmt: skip
def test_automatic_worker_count(cpus: list[int], n_cpus: int, events: int, expected: int) -> None:
    cpus.extend(range(n_cpus))
    assert verify._worker_count(events, None) == expected


def test_the_environment_and_the_caller_override(
    cpus: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    cpus.extend(range(2))
    monkeypatch.setenv("PERFLEDGER_VERIFY_WORKERS", "1")
    assert verify._worker_count(100_000, None) == 1
    assert verify._worker_count(100_000, 3) == 3  # the caller's number wins
    monkeypatch.setenv("PERFLEDGER_VERIFY_WORKERS", "0")
    assert verify._worker_count(100_000, None) == 1  # at least one
