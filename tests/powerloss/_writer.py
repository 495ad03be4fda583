"""Child process of the power-loss tests; not a test module.

``python _writer.py LEDGER ACKS SEED``: opens ``LEDGER`` through the public API
(:func:`perfledger.open`) and appends ``NoteRecorded`` events until it fails or is killed: single
appends, batches of 2-7 (loose objects), of 8-40 (one pack each) and of 300 (built and packed by
the packing process), some with an artifact. After
each ``append``/``append_batch`` returns, the ids it acknowledged are appended to the file
``ACKS`` (outside the crashing filesystem) with one ``os.write`` per call, so a line is never
half-written. It exits on the first error (the power went: every operation fails).
"""

from __future__ import annotations

import os
import random
import sys

import perfledger
from perfledger.ledger.base import Artifact, EventDraft


def main() -> None:
    """Append until an append fails; see the module docstring."""
    ledger_path, acks_path, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    acks = os.open(acks_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    ledger = perfledger.open(ledger_path)
    n = 0
    while True:
        n += 1
        choice = rng.random()
        if choice < 0.6:
            artifacts = {}
            if rng.random() < 0.2:
                artifacts["log.txt"] = Artifact(b"log %d of %d\n" % (n, seed), "text/plain")
            envelopes = [
                ledger.append(
                    "NoteRecorded",
                    {"text": f"writer {seed} note {n}", "tags": []},
                    actor=f"w{seed}",
                    artifacts=artifacts,
                )
            ]
        else:
            # loose objects; one pack; a batch the packing process builds and packs
            size = rng.randint(2, 7) if choice < 0.8 else rng.randint(8, 40)
            if choice > 0.97:
                size = 300
            drafts = [
                EventDraft("NoteRecorded", {"text": f"writer {seed} batch {n}.{i}", "tags": []},
                           f"w{seed}", None, None, {})
                for i in range(size)
            ]  # fmt: skip
            envelopes = ledger.append_batch(drafts)
        os.write(acks, "".join(f"{e.id}\n" for e in envelopes).encode())


if __name__ == "__main__":
    main()
