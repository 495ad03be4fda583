"""Profiler-report parsing throughput and peak memory.

Generates, in a temporary folder, an ncu ``--page raw`` CSV and a PyTorch profiler trace of the
requested sizes by repeating the real rows captured on an H200 (tests/fixtures/profilers: the
raw page's launch rows with fresh IDs; the trace's events shifted in time), parses each in a fresh
child process and reports parse time, throughput (MB/s, 10^6 bytes) and the child's peak RSS. Each
is measured at two sizes (a quarter and the full size) so that memory independent of file size
shows as equal peaks. Generated files are deleted afterwards.

    python bench/profiler_bench.py            # 100 MB ncu raw CSV, 1 GB trace (+ quarters)
    python bench/profiler_bench.py --quick    # 20 MB and 100 MB
Goal: >= 50 MB/s and a peak RSS that does not grow with the file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "profilers"
GOAL_MB_S = 50.0

_CHILD = """
import resource, sys, time
sys.path.insert(0, {src!r})
kind, path = sys.argv[1], sys.argv[2]
import csv, json, numpy, msgspec, pyarrow.csv, pyarrow.compute  # imports are not parse time
from perfledger.kernels.profilers import ncu, torch_trace
start = time.perf_counter()
cpu0 = time.process_time()
if kind == "csv-floor":  # the standard library's csv module alone, over the same file
    import csv
    with open(path, newline="") as handle:
        launches = sum(1 for _ in csv.reader(handle)) - 2
elif kind == "json-floor":  # json.load of the whole file (bounded sizes only)
    import json
    with open(path) as handle:
        data = json.load(handle)
    launches = sum(1 for e in data["traceEvents"] if e.get("cat") == "kernel")
elif kind == "ncu":
    from perfledger.kernels.profilers.ncu import parse_ncu_csv
    report = parse_ncu_csv(path, tool_version="2025.3.1.0")
    launches = sum(k.launches for k in report.kernels.values())
else:
    from perfledger.kernels.profilers.torch_trace import parse_torch_trace
    report = parse_torch_trace(path)
    launches = sum(k.launches for k in report.kernels.values())
