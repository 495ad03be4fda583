#!/usr/bin/env python3
"""perfledger sync benchmark: pull and push of N new events over a loopback git daemon.

Figures:

- pull: a clone of a ledger (made before the new events exist) pulls ``--events`` new events
  (default 10,000) from ``git daemon`` on 127.0.0.1: fetch, unpack, verify every new event,
  store as a pack, move the refs. Wall time of ``perfledger.ledger.sync.pull`` (goal <= 5 s),
  and the same pull's events/s;
- push: the clone appends ``--events`` more events and pushes them to the daemon (receive-pack):
  wall time of ``perfledger.ledger.sync.push``;
- the number of pack files and loose objects in both repositories afterwards (the pull writes
  one pack, never loose objects; the pack count stays bounded by ``packing.MAX_PACKS``);
- both ledgers verify from zero afterwards with the same state_hash (checked, not timed).

Wall times include the ``git daemon`` side (``pack-objects``, ``index-pack``) on the same machine;
the script also prints this process's CPU time and the load average, since a loaded machine
inflates wall time.

Usage::

    python bench/sync_bench.py                 # 10,000 events
    python bench/sync_bench.py --events 2000   # quick run
    python bench/sync_bench.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sync"))

from gitservers import git_daemon  # noqa: E402

from perfledger.api import Ledger  # noqa: E402
from perfledger.ledger import sync  # noqa: E402
from perfledger.ledger.base import EventDraft  # noqa: E402
from perfledger.ledger.packing import pack_stats  # noqa: E402

PULL_GOAL_S = 5.0


def _drafts(n: int, actor: str, start: int) -> list[EventDraft]:
    return [
        EventDraft(
            "NoteRecorded",
            {"text": f"{actor} observation {start + i}: kernel tile 128x64", "tags": ["bench"]},
            actor,
        )
        for i in range(n)
    ]


def _append(ledger: Ledger, n: int, actor: str) -> None:
    for start in range(0, n, 1000):
        ledger.append_batch(_drafts(min(1000, n - start), actor, start))


def run(events: int, workdir: str) -> dict[str, object]:
    """Run the benchmark in ``workdir``; returns the figures."""
    served = os.path.join(workdir, "served")
    os.makedirs(served)
    origin = Ledger.init(os.path.join(served, "ledger.git"), name="bench", actor="alice")
    figures: dict[str, object] = {"events": events}
    with git_daemon(served) as prefix:
        url = f"{prefix}/ledger.git"
        store, _ = sync.clone(url, os.path.join(workdir, "clone"))
        clone = Ledger(store)
        _append(origin, events, "alice")

        figures["load_avg_1min_before"] = round(os.getloadavg()[0], 2)
        started, cpu_started = time.perf_counter(), time.process_time()
        pulled = sync.pull(clone.store)
        pull_s = time.perf_counter() - started
        figures["pull_cpu_s"] = round(time.process_time() - cpu_started, 3)
        assert len(pulled.new_events) == events, len(pulled.new_events)
        figures["pull_s"] = round(pull_s, 3)
        figures["pull_events_per_s"] = round(events / pull_s)
        figures["pull_action"] = pulled.action
        figures["pull_fetched_objects"] = pulled.fetched_objects

        _append(clone, events, "bob")
        started, cpu_started = time.perf_counter(), time.process_time()
        pushed = sync.push(clone.store)
        push_s = time.perf_counter() - started
        figures["push_cpu_s"] = round(time.process_time() - cpu_started, 3)
        assert pushed.pushed
        figures["push_s"] = round(push_s, 3)
        figures["push_events_per_s"] = round(events / push_s)

    origin.close()
    clone.close()
    a = Ledger.open(os.path.join(served, "ledger.git"))
    b = Ledger.open(os.path.join(workdir, "clone"))
    try:
        report_a, report_b = a.verify(), b.verify()
        assert report_a.ok and report_b.ok, (report_a.error, report_b.error)
        assert report_a.extra["state_hash"] == report_b.extra["state_hash"]
        figures["events_after"] = report_b.events
        figures["clone_packs_loose"] = pack_stats(b.store)
        figures["origin_packs_loose"] = pack_stats(a.store)
    finally:
        a.close()
        b.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        figures = run(args.events, workdir)
    verdict = "PASS" if figures["pull_s"] <= PULL_GOAL_S else "MISS"  # type: ignore[operator]
    print(f"pull of {args.events:,} new events over git://, verified: {figures['pull_s']} s "
          f"({figures['pull_events_per_s']:,} events/s)  goal <= {PULL_GOAL_S} s  {verdict}")  # fmt: skip
    print(f"  (this process's CPU time {figures['pull_cpu_s']} s; 1-min load average before: "
          f"{figures['load_avg_1min_before']} on {os.cpu_count()} CPUs)")  # fmt: skip
    print(f"push of {args.events:,} events over git://: {figures['push_s']} s "
          f"({figures['push_events_per_s']:,} events/s)")  # fmt: skip
    print(f"  (this process's CPU time {figures['push_cpu_s']} s)")
    print(f"packs/loose afterwards: clone {figures['clone_packs_loose']}, "
          f"origin {figures['origin_packs_loose']}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2, sort_keys=True)


if __name__ == "__main__":
    main()
