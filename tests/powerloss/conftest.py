"""Fixtures of the power-loss tests: a :mod:`lazyfs` mount that can lose what was not fsynced.

Every test here skips, with the reason, where FUSE cannot mount (no ``/dev/fuse``, no
``fusermount3``, no ``mfusepy``, not allowed in this container).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from lazymount import LazyMount


def _fuse_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # mfusepy raises OSError when libfuse is missing
        return f"mfusepy cannot load libfuse: {exc}"
    return None


@pytest.fixture
def lazyfs(tmp_path: Path) -> Iterator[LazyMount]:
    """A mounted, empty :mod:`lazyfs` (skips with the reason where FUSE cannot mount here)."""
    reason = _fuse_missing()
    if reason:
        pytest.skip(reason)
    backing, path = tmp_path / "durable", tmp_path / "mnt"
    backing.mkdir()
    path.mkdir()
    mount = LazyMount(backing, path, tmp_path / "lazyfs.log")
    try:
        mount.mount()
    except RuntimeError as exc:
        pytest.skip(f"FUSE cannot mount here: {exc}")
    try:
        yield mount
    finally:
        mount.unmount()
