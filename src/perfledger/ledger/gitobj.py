"""Writing git objects fast: raw blob/tree/commit bytes, loose object files and packs, durably
(each file fsynced before its rename, then its directory: :mod:`perfledger.ledger.durable`).

Why not dulwich's writers: their per-object work (``Tree``/``Commit`` objects, a zlib compressor
per object) capped batched appends far below the goal. The formats are git's own (loose objects,
pack v2, index v2 through :mod:`perfledger.ledger.packindex`), checked by ``git fsck``.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import struct
import zlib
from binascii import unhexlify
from collections.abc import Sequence
from typing import NamedTuple

from perfledger.ledger.durable import fsync_dir
from perfledger.ledger.layout import TMP_INDEX_PREFIX, TMP_OBJECT_PREFIX, TMP_PACK_PREFIX
from perfledger.ledger.packindex import IndexArrays, concat, read_index

#: git object type numbers (as in pack entries) and names.
COMMIT, TREE, BLOB, TAG = 1, 2, 3, 4
TYPE_NAMES = {COMMIT: b"commit", TREE: b"tree", BLOB: b"blob", TAG: b"tag"}
#: ``<type> <size>\0``, the header git hashes and stores before an object's content.
HEADER_FORMATS = {num: name + b" %d\0" for num, name in TYPE_NAMES.items()}
#: Objects smaller than this (bytes) are stored uncompressed inside their zlib stream (setting up
#: a compressor costs more than writing an envelope); larger ones are compressed.
STORE_BELOW_BYTES = 1024
_FILE_MODE = b"100644"
_DIR_MODE = b"40000"


class RawObject(NamedTuple):
    """A git object as its type number, its content (without header) and its hex sha (bytes)."""

    type_num: int
    raw: bytes
    id: bytes


def make_object(type_num: int, raw: bytes) -> RawObject:
    """Return the :class:`RawObject` of ``raw`` content of git type ``type_num``."""
    sha = hashlib.sha1(HEADER_FORMATS[type_num] % len(raw) + raw).hexdigest().encode()
    return RawObject(type_num, raw, sha)


def make_blob(data: bytes) -> RawObject:
    """Return the blob object of ``data``."""
    return make_object(BLOB, data)


def make_tree(
    files: Sequence[tuple[bytes, bytes]], dirs: Sequence[tuple[bytes, bytes]] = ()
) -> RawObject:
    """Return a tree of regular ``files`` and subtrees ``dirs`` ((name, hex sha) pairs),
    sorted as git sorts them (a directory name compares as if it ended in ``/``)."""
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
    stamp = b"%s %d +0000" % (who, seconds)
    parent_lines = b"".join(b"parent %s\n" % parent for parent in parents)
    raw = b"tree %s\n%sauthor %s\ncommitter %s\n\n%s" % (tree, parent_lines, stamp, stamp, message)
    return make_object(COMMIT, raw)


_tmp_counter = 0


def _create_tmp(directory: str, prefix: str) -> tuple[int, str]:
    """Create a new read-only temporary file in ``directory``; returns (fd open for writing,
    path). Names are ``<prefix><pid>_<n>`` (unique within a process; a name left by a dead
    process with the same pid is skipped)."""
    global _tmp_counter
    while True:
        _tmp_counter += 1
        path = f"{directory}{os.sep}{prefix}{os.getpid()}_{_tmp_counter}"
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444), path
        except FileExistsError:
            continue


def deflate(data: bytes) -> bytes:
    """Return ``data`` as a zlib stream: below :data:`STORE_BELOW_BYTES` one stored deflate
    block framed by hand (RFC 1950/1951; byte for byte what ``zlib.compressobj(0, DEFLATED, 9,
    1)`` writes; setting up a compressor costs more), compressed otherwise. Any zlib reads it."""
    size = len(data)
    if size < STORE_BELOW_BYTES:
        header = _STORED_HEADER + struct.pack("<HH", size, size ^ 0xFFFF)
        return header + data + struct.pack(">I", zlib.adler32(data))
    return zlib.compress(data)


#: zlib header (deflate, 512-byte window, fastest-level flag) and a final stored block's header.
_STORED_HEADER = b"\x18\x19\x01"


def write_loose(objects_dir: str, objects: Sequence[RawObject]) -> None:
    """Write loose objects under ``objects_dir`` durably: each to a temporary file, fsynced,
    renamed into place (one that exists is replaced by the same bytes); then every directory
    that received a rename is fsynced. Raises: OSError from the filesystem (the temporary is
    removed; objects renamed before it are unreachable until a ref points at them).
    """
    touched: set[str] = set()
    for obj in objects:
        hexsha = obj.id.decode()
        directory = objects_dir + os.sep + hexsha[:2]
        data = deflate(HEADER_FORMATS[obj.type_num] % len(obj.raw) + obj.raw)
        final = directory + os.sep + hexsha[2:]
        try:
            _write_durably(directory, TMP_OBJECT_PREFIX, final, [data])
        except FileNotFoundError:  # the first object under this fan-out directory
            os.makedirs(directory, exist_ok=True)
            touched.add(objects_dir)
            _write_durably(directory, TMP_OBJECT_PREFIX, final, [data])
        touched.add(directory)
    for directory in sorted(touched, reverse=True):  # fan-out directories before objects/
        fsync_dir(directory)


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _entry_header(type_num: int, size: int) -> bytes:
    """Return a pack entry's header: type and size, little-endian base-128 (4 bits first)."""
    byte = (type_num << 4) | (size & 0x0F)
    size >>= 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def write_pack(pack_dir: str, objects: Sequence[RawObject]) -> str:
    """Write ``objects`` (duplicates once) durably as one pack (v2, no deltas) and its index
    (v2): the ``.pack`` first and the ``.idx`` last (readers see a pack once its index exists),
    each fsynced before its rename, then the directory. Returns the pack's base path.
    Raises: OSError from the filesystem (temporary files are removed).
    """
    seen: set[bytes] = set()
    chunks: list[bytes] = []
    names: list[bytes] = []
    offsets: list[int] = []
    crcs: list[int] = []
    offset = 12
    for obj in objects:
        if obj.id in seen:
            continue
        seen.add(obj.id)
        entry = _entry_header(obj.type_num, len(obj.raw)) + deflate(obj.raw)
        names.append(unhexlify(obj.id))
        offsets.append(offset)
        crcs.append(zlib.crc32(entry))
        chunks.append(entry)
        offset += len(entry)
    header = b"PACK" + (2).to_bytes(4, "big") + len(names).to_bytes(4, "big")
    body = b"".join([header, *chunks])
    checksum = hashlib.sha1(body).digest()
    os.makedirs(pack_dir, exist_ok=True)
    base = os.path.join(pack_dir, "pack-" + checksum.hex())
    _write_durably(pack_dir, TMP_PACK_PREFIX, base + ".pack", [body, checksum])
    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    index = IndexArrays(
        np.array(names, dtype="S20"), np.array(offsets, dtype=np.uint64), np.array(crcs, np.uint32)
    )
    _write_durably(pack_dir, TMP_INDEX_PREFIX, base + ".idx", [index.encode(checksum)])
    fsync_dir(pack_dir)
    return base


