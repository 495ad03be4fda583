"""Git's version-2 pack index (``.idx``): the one codec of the format in perfledger.

One layout writer (:meth:`IndexArrays.encode`) and one layout parser behind two readers: the
whole index as numpy arrays (:func:`read_index`: merging packs, verify's scan) and a
memory-mapped binary search for a few lookups without importing numpy (:class:`MappedIndex`: a
CLI decision). The format is git's ``pack-format.txt``:
magic, version 2, a 256-entry fan-out table, the sorted names, their CRC-32s, their 31-bit
offsets (the high bit pointing into a table of 64-bit offsets for packs over 2 GiB), the pack's
checksum, the index's own checksum. Every test scenario checks the result with the real git.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # imported where used: a writer that packs a few thousand objects skips it
    import numpy as np

_MAGIC = b"\377tOc\0\0\0\2"
_FANOUT_AT = 8
_NAMES_AT = _FANOUT_AT + 256 * 4
_LARGE_FLAG = 0x80000000


@dataclass(frozen=True)
class IndexArrays:
    """The entries of one pack: binary ``names`` (``S20``: an item drops trailing zero bytes,
    use ``names.tobytes()``), byte ``offsets`` in the pack (uint64), and the CRC-32 of each
    packed entry (uint32)."""

    names: np.ndarray
    offsets: np.ndarray
    crcs: np.ndarray

    def encode(self, pack_checksum: bytes) -> bytes:
        """Return the bytes of the version-2 index of these entries (any order), built with
        numpy (no Python object per entry)."""
        import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

        order = np.argsort(self.names, kind="stable")
        offsets = self.offsets[order]
        flagged = offsets >= _LARGE_FLAG
        small = offsets.astype(">u4")
        if flagged.any():  # packs over 2 GiB: 64-bit offsets in a side table
            small[flagged] = _LARGE_FLAG | np.arange(int(flagged.sum()), dtype=np.uint32)
        names = self.names[order].tobytes()
        firsts = np.frombuffer(names, dtype=np.uint8)[::20]  # the first byte of every name
        fanout = np.cumsum(np.bincount(firsts, minlength=256)).astype(">u4")
        body = b"".join(
            [
                _MAGIC,
                fanout.tobytes(),
                names,
                self.crcs[order].astype(">u4").tobytes(),
                small.tobytes(),
                offsets[flagged].astype(">u8").tobytes(),
                pack_checksum,
            ]
        )
        return body + hashlib.sha1(body).digest()


def concat(parts: list[IndexArrays]) -> IndexArrays:
    """Return the entries of ``parts`` one after the other."""
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    return IndexArrays(
        np.concatenate([p.names for p in parts]),
        np.concatenate([p.offsets for p in parts]),
        np.concatenate([p.crcs for p in parts]),
    )


def pack_bases(pack_dir: str) -> list[str]:
    """The base paths (without ``.pack``) of the complete packs in ``pack_dir`` (both
    ``.pack`` and ``.idx``: the index is written last), sorted by name."""
    try:
        names = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    return [
        os.path.join(pack_dir, name[: -len(".idx")])
        for name in sorted(names)
        if name.endswith(".idx") and name[: -len(".idx")] + ".pack" in names
    ]


class _Layout(NamedTuple):
    """Where the tables of a version-2 index start (bytes), and its object count."""

    count: int
    crcs_at: int
    offsets_at: int
    large_at: int


def _layout(data: bytes | mmap.mmap) -> _Layout | None:
    """The layout of the version-2 index in ``data``; None when it is not one (or is cut)."""
    if len(data) < _NAMES_AT + 40 or data[:8] != _MAGIC:
        return None
    (count,) = struct.unpack_from(">L", data, _FANOUT_AT + 255 * 4)
    crcs_at = _NAMES_AT + 20 * count
    offsets_at = crcs_at + 4 * count
    large_at = offsets_at + 4 * count
    if len(data) < large_at + 40:
        return None
    return _Layout(count, crcs_at, offsets_at, large_at)


def object_count(path: str) -> int | None:
    """The number of objects in the pack index at ``path`` (its fan-out table's last entry);
    None when it is not a version-2 index. Raises: OSError when it cannot be read."""
    with open(path, "rb") as f:
        head = f.read(_NAMES_AT)
    if len(head) < _NAMES_AT or head[:8] != _MAGIC:
        return None
    return int(struct.unpack_from(">L", head, _FANOUT_AT + 255 * 4)[0])


def read_index(path: str) -> IndexArrays | None:
    """Read the version-2 index at ``path`` (entries sorted by name) as numpy arrays; None when
    the file is not a well-formed version-2 index (dulwich serves those packs).
    Raises: OSError when the file cannot be read.
    """
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    with open(path, "rb") as f:
        data = f.read()
    layout = _layout(data)
    if layout is None:
        return None
    count = layout.count
    names = np.frombuffer(data, dtype="S20", count=count, offset=_NAMES_AT)
    crcs = np.frombuffer(data, dtype=">u4", count=count, offset=layout.crcs_at).astype(np.uint32)
    small = np.frombuffer(data, dtype=">u4", count=count, offset=layout.offsets_at)
    small = small.astype(np.uint64)
    flagged = (small & _LARGE_FLAG) != 0
    if flagged.any():  # packs over 2 GiB: 64-bit offsets in a side table
        slots = (small[flagged] & (_LARGE_FLAG - 1)).astype(np.int64)
        if len(data) < layout.large_at + 8 * (int(slots.max()) + 1) + 40:
            return None
        large = np.frombuffer(data, dtype=">u8", count=int(slots.max()) + 1, offset=layout.large_at)
        small[flagged] = large[slots].astype(np.uint64)
    return IndexArrays(names, small, crcs)


class MappedIndex:
    """A version-2 pack index searched in place (memory-mapped), as git looks objects up:
    through the fan-out table, then a binary search of the sorted names. For a few lookups,
    where loading a whole index would cost more."""

    def __init__(self, data: mmap.mmap, layout: _Layout) -> None:
        self._data = data
        self._fanout = struct.unpack_from(">256L", data, _FANOUT_AT)
        self._layout = layout

    @classmethod
    def open(cls, path: str) -> MappedIndex | None:
        """Map the index at ``path``; None when it is not a version-2 index.
        Raises: OSError when it cannot be opened."""
        with open(path, "rb") as f:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        layout = _layout(data)
        if layout is None:
            data.close()
            return None
        return cls(data, layout)

    def find(self, sha: bytes) -> int | None:
        """The pack offset of binary ``sha``, or None when this pack does not hold it."""
        first = sha[0]
        lo = self._fanout[first - 1] if first else 0
        hi = self._fanout[first]
        data, layout = self._data, self._layout
        while lo < hi:
            mid = (lo + hi) // 2
            name = data[_NAMES_AT + 20 * mid : _NAMES_AT + 20 * mid + 20]
            if name < sha:
                lo = mid + 1
            elif name > sha:
                hi = mid
            else:
                (offset,) = struct.unpack_from(">L", data, layout.offsets_at + 4 * mid)
                if offset & _LARGE_FLAG:
                    (offset,) = struct.unpack_from(
                        ">Q", data, layout.large_at + 8 * (offset & ~_LARGE_FLAG)
                    )
                return int(offset)
        return None

    def close(self) -> None:
        """Unmap the index."""
        self._data.close()
