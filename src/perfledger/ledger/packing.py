"""Keeping the number of git packs bounded however many events are appended.

Why: dulwich writes one pack per ``add_objects`` call; a pack per append left 3,000 packs after
3,000 events and reads collapsed to 44 events/s (GUIDE.md pitfalls). perfledger writes single
appends as loose objects and a batch as one pack, then:

1. when a writer has left :data:`LOOSE_PACK_THRESHOLD` loose objects, they are packed into one
   pack (fsynced before any loose object is moved); the packed loose files are then moved, by a
   background thread (as ``git gc --auto`` detaches), into a pool of spare files that later
   single appends rewrite in place (:mod:`perfledger.ledger.loosepool`): deleting a file whose
   blocks were just written cost 0.4-3 ms each on this machine's disk (ext4 mounted with
   ``discard``). Moving a loose object that is already in a durable pack is always safe to
   interrupt; one left behind is packed again and deduplicated by the next merge;
2. when there are more than :data:`MAX_PACKS` packs, the smallest are merged geometrically (each
   remaining pack at least :data:`GEOMETRIC_FACTOR` times the sum of the smaller ones, as git's
   ``repack --geometric``), streaming objects so memory does not grow with the ledger; the
   merged-away packs are moved out of the pack directory and deleted by the background thread
   too.

Only one process packs at a time (a non-blocking ``flock``); the others skip. Readers are safe
throughout: an object is always in at least one place, and dulwich rescans the pack directory
when an object is not where it looked.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from perfledger.errors import IntegrityError
from perfledger.ledger.durable import fsync_dir
from perfledger.ledger.gitobj import DeltaEntry, RawObject, copy_merge_packs, write_pack
from perfledger.ledger.reader import read_loose

if TYPE_CHECKING:  # dulwich is imported where packing runs: appends that do not pack skip it
    from dulwich.pack import Pack, UnpackedObject

    from perfledger.ledger.store import GitStore

_log = logging.getLogger(__name__)

#: Loose objects one writer leaves before it packs them (about 1,000 events).
LOOSE_PACK_THRESHOLD = 3000
#: Packs tolerated before a geometric merge.
MAX_PACKS = 6
#: Each pack kept must hold at least this many times the objects of all smaller packs.
GEOMETRIC_FACTOR = 2


def maybe_pack(store: GitStore, loose_written: int, packs_written: int) -> tuple[int, int]:
    """Pack loose objects and merge packs when thresholds are crossed.

    Args:
        store: the git store.
        loose_written: loose objects this writer has written since it last packed.
        packs_written: packs this writer has written (batches, pulls) since it last looked.
    Returns: the new (loose_written, packs_written): reset after the work is done, unchanged when
        another process holds the packing lock (it will be tried again on the next append).

    Every new pack makes it count the packs on disk (one directory listing): counting only this
    writer's packs let the total reach twice :data:`MAX_PACKS` before a merge.
    """
    if loose_written < LOOSE_PACK_THRESHOLD and packs_written == 0:
        return loose_written, packs_written
    if loose_written >= LOOSE_PACK_THRESHOLD:  # the packing child's job, where there is one
        kept = store.hand_off_loose_packing(loose_written)
        if kept == 0:
            return 0, 0  # the child merges packs after packing the loose objects
        if kept is not None:  # it still packs the previous ones: tried again at a later append
            return kept, packs_written
    with _try_lock(store) as locked:
        if not locked:
            return loose_written, packs_written
        packed = loose_written >= LOOSE_PACK_THRESHOLD
        if packed:
            pack_loose(store, background=True, known=store._written_loose)
            store._written_loose.clear()
        merge_packs(store)
    # loose objects not packed yet still count towards the next packing (a writer that mixes
    # batches with single appends used to restart from 0 at each batch, and never packed)
    return (0 if packed else loose_written), 0


@contextlib.contextmanager
def _try_lock(store: GitStore) -> Iterator[bool]:
    os.makedirs(store.derived_dir, exist_ok=True)
    fd = os.open(os.path.join(store.derived_dir, "pack.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def pack_loose(
    store: GitStore, *, background: bool = False, known: Mapping[bytes, RawObject] | None = None
) -> int:
    """Move every loose object into one new fsynced pack; returns how many were packed.

    Loose objects are listed and read here (each inflated and checked against its name by
    :func:`perfledger.ledger.reader.read_loose`), not through dulwich, whose per-object parse
    cost about 0.35 ms: a third of a single append's CPU time, amortized. Objects in ``known``
    (binary sha -> object: what this writer wrote loose itself) are taken from memory instead
    of being read back. With ``background`` the loose copies are deleted by the store's
    housekeeping thread (:meth:`GitStore.run_in_background`) after this returns; otherwise
    before.

    A corrupt loose object is moved aside (see :func:`_loose_objects`), not packed.
    """
    objects_dir = store._objects_dir
    objects: list[RawObject] = []
    files: list[tuple[str, int]] = []  # (loose file, an upper bound of its size in bytes)
    corrupt_dir = os.path.join(store.derived_dir, CORRUPT_LOOSE_DIR)
    for path, sha, found in _loose_objects(objects_dir, known or {}, corrupt_dir):
        obj = found if isinstance(found, RawObject) else RawObject(*found, sha.hex().encode())
        objects.append(obj)
        # the raw size bounds the file's (stored or deflated) size from above, give or take
        # the zlib framing: enough to keep artifacts out of the pool
        files.append((path, len(obj.raw) + 64))
    if not objects:
        return 0
    write_pack(os.path.join(objects_dir, "pack"), objects)
    if store._repo is not None:  # dulwich's view of the packs, when it has one
        store._repo.object_store._update_pack_cache()
    if background:
        store.run_in_background(store.loose_pool.retire, files)
    else:
        _delete_loose([path for path, _ in files])
    return len(objects)


_HEX_NAME = re.compile(r"[0-9a-f]{2}|[0-9a-f]{38}")


#: Directory (under the derived directory) where corrupt loose object files are moved.
CORRUPT_LOOSE_DIR = "corrupt-loose"


def _loose_objects(
    objects_dir: str, known: Mapping[bytes, RawObject], corrupt_dir: str
) -> Iterator[tuple[str, bytes, RawObject | tuple[int, bytes]]]:
    """Yield (path, binary sha, the object from ``known`` or its (type number, content) read
    back) for every loose object under ``objects_dir``; a file that disappears meanwhile
    (packed by another writer) is skipped.

    A file that does not hold the object it is named after is moved into ``corrupt_dir`` (kept
    as evidence) with a warning, and the rest is packed: a power loss between renaming a
    rewritten loose file into place and its data reaching the disk leaves such a file, which
    no ref can reach (refs move only after their objects are durable). Were one reachable
    (tampering), ``verify`` reports its event either way."""
    try:
        fanout = os.listdir(objects_dir)
    except FileNotFoundError:
        return
    for prefix in sorted(fanout):
        if len(prefix) != 2 or not _HEX_NAME.fullmatch(prefix):
            continue  # pack/, info/ and anything that is not a loose-object directory
        directory = objects_dir + os.sep + prefix
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in sorted(names):
            if len(name) != 38 or not _HEX_NAME.fullmatch(name):
                continue  # temporary files of a concurrent writer
            sha = bytes.fromhex(prefix + name)
            path = directory + os.sep + name
            mine = known.get(sha)
            if mine is not None:
                yield path, sha, mine
                continue
            try:
                found = read_loose(objects_dir, sha)
            except IntegrityError as exc:
                os.makedirs(corrupt_dir, exist_ok=True)
                with contextlib.suppress(FileNotFoundError):
                    os.replace(path, os.path.join(corrupt_dir, prefix + name))
                    _log.warning("%s; moved to %s", exc, corrupt_dir)
                continue
            if found is not None:
                yield path, sha, found


def _delete_loose(paths: list[str]) -> None:
    """Delete loose object files (their objects are already in a durable pack)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _geometric_split(sizes: list[int]) -> int:
    """Return how many of the packs (sorted by size, ascending) to merge into one."""
    split = 0
    for i in range(len(sizes) - 1, 0, -1):
        if sizes[i - 1] * GEOMETRIC_FACTOR > sizes[i]:
            split = i
            break
    total = sum(sizes[:split])
    while split < len(sizes) and total * GEOMETRIC_FACTOR > sizes[split]:
        total += sizes[split]
        split += 1
    return split


