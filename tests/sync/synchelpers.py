"""Helpers of the sync suite, in a module with a unique name (``conftest`` is ambiguous when the
whole test tree runs): repository snapshots and ``git fsck``."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: This suite's directory (helper scripts live here).
HERE = Path(__file__).resolve().parent


def snapshot(gitdir: Path) -> dict[str, Any]:
    """Relative path -> bytes of every file of a git directory except the derived
    ``perfledger/`` data: refs, packed-refs, HEAD, config, loose objects and packs."""
    files: dict[str, Any] = {}
    for root, dirs, names in os.walk(gitdir):
        rel = Path(root).relative_to(gitdir)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d != "perfledger"]
        for name in names:
            files[str(rel / name)] = (Path(root) / name).read_bytes()
    return files


def fsck_clean(git: Callable[..., Any], repo: Path) -> None:
    """Assert ``git fsck --strict --full`` is clean (dangling objects aside: a refused pull
    leaves none, but a merge raced away can)."""
    proc = git(
        "-C", repo, "fsck", "--strict", "--full", "--no-progress", "--no-dangling", check=False
    )
    output = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == 0 and output.strip() == "", output
