"""A real process for the concurrency test: append N notes to a ledger clone, syncing with its
origin every K appends, then a last sync. Usage: _syncer.py LEDGER ACTOR N K."""

from __future__ import annotations

import sys

from perfledger.api import Ledger


def main() -> None:
    path, actor, n, every = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ledger = Ledger.open(path)
    try:
        rounds = 0
        for i in range(n):
            ledger.append("NoteRecorded", {"text": f"{actor} {i}", "tags": [actor]}, actor=actor)
            if (i + 1) % every == 0:
                rounds += ledger.sync().rounds
        rounds += ledger.sync().rounds
        print(rounds)
    finally:
        ledger.close()


if __name__ == "__main__":
    main()
