"""The derived state cache: a snapshot of a projection's state, keyed by head commit and code
version, kept in ``<gitdir>/perfledger/cache/`` (SPEC.md section 2, Cache).

Deleting it changes nothing but speed; ``verify`` and ``audit`` never read it. A snapshot whose
key does not match (another head, another perfledger or projection version) is ignored, and so is
one that does not decode.
"""

from __future__ import annotations

import os

import msgspec

#: Part of every cache key: a snapshot written by another perfledger version is not used.
CACHE_FORMAT = 1


class Snapshot(msgspec.Struct):
    """A cached projection state.

    Attributes:
        head: the commit sha (hex) the state was folded up to.
        code_version: perfledger version, cache format and projection version, joined.
        count: number of events folded.
        last_lamport: Lamport clock of the last folded event.
        last_id: id of the last folded event.
        state: the msgpack encoding of the state.
    """

    head: str
    code_version: str
    count: int
    last_lamport: int
    last_id: str
    state: bytes


def _path(derived_dir: str, name: str) -> str:
    return os.path.join(derived_dir, "cache", f"{name}.msgpack")


def load_snapshot(derived_dir: str, name: str, code_version: str) -> Snapshot | None:
    """Return the snapshot of projection ``name`` if it exists and matches ``code_version``."""
    try:
        with open(_path(derived_dir, name), "rb") as f:
            snapshot = msgspec.msgpack.decode(f.read(), type=Snapshot)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return snapshot if snapshot.code_version == code_version else None


def save_snapshot(derived_dir: str, name: str, snapshot: Snapshot) -> None:
    """Write the snapshot atomically (temp file + rename). Errors are the caller's to ignore:
    a cache that cannot be written only costs speed."""
    path = _path(derived_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.msgpack.encode(snapshot))
    os.replace(tmp, path)


class StateHash(msgspec.Struct):
    """A cached ``state_hash`` of a projection's state at ``head`` (same key as a snapshot)."""

    head: str
    code_version: str
    state_hash: str


def load_state_hash(derived_dir: str, name: str, head: str, code_version: str) -> str | None:
    """Return the cached state hash of projection ``name`` at ``head``, or None."""
    try:
        with open(_path(derived_dir, f"{name}.hash"), "rb") as f:
            cached = msgspec.msgpack.decode(f.read(), type=StateHash)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if (cached.head, cached.code_version) != (head, code_version):
        return None
    return cached.state_hash


def save_state_hash(derived_dir: str, name: str, cached: StateHash) -> None:
    """Write the cached state hash atomically; errors are the caller's to ignore."""
    path = _path(derived_dir, f"{name}.hash")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.msgpack.encode(cached))
    os.replace(tmp, path)


class _RenderKey(msgspec.Struct):
    """The first line of a cached rendering: what it was rendered from."""

    head: str
    code_version: str
    size: int


def load_rendering(derived_dir: str, name: str, head: str, code_version: str) -> bytes | None:
    """Return the cached rendering ``name`` (bytes) made at ``head`` under ``code_version``, or
    None when absent, stale, truncated or unreadable."""
    try:
        with open(_path(derived_dir, name), "rb") as f:
            key = msgspec.json.decode(f.readline(), type=_RenderKey)
            if (key.head, key.code_version) != (head, code_version):
                return None
            data = f.read()
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return data if len(data) == key.size else None


def save_rendering(derived_dir: str, name: str, head: str, code_version: str, data: bytes) -> None:
    """Write the rendering ``data`` of ``head`` atomically (a key line, then the bytes); errors
    are the caller's to ignore."""
    path = _path(derived_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(msgspec.json.encode(_RenderKey(head, code_version, len(data))) + b"\n")
        f.write(data)
    os.replace(tmp, path)
