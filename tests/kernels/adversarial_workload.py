"""A workload command in the driver's protocol that games it on purpose (and its honest form), for
the driver's adversarial tests. The work is sleeping (``--work-s`` seconds per call), so its wall
time holds on a loaded machine; the metric is ``time_ms``, one value per timed step.

Modes:

- ``honest``: ``--steps`` timed steps of ``work_s/steps`` each; reports each step's time.
- ``scaled``: the same work, reports each time times ``--report-scale`` (1/100: under-reports).
- ``fast_half``: steps alternate short and long (same total); reports only the faster half.
- ``untimed_grandchild``: a grandchild in its own session does the work while this process waits
  outside its timer; then times trivial steps and reports those.
- ``detached_worker``: hands the work to a grandchild in its own session, reports the time the
  work takes (plausible) and exits at once, leaving the grandchild working.
- ``precompute``: does the work before its timer starts (as an import would), then times trivial
  lookups and reports those.
- ``over_wall``: the honest work, reports ten times the time it spent.
- ``linger``: honest, but leaves a grandchild in its own session that appends to ``--heartbeat``
  every 20 ms for 30 s.
- ``daemon``: honest, but leaves a double-forked daemon (``setsid`` in between) doing the same.
- ``reach_driver``: honest, but first opens the driver's memory (``/proc/<parent>/mem``) for
  reading and writing, where it could patch the driver's clock or samples; ``detail`` says
  whether it could (``"opened"``) or the error.
- ``hang_holding_stdout``: starts a grandchild in its own session that keeps stdout open for 30 s,
  then hangs itself.
- ``count_more``: honest work, but counts twice the work it did (``--metric rate``: twice the
  tokens, and so twice the rate).
- ``move_work`` (``--metric rate``): honest work and times, but 99 % of its last step's tokens
  counted in its other steps (the same total): those steps' rates rise, the total time does not.
- ``nudge``: honest work, but one step reports ``1 + 0.06 x (steps - 1)`` times its time and
  the others 0.94 times theirs: the same total, the median 6 % lower.
- ``shift_time`` (``--metric rate``): honest work, but every step after the first reports half
  its time and the first step the rest (the same total): with ``--weights 1,10,100`` the two
  larger steps' rates double and the median with them.

With ``--metric rate`` a call reports a rate instead of times: ``tokens_per_s`` per step
(``--tokens`` per call, shared by the steps in proportion to ``--weights``, evenly by default,
over each step's reported time) and ``tokens``, the work of each step; a mode that scales its
times scales its rates inversely. A step's sleep is its share of ``--work-s`` by the same weights.
``--setup-s``: seconds of untimed work before any step (as loading a model). With ``--metric
per_token`` it reports ``ms_per_token`` per step (each step's reported time over its tokens)
and ``tokens``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HEARTBEAT = (
    "import sys, time\n"
    "end = time.monotonic() + 30\n"
    "while time.monotonic() < end:\n"
    "    open(sys.argv[1], 'a').write('.')\n"
    "    time.sleep(0.02)\n"
)


def _steps(work_s: float, steps: int, weights: list[float] | None = None) -> list[float]:
    out = []
    shares = [w / sum(weights) for w in weights] if weights else [1.0 / steps] * steps
    for share in shares:
        start = time.perf_counter()
        time.sleep(work_s * share)
        out.append((time.perf_counter() - start) * 1e3)
    return out


def _trivial(steps: int) -> list[float]:
    out = []
    table = {i: i * i for i in range(100)}
    for i in range(steps):
        start = time.perf_counter()
        _ = table[i % 100]
        out.append(max((time.perf_counter() - start) * 1e3, 1e-6))
    return out


def _detached(code: str, *args: str, stdout: object = subprocess.DEVNULL) -> None:
    subprocess.Popen(
        [sys.executable, "-c", code, *args],
        start_new_session=True,
        stdout=stdout,  # type: ignore[arg-type]
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="honest")
    parser.add_argument("--work-s", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--report-scale", type=float, default=0.01)
    parser.add_argument("--heartbeat", default="")
    parser.add_argument("--metric", choices=["time", "rate", "per_token"], default="time")
    parser.add_argument("--tokens", type=float, default=1000.0)
    parser.add_argument("--weights", default="", help="per-step work, e.g. 1,10,100")
    parser.add_argument("--setup-s", type=float, default=0.0, help="untimed work first")
    args = parser.parse_args()
    time.sleep(args.setup_s)  # as loading a model: outside every timed step
    mode, work, steps = args.mode, args.work_s, args.steps
    weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0] * steps
    steps = len(weights)
    counted = 1.0  # the share of its work a call says it did
    if mode in ("honest", "count_more", "move_work", "shift_time", "nudge"):
        counted = 2.0 if mode == "count_more" else 1.0
        times = _steps(work, steps, weights)
        if mode == "nudge":  # the same total, the median 6 % lower
            scale = [1.0 + 0.06 * (steps - 1)] + [0.94] * (steps - 1)
            times = [t * k for t, k in zip(sorted(times), scale, strict=True)]
        if mode == "shift_time":
            moved = sum(t / 2 for t in times[1:])
            times = [times[0] + moved, *(t / 2 for t in times[1:])]
    elif mode == "scaled":
        times = [t * args.report_scale for t in _steps(work, steps)]
    elif mode == "fast_half":
        times = []
        for k in range(2 * steps):
            start = time.perf_counter()
            time.sleep(work / steps * (0.5 if k % 2 else 1.5) / 2)
            times.append((time.perf_counter() - start) * 1e3)
        times = sorted(times)[:steps]
    elif mode == "untimed_grandchild":
        child = subprocess.Popen(
            [sys.executable, "-c", f"import time; time.sleep({work})"], start_new_session=True
        )
        child.wait()
        times = _trivial(steps)
    elif mode == "detached_worker":
        _detached(f"import time; time.sleep({work})")
        times = [1e3 * work / steps] * steps
    elif mode == "precompute":
        time.sleep(work)
        times = _trivial(steps)
    elif mode == "over_wall":
        times = [10 * t for t in _steps(work, steps)]
    elif mode == "linger":
        _detached(HEARTBEAT, args.heartbeat)
        times = _steps(work, steps)
    elif mode == "daemon":
        daemon = (
            "import os, subprocess, sys\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0:\n"
            f"        exec({HEARTBEAT!r})\n"
            "    os._exit(0)\n"
            "os.wait()\n"
        )
        subprocess.run([sys.executable, "-c", daemon, args.heartbeat], check=True)
        times = _steps(work, steps)
    elif mode == "reach_driver":
        try:
            with open(f"/proc/{os.getppid()}/mem", "r+b"):
                reached = "opened"
        except OSError as exc:
            reached = f"{type(exc).__name__}: {exc.strerror}"
        times = _steps(work, steps)
        print(json.dumps({"correct": True, "metrics": {"time_ms": times}, "detail": reached}))
        return 0
    elif mode == "hang_holding_stdout":
        _detached("import time; time.sleep(30)", stdout=sys.stdout)
        time.sleep(60)
        return 0
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2
    metrics: dict[str, list[float]] = {"time_ms": times}
    if args.metric == "rate":
        tokens = [counted * args.tokens * w / sum(weights) for w in weights]
        if mode == "move_work":
            moved = 0.99 * tokens[-1]
            tokens = [t + moved / (steps - 1) for t in tokens[:-1]] + [tokens[-1] - moved]
        metrics = {
            "tokens_per_s": [n / (t / 1e3) for n, t in zip(tokens, times, strict=True)],
            "tokens": tokens,
        }
    elif args.metric == "per_token":
        tokens = [counted * args.tokens * w / sum(weights) for w in weights]
        metrics = {
            "ms_per_token": [t / n for n, t in zip(tokens, times, strict=True)],
            "tokens": tokens,
        }
    print(json.dumps({"correct": True, "metrics": metrics, "detail": {"mode": mode}}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
