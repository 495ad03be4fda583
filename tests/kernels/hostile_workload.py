"""A workload command in the driver's protocol that attacks the *other* subject's calls through
the driver (and its honest form), for the driver's hostile-review tests. The work is sleeping
(``--work-s`` seconds per call); the metric is ``time_ms``. Every call reports, in ``detail``,
the scheduling it was started with (CPU affinity, nice value, timer slack, soft file limit), so a
test sees what the other subject's calls inherited.

Modes:

- ``honest``: the work, reported honestly.
- ``tamper_driver``: honest work, then lowers the scheduling of its parent, the driver, which
  every later call inherits: CPU affinity cut to one CPU, nice raised to 10, timer slack raised
  to 50 ms (root only), soft file limit lowered to 64. At its start it restores its own
  affinity, nice and file limit where it can, so only the other subject's calls are slowed.
- ``print_twice``: prints a fast result, then the honest one.
- ``stderr_only``: prints its result on stderr only.
- ``partial``: prints half of a JSON object and exits 0.
- ``huge_line``: prints a 40 MB line of digits, then nothing else, and exits 0.
- ``bigint``: reports its time as a JSON integer of 401 digits (beyond float range).
- ``stop_watcher``: not a subject: a process started before the measurement that, for
  ``--work-s`` seconds, finds every process whose command line holds ``--tag`` and, 0.1 s
  after it first saw it, stops it for 0.1 s once (``SIGSTOP``, then ``SIGCONT``), using
  almost no CPU. With ``--stop-parent`` it stops the process's parent (the driver) instead.
- ``busy``: honest CPU work (``work_s`` seconds of this process's CPU time), reported as the
  wall time it took: a stop lengthens it, as it would any CPU-bound workload.
- ``tmux_server``: honest, but first starts a detached tmux session (a server that
  daemonizes, on its own socket ``--tag``) that appends to ``--input`` every 20 ms for 6 s.
- ``ignore_term``: ignores SIGTERM, starts a child in its own session that ignores it too and
  appends to ``--input`` every 20 ms, then sleeps 30 s.
- ``jitter``: honest work of a random ``work_s x U(0.5, 1.5)`` (the noise of a real workload).
- ``censor_slow``: the same jittered work, but a call slower than ``--censor-above x work_s``
  exits 1 (or, with ``--how omit``, reports another metric in place of ``time_ms``; with
  ``--how partial``, prints half its JSON object and exits 0): only its fast calls give a
  result. With ``--how sabotage`` it reports every call, but after a slow one it hides the
  ``--input`` file (puts it back when its next call starts), so the reference's call that
  follows fails and takes the round, the candidate's slow call with it, out of the samples.

``jitter`` and ``censor_slow`` read ``--input`` first where it is given, and exit 1 without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import sys
import time


def _timerslack_ns(pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/timerslack_ns", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _sched() -> dict[str, object]:
    return {
        "affinity": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "timerslack_ns": _timerslack_ns(),
        "nofile_soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }


def _work(work_s: float) -> list[float]:
    start = time.perf_counter()
    time.sleep(max(work_s, 0.0))
    return [(time.perf_counter() - start) * 1e3]


def _tamper_parent() -> None:
    """Lower the driver's scheduling; every later call it starts inherits it."""
    parent = os.getppid()
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(parent, cpus[:1])
    os.setpriority(os.PRIO_PROCESS, parent, 10)
    with contextlib.suppress(OSError), open(f"/proc/{parent}/timerslack_ns", "w") as f:
        f.write("50000000")  # needs CAP_SYS_NICE
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.prlimit(parent, resource.RLIMIT_NOFILE, (64, hard))


