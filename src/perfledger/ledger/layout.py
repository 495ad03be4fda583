"""Every name perfledger gives to something on disk, in one place (SPEC.md section 2).

A ledger is a git repository. What git owns keeps git's names; what perfledger adds is either
in the repository's config (``[perfledger]``) or under the derived directory, which holds only
rebuildable data and the writers' locks: deleting it changes nothing but speed (``verify``
never reads it; ``audit`` reads only its audit cache, audit_cache.py).

::

    <gitdir>/
      config                     [perfledger] (CONFIG_SECTION) formatVersion, actor
      refs/heads/ledger          LEDGER_REF: the tip of the event DAG
      refs/heads/ledger.lock     git's lock-file protocol (REF_LOCK_SUFFIX)
      refs/remotes/<r>/ledger    tracking refs of sync (TRACKING_REF_FORMAT)
      refs/perfledger/checkpoints/<sha>  signed checkpoint tags (CHECKPOINT_REF_PREFIX; the
                                 name is the tag's sha: created, never moved; checkpoints.py)
      refs/perfledger/witnesses/<sha>    witness co-signatures (WITNESS_REF_PREFIX)
      objects/xx/...             loose objects (temporary names: TMP_OBJECT_PREFIX)
      objects/pack/pack-*.pack   PACK_DIR: packs and their .idx (temporary: TMP_PACK_PREFIX, ...)
      perfledger/                DERIVED_DIR
        append.lock              APPEND_LOCK_FILE: writers' flock (serializes swaps)
        pack.lock                PACK_LOCK_FILE: one packer at a time (flock)
        ref-lock-<pid>-<rand>    REF_LOCK_OWNER_PREFIX: a live writer's ref lock (refcas)
        index-v3.msgpack         INDEX_FILE: the derived commit index (v3: a key used by several
                                 events maps to the first in the total order)
        cache/                   CACHE_DIR: state snapshots (cache.py)
        audit/audit.msgpack      the audit cache: a clean audit's replay state (audit_cache.py)
        corrupt-loose/           CORRUPT_LOOSE_DIR: loose files that failed their hash
        last-pull.json           LAST_PULL_FILE: what the last pull brought (sync.py)
        gc.lock                  GC_GUARD_FILE: gc's open guard (flock; gc.py)

Each event commit's tree: ``event.json`` (EVENT_FILE) and ``artifacts/<blake3>``
(ARTIFACTS_DIR).
"""

from __future__ import annotations

LEDGER_REF = b"refs/heads/ledger"
#: Storage format version written to the repository config and the root event; a ledger in
#: another version is refused before anything else is read. The event-shape limits
#: (:mod:`perfledger.events.limits`) are part of it: raising one is a new version, so that an
#: older perfledger refuses such a ledger as a newer one's (exit 7), not as damaged (exit 5).
FORMAT_VERSION = 1
CONFIG_SECTION = b"perfledger"
REF_LOCK_SUFFIX = ".lock"
#: ``%`` the remote's name.
TRACKING_REF_FORMAT = b"refs/remotes/%s/ledger"
#: Signed checkpoint and witness tags, each ref named by its tag's sha (checkpoints.py).
CHECKPOINT_REF_PREFIX = b"refs/perfledger/checkpoints/"
WITNESS_REF_PREFIX = b"refs/perfledger/witnesses/"

DERIVED_DIR = "perfledger"
APPEND_LOCK_FILE = "append.lock"
PACK_LOCK_FILE = "pack.lock"
REF_LOCK_OWNER_PREFIX = "ref-lock-"
INDEX_FILE = "index-v3.msgpack"
CACHE_DIR = "cache"
CORRUPT_LOOSE_DIR = "corrupt-loose"
LAST_PULL_FILE = "last-pull.json"
GC_GUARD_FILE = "gc.lock"
#: Packs retired by a merge in earlier versions; whatever is left there is garbage (gc.py).
LEGACY_RETIRED_PACKS_DIR = "retired-packs"

#: Temporary names of files being written (git's own prefixes: git fsck ignores them).
TMP_OBJECT_PREFIX = "tmp_obj_"
TMP_PACK_PREFIX = "tmp_pack_"
TMP_INDEX_PREFIX = "tmp_idx_"
PACK_DIR = "pack"

EVENT_FILE = b"event.json"
ARTIFACTS_DIR = b"artifacts"
