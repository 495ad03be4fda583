"""Fixtures of the profiler-evidence suite: the real reports captured on an H200 (see
tests/fixtures/profilers/README.md) and helpers to load them."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The folder of the captured reports."""
    return FIXTURES


@pytest.fixture(scope="session")
def ncu_version() -> str:
    """`ncu --version` as printed on the H200 (Nsight Compute 2025.3.1)."""
    return (FIXTURES / "ncu_version.txt").read_text()


@pytest.fixture(scope="session")
def nvcc_version() -> str:
    """`nvcc --version` as printed on the H200 (CUDA 13.0)."""
    return (FIXTURES / "nvcc_version.txt").read_text()
