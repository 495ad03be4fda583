"""Every name perfledger gives to something on disk, in one place (SPEC.md section 2).

A ledger is a git repository. What git owns keeps git's names; what perfledger adds is either
in the repository's config (``[perfledger]``) or under the derived directory, which holds only
rebuildable data and the writers' locks: deleting it changes nothing but speed (and ``verify``
never reads it).

::

    <gitdir>/
      config                     [perfledger] formatVersion = FORMAT_VERSION, actor = ...
      refs/heads/ledger          LEDGER_REF: the tip of the event DAG
      refs/heads/ledger.lock     git's lock-file protocol (REF_LOCK_SUFFIX)
      refs/remotes/<r>/ledger    tracking refs of sync (TRACKING_REF_FORMAT)
      objects/xx/...             loose objects (temporary names: TMP_OBJECT_PREFIX)
      objects/pack/pack-*.pack   packs and their .idx (temporary names: TMP_PACK_PREFIX, ...)
      perfledger/                DERIVED_DIR
        append.lock              APPEND_LOCK_FILE: writers' flock (serializes swaps)
        pack.lock                PACK_LOCK_FILE: one packer at a time (flock)
        ref-lock-<pid>-<rand>    REF_LOCK_OWNER_PREFIX: a live writer's ref lock (refcas)
        index-v3.msgpack         INDEX_FILE: the derived commit index (v3: a key used by several
                                 events maps to the first in the total order)
        cache/                   CACHE_DIR: state snapshots (cache.py)
        corrupt-loose/           CORRUPT_LOOSE_DIR: loose files that failed their hash
        last-pull.json           LAST_PULL_FILE: what the last pull brought (changes.py)
        gc.lock                  GC_GUARD_FILE: gc's open guard (flock; gc.py)

Each event commit's tree: ``event.json`` (EVENT_FILE) and ``artifacts/<blake3>``
(ARTIFACTS_DIR).
"""

from __future__ import annotations

#: The branch the events live on.
LEDGER_REF = b"refs/heads/ledger"
#: Storage format version written to the repository config and the root event; a ledger in
#: another version is refused before anything else is read.
FORMAT_VERSION = 1
#: The repository config section of perfledger's keys.
CONFIG_SECTION = b"perfledger"
#: git's lock file of a ref: ``<ref>.lock``.
REF_LOCK_SUFFIX = ".lock"
#: Tracking ref of a remote (``%`` the remote's name).
TRACKING_REF_FORMAT = b"refs/remotes/%s/ledger"

#: Directory (inside the git dir) for derived, rebuildable data and the writers' locks.
DERIVED_DIR = "perfledger"
#: The writers' advisory flock, in the derived directory.
APPEND_LOCK_FILE = "append.lock"
#: The packers' advisory flock, in the derived directory.
PACK_LOCK_FILE = "pack.lock"
#: Prefix of a writer's owner name for the ref lock it holds (see refcas).
REF_LOCK_OWNER_PREFIX = "ref-lock-"
#: The derived commit index.
INDEX_FILE = "index-v3.msgpack"
#: The state snapshots.
CACHE_DIR = "cache"
#: Loose object files that do not hold the object they are named after, kept as evidence.
CORRUPT_LOOSE_DIR = "corrupt-loose"
#: What the last pull brought.
LAST_PULL_FILE = "last-pull.json"
#: gc's open guard: every open store holds its flock shared, gc exclusively (gc.py).
GC_GUARD_FILE = "gc.lock"
#: Packs retired by a merge in earlier versions; whatever is left there is garbage (gc.py).
LEGACY_RETIRED_PACKS_DIR = "retired-packs"

#: Temporary names of files being written (git's own prefixes: git fsck ignores them).
TMP_OBJECT_PREFIX = "tmp_obj_"
TMP_PACK_PREFIX = "tmp_pack_"
TMP_INDEX_PREFIX = "tmp_idx_"
#: Packs directory, under ``objects``.
PACK_DIR = "pack"

#: The envelope's file in an event commit's tree.
EVENT_FILE = b"event.json"
#: The directory of an event's artifacts in its tree (``artifacts/<blake3-hex>``).
ARTIFACTS_DIR = b"artifacts"
