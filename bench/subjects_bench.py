"""GPU benchmark of torch subjects through perfledger's harness against the usual tools (the
subjects' figures), one run, printed side by side. Three kernels, each with a true difference (the
same operator redoing 2 % of its output: the same answer, more work):

1. ``elementwise``: ``torch.mul`` over 2^26 float32 (memory-bound, ~150 us on an H200);
2. ``gemm``: ``torch.matmul`` (cuBLAS) of 4096^3 float16 (tensor cores, compute-bound);
3. ``tiny``: ``torch.mul`` over 2^15 float32 (a few microseconds).

Per kernel and tool (perfledger's paired harness, ``triton.testing.do_bench`` median,
``torch.utils.benchmark.Timer.blocked_autorange`` median): the spread (stdev) of ``--runs`` A/A
ratio estimates, the mean A/B ratio and its distance from the ground truth (one long paired
perfledger run), wall seconds per estimate, and the efficiency (A/A spread)^2 x seconds per
estimate. NVIDIA's nvbench through its Python bindings (``cuda-bench``, carried as a wheel;
``bench/nvbench_tool.py``) where they load: its cold GPU mean per call, with its default stopping
criterion, over ``--nvbench-runs`` runs; and, for each kernel, perfledger's median call beside
nvbench's cold time.

Usage: ``python bench/subjects_bench.py [--runs 10] [--quick] [--kernels a,b] [--json OUT.json]``. Needs CuPy,
torch with CUDA; triton optional (its rows say "not available" otherwise). Not run before it was
committed (written without a GPU): its first run is its test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_harness_bench import run_perfledger

EXTRA = 0.02


def _p(text: str = "") -> None:
    print(text, flush=True)


def kernels(torch: Any, quick: bool) -> dict[str, dict[str, Any]]:
    """Per kernel: the problem, the two torch subjects (A, B = A + 2 % of the work again) and
    plain closures of the same work on fixed tensors for the other tools."""
    from perfledger.kernels.subjects.torch_subject import TorchSubject, torch_problem, torch_uniform

    out: dict[str, dict[str, Any]] = {}
    for name, n in (("elementwise", 1 << (24 if quick else 26)), ("tiny", 1 << 15)):

        def mul(i: dict[str, Any], o: dict[str, Any], extra: bool = False) -> None:
            torch.mul(i["x"], 2.0, out=o["y"])
            if extra:
                m = max(1, int(i["x"].numel() * EXTRA))
                torch.mul(i["x"][:m], 2.0, out=o["y"][:m])

        problem = torch_problem(
            f"{name}-{n}",
            make_inputs=lambda seed, n=n: {"x": torch_uniform((n,), seed)},
            reference=lambda inputs: {"y": 2.0 * inputs["x"]},
            outputs={"y": ((n,), "float32")},
            bytes_per_call=8 * n,
        )
        x = torch.rand(n, device="cuda")
        y = torch.empty_like(x)
        out[name] = {
            "problem": problem,
            "a": TorchSubject("A", mul),
            "b": TorchSubject("B", lambda i, o: mul(i, o, True)),
            "fa": lambda x=x, y=y: mul({"x": x}, {"y": y}),
            "fb": lambda x=x, y=y: mul({"x": x}, {"y": y}, True),
            # a tiny kernel's call costs far more wall time than GPU time (flush, inputs, sync):
            # its GPU-seconds stopping bounds are scaled down so that a run takes seconds
            "gpu_s_scale": 0.05 if name == "tiny" else 1.0,
        }
    size = 2048 if quick else 4096

    def mm(i: dict[str, Any], o: dict[str, Any], extra: bool = False) -> None:
        torch.matmul(i["a"], i["b"], out=o["c"])
        if extra:
            m = max(1, int(i["a"].shape[0] * EXTRA))
            torch.matmul(i["a"][:m], i["b"], out=o["c"][:m])

    def made(seed: int) -> dict[str, Any]:
        return {
            "a": torch_uniform((size, size), seed, "float16"),
            "b": torch_uniform((size, size), seed ^ 0x5A5A5A5A, "float16"),
        }

    problem = torch_problem(
        f"gemm-{size}",
        make_inputs=made,
        reference=lambda inputs: {"c": inputs["a"] @ inputs["b"]},
        outputs={"c": ((size, size), "float16")},
        flops_per_call=2 * size**3,
        flops_unit="tensor_fp16",
    )
    a = torch.rand(size, size, device="cuda", dtype=torch.float16)
    b = torch.rand(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    out["gemm"] = {
        "problem": problem,
        "a": TorchSubject("A", mm),
        "b": TorchSubject("B", lambda i, o: mm(i, o, True)),
        "fa": lambda: mm({"a": a, "b": b}, {"c": c}),
        "fb": lambda: mm({"a": a, "b": b}, {"c": c}, True),
    }
    return out


def tool_runs(
    one: Callable[[Callable[[], None]], float],
    fa: Any,
    fb: Any,
    runs: int,
    sync: Callable[[], None],
) -> dict[str, Any]:
    """A/A and A/B ratio estimates of a tool that times one callable (``one(f)`` -> time)."""
    aa, ab = [], []
    t0 = time.perf_counter()
    for _ in range(runs):
        ta, ta2 = one(fa), one(fa)
        aa.append(ta2 / ta)
        ta, tb = one(fa), one(fb)
        ab.append(tb / ta)
    sync()
    return {"aa": aa, "ab": ab, "s_per_estimate": (time.perf_counter() - t0) / (2 * runs)}


def summarize(aa: list[float], ab: list[float], per: float, truth: float) -> dict[str, float]:
    """Spread of A/A estimates, mean A/B ratio, its distance from the truth, efficiency."""
    spread = statistics.stdev(aa) if len(aa) > 1 else float("nan")
    mean_ab = statistics.fmean(ab)
    return {
        "aa_spread": spread,
        "ab_mean": mean_ab,
        "ab_error_vs_truth": mean_ab / truth - 1.0,
        "s_per_estimate": per,
        "efficiency": spread**2 * per,
    }


def main() -> int:
    """Run the benchmark; print the table (and write ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, 4 runs")
    parser.add_argument("--json", default=None)
    parser.add_argument("--nvbench-runs", type=int, default=3)
    parser.add_argument(
        "--truth-gpu-s",
        type=float,
        default=2.0,
        help="GPU seconds of the ground-truth run, before a kernel's scale (0.05 for the tiny "
        "kernel, whose calls cost far more wall time than GPU time)",
    )
    parser.add_argument(
        "--kernels", default="elementwise,tiny,gemm", help="comma-separated subset to run"
    )
    parser.add_argument(
        "--truth-runs",
        type=int,
        default=1,
        help="ground-truth runs, one before the tools and the rest after them (their mean is "
        "the truth; their spread says whether the quantity itself drifts between runs)",
    )
    args = parser.parse_args()
    runs = 4 if args.quick else args.runs
    import torch

    from perfledger.kernels.harness.harness import Harness, HarnessConfig
    from perfledger.kernels.harness.stopping import StoppingRule

    if not torch.cuda.is_available():
        _p("torch sees no CUDA device")
        return 1
    wanted = args.kernels.split(",")
    results: dict[str, Any] = {}
    for name, k in kernels(torch, args.quick).items():
        if name not in wanted:
            continue
        scale = k.get("gpu_s_scale", 1.0)
        config = HarnessConfig(stopping=StoppingRule(min_gpu_s=0.2 * scale, max_gpu_s=3.0 * scale))
        long_rule = StoppingRule(
            min_gpu_s=args.truth_gpu_s * scale,
            max_gpu_s=2 * args.truth_gpu_s * scale,
            target_rsd=0.0,
            settle_tol=0.0,
        )
        _p(f"== {name} (stopping: {config.stopping})")
        truth_runs = run_perfledger(
            Harness(k["problem"], HarnessConfig(stopping=long_rule)), k["a"], k["b"], 1, "truth"
        )
        if "ratio" not in truth_runs[0]:
            _p(f"  ground truth invalid: {truth_runs[0]}")
            results[name] = {"truth": truth_runs[0]}
            continue
        h = Harness(k["problem"], config)
        aa_runs = run_perfledger(h, k["a"], k["a"], runs, "perfledger A/A")
        ab_runs = run_perfledger(h, k["a"], k["b"], runs, "perfledger A/B")
        if args.truth_runs > 1:
            truth_runs += run_perfledger(
                Harness(k["problem"], HarnessConfig(stopping=long_rule)),
                k["a"], k["b"], args.truth_runs - 1, "truth (after)",
            )  # fmt: skip
        truths = [r["ratio"] for r in truth_runs if "ratio" in r]
        truth = sum(truths) / len(truths)
        if len(truths) > 1:
            _p(f"  truth runs: {', '.join(f'{t:.5f}' for t in truths)}; mean {truth:.5f}")
        valid_aa = [r for r in aa_runs if "ratio" in r]
        valid_ab = [r for r in ab_runs if "ratio" in r]
        if len(valid_aa) < 2 or not valid_ab:
            _p(f"  too few valid perfledger runs: {len(valid_aa)} A/A, {len(valid_ab)} A/B")
            results[name] = {"truth": truth_runs[0], "perfledger_runs": aa_runs + ab_runs}
            continue
        per = statistics.fmean(r["wall_s"] for r in aa_runs + ab_runs)
        rows = {
            "perfledger": summarize(
                [r["ratio"] for r in valid_aa], [r["ratio"] for r in valid_ab], per, truth
            )
        }
        try:
            from triton.testing import do_bench

            got = tool_runs(lambda f: float(do_bench(f, return_mode="median")), k["fa"], k["fb"],
                            runs, torch.cuda.synchronize)  # fmt: skip
            rows["do_bench"] = summarize(got["aa"], got["ab"], got["s_per_estimate"], truth)
        except ImportError:
            rows["do_bench"] = {"not_available": 1.0}
        import nvbench_tool

        why = nvbench_tool.available()
        if why is None and args.nvbench_runs < 1:
            why = "nvbench: not run (--nvbench-runs 0)"
        if why is None:
            nv = [nvbench_tool.run_variants(name, args.quick) for _ in range(args.nvbench_runs)]
            rows["nvbench"] = summarize(
                [r["a2"] / r["a"] for r in nv],
                [r["b"] / r["a"] for r in nv],
                statistics.fmean(r["wall_s"] for r in nv) / 2,  # two estimates a run
                truth,
            )
            cold = statistics.median(r["a"] for r in nv)
            ours = statistics.median(r["ref_call_median_s"] for r in valid_aa)
            rows["nvbench"].update(cold_mean_s=cold, perfledger_call_median_s=ours)
            _p(f"  perfledger median call {ours * 1e6:.2f} us, nvbench cold mean "
               f"{cold * 1e6:.2f} us: {ours / cold:.3f}x")  # fmt: skip
        else:
            _p(f"  {why}")
            rows["nvbench"] = {"not_available": 1.0}
        from torch.utils.benchmark import Timer

        def autorange(f: Callable[[], None]) -> float:
            return float(
                Timer(stmt="f()", globals={"f": f}).blocked_autorange(min_run_time=0.2).median
            )

        got = tool_runs(autorange, k["fa"], k["fb"], runs, torch.cuda.synchronize)
        rows["blocked_autorange"] = summarize(got["aa"], got["ab"], got["s_per_estimate"], truth)
        results[name] = {
            "truth": truth_runs[0],
            "tools": rows,
            "perfledger_runs": aa_runs + ab_runs,
        }
        _p(f"  ground truth ratio (long paired run): {truth:.5f} CI {truth_runs[0]['ci']}")
        _p(f"  {'tool':20s} {'A/A spread':>11s} {'A/B mean':>9s} {'vs truth':>9s} "
           f"{'s/estimate':>10s} {'spread^2*s':>11s}")  # fmt: skip
        for tool, row in rows.items():
            if "not_available" in row:
                _p(f"  {tool:20s} not available")
                continue
            _p(f"  {tool:20s} {100 * row['aa_spread']:10.3f}% {row['ab_mean']:9.5f} "
               f"{100 * row['ab_error_vs_truth']:8.3f}% {row['s_per_estimate']:10.3f} "
               f"{row['efficiency']:11.3e}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
