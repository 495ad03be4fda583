"""The local audit cache (SPEC.md section 2, "Audit cache"; docs/storage.md): where a completed,
clean audit leaves what a later audit of a head descending from it needs to re-check only the
events after it.

One file, ``<gitdir>/perfledger/audit/audit.msgpack`` (:data:`AUDIT_CACHE_FILE`): a digest line
(blake3 of the body, hex) and the body, an :class:`AuditCache` in msgpack. It is keyed by the
audited head commit id and by :func:`rules_fingerprint` (blake3 of every source file of the
installed package, its version among them): a cache another perfledger wrote, or one written
before any file of perfledger's code changed, is not used. It lives in the clone's own git
directory, outside every ref: git's transports never carry it, so it is never synced and never
read from a remote.

What it proves, and what it does not, is the caller's to say (:mod:`perfledger.commands.audit`);
this module only stores bytes and says why a file was not used.
"""

from __future__ import annotations

import contextlib
import functools
import os

import blake3
import msgspec

from perfledger.ledger.cache import write_derived
from perfledger.ledger.layout import DERIVED_DIR

#: Bumped when the body's shape changes: a cache of another format is not used.
AUDIT_CACHE_FORMAT = 1
AUDIT_CACHE_DIR = "audit"
AUDIT_CACHE_FILE = "audit.msgpack"


class AuditCache(msgspec.Struct, forbid_unknown_fields=True):
    """A completed clean audit's result and replay state (all plain data).

    Attributes:
        format: :data:`AUDIT_CACHE_FORMAT`; rules: :func:`rules_fingerprint` when written.
        head: the audited head commit (hex); state_hash: its folded state's hash.
        commits: every commit reachable from ``head`` (hex, sorted), event commits and merges.
        replay: the auditor's own state (events with their places, counters, folded state),
            encoded and decoded by the replay (:mod:`perfledger.commands.audit.replay`).
    """

    format: int
    rules: str
    head: str
    state_hash: str
    commits: list[str]
    replay: bytes


def cache_path(controldir: str) -> str:
    """The audit cache file of the repository whose git directory is ``controldir``."""
    return os.path.join(controldir, DERIVED_DIR, AUDIT_CACHE_DIR, AUDIT_CACHE_FILE)


@functools.cache
def rules_fingerprint() -> str:
    """blake3 (hex) of the path and bytes of every ``.py`` file of the installed perfledger
    package (``_version.py``, its version, among them), in path order: any change of the code
    that re-decides, folds or verifies (or of anything else in the package) makes another key.
    Raises: OSError when a file cannot be read (the caller then writes and reads no cache)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../perfledger
    digest = blake3.blake3(b"perfledger audit rules\0")
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                data = f.read()
            rel = os.path.relpath(path, root).replace(os.sep, "/").encode()
            digest.update(b"%s\0%d\0" % (rel, len(data)))
            digest.update(data)
    return digest.hexdigest()


def load_audit_cache(controldir: str) -> tuple[AuditCache | None, str | None]:
    """Read the audit cache of ``controldir``: ``(cache, None)`` when it is present, intact
    (its digest matches its body) and keyed by this perfledger's code; ``(None, None)`` when
    there is none; ``(None, why)`` when there is one that is not used (unreadable, damaged,
    another format, another perfledger's code), ``why`` saying which."""
    path = cache_path(controldir)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"the audit cache {path} cannot be read ({exc.strerror})"
    digest, _, body = data.partition(b"\n")
    if blake3.blake3(body).hexdigest().encode() != digest:
        return None, f"the audit cache {path} does not match its digest (damaged or edited)"
    try:
        cache = msgspec.msgpack.decode(body, type=AuditCache)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, f"the audit cache {path} does not decode ({exc})"
    if cache.format != AUDIT_CACHE_FORMAT:
        return None, f"the audit cache {path} has format {cache.format}"
    try:
        rules = rules_fingerprint()
    except OSError as exc:
        return None, f"perfledger's own code cannot be read to key the audit cache ({exc})"
    if cache.rules != rules:
        return None, "the audit cache was written by other perfledger code (version or rules)"
    return cache, None


def save_audit_cache(controldir: str, cache: AuditCache) -> bool:
    """Write ``cache`` atomically (a reader sees the old file or the new one); True when
    written, False when it could not be (a read-only ledger only loses speed)."""
    body = msgspec.msgpack.encode(cache)
    with contextlib.suppress(OSError):
        write_derived(cache_path(controldir), blake3.blake3(body).hexdigest().encode(), b"\n", body)
        return True
    return False
