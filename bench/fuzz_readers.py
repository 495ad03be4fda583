"""Long fuzzing run of every reader of outside bytes (issue 35): the properties of
``tests/hostile/test_reader_properties.py`` at a larger hypothesis budget, each input run in a
forked child that is timed and whose peak resident memory is read with ``resource`` (wait4).

Per reader it reports the inputs tried, the wall time, the slowest input and the largest peak
RSS (over inputs of at most 1 MiB, the bound's domain, and over all), and every input that broke
the property (an exception other than the reader's documented error, a timeout, a child killed),
kept under ``tests/fixtures/fuzz/<reader>/`` where ``tests/hostile/test_fuzz_corpus.py`` replays
it.

    .venv/bin/python bench/fuzz_readers.py --seconds 240            # all readers, ~4 minutes
    .venv/bin/python bench/fuzz_readers.py --reader event_json --examples 2000
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "hostile"), str(ROOT / "tests")]

import blake3  # noqa: E402
from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from readers import CORPUS, READERS, Reader, check  # noqa: E402

#: The bound of the property, for one input of at most BOUND_INPUT_BYTES.
BOUND_RSS_MIB = 256
BOUND_TIME_S = 10.0
BOUND_INPUT_BYTES = 1024 * 1024
#: Inputs per hypothesis run (one seed each).
_BATCH = 50


def run_one(reader: Reader, data: bytes) -> tuple[str | None, float, float]:
    """Run ``reader`` on ``data`` in a forked child: (what broke the property or None, wall
    seconds, the child's peak RSS in MiB)."""
    read_end, write_end = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: one input, a hard time limit, the verdict through the pipe
        os.close(read_end)
        signal.alarm(int(BOUND_TIME_S * 3))
        try:
            broken = check(reader, data)
        except BaseException as exc:
            broken = f"check failed: {type(exc).__name__}: {exc}"
        os.write(write_end, pickle.dumps(broken))
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        payload = pipe.read()
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - started
    rss_mib = usage.ru_maxrss / 1024  # kilobytes on Linux
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return f"child killed by {name}", elapsed, rss_mib
    broken = pickle.loads(payload) if payload else "child wrote no verdict"
    if elapsed > BOUND_TIME_S and len(data) <= BOUND_INPUT_BYTES:
        broken = broken or f"took {elapsed:.1f} s (bound {BOUND_TIME_S} s)"
    if rss_mib > BOUND_RSS_MIB and len(data) <= BOUND_INPUT_BYTES:
        broken = broken or f"peak RSS {rss_mib:.0f} MiB (bound {BOUND_RSS_MIB} MiB)"
    return broken, elapsed, rss_mib


def fuzz(reader: Reader, examples: int, seconds: float) -> dict[str, object]:
    """Fuzz one reader for at most ``examples`` inputs or ``seconds``; returns its figures."""
    stats: dict[str, object] = {"reader": reader.name}
    tried = 0
    slowest = (0.0, 0)
    rss_bounded = rss_all = 0.0
    failures: dict[str, str] = {}  # distinct failure (type and first words) -> saved file
    started = time.perf_counter()

    def one(data: bytes) -> None:
        nonlocal tried, slowest, rss_bounded, rss_all
        tried += 1
        broken, elapsed, rss = run_one(reader, data)
        if elapsed > slowest[0]:
            slowest = (elapsed, len(data))
        rss_all = max(rss_all, rss)
        if len(data) <= BOUND_INPUT_BYTES:
            rss_bounded = max(rss_bounded, rss)
        if broken is not None:
            key = broken.split(":")[0] + ":" + " ".join(broken.split()[1:6])
            if key not in failures:
                folder = CORPUS / reader.name
                folder.mkdir(parents=True, exist_ok=True)
                path = folder / f"{blake3.blake3(data).hexdigest()[:16]}.bin"
                path.write_bytes(data)
                failures[key] = os.path.relpath(path, ROOT)
                print(f"  {reader.name}: {broken[:160]} -> {path.name}", flush=True)

    check(reader, b"")  # import what the reader imports here, not in every forked child
    # batches of a fixed size, each from its own seed, until the time or the count is spent
    # (hypothesis has no clean way to stop a run early)
    batch = 0
    while time.perf_counter() - started < seconds and tried < examples:
        drive = seed(batch)(
            settings(
                max_examples=min(_BATCH, examples - tried),
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )(given(reader.inputs)(one))
        )
        drive()
        batch += 1
    stats.update(
        inputs=tried,
        seconds=round(time.perf_counter() - started, 1),
        slowest_input_s=round(slowest[0], 2),
        slowest_input_bytes=slowest[1],
        peak_rss_mib_inputs_up_to_1mib=round(rss_bounded, 1),
        peak_rss_mib_all_inputs=round(rss_all, 1),
        distinct_failures=failures,
    )
    return stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reader", action="append", choices=sorted(READERS))
    parser.add_argument("--examples", type=int, default=100_000, help="per reader, at most")
    parser.add_argument("--seconds", type=float, default=240.0, help="in all")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args()
    names = args.reader or sorted(READERS)
    per_reader = args.seconds / len(names)
    results = []
    for name in names:
        result = fuzz(READERS[name], args.examples, per_reader)
        results.append(result)
        print(json.dumps(result), flush=True)
    total = {
        "inputs": sum(int(r["inputs"]) for r in results),  # type: ignore[call-overload]
        "seconds": round(sum(float(r["seconds"]) for r in results), 1),  # type: ignore[arg-type]
        "distinct_failures": sum(len(r["distinct_failures"]) for r in results),  # type: ignore[arg-type]
        "bound": f"<= {BOUND_RSS_MIB} MiB and <= {BOUND_TIME_S} s per input of <= 1 MiB",
    }
    print(json.dumps({"total": total}))
    if args.json:
        args.json.write_text(json.dumps({"readers": results, "total": total}, indent=1) + "\n")


if __name__ == "__main__":
    main()