seconds = time.perf_counter() - start
cpu = time.process_time() - cpu0
print(seconds, launches, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, cpu)
"""


def make_ncu_raw(path: Path, size_bytes: int) -> int:
    """Write an ncu raw CSV of about ``size_bytes``: the real header and units row, then the real
    launch rows repeated with new IDs. Returns the number of launch rows."""
    lines = (FIXTURES / "ncu_raw.csv").read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    header, units, rows = lines[start], lines[start + 1], lines[start + 2 :]
    tails = [row.split(",", 1)[1] for row in rows]
    count = 0
    with open(path, "w") as out:
        written = out.write(header) + out.write(units)
        while written < size_bytes:
            for tail in tails:
                written += out.write(f'"{count}",{tail}')
                count += 1
    return count


def make_torch_trace(path: Path, size_bytes: int) -> int:
    """Write a PyTorch trace of about ``size_bytes``: the real top-level keys, then the real
    complete events repeated, each copy shifted past the previous one. Returns the kernel count."""
    data = json.loads((FIXTURES / "torch_trace.json").read_text())
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    lo = min(e["ts"] for e in events)
    width = max(e["ts"] + e["dur"] for e in events) - lo + 10.0
    header = {k: v for k, v in data.items() if k != "traceEvents"}
    kernels_per_copy = sum(1 for e in events if e.get("cat") == "kernel")
    copies = 0
    with open(path, "w") as out:
        head = json.dumps(header)[:-1] + ', "traceEvents": [\n'
        written = out.write(head)
        first = True
        while written < size_bytes:
            shift = copies * width
            parts = []
            for event in events:
                event = dict(event, ts=round(event["ts"] + shift, 3))
                parts.append(("" if first else ",\n") + json.dumps(event))
                first = False
            written += out.write("".join(parts))
            copies += 1
        out.write("\n]}\n")
    return copies * kernels_per_copy


def measure(kind: str, path: Path) -> dict[str, float]:
    """Parse ``path`` in a child process; return wall seconds, MB/s, CPU seconds (user + system
    of the parse, which a loaded machine inflates less than wall time), MB per CPU-second, peak
    RSS (MiB) and launches."""
    code = _CHILD.format(src=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-c", code, kind, str(path)], capture_output=True, text=True, check=True
    )
    seconds, launches, peak_kib, cpu = proc.stdout.split()
    size = path.stat().st_size
    return {
        "size_mb": size / 1e6,
        "seconds": float(seconds),
        "mb_per_s": size / 1e6 / float(seconds),
        "cpu_s": float(cpu),
        "mb_per_cpu_s": size / 1e6 / max(float(cpu), 1e-9),
        "peak_rss_mib": int(peak_kib) / 1024,  # the child's own ru_maxrss (KiB on Linux)
        "launches": float(launches),
    }


def main() -> None:
    """Run the benchmark and print one line per measurement and the goal check."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 MB ncu, 100 MB trace")
    parser.add_argument("--ncu-mb", type=float, default=100.0)
    parser.add_argument("--torch-mb", type=float, default=1000.0)
    parser.add_argument("--only", choices=["ncu", "torch"], default=None)
    args = parser.parse_args()
    if args.quick:
        args.ncu_mb, args.torch_mb = 20.0, 100.0
    results = []
    print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
    with tempfile.TemporaryDirectory(prefix="plbench-") as tmp:
        for kind, total_mb, make in (
            ("ncu", args.ncu_mb, make_ncu_raw),
            ("torch", args.torch_mb, make_torch_trace),
        ):
            if args.only not in (None, kind):
                continue
            floor_kind, floor_mb = ("csv-floor", total_mb) if kind == "ncu" else ("json-floor", 20)
            path = Path(tmp) / f"{kind}-floor"
            make(path, int(floor_mb * 1e6))
            floor = measure(floor_kind, path)
            path.unlink()
            print(
                f"{floor_kind:10s} {floor['size_mb']:8.1f} MB  {floor['mb_per_s']:6.1f} MB/s  "
                f"({floor['mb_per_cpu_s']:6.1f} MB per CPU-s)  "
                f"peak RSS {floor['peak_rss_mib']:7.1f} MiB  (the standard library alone: this "
                "machine's floor)",
                flush=True,
            )
            for mb in (total_mb / 4, total_mb):
                path = Path(tmp) / f"{kind}-{mb:.0f}MB"
                t0 = time.perf_counter()
                expected = make(path, int(mb * 1e6))
                gen_s = time.perf_counter() - t0
                row = measure(kind, path)
                assert row["launches"] == expected, (row, expected)
                path.unlink()
                row.update(kind=kind, generate_s=gen_s)  # type: ignore[arg-type]
                results.append(row)
                print(
                    f"{kind:10s} {row['size_mb']:8.1f} MB  parse {row['seconds']:6.2f} s  "
                    f"{row['mb_per_s']:6.1f} MB/s ({row['mb_per_cpu_s']:6.1f} MB per CPU-s)  "
                    f"peak RSS {row['peak_rss_mib']:6.1f} MiB  "
                    f"launches {int(row['launches'])}  (generated in {gen_s:.1f} s)",
                    flush=True,
                )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    for kind in ("ncu", "torch"):
        if args.only not in (None, kind):
            continue
        small, big = [r for r in results if r["kind"] == kind]
        ok = big["mb_per_s"] >= GOAL_MB_S
        print(
            f"{kind}: {big['mb_per_s']:.1f} MB/s (goal >= {GOAL_MB_S:.0f}: "
            f"{'met' if ok else 'NOT met'}; {big['mb_per_cpu_s']:.1f} MB per CPU-s); peak RSS {small['peak_rss_mib']:.1f} MiB at "
            f"{small['size_mb']:.0f} MB vs {big['peak_rss_mib']:.1f} MiB at {big['size_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()
