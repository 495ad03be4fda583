"""Reading git objects: the store's and verify's reads (:class:`ObjectReader`, every read
checked against its name) and a received pack (:func:`read_pack`, for pull and clone, through
dulwich's pack reader).

Why not dulwich's object store: its per-object path (a Python callback per bisection probe, a
``ShaFile`` per object) is too slow for a verify, which reads three objects per event. This
reader maps each pack's index once into a dict (or, for a few reads, searches it in place),
reads entries with ``pread`` and re-hashes every object, so a rewritten object is reported, not
trusted. Delta entries (``git gc``, ``git clone``) and layouts it does not map (alternates, index
v1) are read through dulwich.

Decompression bombs: no object is inflated before the sizes git records for it (a loose
object's header, a pack entry's header, a delta's result size, every base of a delta chain, the
entries of a received pack) are checked against what its stored bytes may inflate to
(:func:`perfledger.events.limits.inflation_allowed`) and against what the caller reads (a
commit, a tree, an ``event.json``: ``max_size``); a bomb is an IntegrityError naming it, read
in bounded memory.
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
from perfledger.events.limits import LEDGER_LIMITS_HINT, inflation_allowed
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
        self._pack_bytes: list[int] = []  # their sizes (what their entries may inflate from)
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
            self._pack_bytes.append(os.fstat(fd).st_size)
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
        self._pack_bytes.clear()
        for _, index in self._sparse:
            index.close()
        self._sparse.clear()

    def _locate_in(self, number: int) -> Callable[[bytes], int | None]:
        """``sha -> offset`` in pack ``number`` (None when not there): a ref-delta's base."""

        def find(sha: bytes) -> int | None:
            where = self._locate(sha)
            if where is None or where >> _PACK_SHIFT != number:
                return None
            return where & _OFFSET_MASK

        return find

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

    def read(
        self, sha: bytes, *, check: bool = True, max_size: int | None = None
    ) -> tuple[int, bytes]:
        """Return (type number, content) of the object with binary ``sha`` (``check=False``:
        a packed or loose object is not re-hashed: a walk, or naming what a rewritten object
        claims to be). ``max_size``: the most bytes the caller reads (a commit, a tree, an
        ``event.json``: the storage format's limits), refused before inflating.
        Raises: IntegrityError when the object is missing, does not hash to its name, or would
            inflate beyond ``max_size`` or beyond what its stored bytes may (a decompression
            bomb).
        """
        where = self._locate(sha)
        if where is not None:
            number = where >> _PACK_SHIFT
            fd = self._packs[number]
            offset = where & _OFFSET_MASK
            try:
                allowed = inflation_allowed(self._pack_bytes[number] - offset)
                limit = allowed if max_size is None else min(allowed, max_size)
                result = _read_packed(fd, offset, limit, self._locate_in(number), allowed)
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
            loose = read_loose(self._objects_dir, sha, check=check, max_size=max_size)
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


def read_loose(
    objects_dir: str, sha: bytes, *, check: bool = True, max_size: int | None = None
) -> tuple[int, bytes] | None:
    """Return (type number, content) of the loose object with binary ``sha`` under
    ``objects_dir``, checked against its name unless not ``check``; None when not stored loose.
    Its header's size is checked before the rest is inflated: at most ``max_size`` (when given)
    and what the file's bytes may inflate to (:func:`~perfledger.events.limits.inflation_allowed`).
    Raises: IntegrityError for a file that is not a valid zlib stream, has a malformed header,
        declares more than it may inflate to (a decompression bomb), or does not hash to its
        name.
    """
    hexsha = sha.hex()
    path = os.path.join(objects_dir, hexsha[:2], hexsha[2:])
    try:
        with open(path, "rb") as f:
            compressed = f.read()
    except FileNotFoundError:
        return None
    inflater = zlib.decompressobj()
    try:
        head = inflater.decompress(compressed, 64)  # "<type> <size>\0" and a little content
        nul = head.find(b"\0")
        header = head[:nul] if nul >= 0 else b""
        type_name, _, length = header.partition(b" ")
        type_num = _NAME_TYPES.get(type_name)
        if type_num is None or not length.isdigit() or len(length) > 19:
            raise IntegrityError(f"loose git object {hexsha} has a malformed header", commit=hexsha)
        declared = int(length)
        _refuse_bomb(f"loose git object {hexsha}", declared, len(compressed), max_size)
        raw = head[nul + 1 :]
        if len(raw) <= declared:  # (more content than declared is a malformed header below)
            raw += inflater.decompress(inflater.unconsumed_tail, declared - len(raw) + 1)
    except zlib.error:
        raise IntegrityError(
            f"loose git object {hexsha} is not a valid zlib stream", commit=hexsha
        ) from None
    if len(raw) != declared or not inflater.eof:
        raise IntegrityError(f"loose git object {hexsha} has a malformed header", commit=hexsha)
    if check:
        _check_sha(sha, type_num, raw)
    return type_num, raw


