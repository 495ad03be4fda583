"""The fuzzing property's bounds on the profiler and compiler readers (issue 35; SPEC.md
section 2 "Limits"): any report of at most 1 MiB is read, or refused with its documented error
(EvidenceError), within 256 MiB of peak memory and 10 s. Each input is a shape that broke a
bound before, built here at 1 MiB and read in a child process whose peak RSS and CPU time
``wait4`` reports:

- ncu's raw page header then blank lines: pyarrow gave each blank line every column (a header
  and 17,000 of them: 287 MiB; the fuzzing run's input is replayed by test_fuzz_corpus.py);
- a raw page 60,000 columns wide: pyarrow's reader costs about 5 KB per column (424 MiB);
- ncu's summary page then a line of a million commas: deleting consumed fields from the front
  of a list per record was quadratic (33 s).

A control beside them: the real reports of tests/fixtures/profilers read within the bounds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from readers import _SEEDS, PROFILERS

BOUND_RSS_MIB = 256
BOUND_TIME_S = 10.0
MIB = 1024 * 1024
_PREFIX = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
           "Block Size", "Grid Size", "Device", "CC"]  # fmt: skip
#: Reads the report at argv[1] as argv[2] (a reader of tests/hostile/readers.py); exit 0 when
#: the reader kept its property (read, or refused with its documented error).
_CHILD = """
import sys
sys.path[:0] = [sys.argv[3], sys.argv[4]]
from readers import READERS, check
broken = check(READERS[sys.argv[2]], open(sys.argv[1], "rb").read())
print(broken or "ok")
# the child's own high-water mark: ru_maxrss would carry the spawning pytest process's
print(next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:")))
sys.exit(1 if broken else 0)
"""


def _quoted(fields: list[str]) -> bytes:
    return ",".join(f'"{f}"' for f in fields).encode()


def _wide_raw_page(columns: int) -> bytes:
    metrics = [f"m__x{i}" for i in range(columns)]
    launch = ["0", "1", "app", "h", "k(int)", "1", "7", "(256, 1, 1)", "(16, 1, 1)", "0", "9.0"]
    rows = [_quoted(_PREFIX + metrics), _quoted([""] * (11 + columns)),
            _quoted(launch + ["1"] * columns)]  # fmt: skip
    return b"\n".join(rows) + b"\n"


def _head(seed: str, lines: int) -> bytes:
    return b"\n".join((PROFILERS / seed).read_bytes().split(b"\n")[:lines]) + b"\n"


SHAPES = {
    "ncu-raw-blank-lines": ("profiler_ncu", lambda: (_head("ncu_raw.csv", 6) + b"\n" * MIB)[:MIB]),
    "ncu-raw-60000-columns": ("profiler_ncu", lambda: _wide_raw_page(60_000)[:MIB]),
    "ncu-summary-million-commas": (
        "profiler_ncu", lambda: (_head("ncu_summary.csv", 3) + b"," * MIB)[:MIB]
    ),
    "ncu-details-blank-lines": (
        "profiler_ncu", lambda: (_head("ncu_details_rules.csv", 3) + b"\n" * MIB)[:MIB]
    ),
    **{
        f"real-{seed}": (f"profiler_{kind.replace('-', '_')}",
                         lambda seed=seed: (PROFILERS / seed).read_bytes())
        for kind, seeds in _SEEDS.items() for seed in seeds
    },
}  # fmt: skip


def _read_in_child(reader: str, data: bytes, tmp_path: Path) -> tuple[str, float, float]:
    """(its verdict, CPU seconds, peak RSS in MiB) of reading ``data`` in a child process (CPU
    time, not wall time: six test runs share this machine's two cores)."""
    path = tmp_path / "report.bin"
    path.write_bytes(data)
    here = Path(__file__).resolve().parent
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), reader, str(here), str(here.parent)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    verdict, _, peak_kib = child.stdout.read().strip().rpartition("\n")
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    assert time.perf_counter() - started < 20 * BOUND_TIME_S  # never hangs, even when loaded
    return verdict, usage.ru_utime + usage.ru_stime, int(peak_kib) / 1024


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_report_of_at_most_1_mib_is_read_within_256_mib_and_10_s(
    shape: str, tmp_path: Path
) -> None:
    reader, build = SHAPES[shape]
    data = build()
    assert len(data) <= MIB
    verdict, seconds, rss_mib = _read_in_child(reader, data, tmp_path)
    assert verdict == "ok", verdict
    assert rss_mib <= BOUND_RSS_MIB, f"{shape}: peak RSS {rss_mib:.0f} MiB"
    assert seconds <= BOUND_TIME_S, f"{shape}: {seconds:.1f} s of CPU"
