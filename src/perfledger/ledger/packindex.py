"""Version-2 pack indexes as numpy arrays: written for every new pack, read to merge packs.

Why arrays: merging packs (``gitobj.copy_merge_packs``) and writing a batch's pack handle every
object's name, offset and CRC; as Python tuples, sorting and encoding them cost a quarter of a
60,000-event batched build here (sets of 20-byte names, ``list.sort``, ``struct.pack`` over
lists). As arrays the same work is a few C calls. The format is git's ``pack-format.txt``:
magic, version 2, a 256-entry fan-out table, the sorted names, their CRC-32s, their 31-bit
offsets (the high bit pointing into a table of 64-bit offsets for packs over 2 GiB), the pack's
checksum, the index's own checksum. Every test scenario checks the result with the real git.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a writer that packs a few thousand objects skips it
    import numpy as np

_MAGIC = b"\377tOc\0\0\0\2"
_FANOUT_AT = 8
_NAMES_AT = _FANOUT_AT + 256 * 4
_LARGE_FLAG = 0x80000000


@dataclass(frozen=True)
class IndexArrays:
    """The entries of one pack, index ``i`` describing one object.

    Attributes:
        names: binary object names, dtype ``S20`` (a numpy ``S20`` item drops trailing zero
            bytes when read one at a time: use ``names.tobytes()`` for exact names).
        offsets: byte offsets of the entries in the pack, dtype uint64.
        crcs: CRC-32 of each packed entry (header and zlib stream), dtype uint32.
    """

    names: np.ndarray
    offsets: np.ndarray
    crcs: np.ndarray

    def take(self, order: np.ndarray) -> IndexArrays:
        """Return the entries at the positions ``order`` (an integer array), in that order."""

        return IndexArrays(self.names[order], self.offsets[order], self.crcs[order])

    def by_name(self) -> IndexArrays:
        """Return the entries sorted by name (the order an index stores them in)."""
        import numpy as np

        return self.take(np.argsort(self.names, kind="stable"))

    def by_offset(self) -> IndexArrays:
        """Return the entries in pack order."""
        import numpy as np

        return self.take(np.argsort(self.offsets, kind="stable"))


def index_arrays(names: bytes, offsets: list[int], crcs: list[int]) -> IndexArrays:
    """Build :class:`IndexArrays` from concatenated 20-byte ``names`` and parallel lists."""
    import numpy as np

    return IndexArrays(
        np.frombuffer(names, dtype="S20"),
        np.array(offsets, dtype=np.uint64),
        np.array(crcs, dtype=np.uint32),
    )


def concat(parts: list[IndexArrays]) -> IndexArrays:
    """Return the entries of ``parts`` one after the other."""
    import numpy as np

    return IndexArrays(
        np.concatenate([p.names for p in parts]),
        np.concatenate([p.offsets for p in parts]),
        np.concatenate([p.crcs for p in parts]),
    )


def encode_index_entries(entries: list[tuple[bytes, int, int]], pack_checksum: bytes) -> bytes:
    """Return the bytes of the version-2 index of a pack, from plain tuples: what
    :func:`encode_index` writes, without numpy (whose import, ~0.2 s, would cost a process
    that packs a few thousand loose objects more than the encoding itself).

    Args:
        entries: (binary name, offset in bytes, CRC-32) of each object, in any order.
        pack_checksum: the pack's trailing sha1 (20 bytes).
    """
    entries = sorted(entries)
    count = len(entries)
    fanout = [0] * 256
    for name, _, _ in entries:
        fanout[name[0]] += 1
    total = 0
    for i in range(256):
        total += fanout[i]
        fanout[i] = total
    large = [offset for _, offset, _ in entries if offset >= _LARGE_FLAG]
    small: list[int] = []
    slot = 0
    for _, offset, _ in entries:
        if offset >= _LARGE_FLAG:
            small.append(_LARGE_FLAG | slot)
            slot += 1
        else:
            small.append(offset)
    body = b"".join(
        [
            _MAGIC,
            struct.pack(">256L", *fanout),
            b"".join(name for name, _, _ in entries),
            struct.pack(f">{count}L", *(crc for _, _, crc in entries)),
            struct.pack(f">{count}L", *small),
            struct.pack(f">{len(large)}Q", *large),
            pack_checksum,
        ]
    )
    return body + hashlib.sha1(body).digest()


def encode_index(entries: IndexArrays, pack_checksum: bytes) -> bytes:
    """Return the bytes of the version-2 index of a pack.

    Args:
        entries: the pack's entries, sorted by name (:meth:`IndexArrays.by_name`).
        pack_checksum: the pack's trailing sha1 (20 bytes).
    """
    import numpy as np

    count = len(entries.names)
    first_bytes = np.frombuffer(entries.names.tobytes(), dtype=np.uint8)[::20]
    fanout = np.cumsum(np.bincount(first_bytes, minlength=256)).astype(">u4")
    offsets = entries.offsets
    large = offsets[offsets >= _LARGE_FLAG]
    small = offsets.astype(">u4")
    if len(large):
        small[offsets >= _LARGE_FLAG] = _LARGE_FLAG | np.arange(len(large), dtype=np.uint32)
    body = b"".join(
        [
            _MAGIC,
            fanout.tobytes(),
            entries.names.tobytes(),
            entries.crcs.astype(">u4").tobytes(),
            small.tobytes(),
            large.astype(">u8").tobytes(),
            pack_checksum,
        ]
    )
    assert len(body) == _NAMES_AT + 28 * count + 8 * len(large) + 20
    return body + hashlib.sha1(body).digest()


def read_index(path: str) -> IndexArrays | None:
    """Read the version-2 index at ``path`` (entries sorted by name); None when the file is not
    a well-formed version-2 index (dulwich serves those packs).

    Raises: OSError when the file cannot be read.
    """
    import numpy as np

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _NAMES_AT + 40 or data[:8] != _MAGIC:
        return None
    (count,) = struct.unpack_from(">L", data, _FANOUT_AT + 255 * 4)
    crcs_at = _NAMES_AT + 20 * count
    offsets_at = crcs_at + 4 * count
    large_at = offsets_at + 4 * count
    if len(data) < large_at + 40:
        return None
    names = np.frombuffer(data, dtype="S20", count=count, offset=_NAMES_AT)
    crcs = np.frombuffer(data, dtype=">u4", count=count, offset=crcs_at).astype(np.uint32)
    small = np.frombuffer(data, dtype=">u4", count=count, offset=offsets_at).astype(np.uint64)
    flagged = (small & _LARGE_FLAG) != 0
    if flagged.any():  # packs over 2 GiB: 64-bit offsets in a side table
        slots = (small[flagged] & (_LARGE_FLAG - 1)).astype(np.int64)
        if len(data) < large_at + 8 * (int(slots.max()) + 1) + 40:
            return None
        large = np.frombuffer(data, dtype=">u8", count=int(slots.max()) + 1, offset=large_at)
        small[flagged] = large[slots].astype(np.uint64)
    return IndexArrays(names, small, crcs)
