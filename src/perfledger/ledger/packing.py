"""Keeping the number of git packs bounded however many events are appended (a pack per append
makes reads collapse: GUIDE.md pitfalls; docs/storage.md, Packing and claim 7). Single appends
write loose objects and a batch one pack, then, in the appending process after its ref moved:

1. a writer that has left :data:`LOOSE_PACK_THRESHOLD` loose objects packs them into one durable
   pack, then deletes them (one left behind by a kill is packed again, deduplicated on merge);
2. more than :data:`MAX_PACKS` packs are merged geometrically (as git's ``repack --geometric``),
   streaming entries, the merged-away packs deleted (index first) once the merged one is
   durable. A pack holding deltas (git's own ``gc`` wrote it) is left out: git keeps it compact.

One process packs at a time (a non-blocking ``flock``); an object is always in at least one
durable place, and a reader that misses one rescans the pack directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from perfledger.errors import IntegrityError
from perfledger.ledger.gc import try_flock
from perfledger.ledger.gitobj import DeltaEntry, RawObject, copy_merge_packs, write_pack
from perfledger.ledger.layout import CORRUPT_LOOSE_DIR, PACK_DIR, PACK_LOCK_FILE
from perfledger.ledger.packindex import object_count, pack_bases
from perfledger.ledger.reader import read_loose

if TYPE_CHECKING:
    from perfledger.ledger.store import GitStore

_log = logging.getLogger(__name__)

#: Loose objects one writer leaves before it packs them (about 1,000 events).
LOOSE_PACK_THRESHOLD = 3000
#: Packs tolerated before a geometric merge.
MAX_PACKS = 6
#: Each pack kept must hold at least this many times the objects of all smaller packs.
GEOMETRIC_FACTOR = 2


def maybe_pack(store: GitStore, loose_written: int, packs_written: int) -> tuple[int, int]:
    """Pack and merge when a threshold is crossed, given the loose objects and packs this
    writer wrote since it last packed. Returns: the new counts: reset once the work is done,
    unchanged when another process holds the packing lock (tried again on the next append)."""
    if loose_written < LOOSE_PACK_THRESHOLD and packs_written == 0:
        return loose_written, packs_written
    with try_flock(os.path.join(store.derived_dir, PACK_LOCK_FILE)) as locked:
        if not locked:
            return loose_written, packs_written
        packed = loose_written >= LOOSE_PACK_THRESHOLD
        if packed:
            pack_loose(store)
        merge_packs(store)
    # loose objects not packed yet still count towards the next packing
    return (0 if packed else loose_written), 0


def pack_loose(store: GitStore) -> int:
    """Pack every loose object (step 1); returns how many. A file that does not hold the object
    it is named after (a power loss right after renaming a rewritten loose file leaves one,
    unreachable) is moved into ``perfledger/corrupt-loose/`` as evidence, with a warning."""
    objects_dir = store._objects_dir
    objects: list[RawObject] = []
    files: list[str] = []
    corrupt_dir = os.path.join(store.derived_dir, CORRUPT_LOOSE_DIR)
    for path, hexsha in _loose_files(objects_dir):
        try:
            found = read_loose(objects_dir, bytes.fromhex(hexsha))
        except IntegrityError as exc:
            os.makedirs(corrupt_dir, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, os.path.join(corrupt_dir, hexsha))
                _log.warning("%s; moved to %s", exc, corrupt_dir)
            continue
        if found is not None:  # None: it disappeared meanwhile
            objects.append(RawObject(*found, hexsha.encode()))
            files.append(path)
    if not objects:
        return 0
    write_pack(os.path.join(objects_dir, PACK_DIR), objects)
    for path in files:  # their objects are in the durable pack now
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return len(objects)


_HEX_NAME = re.compile(r"[0-9a-f]{2}|[0-9a-f]{38}")


def _loose_files(objects_dir: str) -> Iterator[tuple[str, str]]:
    """Yield (path, hex sha) of every loose object file under ``objects_dir``, in sha order
    (not temporaries, ``pack/`` or ``info/``)."""
    try:
        fanout = os.listdir(objects_dir)
    except FileNotFoundError:
        return
    for prefix in sorted(fanout):
        if len(prefix) != 2 or not _HEX_NAME.fullmatch(prefix):
            continue
        directory = objects_dir + os.sep + prefix
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in sorted(names):
            if len(name) == 38 and _HEX_NAME.fullmatch(name):
                yield directory + os.sep + name, prefix + name


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
    pack_dir = os.path.join(store._objects_dir, PACK_DIR)
    sized: list[tuple[int, str]] = []
    for base in pack_bases(pack_dir):
        with contextlib.suppress(FileNotFoundError):
            sized.append((object_count(base + ".idx") or 0, base))
    if len(sized) <= (1 if force else MAX_PACKS):
        return 0
    sized.sort()
    split = len(sized) if force else _geometric_split([count for count, _ in sized])
    if split < 2:
        return 0
    group = [base for _, base in sized[:split]]
    while True:
        try:
            merged = copy_merge_packs(pack_dir, group)
            break
        except DeltaEntry as exc:
            # git's own gc wrote it: git keeps it compact, perfledger merges the others
            _log.info("%s: left out of the merge", exc)
            group.remove(exc.base)
            if len(group) < 2:
                return 0
    for base in group:
        if os.path.abspath(base) == os.path.abspath(merged):
            continue
        for ext in (".idx", ".pack"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(base + ext)
    if store._repo is not None:
        store._repo.object_store.packs  # noqa: B018  (dulwich rescans the pack directory)
    return len(group)


def pack_stats(store: GitStore) -> dict[str, int]:
    """Return ``{"packs": n, "loose": m}``: the complete packs and the loose objects in the
    ledger's object directory."""
    packs = len(pack_bases(os.path.join(store._objects_dir, PACK_DIR)))
    return {"packs": packs, "loose": sum(1 for _ in _loose_files(store._objects_dir))}