def _refuse_bomb(what: str, declared: int, stored: int, max_size: int | None) -> None:
    """Refuse ``what``, which declares ``declared`` bytes inflated from ``stored`` bytes, when
    that is more than the caller reads (``max_size``) or than ``stored`` may inflate to.
    Raises: IntegrityError naming it (nothing inflated yet)."""
    allowed = inflation_allowed(stored)
    if declared > allowed:
        raise IntegrityError(
            f"{what} would inflate to {declared} bytes from {stored}, more than its stored "
            f"bytes may ({allowed}): a decompression bomb, refused before inflating it",
            hint=LEDGER_LIMITS_HINT,
        )
    if max_size is not None and declared > max_size:
        raise IntegrityError(
            f"{what} is {declared} bytes, more than the {max_size} the storage format allows "
            "where it is read, refused before inflating it",
            hint=LEDGER_LIMITS_HINT,
        )


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


#: Deepest delta chain walked to check its bases' sizes (git's default depth is 50).
_MAX_CHAIN = 1_000


def _read_packed(
    fd: int,
    offset: int,
    limit: int,
    locate: Callable[[bytes], int | None] | None = None,
    chain_limit: int | None = None,
) -> tuple[int, bytes] | None:
    """Inflate the non-delta entry at ``offset`` of the pack open on ``fd``, declaring at most
    ``limit`` bytes; None for a delta (dulwich resolves it) once the delta's result is within
    ``limit`` and its instructions and every base of its chain (``locate``: a ref-delta base's
    offset in this pack) within ``chain_limit`` (a base may be larger than what is read from
    it: another artifact, say; default ``limit``).
    Raises: IntegrityError for a malformed entry or one beyond its limit."""
    data = os.pread(fd, _FIRST_READ, offset)
    if not data:
        raise IntegrityError(f"pack entry at offset {offset} is past the end of the pack")
    try:
        type_num, size, pos = _entry_header(data, 0)
    except IndexError:
        raise IntegrityError(f"pack entry at offset {offset} has a truncated header") from None
    if type_num in (_OFS_DELTA, _REF_DELTA):
        _check_chain(fd, offset, limit, locate, limit if chain_limit is None else chain_limit)
        return None
    _refuse_size(offset, size, limit)
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


def _refuse_size(offset: int, size: int, limit: int) -> None:
    if size > limit:
        raise IntegrityError(
            f"pack entry at offset {offset} declares {size} bytes, more than it may inflate to "
            f"where it is read ({limit}): a decompression bomb or a forged object, refused "
            "before inflating it",
            hint=LEDGER_LIMITS_HINT,
        )


def _check_chain(
    fd: int,
    offset: int,
    limit: int,
    locate: Callable[[bytes], int | None] | None,
    chain_limit: int,
) -> None:
    """Check a delta entry's result size against ``limit`` and, down its chain, every delta's
    instructions and result and every base's declared size against ``chain_limit`` (what
    dulwich would inflate to resolve it).
    Raises: IntegrityError for a size beyond its limit or a malformed entry."""
    first = True
    for _ in range(_MAX_CHAIN):
        data = os.pread(fd, _FIRST_READ, offset)
        try:
            type_num, size, pos = _entry_header(data, 0)
            base: int | None = None
            if type_num == _OFS_DELTA:
                back, pos = _ofs_distance(data, pos)
                base = offset - back
            elif type_num == _REF_DELTA:
                base = locate(bytes(data[pos : pos + 20])) if locate is not None else None
                pos += 20
        except IndexError:
            raise IntegrityError(f"pack entry at offset {offset} has a truncated header") from None
        if type_num not in (_OFS_DELTA, _REF_DELTA):
            _refuse_size(offset, size, chain_limit)
            return
        _refuse_size(offset, size, chain_limit)  # the delta's own instructions
        _refuse_size(
            offset, _delta_result_size(data[pos:], offset), limit if first else chain_limit
        )
        first = False
        if base is None or base < 0 or base >= offset:
            return  # a base outside this pack: dulwich finds it, or fails, through its reader
        offset = base
    raise IntegrityError(f"pack entry at offset {offset}: a delta chain deeper than {_MAX_CHAIN}")


def _ofs_distance(data: bytes, pos: int) -> tuple[int, int]:
    """An ofs-delta's distance back to its base (git's offset encoding) and the position after
    it. Raises: IndexError when it runs past ``data``."""
    byte = data[pos]
    distance = byte & 0x7F
    pos += 1
    while byte & 0x80:
        byte = data[pos]
        distance = ((distance + 1) << 7) | (byte & 0x7F)
        pos += 1
    return distance, pos


def _delta_result_size(stream: bytes, offset: int) -> int:
    """The result size a delta's instructions declare, from the first inflated bytes of its
    zlib ``stream``. Raises: IntegrityError when the stream is not zlib or too short."""
    try:
        head = zlib.decompressobj().decompress(stream, 32)
    except zlib.error:
        raise IntegrityError(f"pack entry at offset {offset} is not a valid zlib stream") from None
    return _result_size(head, f"pack entry at offset {offset}")


