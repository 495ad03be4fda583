"""Writing git objects fast: raw blob/tree/commit bytes, loose object files and packs.

Why not dulwich's writers: building ``Tree``/``Commit`` objects and ``write_pack_objects`` cost
about 350 µs per event (object re-serialisation, a zlib compressor per object, repeated sha
computation), which capped batched appends at ~2,000 events/s. The formats written here are git's
own, small and fixed (loose objects, pack v2, index v2 through dulwich's ``write_pack_index``);
every test scenario checks the result with ``git fsck --strict --full``, and every read goes
through dulwich.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import sys
import zlib
from binascii import unhexlify
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from perfledger.ledger.durable import fsync_dir, write_out
from perfledger.ledger.loosepool import open_spare

if TYPE_CHECKING:
    from perfledger.ledger.loosepool import LoosePool

#: git object type numbers (as in pack entries).
COMMIT, TREE, BLOB = 1, 2, 3
_TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob"}
#: ``<type> <size>\0``, the header git hashes and stores before an object's content.
_HEADER_FORMATS = {num: name + b" %d\0" for num, name in _TYPE_NAMES.items()}
#: Objects smaller than this (bytes) are stored uncompressed inside their zlib stream: setting up
#: a deflate compressor costs ~20-50 µs here, more than writing the few hundred bytes of an
#: envelope; larger objects (artifacts) are compressed at zlib's default level. Geometric pack
#: merges recompress everything later.
STORE_BELOW_BYTES = 1024
_FILE_MODE = b"100644"
_DIR_MODE = b"40000"


class RawObject(NamedTuple):
    """A git object as its type number, its content (without header) and its hex sha (bytes).

    A named tuple, immutable and hashable: three are made per appended event, and a tuple is
    made in half the time of a frozen dataclass (whose ``__init__`` sets each field through
    ``object.__setattr__``)."""

    type_num: int
    raw: bytes
    id: bytes


def make_object(type_num: int, raw: bytes) -> RawObject:
    """Return the :class:`RawObject` of ``raw`` content of git type ``type_num``."""
    sha = hashlib.sha1(_HEADER_FORMATS[type_num] % len(raw) + raw).hexdigest().encode()
    return RawObject(type_num, raw, sha)


def make_blob(data: bytes) -> RawObject:
    """Return the blob object of ``data``."""
    return make_object(BLOB, data)


def make_tree(
    files: Sequence[tuple[bytes, bytes]], dirs: Sequence[tuple[bytes, bytes]] = ()
) -> RawObject:
    """Return a tree of regular files and subtrees.

    Args:
        files: (name, blob hex sha) pairs.
        dirs: (name, tree hex sha) pairs.
    Entries are sorted as git sorts them (a directory name compares as if it ended in ``/``).
    """
    if not dirs and len(files) == 1:  # an event without artifacts: nothing to sort
        name, sha = files[0]
        return make_object(TREE, b"100644 " + name + b"\0" + bytes.fromhex(sha.decode()))
    entries = [(name, _FILE_MODE, sha) for name, sha in files]
    entries += [(name, _DIR_MODE, sha) for name, sha in dirs]
    entries.sort(key=lambda e: e[0] + b"/" if e[1] == _DIR_MODE else e[0])
    raw = b"".join(
        mode + b" " + name + b"\0" + bytes.fromhex(sha.decode()) for name, mode, sha in entries
    )
    return make_object(TREE, raw)


def make_commit(
    tree: bytes, parents: Sequence[bytes], who: bytes, seconds: int, message: bytes
) -> RawObject:
    """Return a commit object (author = committer = ``who``, time ``seconds`` UTC)."""
    stamp = b"%s %d +0000\n" % (who, seconds)
    raw = b"".join(
        [
            b"tree ",
            tree,
            b"\n",
            *[b"parent " + p + b"\n" for p in parents],
            b"author ",
            stamp,
            b"committer ",
            stamp,
            b"\n",
            message,
        ]
    )
    return make_object(COMMIT, raw)


_tmp_counter = 0
#: this process's id, for temporary names (``getpid`` is a system call; reset in a forked child)
_pid = os.getpid()


def _reset_pid() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_reset_pid)


def _create_tmp(directory: str, prefix: str) -> tuple[int, str]:
    """Create a new read-only temporary file in ``directory``; returns (fd open for writing,
    path). Names are ``<prefix><pid>_<n>`` (unique within a process; a name left by a dead
    process with the same pid is skipped)."""
    global _tmp_counter
    while True:
        _tmp_counter += 1
        path = f"{directory}{os.sep}{prefix}{_pid}_{_tmp_counter}"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), path
        except FileExistsError:
            continue


def deflate(data: bytes) -> bytes:
    """Return ``data`` as a zlib stream (stored for small data, compressed otherwise).

    Small data is framed by hand as one stored deflate block (RFC 1950/1951: the zlib header
    ``18 19``, a final stored block of ``len`` and its complement, the bytes, their Adler-32):
    for short data, byte for byte what ``zlib.compressobj(0, DEFLATED, 9, 1)`` writes, without
    setting up a compressor per object (20-50 µs each here).
    """
    size = len(data)
    if size < STORE_BELOW_BYTES:
        return b"".join(
            [
                _STORED_HEADER,
                struct.pack("<HH", size, size ^ 0xFFFF),
                data,
                struct.pack(">I", zlib.adler32(data)),
            ]
        )
    return zlib.compress(data)


#: zlib header (deflate, 512-byte window, fastest-level flag) and a final stored block's header.
_STORED_HEADER = b"\x18\x19\x01"


def inflate(stream: bytes, size: int) -> bytes:
    """Return the ``size`` bytes a zlib ``stream`` holds (bytes after the stream are ignored).

    What :func:`deflate` writes for small data (one stored block) is unframed directly, its
    Adler-32 checked, without setting up a zlib decompressor (~5 µs each, three per event read);
    anything else goes through zlib. The caller still checks the length and the object's sha.
    Raises: zlib.error for a stream zlib cannot inflate.
    """
    if (
        stream[:3] == _STORED_HEADER
        and stream[3:7] == struct.pack("<HH", size, size ^ 0xFFFF)
        and len(stream) >= size + 11
    ):
        raw = stream[7 : 7 + size]
        if stream[7 + size : 11 + size] == zlib.adler32(raw).to_bytes(4, "big"):
            return raw
    return zlib.decompress(stream, 15, size or 1)


def write_loose(
    objects_dir: str,
    objects: Sequence[RawObject],
    *,
    fsync: bool = True,
    writeout: bool = False,
    pool: LoosePool | None = None,
    pending: list[int] | None = None,
) -> None:
    """Write loose objects: each to a temporary file (or a spare from ``pool``), then renamed
    into place once every one is written.

    Args:
        objects_dir: the repository's ``objects`` directory.
        objects: the objects; one that already exists is replaced by the same bytes
            (content-addressed: same name, same content), which is harmless and spares two
            ``stat`` calls per object on the append path.
        fsync: fsync each file before its rename and every fan-out directory afterwards
            (the ``fsync`` method of :mod:`perfledger.ledger.durable`); False leaves the flush
            to the caller.
        writeout: have the kernel write every file out to the device, and wait for it, before
            any rename (the ``writeout`` method: the caller's one directory fsync then makes
            them durable).
        pool: spare files to rewrite instead of creating new ones
            (:mod:`perfledger.ledger.loosepool`); a new file when it has none.
        pending: with ``writeout``, the files are renamed into place as soon as their write-out
            has started, and their descriptors are appended here, still open, for the caller
            to wait on and close (:func:`perfledger.ledger.durable.write_out`): the wait then
            overlaps with the caller's own work (locking the ref).
    Raises: OSError from the filesystem (a full disk, say); temporary files are removed, and
        nothing is renamed into place unless every object was written.
    """
    sep = os.sep
    # (descriptor, temporary or spare path, final path, whether it is a spare)
    staged: list[tuple[int, str, str, bool]] = []
    made_directory = False
    try:
        for obj in objects:
            hexsha = obj.id.decode()
            directory = objects_dir + sep + hexsha[:2]
            header = _HEADER_FORMATS[obj.type_num] % len(obj.raw)
            data = deflate(header + obj.raw)
            spare = pool.take() if pool is not None else None
            fd = -1
            if spare is not None:
                try:
                    fd = open_spare(spare)
                except OSError:
                    spare = None
            if spare is None:
                # A unique temporary name, as git does (never ``<sha>.lock``): a writer killed
                # here leaves a ``tmp_obj_*`` file that git fsck ignores and that blocks nobody.
                try:
                    fd, tmp = _create_tmp(directory, "tmp_obj_")
                except FileNotFoundError:  # the first object under this fan-out directory
                    os.makedirs(directory, exist_ok=True)
                    made_directory = True
                    fd, tmp = _create_tmp(directory, "tmp_obj_")
                staged.append((fd, tmp, directory + sep + hexsha[2:], False))
                _write_all(fd, data)
            else:
                staged.append((fd, spare, directory + sep + hexsha[2:], True))
                _pwrite_all(fd, data)
                os.ftruncate(fd, len(data))
            if fsync:
                os.fsync(fd)
            elif writeout:
                write_out(fd, wait=False)  # started now, waited for below: overlapping
        if writeout and pending is None:
            for fd, _, _, _ in staged:
                write_out(fd, wait=True)
    except BaseException:
        for fd, path, _, is_spare in staged:
            os.close(fd)
            if not is_spare:  # a spare that failed stays in the pool's batch, reused later
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        raise
    if writeout and pending is not None:
        pending.extend(fd for fd, _, _, _ in staged)
    else:
        for fd, _, _, _ in staged:
            os.close(fd)
    touched = {objects_dir} if made_directory else set()
    for index, (_, path, final, is_spare) in enumerate(staged):
        try:
            try:
                os.replace(path, final)
            except FileNotFoundError:  # a spare moved into a fan-out directory not made yet
                if not is_spare:
                    raise
                os.makedirs(os.path.dirname(final), exist_ok=True)
                touched.add(objects_dir)
                os.replace(path, final)
        except BaseException:
            for _, left, _, left_is_spare in staged[index:]:
                if not left_is_spare:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(left)
            raise
        if fsync:
            touched.add(os.path.dirname(final))
    if pool is not None:
        pool.settle()
    if fsync:
        for directory in touched:
            fsync_dir(directory)


def _pwrite_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` at offset 0 of ``fd`` (``os.pwrite`` may write less than asked)."""
    offset = os.pwrite(fd, data, 0)
    if offset < len(data):
        view = memoryview(data)
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _entry_header(type_num: int, size: int) -> bytes:
    """Return a pack entry's header: type and size, little-endian base-128 (4 bits first)."""
    if size < 0x800:  # an envelope, tree or commit: at most two bytes
        if size < 0x10:
            return bytes(((type_num << 4) | size,))
        return bytes((0x80 | (type_num << 4) | (size & 0x0F), size >> 4))
    byte = (type_num << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def write_pack(pack_dir: str, objects: Sequence[RawObject], *, fsync: bool = True) -> str:
    """Write ``objects`` as one pack (v2, no deltas) and its index (v2).

    The ``.pack`` is written first and the ``.idx`` last: git and dulwich see a pack only once
    its index exists, so a crash never exposes half a pack. With ``fsync`` each file is fsynced
    before its rename and the directory afterwards; without, the caller's ``syncfs`` flushes
    them. Duplicate objects are written once. Returns the pack's base path.
    """
    builder = PackBuilder()
    builder.add(objects)
    return builder.write(pack_dir, fsync=fsync)


#: Packs of at most this many objects get their index encoded without numpy.
_SMALL_INDEX_ENTRIES = 20_000


class PackBuilder:
    """A pack's entries prepared as objects come (header, deflated content, CRC-32 each), then
    written as one pack and its index by :meth:`write`: the per-object work can overlap with
    whatever produces the objects (the pipelined batch's child prepares each event's entries as
    it builds them). Duplicate objects are kept once."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._chunks: list[bytes] = []
        self._names: list[bytes] = []
        self._offsets: list[int] = []
        self._crcs: list[int] = []
        self._offset = 12

    def add(self, objects: Sequence[RawObject]) -> None:
        """Prepare the entries of ``objects`` (in order; one already added is skipped)."""
        seen, crc32 = self._seen, zlib.crc32
        for obj in objects:
            if obj.id in seen:
                continue
            seen.add(obj.id)
            entry = _entry_header(obj.type_num, len(obj.raw)) + deflate(obj.raw)
            self._names.append(unhexlify(obj.id))
            self._offsets.append(self._offset)
            self._crcs.append(crc32(entry))
            self._chunks.append(entry)
            self._offset += len(entry)

    def write(self, pack_dir: str, *, fsync: bool = True) -> str:
        """Write the pack and then its index (see :func:`write_pack`); returns its base path.
        Raises: OSError from the filesystem."""
        header = b"PACK" + (2).to_bytes(4, "big") + len(self._names).to_bytes(4, "big")
        body = b"".join([header, *self._chunks])
        checksum = hashlib.sha1(body).digest()
        os.makedirs(pack_dir, exist_ok=True)
        base = os.path.join(pack_dir, "pack-" + checksum.hex())
        from dulwich.file import GitFile

        with GitFile(base + ".pack", "wb", mask=0o444, fsync=fsync) as f:
            f.write(body)
            f.write(checksum)
        from perfledger.ledger import packindex

        # numpy's encoder is ~3x faster, but importing numpy costs ~0.2 s: used when it is
        # loaded already (the pipelined batch's child loads it while idle) or the pack is large
        if len(self._names) <= _SMALL_INDEX_ENTRIES and "numpy" not in sys.modules:
            entries = list(zip(self._names, self._offsets, self._crcs, strict=True))
            index_bytes = packindex.encode_index_entries(entries, checksum)
        else:
            arrays = packindex.index_arrays(b"".join(self._names), self._offsets, self._crcs)
            index_bytes = packindex.encode_index(arrays.by_name(), checksum)
        with GitFile(base + ".idx", "wb", mask=0o444, fsync=fsync) as f:
            f.write(index_bytes)
        if fsync:
            fsync_dir(pack_dir)
        return base


def read_index_v2(path: str) -> list[tuple[bytes, int, int]] | None:
    """Read a version-2 pack index: (binary sha, offset, crc32) sorted by sha; None when the file
    is not a version-2 index (dulwich serves those packs)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8 + 1024 + 40 or data[:4] != b"\377tOc" or data[4:8] != b"\0\0\0\2":
        return None
    count = struct.unpack_from(">L", data, 8 + 255 * 4)[0]
    shas_at = 8 + 1024
    crcs_at = shas_at + 20 * count
    offsets_at = crcs_at + 4 * count
    large_at = offsets_at + 4 * count
    crcs = struct.unpack_from(f">{count}L", data, crcs_at)
    small = struct.unpack_from(f">{count}L", data, offsets_at)
    shas = [data[at : at + 20] for at in range(shas_at, crcs_at, 20)]
    if max(small, default=0) & 0x80000000:  # packs over 2 GiB: 64-bit offsets in a side table
        offsets = [
            struct.unpack_from(">Q", data, large_at + 8 * (o & 0x7FFFFFFF))[0]
            if o & 0x80000000
            else o
            for o in small
        ]
        return list(zip(shas, offsets, crcs, strict=True))
    return list(zip(shas, small, crcs, strict=True))


#: Bytes copied at a time when packs are merged (bounds the merge's memory).
_COPY_BLOCK_BYTES = 8 << 20


class DeltaEntry(Exception):
    """A pack holds delta entries, which :func:`copy_merge_packs` does not rewrite."""


def copy_merge_packs(pack_dir: str, bases: Sequence[str]) -> str:
    """Merge packs into one by copying their compressed entries verbatim (as git reuses packed
    objects), each object once; durably, pack before index. Returns the new base path.

    Args:
        pack_dir: the ``objects/pack`` directory.
        bases: the packs' base paths (without ``.pack``/``.idx``).
    Raises: DeltaEntry when a pack holds a delta entry (offsets inside would change); the
        caller then merges through dulwich, which resolves deltas.
    """
    import mmap

    import numpy as np

    from perfledger.ledger.packindex import IndexArrays, concat, encode_index, read_index

    # Read every index first: the header's object count is then known, so the pack's sha1 is
    # computed while copying (memory stays one block, not the whole pack). An object in two
    # packs (a writer killed between packing loose objects and deleting them) is kept once.
    plans: list[tuple[str, IndexArrays]] = []
    for base in bases:
        index = read_index(base + ".idx")
        if index is None:
            raise DeltaEntry(f"{base}.idx is not a version-2 index")
        plans.append((base, index.by_offset()))
    everything = concat([index for _, index in plans])
    _, first_seen = np.unique(everything.names, return_index=True)
    keep = np.zeros(len(everything.names), dtype=bool)
    keep[first_seen] = True
    header = b"PACK" + (2).to_bytes(4, "big") + len(first_seen).to_bytes(4, "big")
    digest = hashlib.sha1(header)
    parts: list[IndexArrays] = []
    fd, tmp_pack = _create_tmp(pack_dir, "tmp_pack_")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(header)
            offset = 12

            def copy(chunk: bytes | memoryview) -> None:
                out.write(chunk)
                digest.update(chunk)

            seen = 0
            for base, index in plans:
                kept = keep[seen : seen + len(index.names)]
                seen += len(index.names)
                if not len(index.names):
                    continue
                with open(base + ".pack", "rb") as f:
                    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                view = memoryview(data)
                try:
                    end_of_data = len(data) - 20
                    starts = index.offsets.astype(np.int64)
                    types = (np.frombuffer(view, dtype=np.uint8)[starts] >> 4) & 0x07
                    if ((types == 6) | (types == 7)).any():
                        raise DeltaEntry(f"{base}.pack holds delta entries")
                    first = int(starts[0])
                    if kept.all():  # the usual case: one block copy, offsets shifted
                        for at in range(first, end_of_data, _COPY_BLOCK_BYTES):
                            copy(view[at : min(at + _COPY_BLOCK_BYTES, end_of_data)])
                        shifted = (starts + (offset - first)).astype(np.uint64)
                        parts.append(IndexArrays(index.names, shifted, index.crcs))
                        offset += end_of_data - first
                        continue
                    ends = np.append(starts[1:], end_of_data)
                    new_offsets: list[int] = []
                    for start, stop in zip(starts[kept].tolist(), ends[kept].tolist(), strict=True):
                        copy(view[start:stop])
                        new_offsets.append(offset)
                        offset += stop - start
                    parts.append(
                        IndexArrays(
                            index.names[kept],
                            np.array(new_offsets, dtype=np.uint64),
                            index.crcs[kept],
                        )
                    )
                finally:
                    view.release()
                    data.close()
            checksum = digest.digest()
            out.write(checksum)
            out.flush()
            os.fsync(out.fileno())
        target = os.path.join(pack_dir, "pack-" + checksum.hex())
        os.replace(tmp_pack, target + ".pack")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_pack)
        raise
    merged = concat(parts).by_name()
    fd, tmp_idx = _create_tmp(pack_dir, "tmp_idx_")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(encode_index(merged, checksum))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp_idx, target + ".idx")
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_idx)
        raise
    fsync_dir(pack_dir)
    return target
