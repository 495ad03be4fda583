"""The CPU session's workload: row softmax of a fixed test set, in the workload driver's protocol.

Under perfledger's worker protocol (``$PERFLEDGER_WORKER_FDS`` set: ``measure workload``,
``measure baseline`` and ``measure aa`` of a Target whose primary perfledger observes), this
process is a worker (:func:`serve_worker`): perfledger owns the clock, the inputs' seed and the
judgement of every output. The self-timed mode below is kept for the other modes and by hand
(``measure workload --protocol self`` records its figures only as reported: they decide nothing).

One call = one subject on one case: import the implementation (``--code DIR``: the code
directory's ``softmax.py``, how the session's subjects run; ``--impl NAME``: ``impls/NAME.py``),
check it against an extended-precision reference (R5: a wrong answer is reported as
``correct: false``, its times are kept but mean nothing), then time ``--repeats`` calls and
print one JSON object::

    {"correct": true, "metrics": {"cpu_ms": [...], "wall_ms": [...]}, "detail": {...}}

With ``--out PATH`` (the readiness driver's ``{output}`` place) the call also writes the output of
its checked call there (``numpy.save``), and the driver, not this process, compares it with the
reference's output of the same pair (docs/measurement.md, "Outputs judged by perfledger").

``cpu_ms`` is this process's CPU time per call (``time.process_time``, milliseconds): on a busy
machine it excludes the time the process waited for a core, which ``wall_ms`` includes.

Other modes (used by the session driver, ``session.py``):

- ``--test-set``: the test set's identity: ``{"hash", "case_count", "cases", "shapes"}``; the hash
  is sha256 over each case's name, shape and input bytes (the inputs come from fixed seeds, so
  every machine hashes the same arrays).
- ``--hash IMPL``: ``sha256:<hex>`` of the implementation's source file (its content hash).
- ``--profile IMPL``: cProfile of one call per case; prints the share of the profiled time spent
  inside the implementation's ``softmax`` (``softmax_share``, a ratio), the share spent in Python
  frames (``python_frames_share``: interpreter dispatch, what vectorizing removes) and the calls
  per input row.
- ``--memory IMPL``: tracemalloc's peak bytes during one call per case (the temporaries).

Accuracy rule: every output finite, and max relative error <= 1e-12 against a reference computed
in ``numpy.longdouble`` (80-bit on x86-64), rounded to float64.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import importlib.util
import json
import os
import pstats
import sys
import time
from pathlib import Path
from types import ModuleType

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np


def _shared_start_up() -> None:
    """Import SciPy's softmax and call it once, whichever implementation runs: every subject
    pays the same start-up. The driver checks the times a call reports against its own wall
    clock of the whole call (docs/measurement.md): a library that one candidate alone loads
    outside its timed region (SciPy imports lazily on first call) would look like time moved
    out of the timer."""
    try:
        from scipy.special import softmax
    except ImportError:  # scipy_reuse needs it; the other implementations do not
        return
    softmax(np.zeros((2, 4)), axis=1)


_shared_start_up()

HERE = Path(__file__).resolve().parent
IMPLS = HERE / "impls"
#: The implementation's file inside a code directory (``--code DIR``).
SUBJECT_FILE = "softmax.py"
#: case -> (rows, cols, seed, logit scale). ``narrow``: many short rows (per-row overhead
#: dominates the loop); ``wide``: fewer, long rows (exp and the reductions dominate).
CASES = {"narrow": (1000, 32, 11, 4.0), "wide": (64, 4096, 12, 30.0)}
RTOL = 1e-12


def make_input(case: str) -> np.ndarray:
    """The case's input: a float64 (rows, cols) array from its fixed seed (standard normal
    logits times the case's scale)."""
    rows, cols, seed, scale = CASES[case]
    return np.random.default_rng(seed).standard_normal((rows, cols)) * scale


def perturbed(base: np.ndarray, seed: int) -> np.ndarray:
    """The inputs of one worker-protocol call: the case's fixed input with its rows permuted
    and its logits scaled (by 0.5 to 1.5) as ``seed`` says, so no call can hand back an output
    it remembers, at the cost of a copy (drawing fresh normals cost more than a call's work)."""
    rng = np.random.default_rng(seed)
    x = base[rng.permutation(base.shape[0])]
    x *= rng.uniform(0.5, 1.5)
    return x


def serve_worker(impl: str, code: str | None) -> None:
    """Speak perfledger's worker protocol (docs/measurement.md, "Workload worker protocol"):
    import the implementation and make the cases' fixed inputs once, then for each call
    perturb the case's input by the call's seed (:func:`perturbed`), run ``softmax`` and save
    its output where perfledger says; perfledger times the call with its own clock, reads the
    CPU time from the kernel and compares the output with the reference's of the pair."""
    from perfledger.subject import serve

    def setup() -> tuple[ModuleType, dict[str, np.ndarray]]:
        return load(impl, code), {case: make_input(case) for case in CASES}

    def call(state: tuple[ModuleType, dict[str, np.ndarray]], case: str, seed: int,
             output: str) -> None:  # fmt: skip
        module, bases = state
        np.save(output, np.asarray(module.softmax(perturbed(bases[case], seed))))

    serve(setup, call)


def reference(x: np.ndarray) -> np.ndarray:
    """Row softmax in extended precision (``numpy.longdouble``), rounded to float64."""
    xl = x.astype(np.longdouble)
    e = np.exp(xl - xl.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float64)