def _result_size(head: bytes, what: str) -> int:
    """The second varint of an inflated delta (``head``: its first bytes), after the base's
    size: the size of the object it builds. Raises: IntegrityError when malformed."""
    pos = value = 0
    for _ in range(2):
        value, shift = 0, 0
        while True:
            if pos >= len(head) or shift > 63:
                raise IntegrityError(f"{what} has a malformed delta")
            byte = head[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
    return value


# ---------------------------------------------------------------------------- a received pack


def read_pack(
    data: bytes | bytearray, external: Callable[[bytes], tuple[int, bytes]]
) -> dict[bytes, tuple[int, bytes]]:
    """Return every object of the received pack ``data`` (pull and clone) through dulwich's
    pack reader: binary sha -> (type number, content), deltas resolved (``external``: a thin
    pack's local bases, KeyError when absent), each named by hashing its content; first
    :func:`scan_pack` (no decompression bomb reaches dulwich).
    Raises: IntegrityError for a malformed pack, a bad checksum, an unresolvable delta, or a
        pack that would inflate beyond what its bytes may.
    """
    from dulwich.object_format import SHA1  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)
    from dulwich.pack import PackData, UnpackedObjectIterator  # noqa: PLC0415 (dulwich: kept off `perfledger log`'s start-up path)

    if len(data) < 32 or data[:4] != b"PACK" or data[4:8] not in (b"\0\0\0\2", b"\0\0\0\3"):
        raise IntegrityError("the remote sent a malformed pack: bad header")
    scan_pack(data)
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


#: Bytes of a received pack inflated at a time by :func:`scan_pack` (its memory bound).
_SCAN_CHUNK = 64 * 1024


def scan_pack(data: bytes | bytearray) -> None:
    """Walk the entries of the received pack ``data`` in bounded memory (each zlib stream
    inflated :data:`_SCAN_CHUNK` bytes at a time and dropped) and refuse it when the objects it
    declares (entries' sizes, deltas' result sizes) add up to more than its bytes may inflate
    to (:func:`~perfledger.events.limits.inflation_allowed`), or an entry inflates to more than
    it declares.
    Raises: IntegrityError naming the entry: a decompression bomb, or a malformed pack."""
    view = memoryview(data)
    end = len(data) - 20  # the trailing checksum
    allowed = inflation_allowed(len(data))
    count = int.from_bytes(data[8:12], "big")
    pos, total = 12, 0
    for index in range(count):
        start = pos
        try:
            type_num, size, pos = _entry_header(data, pos)
            if type_num == _OFS_DELTA:
                _, pos = _ofs_distance(data, pos)
            elif type_num == _REF_DELTA:
                pos += 20
        except IndexError:
            raise IntegrityError(
                f"the remote sent a malformed pack: entry {index} has a truncated header"
            ) from None
        if pos >= end:
            raise IntegrityError(f"the remote sent a malformed pack: entry {index} is cut short")
        delta = type_num in (_OFS_DELTA, _REF_DELTA)
        _refuse_pack(data, index, start, total + size, size, allowed)
        inflater = zlib.decompressobj()
        produced, head = 0, b""
        try:
            while not inflater.eof:
                if pos >= end:
                    raise IntegrityError(
                        f"the remote sent a malformed pack: entry {index} is cut short"
                    )
                piece = view[pos : pos + _SCAN_CHUNK]
                pos += len(piece)
                while piece:
                    out = inflater.decompress(piece, _SCAN_CHUNK)
                    produced += len(out)
                    if len(head) < 32:
                        head += out[: 32 - len(head)]
                    if produced > size:
                        raise IntegrityError(
                            f"the remote sent a malformed pack: entry {index} (offset {start}) "
                            f"inflates beyond the {size} bytes it declares",
                            hint="a decompression bomb or a damaged pack; nothing was written",
                        )
                    if inflater.eof:
                        break
                    piece = inflater.unconsumed_tail
        except zlib.error:
            raise IntegrityError(
                f"the remote sent a malformed pack: entry {index} is not a valid zlib stream"
            ) from None
        pos -= len(inflater.unused_data)
        if produced != size:
            raise IntegrityError(
                f"the remote sent a malformed pack: entry {index} inflates to {produced} bytes, "
                f"not the {size} it declares"
            )
        if delta:  # what dulwich would build from it
            result = _result_size(head, f"the remote's pack entry {index}")
            _refuse_pack(data, index, start, total + result, result, allowed)
            total += result
        else:
            total += size


def _refuse_pack(
    data: bytes | bytearray, index: int, start: int, total: int, size: int, allowed: int
) -> None:
    """Refuse a received pack whose objects up to entry ``index`` declare ``total`` bytes,
    more than ``allowed``. Raises: IntegrityError (nothing inflated past the limit)."""
    if total > allowed:
        raise IntegrityError(
            f"the remote sent a pack of {len(data)} bytes whose objects would inflate to "
            f"more than {allowed} bytes (entry {index} at offset {start} declares {size}): "
            "a decompression bomb, refused before inflating it",
            hint="nothing was written; fetch from a remote you trust, or ask who runs it",
        )
