"""Reading git objects: the store's and verify's reads (:class:`ObjectReader`, every read
checked against its name) and a received pack (:func:`read_pack`, for pull and clone, through
dulwich's pack reader).

Why not dulwich's object store: its per-object path (a Python callback per bisection probe, a
``ShaFile`` per object) is too slow for a verify, which reads three objects per event. This
reader maps each pack's index once into a dict (or, for a few reads, searches it in place),
reads entries with ``pread`` and re-hashes every object, so a rewritten object is reported, not
trusted. Delta entries (``git gc``, ``git clone``) and layouts it does not map (alternates, index
v1) are read through dulwich.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from perfledger.errors import IntegrityError
from perfledger.ledger.gitobj import HEADER_FORMATS, TYPE_NAMES
from perfledger.ledger.packindex import IndexArrays, MappedIndex, pack_bases, read_index

if TYPE_CHECKING:
    from dulwich.object_store import DiskObjectStore

_NAME_TYPES = {v: k for k, v in TYPE_NAMES.items()}
_OFS_DELTA, _REF_DELTA = 6, 7


_PACK_SHIFT = 40
_OFFSET_MASK = (1 << _PACK_SHIFT) - 1


#: Up to this many packed objects the reader maps shas with a dict (fastest); above it, with
#: sorted numpy tables (a 1,000,000-event ledger holds about 3,000,000 objects).
DICT_INDEX_MAX = 1_500_000
#: Bytes read at an entry's offset in one pread: the header and most envelopes fit (a larger
#: entry takes a second pread).
_FIRST_READ = 512


class ObjectReader:
    """Random access to the objects under ``objects_dir`` by binary sha, each checked against
    its sha. ``open_store`` opens the dulwich object store, only for what this reader does not
    read itself; ``sparse``, for a few reads, searches each pack's mapped index in place
    instead of loading every index into a map first."""

    def __init__(
        self, open_store: Callable[[], DiskObjectStore], objects_dir: str, *, sparse: bool = False
    ) -> None:
        self._open_store = open_store
        self._opened: DiskObjectStore | None = None
        self._objects_dir = objects_dir
        self._packs: list[int] = []  # open descriptors of the packs
        # binary sha -> (pack number << 40) | offset, over every mapped pack (small ledgers), or
        # per pack a sorted numpy sha table searched in C (large ledgers: ~28 bytes an object
        # instead of ~110 for a dict entry).
        self._where: dict[bytes, int] = {}
        self._tables: list[tuple[int, Any, Any]] = []
        self._sparse: list[tuple[int, MappedIndex]] = []
        indexes: list[tuple[int, IndexArrays]] = []  # (pack number, its index)
        for base in pack_bases(os.path.join(self._objects_dir, "pack")):
            # pread on a descriptor, not mmap: mapped pages of a large pack would count in the
            # process's resident memory although the page cache holds them anyway
            try:
                index = MappedIndex.open(base + ".idx") if sparse else read_index(base + ".idx")
                fd = os.open(base + ".pack", os.O_RDONLY)
            except FileNotFoundError:
                continue  # merged away by a concurrent writer: dulwich rescans, finds the new pack
            if index is None:  # an index layout we do not map: dulwich serves those objects
                os.close(fd)
                continue
            self._packs.append(fd)
            if isinstance(index, MappedIndex):
                self._sparse.append((len(self._packs) - 1, index))
            else:
                indexes.append((len(self._packs) - 1, index))
        use_tables = sum(len(index.names) for _, index in indexes) > DICT_INDEX_MAX
        for number, index in indexes:
            if use_tables:
                self._tables.append((number, index.names, index.offsets))
            else:
                mapped = dict(
                    zip(
                        index.names.view("V20").tolist(),  # all 20 bytes (S20 drops trailing 0s)
                        (index.offsets | (number << _PACK_SHIFT)).tolist(),
                        strict=True,
                    )
                )
                mapped.update(self._where)  # an object in two packs: the first pack's copy
                self._where = mapped

    def close(self) -> None:
        """Close the packs."""
        for fd in self._packs:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._packs.clear()
        for _, index in self._sparse:
            index.close()
        self._sparse.clear()

    def _locate(self, sha: bytes) -> int | None:
        where = self._where.get(sha)
        if where is not None:
            return where
        for number, index in self._sparse:
            offset = index.find(sha)
            if offset is not None:
                return (number << _PACK_SHIFT) | offset
        for number, shas, offsets in self._tables:
            i = int(shas.searchsorted(sha))
            if i < len(shas) and shas[i : i + 1].tobytes() == sha:
                return (number << _PACK_SHIFT) | int(offsets[i])
        return None

    def read(self, sha: bytes, *, check: bool = True) -> tuple[int, bytes]:
        """Return (type number, content) of the object with binary ``sha`` (``check=False``:
        a packed or loose object is not re-hashed: a walk, or naming what a rewritten object
        claims to be).
        Raises: IntegrityError when the object is missing or does not hash to its name.
        """
        where = self._locate(sha)
        if where is not None:
            fd = self._packs[where >> _PACK_SHIFT]
            offset = where & _OFFSET_MASK
            try:
                result = _read_packed(fd, offset)
            except IntegrityError as exc:
                raise IntegrityError(
                    f"git object {sha.hex()}: {exc.message}",
                    commit=sha.hex(),
                    hint="the pack file was damaged or modified; restore the ledger from a clone",
                ) from None
            if result is not None:
                if check:
                    _check_sha(sha, *result)
                return result
            # a delta entry: dulwich resolves it below
        else:
            loose = read_loose(self._objects_dir, sha, check=check)
            if loose is not None:
                return loose
        failure = ""
        if self._opened is None:
            self._opened = self._open_store()
        try:
            type_num, raw = self._opened.get_raw(sha)
        except KeyError:
            raise IntegrityError(f"git object {sha.hex()} is missing", commit=sha.hex()) from None
        except Exception as exc:  # dulwich meeting a damaged entry (zlib, delta, buffer errors)
            failure = f"{type(exc).__name__}: {exc}"
        if failure:  # raised here, not in the handler: no traceback keeps dulwich's buffers alive
            raise IntegrityError(
                f"git object {sha.hex()} cannot be read ({failure})",
                commit=sha.hex(),
                hint="the pack file was damaged or modified; restore the ledger from a clone",
            )
        _check_sha(sha, type_num, raw)
        return type_num, raw


def read_loose(objects_dir: str, sha: bytes, *, check: bool = True) -> tuple[int, bytes] | None:
    """Return (type number, content) of the loose object with binary ``sha`` under
    ``objects_dir``, checked against its name unless not ``check``; None when not stored loose.
    Raises: IntegrityError for a file that is not a valid zlib stream, has a malformed header,
        or does not hash to its name.
    """
    hexsha = sha.hex()
    path = os.path.join(objects_dir, hexsha[:2], hexsha[2:])
    try:
        with open(path, "rb") as f:
            compressed = f.read()
    except FileNotFoundError:
        return None
    try:
        data = zlib.decompress(compressed)
    except zlib.error:
        raise IntegrityError(
            f"loose git object {hexsha} is not a valid zlib stream", commit=hexsha
        ) from None
    header, _, raw = data.partition(b"\0")
    type_name, _, length = header.partition(b" ")
    type_num = _NAME_TYPES.get(type_name)
    if type_num is None or not length.isdigit() or int(length) != len(raw):
        raise IntegrityError(f"loose git object {hexsha} has a malformed header", commit=hexsha)
    if check:
        _check_sha(sha, type_num, raw)
    return type_num, raw


def _entry_header(data: bytes, pos: int) -> tuple[int, int, int]:
    """(type number, inflated size, offset after the header) of the pack entry whose header
    (type and size, little-endian base-128, 4 bits first) starts at ``pos`` of ``data``.
    Raises: IndexError when the header runs past ``data``."""
    byte = data[pos]
    type_num = (byte >> 4) & 0x07
    size = byte & 0x0F
    shift = 4
    pos += 1
    while byte & 0x80:
        byte = data[pos]
        size |= (byte & 0x7F) << shift
        shift += 7
        pos += 1
    return type_num, size, pos


def _sha(type_num: int, raw: bytes) -> bytes:
    """The binary git name of an object of type ``type_num`` (1-4) with content ``raw``."""
    return hashlib.sha1(HEADER_FORMATS[type_num] % len(raw) + raw).digest()


def _check_sha(sha: bytes, type_num: int, raw: bytes) -> None:
    if type_num not in HEADER_FORMATS:
        raise IntegrityError(f"git object {sha.hex()} has unknown type {type_num}")
    digest = _sha(type_num, raw)
    if digest != sha:
        raise IntegrityError(
            f"git object {sha.hex()} was rewritten: its content hashes to {digest.hex()}",
            commit=sha.hex(),
            hint="the object store was modified outside git; restore the ledger from a clone",
        )


def _read_packed(fd: int, offset: int) -> tuple[int, bytes] | None:
    """Inflate the non-delta entry at ``offset`` of the pack open on ``fd``; None for a delta."""
    data = os.pread(fd, _FIRST_READ, offset)
    if not data:
        raise IntegrityError(f"pack entry at offset {offset} is past the end of the pack")
    try:
        type_num, size, pos = _entry_header(data, 0)
    except IndexError:
        raise IntegrityError(f"pack entry at offset {offset} has a truncated header") from None
    if type_num in (_OFS_DELTA, _REF_DELTA):
        return None
    # A zlib stream of n bytes is at most n + 5 bytes per 16 KiB block + 11 bytes of framing;
    # zlib.decompress ignores what follows the stream (the next entry).
    window = size + (size // 16384 + 1) * 5 + 64
    stream = data[pos:] if pos + window <= len(data) else os.pread(fd, window, offset + pos)
    try:
        raw = zlib.decompress(stream, 15, size or 1)
    except zlib.error:
        raise IntegrityError(f"pack entry at offset {offset} is not a valid zlib stream") from None
    if len(raw) != size:
        raise IntegrityError(f"pack entry at offset {offset} inflates to the wrong size")
    return type_num, raw


# ---------------------------------------------------------------------------- a received pack


def read_pack(
    data: bytes | bytearray, external: Callable[[bytes], tuple[int, bytes]]
) -> dict[bytes, tuple[int, bytes]]:
    """Return every object of the received pack ``data`` (pull and clone) through dulwich's
    pack reader: binary sha -> (type number, content), deltas resolved (``external``: a thin
    pack's local bases, KeyError when absent), each named by hashing its content.
    Raises: IntegrityError for a malformed pack, a bad checksum or an unresolvable delta.
    """
    from dulwich.object_format import SHA1  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)
    from dulwich.pack import PackData, UnpackedObjectIterator  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    if len(data) < 32 or data[:4] != b"PACK" or data[4:8] not in (b"\0\0\0\2", b"\0\0\0\3"):
        raise IntegrityError("the remote sent a malformed pack: bad header")
    objects: dict[bytes, tuple[int, bytes]] = {}
    failure = ""
    try:
        pack = PackData.from_file(io.BytesIO(data), SHA1, len(data))
        pack.check()
        for entry in UnpackedObjectIterator.for_pack_data(pack, resolve_ext_ref=external):
            raw = b"".join(entry.obj_chunks)
            objects[_sha(entry.obj_type_num, raw)] = (entry.obj_type_num, raw)
    except Exception as exc:  # dulwich's checksum, zlib, delta and unresolved-base errors
        failure = f"{type(exc).__name__}: {exc}"
    if failure:  # raised here, not in the handler: no traceback keeps dulwich's buffers alive
        raise IntegrityError(f"the remote sent a malformed pack: {failure}")
    return objects
