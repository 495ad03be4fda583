"""How fast the CLI answers, side by side with the import floor, in one run (issue "One
application layer", "Fast answers").

Run: ``.venv/bin/python bench/cli_latency_bench.py [--runs R] [--events N] [--workdir DIR]``.

Two ledgers are built under ``--workdir``:

- **small**: the chain of ``examples/requests/`` sent through the real CLI (a Target, readiness,
  baseline, resolution, an experiment with its screen and target stages, a champion, a final
  audit, a handoff);
- **big**: a copy of the small one with ``N`` more events (notes appended through the library, so
  every command below has a long history to read), default 10,000.

Each command is one whole ``perfledger`` process (start-up included), timed with the parent's
clock; the rounds interleave every command and the floor, so a slow moment of the machine
touches all of them alike. The floor is ``python -c 'import click, msgspec, blake3,
dulwich.repo'``: what any command must import. Every figure is the median of ``R`` rounds and
its ratio to the floor's median.

Goals (small ledger): ``state --json``, ``log``, ``show``, ``note`` <= 1.3x the floor; ``status``
<= 1.5x; ``verdict record`` (derived, ``--dry-run``) and ``verdict explain`` <= 4x; ``audit``
<= 4x. Big ledger: each command within 1.3x of its time on the small one.

``note`` appends one event to each ledger every round, so every ``audit`` after the first
re-checks the event(s) after the head its audit cache holds (SPEC.md section 2, "Audit cache"):
the case of an audit after each step of a session; ``audit --full`` is the replay from zero.
``--compare-src DIR`` times ``python -m perfledger audit`` with ``PYTHONPATH=DIR`` (another
checkout's ``src/``, e.g. ``git archive main src | tar -x -C /tmp/main``) in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUESTS = ROOT / "examples" / "requests"
FLOOR = [sys.executable, "-c", "import click, msgspec, blake3, dulwich.repo"]
#: The request whose verdict ``verdict record --dry-run`` derives: it runs on a ledger built up to
#: the samples before it (the full chain already holds that verdict, and a verdict is derived once).
VERDICT_REQUEST = REQUESTS / "11-verdict.record.json"
#: command label -> (argv after ``perfledger``, goal as a ratio to the floor)
COMMANDS: dict[str, tuple[list[str], float]] = {
    "state --json": (["state", "--json"], 1.3),
    "log": (["log", "-n", "20"], 1.3),
    "show HEAD": (["show", "HEAD"], 1.3),
    "note": (["note", "bench"], 1.3),
    "status": (["status"], 1.5),
    "verdict record --dry-run": (
        ["verdict", "record", "--request", str(VERDICT_REQUEST), "--dry-run"],
        4.0,
    ),
    "verdict explain": (["verdict", "explain", "e1-target"], 4.0),
    "audit": (["audit"], 4.0),
    # the replay from zero, without the audit cache (SPEC.md section 2, "Audit cache")
    "audit --full": (["audit", "--full"], 4.0),
}


def _env(ledger: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFLEDGER_")}
    env.update(PERFLEDGER_DIR=str(ledger), PERFLEDGER_ACTOR="bench")
    return env


def _perfledger() -> list[str]:
    script = Path(sys.executable).with_name("perfledger")
    return [str(script)] if script.exists() else [sys.executable, "-m", "perfledger"]


def _run(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, check=False)
    wall_s = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-2000:]!r}")
    return wall_s


def build_small(path: Path, before: Path | None = None) -> None:
    """Send the chain of ``examples/requests/`` (up to, not including, ``before``) through the
    CLI into a new ledger at ``path``, as ``tests/examples/test_request_examples.py`` does: a
    formal stage's pairs and the A/A are appended with the raw tables ``perfledger measure``
    attaches (R4, R5: typed figures decide nothing), through the tests' scenario helpers, and
    so are the measured baseline and A/A beside the typed ones."""
    sys.path.insert(0, str(ROOT / "tests" / "workflow"))
    from wf_scenario import (  # the tests' stand-ins of measured runs
        Session,
        record_measured_aa,
        record_measured_baseline,
    )

    from perfledger.api import Ledger

    env = _env(path)
    subprocess.run([*_perfledger(), "init", str(path)], env=env, check=True, capture_output=True)
    for request in sorted(REQUESTS.glob("[0-9][0-9]-*.json")):
        if before is not None and request.name >= before.name:
            break
        operation = request.stem.split("-", 1)[1]
        group, verb = operation.rsplit(".", 1)
        body = json.loads(request.read_text())
        if operation == "samples.record":
            with Ledger.open(path) as opened:
                Session(opened).record_measured(body)
            continue
        argv = [*_perfledger(), group, verb, "--request", str(request), "--json"]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{request.name}: exit {proc.returncode}: {proc.stdout}{proc.stderr}")
        if operation == "baseline.record":  # R4: a typed baseline decides nothing
            with Ledger.open(path) as opened:
                record_measured_baseline(opened, body)
        if operation == "resolution.record":
            with Ledger.open(path) as opened:
                record_measured_aa(opened, "t1")


def build_big(small: Path, path: Path, events: int) -> None:
    """Copy ``small`` to ``path`` and append ``events`` notes through the library."""
    from perfledger.api import Ledger
    from perfledger.ledger.base import EventDraft

    shutil.copytree(small, path)
    with Ledger.open(path) as ledger:
        batch = 500
        for start in range(0, events, batch):
            ledger.append_batch(
                [
                    EventDraft(
                        kind="NoteRecorded",
                        payload={"text": f"note {i}", "tags": []},
                        actor="bench",
                    )
                    for i in range(start, min(events, start + batch))
                ]
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9, help="rounds (each runs every command)")
    parser.add_argument("--events", type=int, default=10_000, help="events added to the big ledger")
    parser.add_argument("--workdir", type=Path, default=None, help="where the ledgers are built")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    parser.add_argument("--compare-src", type=Path, default=None,
                        help="another checkout's src/: its `audit` is timed in the same rounds")  # fmt: skip
    args = parser.parse_args(argv)
    commands = dict(COMMANDS)
    compare_env: dict[str, str] = {}
    if args.compare_src is not None:
        label = "audit (compare-src)"
        commands[label] = ([sys.executable, "-m", "perfledger", "audit"], 4.0)
        compare_env[label] = str(args.compare_src.resolve())
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pl-cli-bench-"))
    ledgers: dict[tuple[str, bool], Path] = {}
    for size in ("small", "big"):
        for pre in (False, True):
            ledgers[(size, pre)] = workdir / (size + ("-preverdict" if pre else ""))
    for pre in (False, True):
        if not ledgers[("small", pre)].exists():
            build_small(ledgers[("small", pre)], VERDICT_REQUEST if pre else None)
        if not ledgers[("big", pre)].exists():
            build_big(ledgers[("small", pre)], ledgers[("big", pre)], args.events)

    def ledger_of(label: str, size: str) -> Path:
        return ledgers[(size, label.startswith("verdict record"))]

    def argv_env(label: str, size: str) -> tuple[list[str], dict[str, str]]:
        cmd, env = commands[label][0], _env(ledger_of(label, size))
        if label in compare_env:
            return cmd, {**env, "PYTHONPATH": compare_env[label]}
        return [*_perfledger(), *cmd], env

    # warm the derived caches and the page cache once
    for label in commands:
        for size in ("small", "big"):
            _run(*argv_env(label, size))
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        times.setdefault(("floor", ""), []).append(_run(FLOOR, dict(os.environ)))
        for label in commands:
            for size in ("small", "big"):
                wall_s = _run(*argv_env(label, size))
                times.setdefault((label, size), []).append(wall_s)
    floor_s = statistics.median(times[("floor", "")])
    load = os.getloadavg()
    print(f"# cli_latency_bench: {args.runs} rounds, {os.cpu_count()} CPUs, load {load[0]:.2f}")
    print(f"# floor {' '.join(FLOOR[1:])!r}: {floor_s:.3f} s")
    print(
        f"{'command':28} {'small s':>8} {'x floor':>8} {'goal':>6} {'big s':>8} {'big/small':>9}  ok"
    )
    rows = []
    for label, (_cmd, goal) in commands.items():
        s = statistics.median(times[(label, "small")])
        b = statistics.median(times[(label, "big")])
        ok = s / floor_s <= goal and b / s <= 1.3
        rows.append({"command": label, "small_s": s, "ratio_to_floor": s / floor_s, "goal": goal,
                     "big_s": b, "big_over_small": b / s, "met": ok})  # fmt: skip
        print(f"{label:28} {s:8.3f} {s / floor_s:8.2f} {goal:6.1f} {b:8.3f} {b / s:9.2f}  "
              f"{'yes' if ok else 'NO'}")  # fmt: skip
    if args.json:
        print(json.dumps({"floor_s": floor_s, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