def merge_packs(store: GitStore, *, force: bool = False) -> int:
    """Merge packs geometrically when there are more than :data:`MAX_PACKS` (or all of them when
    ``force``); returns the number of packs merged (0 when nothing was done)."""
    object_store = store.repo.object_store
    object_store._update_pack_cache()
    packs: list[Pack] = list(object_store.packs)
    if len(packs) <= (1 if force else MAX_PACKS):
        return 0
    packs.sort(key=len)
    split = len(packs) if force else _geometric_split([len(p) for p in packs])
    if split < 2:
        return 0
    group = packs[:split]
    pack_dir = os.path.join(store._objects_dir, "pack")
    try:
        merged_base = copy_merge_packs(pack_dir, [p._basename for p in group])
        stale = [p for p in group if os.path.abspath(p._basename) != os.path.abspath(merged_base)]
    except DeltaEntry:
        merged_name = _merge_through_dulwich(store, group)
        stale = [p for p in group if p.name() != merged_name]
    _retire_packs(store, stale)
    return len(group)


#: Directory (under the derived directory) where merged-away packs wait for deletion.
RETIRED_PACKS_DIR = "retired-packs"


def _retire_packs(store: GitStore, packs: list[Pack]) -> None:
    """Take merged-away packs out of the pack directory (renames: the index first, so that no
    reader ever sees a pack without one) and delete them in the background thread: deleting a
    file whose blocks were just written cost milliseconds here (see the module docstring), and
    a merge retires several. Their objects are all in the durable merged pack. Files left in
    the directory by a killed writer are deleted with the next retired ones."""
    retired = os.path.join(store.derived_dir, RETIRED_PACKS_DIR)
    os.makedirs(retired, exist_ok=True)
    for pack in packs:
        base = pack._basename
        for ext in (".idx", ".pack"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(base + ext, os.path.join(retired, os.path.basename(base) + ext))
    store.repo.object_store._update_pack_cache()  # forgets (and closes) the packs moved out
    store.run_in_background(_delete_directory_files, retired)


def _delete_directory_files(directory: str) -> None:
    """Delete the files in ``directory`` (retired packs)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def _merge_through_dulwich(store: GitStore, group: list[Pack]) -> bytes:
    """Merge packs that hold deltas (a git gc'd ledger): dulwich resolves and rewrites every
    object. Each object is written once. Returns the merged pack's ``Pack.name()``."""
    object_store = store.repo.object_store
    # An object can be in two packs (a writer killed between packing loose objects and deleting
    # them; an object written loose again after it was packed): write it once, as git does.
    unique: set[bytes] = set()
    for pack in group:
        unique.update(pack.index)  # hex shas
    count = len(unique)

    from dulwich.pack import full_unpacked_object

    def records() -> Iterator[UnpackedObject]:
        written: set[bytes] = set()
        for pack in group:
            for obj in pack.iterobjects():
                if obj.id in written:
                    continue
                written.add(obj.id)
                yield full_unpacked_object(obj)

    object_store.fsync_object_files = True
    merged = object_store.add_pack_data(count, records())
    fsync_dir(os.path.join(store._objects_dir, "pack"))
    return merged.name() if merged is not None else b""


def pack_stats(store: GitStore) -> dict[str, int]:
    """Return ``{"packs": n, "loose": m}`` for the ledger's object directory, once the
    store's background deletion of packed loose objects has finished."""
    store.wait_background()
    object_store = store.repo.object_store
    object_store._update_pack_cache()
    loose = sum(1 for _ in object_store._iter_loose_objects())
    return {"packs": len(list(object_store.packs)), "loose": loose}
