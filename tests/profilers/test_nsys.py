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


# ------------------------------------------- public exports (fixtures/profilers/public)

PUBLIC = Path(__file__).resolve().parent.parent / "fixtures" / "profilers" / "public"


def _facts(report) -> dict[str, dict]:
    from perfledger.kernels.profilers.evidence import report_facts

    return {f["name"]: f for f in report_facts(report)}


@pytest.mark.parametrize(
    ("name", "version", "meta"),
    [
        ("nsys_2022_saxpy_a100.sqlite", "2022.2.1.31", "EXPORT_META_DATA"),
        ("nsys_2024_cloverleaf_a100.sqlite", "2024.5.1.113", "META_DATA_EXPORT"),
    ],
)
def test_public_exports_record_copies_beside_kernels_and_the_gpus(
    name: str, version: str, meta: str
) -> None:
    """Real exports of schema 2.9 and 3.13: kernels as before, plus memory copies (per copy
    kind: count, summed duration in ns, bytes), memory sets and each GPU, checked against
    SQL run here."""
    path = PUBLIC / name
    report = parse_nsys_sqlite(path)
    assert (report.tool_version, report.attributes["metadata_table"]) == (version, meta)
    con = sqlite3.connect(path)
    (launches,) = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert sum(k.launches for k in report.kernels.values()) == launches
    facts = _facts(report)
    count, total, size = con.execute(
        "SELECT count(*), sum(end - start), sum(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY"
    ).fetchone()
    assert count > 0
    assert (facts["memcpy.count"]["value"], facts["memcpy.total"]["value"]) == (count, total)
    assert (facts["memcpy.bytes"]["value"], facts["memcpy.bytes"]["unit"]) == (size, "byte")
    (htod,) = con.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1"
    ).fetchone()
    assert facts["memcpy.HtoD.count"]["value"] == htod > 0
    gpus = con.execute(
        "SELECT id, name, computeMajor, computeMinor FROM TARGET_INFO_GPU"
    ).fetchall()
    for gpu, gpu_name, major, minor in gpus:
        assert facts[f"gpu{gpu}.name"]["unit"] == "text"
        assert facts[f"gpu{gpu}.name"]["note"].startswith(gpu_name)
        assert facts[f"gpu{gpu}.compute_capability.major"]["value"] == major == 8
        assert facts[f"gpu{gpu}.compute_capability.minor"]["value"] == minor
    has_memset = con.execute(
        "SELECT count(*) FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_MEMSET'"
    ).fetchone()[0]
    if has_memset:
        assert facts["memset.count"]["value"] == 0
    else:
        assert "memset.count" not in facts
        assert any("no memset activity" in item for item in report.added_limitations)


def test_memcpy_rows_with_reversed_times_refused(tmp_path: Path) -> None:
    target = tmp_path / "copy.sqlite"
    shutil.copy(PUBLIC / "nsys_2022_saxpy_a100.sqlite", target)
    con = sqlite3.connect(target)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end = start - 1 WHERE rowid = 1")
    con.commit()
    con.close()
    with pytest.raises(EvidenceError, match="1 memcpy rows with a non-integer or reversed"):
        parse_nsys_sqlite(target)
