"""Fixtures of the kernels tests: the embedded CPU workload and GPU skipping."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

#: The embedded CPU workload of examples/workloads.
SUMSQ = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "sumsq.py"


def sumsq(label: str, *extra: str) -> list[str]:
    """argv of the embedded workload with extra arguments."""
    return [sys.executable, str(SUMSQ), *extra]


@pytest.fixture
def sumsq_argv() -> list[str]:
    """argv prefix of the embedded workload."""
    return [sys.executable, str(SUMSQ)]