def load(impl: str, code: str | None = None) -> ModuleType:
    """Import ``impls/<impl>.py``, or ``CODE/softmax.py`` when ``code`` names a code directory
    (a subject of the session: one version of the code, R11). Raises SystemExit(2) when the
    file does not exist."""
    path = Path(code) / SUBJECT_FILE if code is not None else IMPLS / f"{impl}.py"
    if not path.is_file():
        print(f"unknown implementation {impl!r} (no {path})", file=sys.stderr)
        raise SystemExit(2)
    spec = importlib.util.spec_from_file_location(f"impl_{impl}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(out: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    """(correct, max relative error) of ``out`` against ``ref`` (NaN never passes)."""
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return False, float("inf")
    err = float(np.max(np.abs(out - ref) / np.abs(ref)))
    return err <= RTOL, err


def measure(
    impl: str, case: str, repeats: int, code: str | None = None, out_path: str | None = None
) -> dict[str, object]:
    """One driver call (of ``impls/<impl>.py``, or of ``CODE/softmax.py``): correctness first
    (its output written to ``out_path`` when given), then ``repeats`` timed calls."""
    module = load(impl, code)
    x = make_input(case)
    before = hashlib.sha256(x.tobytes()).hexdigest()
    out = module.softmax(x)
    correct, err = check(out, reference(x))
    if out_path is not None:  # for the driver's own comparison (R5)
        np.save(out_path, np.asarray(out))
    correct = correct and hashlib.sha256(x.tobytes()).hexdigest() == before  # inputs untouched
    cpu_ms: list[float] = []
    wall_ms: list[float] = []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        module.softmax(x)
        c1, w1 = time.process_time(), time.perf_counter()
        cpu_ms.append(max((c1 - c0) * 1e3, 1e-6))
        wall_ms.append((w1 - w0) * 1e3)
    return {
        "correct": correct,
        "metrics": {"cpu_ms": cpu_ms, "wall_ms": wall_ms},
        "detail": {"impl": code or impl, "case": case, "max_rel_err": err, "shape": list(x.shape)},
    }


def test_set() -> dict[str, object]:
    """The test set's identity (hash over every case's name, shape and input bytes)."""
    digest = hashlib.sha256()
    for case in CASES:
        x = make_input(case)
        digest.update(case.encode() + repr(x.shape).encode() + x.tobytes())
    return {
        "hash": "sha256:" + digest.hexdigest(),
        "case_count": len(CASES),
        "cases": list(CASES),
        "shapes": {case: list(CASES[case][:2]) for case in CASES},
    }


def content_hash(impl: str) -> str:
    """``sha256:<hex>`` of ``impls/<impl>.py``."""
    return "sha256:" + hashlib.sha256((IMPLS / f"{impl}.py").read_bytes()).hexdigest()


def profile(impl: str) -> dict[str, object]:
    """cProfile one call per case; the share of the profiled time inside ``softmax``."""
    module = load(impl)
    inputs = {case: make_input(case) for case in CASES}
    profiler = cProfile.Profile()
    profiler.enable()
    for x in inputs.values():
        module.softmax(x)
    profiler.disable()
    stats = pstats.Stats(profiler)
    total = stats.total_tt  # type: ignore[attr-defined]
    inside = 0.0
    overhead = 0.0
    calls = 0
    for (filename, _line, name), (cc, _nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if name == "softmax" and filename.endswith(f"{impl}.py"):
            inside += ct
            calls += cc
        if filename.endswith(".py"):  # time in Python frames (the interpreter's dispatch)
            overhead += tt
    rows = sum(CASES[case][0] for case in CASES)
    return {
        "tool": {"name": "cProfile", "version": "python-" + sys.version.split()[0]},
        "impl": impl,
        "total_s": total,
        "softmax_cumulative_s": inside,
        "softmax_share": min(inside / total, 1.0) if total > 0 else 0.0,
        "python_frames_share": min(overhead / total, 1.0) if total > 0 else 0.0,
        "softmax_calls": calls,
        "calls_per_row": stats.total_calls / rows,  # type: ignore[attr-defined]
    }


def memory(impl: str) -> dict[str, object]:
    """tracemalloc: peak bytes NumPy allocated during one call per case, and the output's size."""
    import tracemalloc

    module = load(impl)
    peaks = {}
    for case in CASES:
        x = make_input(case)
        tracemalloc.start()
        module.softmax(x)
        peaks[case] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {
        "tool": {"name": "tracemalloc", "version": "python-" + sys.version.split()[0]},
        "impl": impl,
        "peak_bytes": peaks,
        "output_bytes": {case: CASES[case][0] * CASES[case][1] * 8 for case in CASES},
    }


def main() -> int:
    """Parse the arguments and print one JSON object; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", default="loop")
    parser.add_argument("--code", metavar="DIR", help="a code directory: run DIR/softmax.py")
    parser.add_argument("--case", default=os.environ.get("PERFLEDGER_CASE", "narrow"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--test-set", action="store_true")
    parser.add_argument("--hash", metavar="IMPL")
    parser.add_argument("--profile", metavar="IMPL")
    parser.add_argument("--memory", metavar="IMPL")
    parser.add_argument("--out", metavar="PATH", help="write the checked output here (.npy)")
    args = parser.parse_args()
    if os.environ.get("PERFLEDGER_WORKER_FDS"):  # started by perfledger as a worker
        serve_worker(args.impl, args.code)
        return 0
    if args.test_set:
        result: dict[str, object] = test_set()
    elif args.hash:
        result = {"content_hash": content_hash(args.hash)}
    elif args.profile:
        result = profile(args.profile)
    elif args.memory:
        result = memory(args.memory)
    else:
        if args.case not in CASES:
            print(f"unknown case {args.case!r}; cases: {list(CASES)}", file=sys.stderr)
            return 2
        result = measure(args.impl, args.case, args.repeats, args.code, args.out)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
