"""A real process appending N notes to a ledger, one by one. Usage: _appender.py LEDGER N."""

from __future__ import annotations

import sys

from perfledger.api import Ledger

if __name__ == "__main__":
    ledger = Ledger.open(sys.argv[1])
    try:
        for i in range(int(sys.argv[2])):
            ledger.append("NoteRecorded", {"text": f"local {i}", "tags": []}, actor="local")
    finally:
        ledger.close()
