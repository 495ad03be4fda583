"""GPU benchmark of perfledger's kernel harness, one run, figures printed side by side
with their goals:

1. copy bandwidth: a vectorized copy kernel through the harness (cold, L2 flushed) vs
   ``cupy.copyto`` timed in the same run with plain CUDA events (goal: within 5 %);
2. A/A comparisons of a memory-bound scale kernel: false-``pass`` rate over ``--aa-runs`` runs
   (goal <= 5 %) and the spread (stdev) of the A/A ratio estimates;
3. a true ~2 % difference (the same kernel doing 2 % more work): detected in >= 95 % of
   ``--detect-runs`` runs (half with the slower subject as candidate, half with the faster), each
   within 10 s of GPU time per subject; ground truth from one long paired run;
4. the same comparisons through ``triton.testing.do_bench`` (median) and
   ``cupyx.profiler.benchmark`` (mean of GPU times): each tool's estimated ratio and run-to-run
   spread, next to perfledger's;
5. the cost of the second protocol's defences (fresh inputs per pair, re-checks drawn
   after the call, optionally every call's outputs poisoned): ``--cost-runs`` A/A comparisons under each protocol,
   interleaved, with wall seconds and timed GPU seconds per comparison, the A/A spread and the
   efficiency (A/A spread)^2 x seconds per estimate, after / before.

Usage: ``python bench/gpu_harness_bench.py [--quick] [--json OUT.json]``. Needs CuPy and an
NVIDIA GPU; torch/triton are optional (their rows say "not available" otherwise).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import numpy as np


def _p(text: str = "") -> None:
    print(text, flush=True)


def _fmt_pct(x: float) -> str:
    return f"{100 * x:.3f}%"


def bench_copy(
    results: dict[str, Any], n: int, harness_cls: Any, config: Any, ceilings: Any
) -> None:
    import cupy

    from perfledger.kernels.harness.examples import copy_problem, copy_subject, copyto_subject

    h = harness_cls(copy_problem(n), config, ceilings=ceilings)
    kernel = h.measure(copy_subject(n))
    through_h = h.measure(copyto_subject())
    x = cupy.random.standard_normal(n, dtype=cupy.float32)
    y = cupy.empty_like(x)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for _ in range(5):
        cupy.copyto(y, x)
    times = []
    for _ in range(200):
        start.record()
        cupy.copyto(y, x)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    plain_bw = 8 * n / statistics.median(times)
    k_bw = kernel.timing.figures["bytes_per_s"] if kernel.timing else float("nan")
    c_bw = through_h.timing.figures["bytes_per_s"] if through_h.timing else float("nan")
    results["copy"] = {
        "n": n,
        "bytes_per_call": 8 * n,
        "kernel_harness_bytes_per_s": k_bw,
        "copyto_harness_bytes_per_s": c_bw,
        "copyto_events_bytes_per_s": plain_bw,
        "kernel_vs_copyto_events": k_bw / plain_bw,
        "kernel_stop_reason": kernel.stop_reason,
        "kernel_samples": len(kernel.timing.samples_s) if kernel.timing else 0,
        "correct": kernel.correctness.ok and through_h.correctness.ok,
    }
    del x, y


def run_perfledger(
    h: Any, a: Any, b: Any, runs: int, label: str, progress: bool = True
) -> list[dict[str, Any]]:
    out = []
    for r in range(runs):
        t0 = time.perf_counter()
        c = h.compare(a, b)
        wall = time.perf_counter() - t0
        s = c.stats
        if s is None or not c.valid:
            reasons = c.ref_correctness.reasons + c.cand_correctness.reasons
            _p(f"  {label} run {r + 1}/{runs}: INVALID flags {c.flags} reasons {reasons[:6]}")
            out.append({"invalid": True, "flags": c.flags, "reasons": reasons, "wall_s": wall})
            continue
        out.append(
            {
                "ratio": s.median_ratio,
                "ci": [s.ci_low, s.ci_high],
                "status_1pct": s.status(min_effect=0.01),
                "direction": s.direction(),
                "pairs": s.n,
                "gpu_s_ref": c.ref.gpu_s if c.ref else None,
                "gpu_s_cand": c.cand.gpu_s if c.cand else None,
                "stop": c.stop_reason,
                "wall_s": wall,
                "p": s.wilcoxon_p,
                "ref_call_median_s": s.ref_median_s,
                "cand_call_median_s": s.cand_median_s,
                "medians_per": s.medians_per,
            }
        )
        if progress:
            _p(
                f"  {label} run {r + 1}/{runs}: ratio {s.median_ratio:.5f} "
                f"CI [{s.ci_low:.5f}, {s.ci_high:.5f}] {s.direction()} {s.status(0.01)} "
                f"pairs {s.n} stop {c.stop_reason} wall {wall:.2f}s"
            )
    return out


COST_VARIANTS = (
    ("before: first protocol", {"protocol": 1}),
    ("after: second protocol", {}),
    ("after, + per-call poison", {"poison_every_call": True}),
)


def bench_cost(n: int, runs: int, resamples: int, ceilings: Any) -> dict[str, Any]:
    """A/A comparisons of the scale kernel under each protocol variant, rounds interleaved."""
    from dataclasses import replace

    from perfledger.kernels.harness.examples import scale_problem, scale_subject
    from perfledger.kernels.harness.harness import Harness, HarnessConfig

    base = HarnessConfig(resamples=resamples)
    subject = scale_subject(n)
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in COST_VARIANTS}
    for r in range(runs):
        for label, change in COST_VARIANTS:
            h = Harness(scale_problem(n), replace(base, **change), ceilings=ceilings)
            rows[label] += run_perfledger(h, subject, subject, 1, f"cost {label} {r + 1}", False)
    out: dict[str, Any] = {}
    for label, got in rows.items():
        ok = [x for x in got if not x.get("invalid")]
        spread = float(np.std([x["ratio"] for x in ok], ddof=1)) if len(ok) > 1 else float("nan")
        wall = statistics.median(x["wall_s"] for x in got)
        gpu = statistics.median(x["gpu_s_ref"] + x["gpu_s_cand"] for x in ok) if ok else None
        out[label] = {
            "runs": got,
            "invalid": len(got) - len(ok),
            "wall_s": wall,
            "timed_gpu_s": gpu,
            "pairs": statistics.median(x["pairs"] for x in ok) if ok else None,
            # the statistic's n counts ABBA blocks: two pairs, four timed calls each
            "wall_s_per_call": statistics.median(x["wall_s"] / (4 * x["pairs"]) for x in ok)
            if ok
            else None,
            "aa_spread": spread,
            "efficiency": spread**2 * wall,
            "call_median_s": statistics.median(x["ref_call_median_s"] for x in ok) if ok else None,
        }
    return out


def print_cost(cost: dict[str, Any]) -> None:
    """The cost table of :func:`bench_cost`, printed as soon as it is measured."""
    _p()
    _p("cost of the defences (A/A of the scale kernel, rounds interleaved; goal after <= 1.5x)")
    _p(
        f"{'protocol':30s} {'wall s/cmp':>10s} {'timed GPU s':>11s} {'blocks':>7s} "
        f"{'wall us/call':>12s} {'A/A spread':>10s} {'spread^2*s':>11s} {'call us':>8s} {'inv':>4s}"
    )
    for label, row in cost.items():
        per_call = row["wall_s_per_call"]
        _p(
            f"{label:30s} {row['wall_s']:10.3f} {row['timed_gpu_s'] or float('nan'):11.3f} "
            f"{row['pairs'] or 0:7.0f} {1e6 * (per_call or float('nan')):12.1f} "
            f"{row['aa_spread']:10.5f} {row['efficiency']:11.3e} "
            f"{1e6 * (row['call_median_s'] or float('nan')):8.1f} {row['invalid']:4d}"
        )
    before, after = cost[COST_VARIANTS[0][0]], cost[COST_VARIANTS[1][0]]
    if before["wall_s_per_call"] and after["wall_s_per_call"]:
        _p(
            f"after/before: wall per call {after['wall_s_per_call'] / before['wall_s_per_call']:.2f}x, "
            f"wall per comparison {after['wall_s'] / before['wall_s']:.2f}x, "
            f"spread^2 x s {after['efficiency'] / before['efficiency']:.2f}x"
        )


def tool_estimates(
    tool: str, fa: Any, fb: Any, runs: int
) -> tuple[list[float], list[float], float] | None:
    """Ratios b/a per run for the A/A (a vs a) and A/B (b vs a) cases; seconds per estimate."""
    import cupy

    if tool == "do_bench":
        try:
            from triton.testing import do_bench
        except Exception:
            return None

        def one(f: Any) -> float:
            return float(do_bench(f, return_mode="median"))

    else:
        from cupyx.profiler import benchmark

        def one(f: Any) -> float:
            res = benchmark(f, n_repeat=1000, n_warmup=10)
            return float(np.mean(res.gpu_times[0]))

    aa, ab = [], []
    t0 = time.perf_counter()
    for _ in range(runs):
        ta, ta2 = one(fa), one(fa)
        aa.append(ta2 / ta)
        ta, tb = one(fa), one(fb)
        ab.append(tb / ta)
    cupy.cuda.runtime.deviceSynchronize()
    per = (time.perf_counter() - t0) / (4 * runs)
    return aa, ab, per


def main() -> int:
    parser = argparse.ArgumentParser(description="perfledger GPU harness benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer runs (a smoke test)")
    parser.add_argument("--aa-runs", type=int, default=40)
    parser.add_argument("--detect-runs", type=int, default=20)
    parser.add_argument("--tool-runs", type=int, default=10)
    parser.add_argument("--n", type=int, default=1 << 26, help="scale kernel elements (float32)")
    parser.add_argument("--copy-n", type=int, default=1 << 28, help="copy elements (float32)")
    parser.add_argument("--cost-runs", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=4000)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.aa_runs, args.detect_runs, args.tool_runs, args.cost_runs = 4, 2, 2, 2
    t_start = time.perf_counter()
    import cupy

    from perfledger.kernels.cuda.ceilings import measure_ceilings
    from perfledger.kernels.env import collect
    from perfledger.kernels.harness.examples import scale_problem, scale_subject
    from perfledger.kernels.harness.harness import Harness, HarnessConfig
    from perfledger.kernels.monitor.monitor import Monitor

    env = collect()
    results: dict[str, Any] = {"environment": env.to_json()}
    _p(
        f"GPU {env.gpu_name} ({env.sm_count} SMs, L2 {env.l2_bytes} B), driver {env.driver_version}, "
        f"CUDA {env.cuda_driver_version}, CuPy {env.cupy_version}, nvcc {env.nvcc_version}"
    )
    ceilings = measure_ceilings(env.identity())
    results["ceilings"] = ceilings.to_json()
    _p(
        f"ceilings: copy {ceilings.copy_bytes_per_s / 1e12:.2f} TB/s, matmul fp16 "
        f"{ceilings.matmul_fp16_flops_per_s / 1e12:.0f} TFLOP/s, fp32 "
        f"{ceilings.matmul_fp32_flops_per_s / 1e12:.0f} TFLOP/s; by unit "
        + ", ".join(f"{k} {v / 1e12:.1f}" for k, v in ceilings.unit_flops_per_s.items())
    )
    config = HarnessConfig(resamples=args.resamples)
    _p(
        f"protocol: defaults of SPEC.md section 5 (min 10 samples and 0.5 s GPU per subject, "
        f"rsd < 0.5 % or settled noise, cap 15 s), bootstrap resamples {args.resamples}"
    )

    monitor = Monitor(hz=10.0).start()
    cupy.zeros(1)
    monitor.calibrate()
    idle = monitor.idle_check(1.0)
    results["idle_check"] = {"idle": idle.idle, "reasons": idle.reasons}
    _p(f"idle check: {idle}")

    bench_copy(results, args.copy_n, Harness, config, ceilings)
    _p(f"copy done ({time.perf_counter() - t_start:.0f}s)")
    cost = bench_cost(args.n, args.cost_runs, args.resamples, ceilings)
    print_cost(cost)
    _p(f"cost done ({time.perf_counter() - t_start:.0f}s)")
    c = results["copy"]

    n = args.n
    h = Harness(scale_problem(n), config, ceilings=ceilings, monitor=monitor)
    base = scale_subject(n)
    more = scale_subject(n, extra_share=0.02, name="scale+2%")
    _p("ground truth: one long paired run (min 2 s GPU per subject)")
    long_h = Harness(
        scale_problem(n),
        HarnessConfig(
            resamples=args.resamples,
            stopping=type(config.stopping)(
                min_gpu_s=2.0, max_gpu_s=4.0, target_rsd=0.0, settle_tol=0.0
            ),
        ),
        ceilings=ceilings,
    )
    truth = run_perfledger(long_h, base, more, 1, "truth")[0]
    _p("A/A runs")
    aa = run_perfledger(h, base, base, args.aa_runs, "A/A")
    _p("2% detection runs (alternating which subject is the candidate)")
    det = []
    for r in range(args.detect_runs):
        slower_is_cand = r % 2 == 0
        a, b = (base, more) if slower_is_cand else (more, base)
        row = run_perfledger(h, a, b, 1, "slower-cand" if slower_is_cand else "faster-cand")[0]
        row["slower_is_cand"] = slower_is_cand
        row["detected"] = not row.get("invalid") and (
            row["direction"] == "slower" and row["status_1pct"] == "fail"
            if slower_is_cand
            else row["status_1pct"] == "pass"
        )
        det.append(row)
    monitor.stop()
    windows = len(monitor.observations())

    # the same two kernels through the other tools, on the harness's own input set
    x = cupy.random.standard_normal(n, dtype=cupy.float32)
    y = cupy.empty_like(x)
    fa = lambda: base({"x": x}, {"y": y})  # noqa: E731
    fb = lambda: more({"x": x}, {"y": y})  # noqa: E731
    tools = {}
    for tool in ("do_bench", "cupyx"):
        est = tool_estimates(tool, fa, fb, args.tool_runs)
        if est is None:
            tools[tool] = None
            continue
        t_aa, t_ab, per = est
        tools[tool] = {
            "aa_ratios": t_aa,
            "ab_ratios": t_ab,
            "aa_spread": float(np.std(t_aa, ddof=1)),
            "ab_mean": float(np.mean(t_ab)),
            "ab_spread": float(np.std(t_ab, ddof=1)),
            "s_per_estimate": per,
        }
        _p(f"{tool} done ({time.perf_counter() - t_start:.0f}s)")

    invalid = sum(bool(r.get("invalid")) for r in aa + det)
    aa_ok = [r for r in aa if not r.get("invalid")]
    det_ok = [r for r in det if not r.get("invalid")]
    aa_ratios = [r["ratio"] for r in aa_ok]
    false_pass = sum(r["status_1pct"] == "pass" for r in aa_ok) / len(aa)
    excl_one = sum(r["direction"] != "same" for r in aa_ok) / max(len(aa_ok), 1)
    detected = sum(r["detected"] for r in det) / len(det)
    gpu_max = max(max(r["gpu_s_ref"], r["gpu_s_cand"]) for r in det_ok + aa_ok)
    slower_ratios = [r["ratio"] if r["slower_is_cand"] else 1 / r["ratio"] for r in det_ok]
    pl_per = statistics.median(r["wall_s"] for r in aa_ok)
    results.update(
        truth=truth, aa=aa, detect=det, tools=tools, monitor_observations=windows, cost=cost,
        summary={
            "copy_ratio": c["kernel_vs_copyto_events"],
            "aa_false_pass_rate": false_pass,
            "aa_ci_excludes_one_rate": excl_one,
            "aa_spread": float(np.std(aa_ratios, ddof=1)),
            "detect_rate": detected,
            "max_gpu_s_per_subject": gpu_max,
        },
    )  # fmt: skip

    _p()
    _p("=" * 100)
    _p("perfledger GPU harness benchmark — figures vs goals")
    _p("=" * 100)
    ok = lambda b: "MET" if b else "NOT MET"  # noqa: E731
    ratio = c["kernel_vs_copyto_events"]
    _p(
        f"{'copy kernel via harness (cold, L2 flushed)':58s} {c['kernel_harness_bytes_per_s'] / 1e12:7.3f} TB/s"
    )
    _p(
        f"{'cupy.copyto, plain CUDA events (same run)':58s} {c['copyto_events_bytes_per_s'] / 1e12:7.3f} TB/s"
    )
    _p(
        f"{'cupy.copyto via harness (cold, L2 flushed)':58s} {c['copyto_harness_bytes_per_s'] / 1e12:7.3f} TB/s"
    )
    _p(
        f"{'  kernel/copyto ratio (goal within 5%)':58s} {ratio:7.4f}   {ok(abs(ratio - 1) <= 0.05)}"
    )
    _p(
        f"{'A/A false-pass rate, min effect 1% (goal <= 5%)':58s} {100 * false_pass:6.1f}%   {ok(false_pass <= 0.05)}  ({len(aa)} runs)"
    )
    _p(f"{'A/A runs whose 95% CI excludes 1 (expect ~5%)':58s} {100 * excl_one:6.1f}%")
    _p(
        f"{'2% more work detected, right direction (goal >= 95%)':58s} {100 * detected:6.1f}%   {ok(detected >= 0.95)}  ({len(det)} runs)"
    )
    _p(
        f"{'max GPU time per subject per comparison (goal <= 10 s)':58s} {gpu_max:7.2f} s   {ok(gpu_max <= 10)}"
    )
    _p(
        f"{'ground truth ratio (long paired run, 2% more work)':58s} {truth['ratio']:.5f}  CI [{truth['ci'][0]:.5f}, {truth['ci'][1]:.5f}]  pairs {truth['pairs']}"
    )
    _p()
    _p(
        f"{'tool':34s} {'est. ratio (2% work)':>22s} {'ratio spread':>13s} {'A/A spread':>11s} {'s/estimate':>11s}"
    )
    pl_spread = float(np.std(aa_ratios, ddof=1))
    _p(
        f"{'perfledger harness (ABBA, flushed)':34s} {statistics.mean(slower_ratios):22.5f} "
        f"{np.std(slower_ratios, ddof=1):13.5f} {pl_spread:11.5f} {pl_per:11.3f}"
        f"   spread^2 x s {pl_spread**2 * pl_per:.3e}"
    )
    for tool, label in (
        ("do_bench", "triton do_bench (median)"),
        ("cupyx", "cupyx.profiler.benchmark (mean)"),
    ):
        t = tools.get(tool)
        if t is None:
            _p(f"{label:34s} not available")
            continue
        _p(
            f"{label:34s} {t['ab_mean']:22.5f} {t['ab_spread']:13.5f} {t['aa_spread']:11.5f} {t['s_per_estimate']:11.3f}"
            f"   spread^2 x s {t['aa_spread'] ** 2 * t['s_per_estimate']:.3e}"
        )
    _p(
        "(spread = standard deviation of the run-to-run ratio estimates; GUIDE.md reference on its "
        "kernel: A/A spread do_bench 0.26%, cupyx 0.12%, 50 flushed ABBA pairs 0.09%)"
    )
    _p(f"invalid comparisons (a subject failed correctness or was flagged): {invalid}")
    _p(
        f"runs: A/A {len(aa)}, detection {len(det)}, tools {args.tool_runs} estimates each; "
        f"scale kernel n={n} float32 ({8 * n / 2**20:.0f} MiB moved per call); "
        f"monitor observations {windows}; total {time.perf_counter() - t_start:.0f} s"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
