"""A stand-in subject worker for the isolated-comparison tests (CPU, NumPy): speaks the protocol
of :mod:`perfledger.kernels.isolation.subject_protocol` like :mod:`perfledger.kernels.isolation.subject_worker`, with
``--spec`` a JSON file instead of a kernel spec::

    {"cases": ["small"], "harness": {...settings...},
     "reference": {options}, "candidate": {options}}

A call does ``work_k`` thousand steps of integer arithmetic (a fixed amount of CPU work) and
outputs :func:`answer` of its seed. Options of a subject (cheats where not honest):

- ``work_k``: the work per call (default 60, ~5 ms);
- ``report_factor``: reports that many times the time it measured (a patched clock);
- ``lazy_commit``: does no work in the call, commits the digest of a garbage output, and
  reveals the correct output (computed at reveal time);
- ``wrong_every``: every n-th call's output is off by 1 % (its digest is honest);
- ``die_after``: exits after that many calls (mid-batch);
- ``garbage_after``: writes a non-JSON line on the protocol stream after that many calls;
- ``sleep_in_run_s``: sleeps that long in every run (a hang);
- ``incorrect``: fails its correctness trials;
- ``refuse_reveal``: answers every ``reveal`` with an error;
- ``tick_file``: a thread appends ``time.monotonic()`` to that file every 0.5 ms, all along;
- ``helper_tick_file``: a helper process in a session of its own (``setsid``: out of the
  worker's process group) does the same, and writes its pid to that file + ``.pid``;
- ``window_file``: appends the monotonic start and end of each run it serves;
- ``resume_pid_file``: at the start of each run, continues (``SIGCONT``) the process whose
  pid that file holds (the other worker's helper: the candidate's module-level code runs in
  the reference's worker too when one spec file defines both subjects);
- ``restop_after_s``: with ``resume_pid_file``, stops that process again after that long (so
  that it looks stopped when the batch ends);
- ``hello``: values that replace its ``hello`` reply's (a worker lying about the problem);
- ``exit_after_batches``: exits after replying to that many ``run`` requests;
- ``reveal_as``: ``fifo`` (reveals a named pipe that nobody writes) or
  ``link`` (a symbolic link to a file of the right outputs elsewhere);
- ``reach_file``: in its first run, opens the measuring process's memory
  (``/proc/<parent>/mem``) for reading and writing and writes ``opened`` or the error there;
- ``flood_mb``: answers ``run`` with that many MiB of one unfinished JSON line, then waits;
- ``shift_report``: moves hidden time between batches: its first three ``run``s and every other one after
  report the whole time since the request arrived (little excess over the parent's clock),
  the others that factor of the time they measured (a large excess), so most of its batches
  look clean while every ABBA block holds one under-reported batch;
- ``lower_other``: in its first run, lowers the scheduling of every thread of the other
  worker (its sibling: nice 19, ``SCHED_BATCH``), which runs its batches slower then;
- ``lower_parent``: in its first run, gives the measuring process's main thread the
  ``SCHED_BATCH`` policy (slower to wake up and read replies);
- ``lower_at_hello``: at ``hello`` (as a spec's module-level code would, before any batch),
  renices the measuring process's main thread and every thread of the other worker to 19
  (the policy left as it is);
- ``lower_autogroup``: in its first run, sets the other worker's autogroup nice value to 19
  (``/proc/<pid>/autogroup``: with autogroups on, the CPU is shared between sessions by it);
- ``sched_file``: appends its main thread's nice and scheduling policy at each run;
- ``plant_file``: in its first run, writes a comment line to that path (a ``.pth`` file in the
  interpreter's site-packages: code there runs at the start of every later Python process);
- ``stream_hold``: the ``stream_hold`` statement of its run replies (the real worker's: its
  timer's hold state and counts);
- ``persisting_l2``: the ``persisting_l2`` statement of its check and run replies (the real
  worker's: the persisting L2 carve-out its context holds, ``bytes``, and how many of its calls'
  flushes found one, ``found``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from perfledger.kernels.isolation.subject_protocol import output_digest, write_reveal
from perfledger.kernels.proc import process_table

OUTPUT = "y"
SIZE = 256


def answer(seed: int) -> np.ndarray:
    """The output a call on ``seed`` must return."""
    return np.random.default_rng(seed).standard_normal(SIZE).astype(np.float32)


def work(seed: int, steps: int) -> None:
    """A fixed amount of CPU work."""
    x = seed & 0xFFFFFFFF
    for _ in range(steps):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def _tick(path: str) -> None:
    with open(path, "a", encoding="utf-8", buffering=1) as f:
        while True:
            f.write(f"{time.monotonic()}\n")
            time.sleep(0.0005)


def _siblings() -> list[int]:
    """The other children of this process's parent (the other worker)."""
    parent, me = os.getppid(), os.getpid()
    return [pid for pid, (ppid, _) in process_table().items() if ppid == parent and pid != me]


