"""The derived state cache: a snapshot of a projection's state, keyed by head commit and code
version, kept in ``<gitdir>/perfledger/cache/`` (SPEC.md section 2, Cache).

Deleting it changes nothing but speed; ``verify`` and ``audit`` never read it. A snapshot whose
key does not match (another head, another perfledger or projection version) is ignored, and so is
one that does not decode.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from typing import Any

import blake3
import msgspec

from perfledger.ledger.layout import CACHE_DIR

#: Part of every cache key: a snapshot written by another perfledger version is not used.
#: Format 2: a manifest plus one content-addressed file per state field (format 1: one file).
CACHE_FORMAT = 2

#: Unreferenced section files younger than this are kept: a concurrent writer may be about to
#: name them in its manifest.
SECTION_GRACE_S = 10.0


class _Key(msgspec.Struct):
    """What a snapshot was folded from: the ``head`` (hex), its ``code_version`` (perfledger,
    cache format and projection versions), the events folded and the last one's Lamport clock
    and id."""

    head: str
    code_version: str
    count: int
    last_lamport: int
    last_id: str


class Snapshot(_Key):
    """A cached projection state: its key and ``sections`` (:func:`encode_fields`)."""

    sections: dict[str, bytes]


class _Manifest(_Key):
    """What ``<name>.msgpack`` holds: the snapshot's key and, per field, its section file."""

    sections: dict[str, str]