def _restore_self() -> None:
    """Undo, for this process, what an earlier call of its own did to the driver."""
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    with contextlib.suppress(OSError):  # an unprivileged process cannot lower its nice value
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    with contextlib.suppress(OSError), open("/proc/self/timerslack_ns", "w") as f:
        f.write("50000")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def _stop_watcher(tag: str, seconds: float, parent: bool = False) -> None:
    """Stop each process whose command line holds ``tag`` (with ``parent``: its parent, the
    driver) for 0.1 s, once."""
    import signal

    done: set[int] = set()
    seen: dict[int, float] = {}
    needle = tag.encode()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in done or int(entry) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                # once its start-up is over: inside the timed work
                if time.monotonic() - seen.setdefault(int(entry), time.monotonic()) < 0.1:
                    continue
                victim = int(entry)
                if parent:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        stat = f.read()
                    victim = int(stat[stat.rfind(b")") + 2 :].split()[1])
                os.kill(victim, signal.SIGSTOP)
                time.sleep(0.1)
                os.kill(victim, signal.SIGCONT)
            except OSError:
                continue
            done.add(int(entry))
        time.sleep(0.005)


def main() -> int:
    """Run one call in the chosen mode (module docstring)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="honest")
    ap.add_argument("--work-s", type=float, default=0.2)
    ap.add_argument("--how", default="exit")
    ap.add_argument("--censor-above", type=float, default=1.0)
    ap.add_argument("--tag", default="")
    ap.add_argument("--input", default="")
    ap.add_argument("--stop-parent", action="store_true")
    args = ap.parse_args()
    if args.mode == "stop_watcher":
        _stop_watcher(args.tag, args.work_s, args.stop_parent)
        return 0
    if args.mode in ("tmux_server", "ignore_term"):
        import signal
        import subprocess

        beat = f"for i in $(seq 300); do echo . >> {args.input}; sleep 0.02; done"
        if args.mode == "tmux_server":
            subprocess.run(
                ["tmux", "-L", args.tag, "new-session", "-d", "sh", "-c", beat], check=True
            )
        else:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            subprocess.Popen(["sh", "-c", f"trap '' TERM; {beat}"], start_new_session=True)
            time.sleep(30)
    if args.mode == "busy":
        start, cpu_end = time.perf_counter(), time.process_time() + args.work_s
        while time.process_time() < cpu_end:
            pass
        elapsed = [(time.perf_counter() - start) * 1e3]
        print(json.dumps({"correct": True, "metrics": {"time_ms": elapsed}}))
        return 0
    if args.mode in ("jitter", "censor_slow"):
        hidden = args.input + ".hidden"
        if args.how == "sabotage" and os.path.exists(hidden):
            os.replace(hidden, args.input)
        if args.input:
            with open(args.input, encoding="utf-8") as f:  # honest: fails without it
                f.read()
        drawn = args.work_s * random.uniform(0.5, 1.5)
        times = _work(drawn)
        if args.mode == "censor_slow" and drawn > args.censor_above * args.work_s:
            if args.how == "sabotage":
                os.replace(args.input, hidden)
            elif args.how == "exit":
                return 1
            elif args.how == "omit":
                print(json.dumps({"correct": True, "metrics": {"other_ms": times}}))
                return 0
            else:
                sys.stdout.write('{"correct": true, "metrics": {"time_ms": [')
                return 0
        print(json.dumps({"correct": True, "metrics": {"time_ms": times}}))
        return 0
    if args.mode == "tamper_driver":
        _restore_self()
    seen = _sched()
    times = _work(args.work_s)
    result = {"correct": True, "metrics": {"time_ms": times}, "detail": seen}
    if args.mode == "tamper_driver":
        _tamper_parent()
    elif args.mode == "print_twice":
        print(json.dumps({"correct": True, "metrics": {"time_ms": [t / 100 for t in times]}}))
    elif args.mode == "stderr_only":
        print(json.dumps(result), file=sys.stderr)
        return 0
    elif args.mode == "partial":
        sys.stdout.write(json.dumps(result)[: len(json.dumps(result)) // 2])
        return 0
    elif args.mode == "bigint":
        print('{"correct": true, "metrics": {"time_ms": 1' + "0" * 400 + "}}")
        return 0
    elif args.mode == "huge_line":
        sys.stdout.write("1" * 40_000_000)
        return 0
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
