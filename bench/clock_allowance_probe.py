"""How much room the parent's clock check needs for honest subjects (property 3 of SPEC.md
section 5): isolated comparisons (``perfledger.kernels.isolation.isolated.compare_spec``) of honest pairs,
A/A and true differences, of several kinds and sizes, and per comparison what the check saw.

Per comparison it prints each subject's median reported call time, the median excess of the
parent's wall time over the reported times per call (per ABBA block), the candidate's excess
minus the reference's (the quantity the check bounds), the limit that comparison got, its noise
term, and the overhead share that difference needs on its own (difference / the smaller excess):
the data to set ``IsolationConfig.overhead_share`` from, since the smaller the limit, the less
time a candidate can hide on the host. An honest comparison flagged ``clock:candidate`` is a
false flag and is counted.

Needs CuPy and a GPU (torch and triton for the torch pair). Run on the device::

    .venv/bin/python bench/clock_allowance_probe.py --runs 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

PAIRS = {
    # name: (spec text, case)
    "scale 2^16 A/A": (
        "from perfledger.kernels.harness.examples import scale_problem as P, scale_subject as S\n"
        "PROBLEMS = {'s': P(1 << 16)}\nREFERENCE = S(1 << 16)\nCANDIDATE = S(1 << 16, name='b')\n",
        "s",
    ),
    "scale 2^24 +2 %": (
        "from perfledger.kernels.harness.examples import scale_problem as P, scale_subject as S\n"
        "PROBLEMS = {'s': P(1 << 24)}\nREFERENCE = S(1 << 24)\n"
        "CANDIDATE = S(1 << 24, extra_share=0.02, name='b')\n",
        "s",
    ),
    "iterate 2^18 A/A": (
        "from perfledger.kernels.harness.examples import iterate_problem as P, iterate_subject as S\n"
        "PROBLEMS = {'i': P(1 << 18, 2048)}\nREFERENCE = S(1 << 18, 2048)\n"
        "CANDIDATE = S(1 << 18, 2048, name='b')\n",
        "i",
    ),
    "iterate 2^21 A/A": (
        "from perfledger.kernels.harness.examples import iterate_problem as P, iterate_subject as S\n"
        "PROBLEMS = {'i': P(1 << 21, 2048)}\nREFERENCE = S(1 << 21, 2048)\n"
        "CANDIDATE = S(1 << 21, 2048, name='b')\n",
        "i",
    ),
    "copy 2^26 raw vs cupy.copyto": (
        "from perfledger.kernels.harness.examples import copy_problem as P, copy_subject as S, "
        "copyto_subject as C\n"
        "PROBLEMS = {'c': P(1 << 26)}\nREFERENCE = S(1 << 26)\nCANDIDATE = C()\n",
        "c",
    ),
}
TORCH_SPEC = Path(__file__).resolve().parent.parent / "examples/subjects/torch_triton_spec.py"
# a raw kernel against torch.mul: two kinds of subject, two host sides, the same work
RAW_VS_TORCH = """import torch
from perfledger.kernels.harness.examples import scale_problem as P, scale_subject as S
from perfledger.kernels.subjects.torch_subject import TorchSubject


def torch_scale(inputs, outputs):
    torch.mul(inputs["x"], 2.0, out=outputs["y"])


PROBLEMS = {{"s": P({n})}}
REFERENCE = S({n})
CANDIDATE = TorchSubject("torch.mul", torch_scale)
"""


def main() -> int:
    """Run the pairs ``--runs`` times each (rounds interleaved); print one row a comparison
    and, per pair, the largest share needed and the false flags."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default="", help="run only the pairs whose name contains this")
    ap.add_argument("--torch", action="store_true", help="add torch.mul vs Triton")
    args = ap.parse_args()

    from perfledger.kernels.isolation.isolated import IsolationConfig, compare_spec

    config = IsolationConfig()
    print(
        f"IsolationConfig: overhead_share {config.overhead_share}, noise_sigmas "
        f"{config.noise_sigmas}, tolerance {config.tolerance_s * 1e6:.0f} us / "
        f"{config.tolerance_share:.0%} of a call; cap 25 % of a call"
    )
    print(
        f"{'pair':32s} {'ref us':>8s} {'cand us':>8s} {'exc ref':>8s} {'exc cand':>8s} "
        f"{'diff us':>8s} {'limit us':>8s} {'noise us':>8s} {'share':>7s} {'%call':>6s} "
        f"{'ratio':>7s} {'wall s':>6s} flags"
    )
    with tempfile.TemporaryDirectory() as tmp:
        specs: dict[str, tuple[str, str]] = {}
        for name, (text, case) in PAIRS.items():
            if args.only in name:
                path = Path(tmp) / f"spec{len(specs)}.py"
                path.write_text(text)
                specs[name] = (str(path), case)
        if args.torch:
            specs["torch.mul vs triton 2^24"] = (str(TORCH_SPEC), "n16M")
            for n in (1 << 15, 1 << 24):
                path = Path(tmp) / f"raw_torch_{n}.py"
                path.write_text(RAW_VS_TORCH.format(n=n))
                specs[f"raw scale vs torch.mul 2^{n.bit_length() - 1}"] = (str(path), "s")
            specs = {k: v for k, v in specs.items() if args.only in k}
        worst: dict[str, float] = {}
        false_flags: dict[str, int] = {}
        for _ in range(args.runs):
            for name, (path, case) in specs.items():
                t0 = time.perf_counter()
                c = compare_spec(path, case, config=config)
                wall = time.perf_counter() - t0
                clock = c.settings.get("clock") or {}
                exc, call, limit = clock.get("excess_s"), clock.get("call_s"), clock.get("limit_s")
                if not exc:
                    print(f"{name:32s} no clock data; flags {c.flags}")
                    continue
                diff = exc["candidate"] - exc["reference"]
                share = max(diff, 0.0) / max(min(exc.values()), 1e-12)
                worst[name] = max(worst.get(name, 0.0), share)
                false_flags[name] = false_flags.get(name, 0) + ("clock:candidate" in c.flags)
                ratio = c.stats.median_ratio if c.stats else float("nan")
                print(
                    f"{name:32s} {call['reference'] * 1e6:8.1f} {call['candidate'] * 1e6:8.1f} "
                    f"{exc['reference'] * 1e6:8.1f} {exc['candidate'] * 1e6:8.1f} "
                    f"{diff * 1e6:8.1f} {limit['candidate'] * 1e6:8.1f} "
                    f"{clock.get('noise_s', 0.0) * 1e6:8.1f} {share:7.3f} "
                    f"{100 * diff / call['candidate']:6.1f} {ratio:7.4f} {wall:6.1f} {c.flags}",
                    flush=True,
                )
        print("\nper pair: the largest overhead share an honest difference needed; false flags")
        for name in specs:
            print(f"  {name:32s} {worst.get(name, float('nan')):7.3f}  {false_flags.get(name, 0)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
