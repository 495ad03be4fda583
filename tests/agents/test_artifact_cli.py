"""``perfledger artifact list|get``: an event's attached files come out byte for byte (checked
against their blake3 on the way), to stdout or a file; a wrong name is a bad request naming the
event's artifacts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from perfledger.api import Ledger
from perfledger.ledger.base import Artifact

DATA = b"raw,table\n1,2\n\x00binary tail"


def _ledger_with_artifact(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "l"
    ledger = Ledger.init(path, name="l", actor="a")
    try:
        envelope = ledger.append(
            "NoteRecorded", {"text": "with a file", "tags": []}, actor="a",
            artifacts={"table.csv": Artifact(DATA, "text/csv")},
        )  # fmt: skip
    finally:
        ledger.close()
    return path, envelope.id


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "perfledger", "--ledger", str(path), "artifact", *args],
        capture_output=True,
    )


def test_artifact_get_writes_the_exact_bytes_to_stdout_and_to_a_file(tmp_path: Path) -> None:
    path, event_id = _ledger_with_artifact(tmp_path)
    assert _cli(path, "get", event_id[:10], "table.csv").stdout == DATA
    out = tmp_path / "out.csv"
    done = _cli(path, "get", "HEAD", "table.csv", "-o", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "event_id": event_id, "name": "table.csv", "path": str(out), "size": len(DATA),
    }  # fmt: skip
    assert out.read_bytes() == DATA


def test_artifact_list_names_size_and_media_type(tmp_path: Path) -> None:
    path, event_id = _ledger_with_artifact(tmp_path)
    listed = json.loads(_cli(path, "list", event_id, "--json").stdout)
    assert [(a["name"], a["size"], a["media_type"]) for a in listed["artifacts"]] == [
        ("table.csv", len(DATA), "text/csv")
    ]


def test_artifact_get_of_an_unknown_name_is_a_bad_request_listing_the_names(
    tmp_path: Path,
) -> None:
    path, event_id = _ledger_with_artifact(tmp_path)
    done = _cli(path, "get", event_id, "nope.csv")
    assert done.returncode == 2
    assert b"has no artifact 'nope.csv'" in done.stderr and b"table.csv" in done.stderr
    assert b"Traceback" not in done.stderr
