"""Nsight Systems: the SQLite export (a synthetic fixture in nsys's schema: nsys could not make a
report on the device machine, see the fixtures README) and the `nsys stats` CSV."""

from __future__ import annotations

import shutil
import sqlite3
import statistics
from pathlib import Path

import pytest

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.nsys import parse_nsys_sqlite, parse_nsys_stats_csv

SAXPY = "saxpy(int, float, const float *, float *)"
FMA = "fma_loop(int, int, float *)"


def _copy(fixtures: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy.sqlite"
    shutil.copy(fixtures / "nsys_synthetic.sqlite", target)
    return target


def test_sqlite_kernel_summary_is_exact(fixtures: Path) -> None:
    path = fixtures / "nsys_synthetic.sqlite"
    report = parse_nsys_sqlite(path)
    con = sqlite3.connect(path)
    rows = con.execute(
        "SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    ).fetchall()
    con.close()
    assert report.tool_version == "2025.3.1.90" and report.layer == "workload"
    assert report.attributes["schema_version"] == "3.25.0"
    grand = sum(d for _, d in rows)
    for name in (SAXPY, FMA):
        durations = [d for n, d in rows if n == name]
        got = report.durations(name)
        assert got == {
            "count": 2.0, "total_ns": float(sum(durations)), "mean_ns": sum(durations) / 2,
            "median_ns": statistics.median(durations), "min_ns": float(min(durations)),
            "max_ns": float(max(durations)),
        }  # fmt: skip
        assert report.kernels[name].grids == {"(16384, 1, 1)"}
    shares = {n: v for n, v, _, _ in report.facts if n.endswith("share_of_kernel_time")}
    assert shares["k0.share_of_kernel_time"] == pytest.approx(
        sum(d for n, d in rows if n == SAXPY) / grand
    )
    assert sum(shares.values()) == pytest.approx(1.0)


def test_old_metadata_table_name_accepted(fixtures: Path, tmp_path: Path) -> None:
    path = _copy(fixtures, tmp_path)
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
    con.commit()
    con.close()
    report = parse_nsys_sqlite(path)
    assert report.attributes["metadata_table"] == "EXPORT_META_DATA"


def test_r6_unknown_schema_version_refused(fixtures: Path, tmp_path: Path) -> None:
    path = _copy(fixtures, tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE META_DATA_EXPORT SET value='9.0.0' WHERE name='EXPORT_SCHEMA_VERSION'")
    con.commit()
    con.close()
    with pytest.raises(EvidenceError, match=r"unknown nsys export schema version 9\.0\.0"):
        parse_nsys_sqlite(path)


def test_no_kernel_table_is_a_fact_not_a_crash(fixtures: Path, tmp_path: Path) -> None:
    path = _copy(fixtures, tmp_path)
    con = sqlite3.connect(path)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    report = parse_nsys_sqlite(path)
    assert report.kernels == {} and report.limitations[0].startswith("no kernel activity")


def test_not_sqlite_and_damaged_refused(fixtures: Path, tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="not an SQLite database"):
        parse_nsys_sqlite(fixtures / "torch_trace.json")
    damaged = tmp_path / "damaged.sqlite"
    data = (fixtures / "nsys_synthetic.sqlite").read_bytes()
    damaged.write_bytes(data[:5000])
    with pytest.raises(EvidenceError):
        parse_nsys_sqlite(damaged)


def test_stats_csv(fixtures: Path) -> None:
    report = parse_nsys_stats_csv(
        fixtures / "nsys_stats_cuda_gpu_kern_sum.csv", tool_version="2025.3.1.90"
    )
    assert list(report.kernels) == [FMA, SAXPY]
    assert report.durations(SAXPY)["median_ns"] == 14480.0
    assert ("k0.share_of_kernel_time", 0.764, "ratio", "") in report.facts


def test_stats_csv_unknown_header_refused(fixtures: Path, tmp_path: Path) -> None:
    text = (fixtures / "nsys_stats_cuda_gpu_kern_sum.csv").read_text()
    bad = tmp_path / "bad.csv"
    bad.write_text(text.replace("Med (ns),", ""))
    with pytest.raises(EvidenceError, match="unknown nsys stats header"):
        parse_nsys_stats_csv(bad, tool_version="2025.3.1.90")


def test_text_that_is_not_utf8_refused(fixtures: Path, tmp_path: Path) -> None:
    """Found by the fuzz test: TEXT that is not UTF-8 is an EvidenceError, not a crash."""
    path = _copy(fixtures, tmp_path)
    con = sqlite3.connect(path)
    con.execute("UPDATE StringIds SET value = CAST(x'80ff' AS TEXT) WHERE id = 1")
    con.commit()
    con.close()
    with pytest.raises(EvidenceError, match="cannot be read"):
        parse_nsys_sqlite(path)
