"""The loop's ncu run (``CudaBackend.ncu_profile``, shared by the ``.cu`` and ``solve()``
backends) against stand-in ``ncu`` executables (shell scripts: Nsight Compute is not installed
here): no ncu and no counter access are limitations with no metrics (R16), any other failure is
a clear error, and a ``solve()`` source is built only once ncu is there."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from perfledger.errors import BadRequest
from perfledger.events.catalog import load_default_catalog
from perfledger.kernels.loop.measure import CudaBackend
from perfledger.kernels.loop.solve import SolveBackend


def _ncu(tmp_path: Path, body: str) -> str:
    path = tmp_path / "ncu"
    path.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then\n'
        '  echo "NVIDIA (R) Nsight Compute Command Line Profiler"\n'
        '  echo "Version 2025.3.1.0 (build 1)"\n  exit 0\nfi\n' + body
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


CATALOG = load_default_catalog()[0]


def _backend(tmp_path: Path, ncu: str | None) -> CudaBackend:
    return CudaBackend(tmp_path / "ref.py", {"n": 8}, "k", ncu=ncu)


def test_missing_ncu_is_a_limitation_with_no_metrics(tmp_path: Path) -> None:
    profile = _backend(tmp_path, str(tmp_path / "absent")).profile(tmp_path / "k.cu", CATALOG)
    assert profile["metrics"] == {} and profile["limitations"] == ["ncu not found on PATH"]


def test_no_counter_access_is_a_limitation_with_no_metrics(tmp_path: Path) -> None:
    ncu = _ncu(tmp_path, 'echo "==ERROR== ERR_NVGPUCTRPERM"\nexit 1\n')
    profile = _backend(tmp_path, ncu).profile(tmp_path / "k.cu", CATALOG)
    assert profile["tool_version"] == "2025.3.1.0" and profile["metrics"] == {}
    assert profile["limitations"][0].startswith("ERR_NVGPUCTRPERM")


def test_a_failed_ncu_run_is_a_clear_error_with_its_output(tmp_path: Path) -> None:
    ncu = _ncu(tmp_path, 'echo "target crashed" >&2\nexit 3\n')
    with pytest.raises(BadRequest, match="ncu exited with 3") as raised:
        _backend(tmp_path, ncu).profile(tmp_path / "k.cu", CATALOG)
    assert "target crashed" in (raised.value.hint or "")


def test_a_solve_source_is_built_only_once_ncu_is_there(tmp_path: Path) -> None:
    built: list[Path] = []

    class Recording(SolveBackend):
        def subject(self, kernel: Path) -> object:
            built.append(kernel)
            raise BadRequest("not built in this test")

    absent = Recording(tmp_path / "ref.py", {"n": 8}, ncu=str(tmp_path / "absent"))
    assert absent.profile(tmp_path / "k.cu", CATALOG)["limitations"] == ["ncu not found on PATH"]
    assert built == []
    present = Recording(tmp_path / "ref.py", {"n": 8}, ncu=_ncu(tmp_path, "exit 0\n"))
    with pytest.raises(BadRequest, match="not built in this test"):
        present.profile(tmp_path / "k.cu", CATALOG)
    assert built == [tmp_path / "k.cu"]