def _lower(pid: int) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), 19)
        os.sched_setscheduler(int(tid), os.SCHED_BATCH, os.sched_param(0))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", required=True)
    parser.add_argument("--subject", required=True)
    parser.add_argument("--case", default=None)
    args = parser.parse_args()
    with open(args.spec, encoding="utf-8") as f:
        spec = json.load(f)
    opts: dict[str, Any] = spec.get(args.subject, {})
    steps = int(opts.get("work_k", 60)) * 1000
    if spec.get("cpu") is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(spec["cpu"])})  # both subjects on one CPU: they alternate
    if opts.get("tick_file"):
        threading.Thread(target=_tick, args=(opts["tick_file"],), daemon=True).start()
    if opts.get("helper_tick_file"):
        path = opts["helper_tick_file"]
        code = f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
        code += f"import stand_in_worker as w; w._tick({path!r})"
        helper = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        with open(path + ".pid", "w", encoding="utf-8") as f:
            f.write(str(helper.pid))
    calls = batches = 0
    kept: list[dict[str, np.ndarray]] = []
    last_seeds: list[int] = []
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        op = request["op"]
        if op == "exit":
            return 0
        if op == "hello":
            if opts.get("lower_at_hello"):
                os.setpriority(os.PRIO_PROCESS, os.getppid(), 19)
                for pid in _siblings():
                    for tid in os.listdir(f"/proc/{pid}/task"):
                        os.setpriority(os.PRIO_PROCESS, int(tid), 19)
            reply: dict[str, Any] = {"cases": spec["cases"], "has_candidate": True}
            if args.case is not None:
                reply.update(
                    case=args.case,
                    problem="stand-in",
                    subject=f"{args.subject}-stand-in",
                    bytes_per_call=None,
                    flops_per_call=None,
                    flops_unit=None,
                    outputs={OUTPUT: [[SIZE], "float32"]},
                    tolerances={},
                    settings={"harness": spec["harness"], "overhead_s": 0.0},
                    content_hash="sha256:" + "0" * 64,
                    identity=None,
                )
                reply.update(opts.get("hello", {}))
        elif op == "check":
            ok = not opts.get("incorrect")
            trials = [
                {"trial": t, "ok": ok, "reasons": [] if ok else ["output:y:tolerance"],
                 "errors": {OUTPUT: 0.0 if ok else 0.5}, "pending_s": 0.0}
                for t in range(5)
            ]  # fmt: skip
            reply = {"report": {"subject": args.subject, "ok": ok, "trials": trials}}
            if opts.get("persisting_l2"):
                reply["persisting_l2"] = opts["persisting_l2"]
        elif op == "run":
            started = time.monotonic()
            arrived = time.perf_counter()
            key = bytes.fromhex(request["key"])
            times, digests = [], []
            kept = []
            if opts.get("resume_pid_file") and os.path.exists(opts["resume_pid_file"]):
                with open(opts["resume_pid_file"], encoding="utf-8") as f:
                    resumed = int(f.read())
                os.kill(resumed, signal.SIGCONT)
                if opts.get("restop_after_s"):
                    time.sleep(float(opts["restop_after_s"]))
                    os.kill(resumed, signal.SIGSTOP)
            if opts.get("plant_file") and batches == 0:
                with open(opts["plant_file"], "w", encoding="utf-8") as f:
                    f.write("# a start-up file: its import lines run in every later Python\n")
            if opts.get("lower_parent") and batches == 0:
                os.sched_setscheduler(os.getppid(), os.SCHED_BATCH, os.sched_param(0))
            if opts.get("lower_other") and batches == 0:
                for pid in _siblings():
                    _lower(pid)
            if opts.get("lower_autogroup") and batches == 0:
                for pid in _siblings():
                    with open(f"/proc/{pid}/autogroup", "w", encoding="ascii") as f:
                        f.write("19")
            if opts.get("sched_file"):
                with open(opts["sched_file"], "a", encoding="utf-8") as f:
                    f.write(f"{os.getpriority(os.PRIO_PROCESS, 0)} {os.sched_getscheduler(0)}\n")
            if opts.get("reach_file") and not os.path.exists(opts["reach_file"]):
                try:
                    with open(f"/proc/{os.getppid()}/mem", "r+b"):
                        reached = "opened"
                except OSError as exc:
                    reached = f"{type(exc).__name__}: {exc.strerror}"
                with open(opts["reach_file"], "w", encoding="utf-8") as f:
                    f.write(reached)
            if opts.get("flood_mb"):  # one reply line that never ends
                out.write('{"times_s": [' + "1e-3, " * 10)
                chunk = "1e-3, " * (1 << 18)
                for _ in range(int(opts["flood_mb"] * (1 << 20) / len(chunk))):
                    out.write(chunk)
                out.flush()
                time.sleep(60)
            if opts.get("sleep_in_run_s"):
                time.sleep(float(opts["sleep_in_run_s"]))
            for seed in request["seeds"]:
                calls += 1
                if opts.get("die_after") and calls > int(opts["die_after"]):
                    return 3
                if opts.get("garbage_after") and calls > int(opts["garbage_after"]):
                    out.write("not json: a forged protocol line\n")
                    out.flush()
                t0 = time.perf_counter()
                if opts.get("lazy_commit"):
                    y = np.zeros(SIZE, dtype=np.float32)  # no work, a garbage output
                else:
                    work(seed, steps)
                    y = answer(seed)
                    if opts.get("wrong_every") and calls % int(opts["wrong_every"]) == 0:
                        y = y * np.float32(1.01)
                took = time.perf_counter() - t0
                times.append(took * float(opts.get("report_factor", 1.0)))
                digests.append(output_digest({OUTPUT: y}, key))
                kept.append({OUTPUT: y})
            if opts.get("shift_report"):
                if batches < 3 or batches % 2 == 1:  # all the time since the request, spread
                    whole = (time.perf_counter() - arrived) * 0.99
                    times = [whole / len(times)] * len(times)
                else:
                    times = [t * float(opts["shift_report"]) for t in times]
            if opts.get("window_file"):
                with open(opts["window_file"], "a", encoding="utf-8") as f:
                    f.write(f"{started} {time.monotonic()}\n")
            reply = {"times_s": times, "wall_s": times, "span_s": times, "digests": digests,
                     "recheck_failures": [], "checked_calls": []}  # fmt: skip
            if opts.get("stream_hold"):
                reply["stream_hold"] = opts["stream_hold"]
            if opts.get("persisting_l2"):
                reply["persisting_l2"] = opts["persisting_l2"]
        elif op == "reveal" and opts.get("refuse_reveal"):
            reply = {"error": {"type": "MeasurementError", "message": "not today"}}
        elif op == "reveal" and opts.get("reveal_as") == "fifo":
            os.mkfifo(request["path"])  # nobody will write it
            reply = {"ok": True}
        elif op == "reveal" and opts.get("reveal_as") == "link":
            elsewhere = request["path"] + ".elsewhere.npz"
            write_reveal(elsewhere, kept[int(request["index"])])
            os.symlink(elsewhere, request["path"])
            reply = {"ok": True}
        elif op == "reveal":
            y = kept[int(request["index"])][OUTPUT]
            if opts.get("lazy_commit"):  # the correct answer, made only now
                y = answer(last_seeds[int(request["index"])])
            write_reveal(request["path"], {OUTPUT: y})
            reply = {"ok": True}
        else:
            reply = {"error": {"type": "BadRequest", "message": f"unknown op {op}"}}
        if op == "run":
            last_seeds = [int(s) for s in request["seeds"]]
        out.write(json.dumps(reply) + "\n")
        out.flush()
        batches += op == "run"
        if opts.get("exit_after_batches") and batches >= int(opts["exit_after_batches"]):
            return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