def _write_durably(directory: str, prefix: str, final: str, parts: Sequence[bytes]) -> None:
    """Write ``parts`` to a new read-only temporary file in ``directory``, fsync it and rename
    it to ``final`` (the caller fsyncs the directory). Raises: OSError (nothing left)."""
    fd, tmp = _create_tmp(directory, prefix)
    try:
        try:
            for part in parts:
                write_all(fd, part)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


#: Bytes copied at a time when packs are merged (bounds the merge's memory).
_COPY_BLOCK_BYTES = 8 << 20


class DeltaEntry(Exception):
    """The pack at ``base`` (path without ``.pack``) holds delta entries (git's ``gc`` wrote
    it), which :func:`copy_merge_packs` does not rewrite: the offsets inside would change."""

    def __init__(self, base: str) -> None:
        super().__init__(f"{base}.pack holds delta entries or an index perfledger does not read")
        self.base = base


def _holds_deltas(pack: str, index: IndexArrays) -> bool:
    """Whether an entry of ``pack`` (its ``index`` read) is an ofs- or ref-delta (type 6, 7)."""

    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    with open(pack, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        # the fancy index copies: no view of the map outlives it
        firsts = np.frombuffer(data, dtype=np.uint8)[index.offsets.astype(np.int64)]
    types = (firsts >> 4) & 0x07
    return bool(((types == 6) | (types == 7)).any())


def copy_merge_packs(pack_dir: str, bases: Sequence[str]) -> str:
    """Merge the packs ``bases`` (paths without ``.pack``) of ``pack_dir`` into one by copying
    their compressed entries verbatim, each object once; durably, pack before index.
    Returns: the new base path. Raises: DeltaEntry, before anything is written.
    """

    import numpy as np  # noqa: PLC0415 (numpy: heavy, kept off the CLI's start-up path)

    # Read every index first: the header's object count is then known, so the pack's sha1 is
    # computed while copying (memory stays one block, not the whole pack). An object in two
    # packs (a writer killed between packing loose objects and deleting them) is kept once.
    plans: list[tuple[str, IndexArrays]] = []
    for base in bases:
        index = read_index(base + ".idx")
        if index is None or _holds_deltas(base + ".pack", index):
            raise DeltaEntry(base)
        order = np.argsort(index.offsets, kind="stable")  # pack order
        plans.append(
            (base, IndexArrays(index.names[order], index.offsets[order], index.crcs[order]))
        )
    everything = concat([index for _, index in plans])
    _, first_seen = np.unique(everything.names, return_index=True)
    keep = np.zeros(len(everything.names), dtype=bool)
    keep[first_seen] = True
    header = b"PACK" + (2).to_bytes(4, "big") + len(first_seen).to_bytes(4, "big")
    digest = hashlib.sha1(header)
    parts: list[IndexArrays] = []
    fd, tmp_pack = _create_tmp(pack_dir, TMP_PACK_PREFIX)
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
    index = concat(parts).encode(checksum)
    _write_durably(pack_dir, TMP_INDEX_PREFIX, target + ".idx", [index])
    fsync_dir(pack_dir)
    return target
