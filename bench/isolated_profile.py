"""Where the time of one isolated comparison goes (property 3 of SPEC.md section 5): one A/A
comparison of a kernel spec's reference in two workers, with the measuring process and both
workers under :mod:`cProfile`, and the wall time of each phase (start-up and ``hello``,
correctness, warm-up, timed batches, reveals).

Needs CuPy and a GPU. Run on the device::

    python bench/isolated_profile.py --kind iterate --n 2097152 --out /tmp/prof

Prints the phases and the 25 most expensive functions of each process (by cumulative time, then
by own time); the raw profiles are written under ``--out``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

WRAPPER = """
import cProfile, os, sys
from perfledger.kernels.isolation import subject_worker
out, argv = sys.argv[1], sys.argv[2:]
profile = cProfile.Profile()
profile.enable()
try:
    code = subject_worker.main(argv)
finally:
    profile.disable()
    profile.dump_stats(f"{out}/worker-{os.getpid()}.prof")
sys.exit(code)
"""


def _top(path_or_profile: Any, n: int = 25) -> str:
    buf = io.StringIO()
    stats = pstats.Stats(path_or_profile, stream=buf)
    stats.sort_stats("cumulative").print_stats(n)
    stats.sort_stats("tottime").print_stats(n)
    return buf.getvalue()


def main() -> int:
    """Run the profile; returns the exit status."""
    sys.path.insert(0, str(Path(__file__).parent))
    from isolated_cost_bench import SPECS  # the same specs as the cost benchmark
    from perfledger.kernels.isolation import isolated

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(SPECS), default="iterate")
    parser.add_argument("--n", type=int, default=1 << 21)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    phases: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)

    def timed(cls: Any, name: str) -> None:
        original = getattr(cls, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                phases[f"{cls.__name__}.{name}"] += time.perf_counter() - t0
                counts[f"{cls.__name__}.{name}"] += 1

        setattr(cls, name, wrapper)

    for name in ("hello", "check", "run", "reveal"):
        timed(isolated.WorkerProcess, name)
    for name in ("batch", "reveal", "_stop_others", "_hold", "_ran"):
        timed(isolated._Run, name)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.py"
        spec.write_text(SPECS[args.kind].format(n=args.n))
        wrapper = Path(tmp) / "wrapper.py"
        wrapper.write_text(WRAPPER)
        config = isolated.IsolationConfig(worker=(sys.executable, str(wrapper), str(out)))
        profile = cProfile.Profile()
        t0 = time.perf_counter()
        profile.enable()
        c = isolated.compare_spec(str(spec), args.kind, roles=("reference", "reference"),
                                  config=config)  # fmt: skip
        profile.disable()
        wall = time.perf_counter() - t0
    profile.dump_stats(str(out / "parent.prof"))
    calls = len(c.ref.samples_s) if c.ref else 0
    print(f"comparison wall {wall:.3f} s, valid {c.valid}, flags {c.flags}, timed calls per "
          f"subject {calls}, batches {c.settings.get('batches')}, reveals "
          f"{c.settings.get('reveals')}")  # fmt: skip
    for name, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"  {name:28s} {seconds:8.3f} s in {counts[name]:5d} calls "
              f"({1e3 * seconds / max(1, counts[name]):.3f} ms each)")  # fmt: skip
    if c.ref:
        print(f"  worker-reported wall per call {1e3 * sum(c.ref.wall_s) / calls:.3f} ms, event "
              f"time per call {1e3 * sum(c.ref.samples_s) / calls:.3f} ms")  # fmt: skip
    print("\n# measuring process\n" + _top(str(out / "parent.prof")))
    for prof in sorted(out.glob("worker-*.prof")):
        print(f"\n# {prof.name}\n" + _top(str(prof)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
