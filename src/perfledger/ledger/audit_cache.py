"""The local audit cache (SPEC.md section 2, "Audit cache"; docs/storage.md): where a completed,
clean audit leaves what a later audit of a head descending from it needs to re-check only the
events after it.

One file, ``<gitdir>/perfledger/audit/audit.msgpack`` (:data:`AUDIT_CACHE_FILE`): a digest line
(blake3 of the body keyed by this auditor's own secret, hex: :func:`auditor_key`) and the body, an :class:`AuditCache` in msgpack. It is keyed by the
audited head commit id and by :func:`rules_fingerprint` (blake3 of every source file of the
installed package, its version among them): a cache another perfledger wrote, or one written
before any file of perfledger's code changed, is not used. It lives in the clone's own git
directory, outside every ref: git's transports never carry it, so it is never synced and never
read from a remote. A ledger handed over as a directory (a tarball, a shared disk) may carry a
cache its sender wrote, digest and all: the digest is keyed by a secret kept outside every
repository (:func:`auditor_key`), so such a cache is not used unless this auditor's key wrote it.

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


#: Where the auditor's key lives unless ``PERFLEDGER_AUDIT_KEY`` names another file.
AUDIT_KEY_FILE = "audit-cache.key"


def auditor_key_path() -> str:
    """The file holding this auditor's audit-cache key: ``$PERFLEDGER_AUDIT_KEY`` when set, else
    ``$XDG_STATE_HOME/perfledger/audit-cache.key`` (``~/.local/state`` when unset): outside every
    repository, so a ledger's sender cannot ship it with the ledger."""
    named = os.environ.get("PERFLEDGER_AUDIT_KEY")
    if named:
        return named
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(state, "perfledger", AUDIT_KEY_FILE)


def auditor_key(create: bool = False) -> bytes | None:
    """This auditor's 32-byte audit-cache key (the key of blake3's keyed mode), made (random,
    mode 0600) when ``create`` and there is none. None when there is none (or it cannot be read
    or made): no cache is then used or written. A key of another length is not used."""
    path = auditor_key_path()
    try:
        with open(path, "rb") as f:
            key = f.read()
        return key if len(key) == 32 else None
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another audit made it first
        return auditor_key(create=False)
    except OSError:
        return None
    key = os.urandom(32)
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())
    return key


def _digest(body: bytes, key: bytes) -> bytes:
    return blake3.blake3(body, key=key).hexdigest().encode()


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
    key = auditor_key()
    if key is None:
        return (
            None,
            f"the audit cache {path} is not used: there is no auditor key ({auditor_key_path()}) to check it with",
        )
    digest, _, body = data.partition(b"\n")
    if _digest(body, key) != digest:
        return None, (
            f"the audit cache {path} does not match its digest under this auditor's key "
            "(damaged, edited, or written by someone else)"
        )
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
    """Write ``cache`` atomically (a reader sees the old file or the new one), its digest keyed
    by :func:`auditor_key` (made on first use); True when written, False when it could not be
    (a read-only ledger, no key: only speed is lost)."""
    key = auditor_key(create=True)
    if key is None:
        return False
    body = msgspec.msgpack.encode(cache)
    with contextlib.suppress(OSError):
        write_derived(cache_path(controldir), _digest(body, key), b"\n", body)
        return True
    return False