def write_derived(path: str, *parts: bytes) -> None:
    """Write a derived file: ``parts`` to a temporary file (named with this process's pid, which
    gc reads), then renamed over ``path``, so a reader sees the old file or the new one; its
    directory made if needed. Not fsynced: derived data, rebuilt if lost.
    Raises: OSError (the temporary is removed)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            for part in parts:
                f.write(part)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _path(derived_dir: str, name: str) -> str:
    return os.path.join(derived_dir, CACHE_DIR, f"{name}.msgpack")


def _section_name(name: str, data: bytes) -> str:
    """A section's file name: the projection, then blake3 of its bytes (content-addressed: a
    field that did not change keeps its file, and is not written again)."""
    return f"{name}.s.{blake3.blake3(data).hexdigest()[:40]}.msgpack"


def load_snapshot(derived_dir: str, name: str, code_version: str) -> Snapshot | None:
    """Return the snapshot of projection ``name`` if it exists, matches ``code_version`` and
    every section file it names holds the bytes its name hashes; None otherwise (a miss)."""
    directory = os.path.join(derived_dir, CACHE_DIR)
    try:
        with open(_path(derived_dir, name), "rb") as f:
            manifest = msgspec.msgpack.decode(f.read(), type=_Manifest)
        if manifest.code_version != code_version:
            return None
        sections = {}
        for field, file_name in manifest.sections.items():
            with open(os.path.join(directory, file_name), "rb") as f:
                data = f.read()
            if _section_name(name, data) != file_name:
                return None
            sections[field] = data
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return Snapshot(*msgspec.structs.astuple(manifest)[:-1], sections)


def save_snapshot(derived_dir: str, name: str, snapshot: Snapshot) -> None:
    """Write the section files that do not exist yet, then the manifest (readers see the old
    snapshot or the new one), then remove unnamed section files older than
    :data:`SECTION_GRACE_S`. Raises: OSError (the caller ignores it: derived data)."""
    directory = os.path.join(derived_dir, CACHE_DIR)
    os.makedirs(directory, exist_ok=True)
    names = {}
    for field, data in snapshot.sections.items():
        file_name = names[field] = _section_name(name, data)
        path = os.path.join(directory, file_name)
        if os.path.exists(path):
            os.utime(path)  # in use again: not garbage for a concurrent writer
            continue
        write_derived(path, data)
    manifest = _Manifest(*msgspec.structs.astuple(snapshot)[:-1], names)
    write_derived(_path(derived_dir, name), msgspec.msgpack.encode(manifest))
    _collect_sections(directory, name, set(names.values()))


def _collect_sections(directory: str, name: str, keep: set[str]) -> None:
    """Remove ``name``'s section files that are not in ``keep``, and temporary files of any
    cache writer (left by one that was killed), older than the grace."""
    cutoff = time.time() - SECTION_GRACE_S
    prefix = f"{name}.s."
    with os.scandir(directory) as entries:
        for entry in entries:
            stale_section = (
                entry.name.startswith(prefix)
                and entry.name.endswith(".msgpack")
                and entry.name not in keep
            )
            if stale_section or entry.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)


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
    write_derived(_path(derived_dir, f"{name}.hash"), msgspec.msgpack.encode(cached))


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
    key = msgspec.json.encode(_RenderKey(head, code_version, len(data))) + b"\n"
    write_derived(_path(derived_dir, name), key, data)


# ------------------------------------------------------------------ a state decoded field by field
# A decider reads a few of the state's maps, and decoding all of a large state dominated a CLI
# decision: LazyStruct decodes a field on first access and encodes again only those, so an
# untouched field goes back to the cache byte for byte. Ledger.state_at hands it to deciders.


@functools.cache
def _fields(struct_type: type[msgspec.Struct]) -> dict[str, msgspec.structs.FieldInfo]:
    """Field name (the attribute) -> its FieldInfo (``encode_name`` keys the encoded map)."""
    return {f.name: f for f in msgspec.structs.fields(struct_type)}


@functools.cache
def _decoder(struct_type: type[msgspec.Struct], name: str) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(_fields(struct_type)[name].type)


def encode_fields(state: Any) -> dict[str, bytes]:
    """The sections of ``state`` (a msgspec Struct or a :class:`LazyStruct`): field encode name
    -> the msgpack encoding of that field's value. A LazyStruct's untouched fields are returned
    as the bytes it was built from."""
    if isinstance(state, LazyStruct):
        return state.encode_fields()
    encode = msgspec.msgpack.encode
    # an unset field (msgspec.UNSET) has no section: read back, it takes its default again
    return {
        f.encode_name: encode(value)
        for f in msgspec.structs.fields(state)
        if (value := getattr(state, f.name)) is not msgspec.UNSET
    }


class LazyStruct:
    """A ``struct_type`` instance read from its sections (:func:`encode_fields`): a field is
    decoded on first access (later reads return the same object), a write replaces it, a field
    without a section takes its default.
    Raises: msgspec.DecodeError / ValidationError at first access of a malformed section;
    AttributeError for a name that is not a field.
    """

    def __init__(self, struct_type: type[msgspec.Struct], sections: dict[str, bytes]) -> None:
        object.__setattr__(self, "_struct_type", struct_type)
        object.__setattr__(self, "_raw", dict(sections))

    def __getattr__(self, name: str) -> Any:  # only for names not decoded yet
        fields = _fields(self._struct_type)
        if name not in fields:
            raise AttributeError(f"{self._struct_type.__name__} has no field {name!r}")
        raw = self._raw.pop(fields[name].encode_name, None)
        if raw is not None:
            value = _decoder(self._struct_type, name).decode(raw)
        else:
            info = fields[name]
            has_factory = info.default_factory is not msgspec.NODEFAULT
            value = info.default_factory() if has_factory else info.default
        object.__setattr__(self, name, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        fields = _fields(self._struct_type)
        if name not in fields:
            raise AttributeError(f"{self._struct_type.__name__} has no field {name!r}")
        self._raw.pop(fields[name].encode_name, None)
        object.__setattr__(self, name, value)

    def encode_fields(self) -> dict[str, bytes]:
        """The sections of the current value: untouched fields as the bytes they came from,
        decoded fields (which may have been updated in place) encoded again."""
        out: dict[str, bytes] = {}
        for name, info in _fields(self._struct_type).items():
            if name in self.__dict__:
                if self.__dict__[name] is not msgspec.UNSET:
                    out[info.encode_name] = msgspec.msgpack.encode(self.__dict__[name])
            elif info.encode_name in self._raw:
                out[info.encode_name] = self._raw[info.encode_name]
        return out

    def materialize(self) -> msgspec.Struct:
        """Decode every remaining field and return the ``struct_type`` instance (sharing the
        already decoded field objects)."""
        return self._struct_type(
            **{name: getattr(self, name) for name in _fields(self._struct_type)}
        )
