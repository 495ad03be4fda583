"""Signed checkpoints and witness co-signatures of a ledger (SPEC.md section 2, Checkpoints;
docs/checkpoints.md).

A *checkpoint* is a git annotated tag object on a ledger commit, SSH-signed exactly as
``git tag -s`` writes one with ``gpg.format=ssh`` (the armored signature appended to the tag's
message), so ``git verify-tag`` checks it with nothing but git and an allowed-signers file. Its
message carries, as trailers, the commit (``Ledger-Head``), the number of events reachable from
it (``Event-Count``) and ``Event-Digest``: sha256 over their ids in the total order, one a line,
which standard tools recompute (``git log`` prints the Lamport and Event-Id trailers) and which
no change of perfledger's code moves. A *witness* tag points at a checkpoint tag, repeats what
it names, and is signed with another key after its signer verified the ledger.

Refs: ``refs/perfledger/checkpoints/<tag sha>`` and ``refs/perfledger/witnesses/<tag sha>``.
A ref's name is its value, so a rewritten ref is seen at once, and two machines never write
the same name with different values; refs are only ever created, never moved. A witness keeps
the raw tag objects it signed in a directory of its own (``<sha>.tag``), named by their git
hash, so deleting the refs from a ledger erases nothing the witness can show.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from perfledger.errors import BadRequest, IntegrityError
from perfledger.ledger.dag import CommitNode
from perfledger.ledger.gitobj import TAG, RawObject, make_object
from perfledger.ledger.layout import CHECKPOINT_REF_PREFIX, WITNESS_REF_PREFIX
from perfledger.ledger.sshsig import SIGNATURE_BEGIN, SIGNATURE_END, signers

#: The trailer that marks a checkpoint tag, and its format version (checked first).
CHECKPOINT_MARK = "Perfledger-Checkpoint"
WITNESS_MARK = "Perfledger-Witness"
TAG_FORMAT_VERSION = "1"
DIGEST_PREFIX = "sha256:"
#: The largest checkpoint or witness tag read (bytes): perfledger writes well under 2 KiB.
MAX_TAG_BYTES = 64 * 1024
#: A witness's copy: ``<tag sha>.tag`` holding the tag object's content (no git header).
TRUST_SUFFIX = ".tag"

_SHA = re.compile(r"[0-9a-f]{40}\Z")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_TRAILER = re.compile(rb"^([A-Za-z][A-Za-z0-9-]*): (.*)$")

#: hex sha (bytes) -> the commit's structure (parents hex bytes).
NodeFn = Callable[[bytes], CommitNode]


@dataclass(frozen=True)
class SignedTag:
    """A parsed checkpoint or witness tag: its ``sha`` (hex), raw content, the object it
    points at and that object's type, its trailers (``fields``), the signed ``payload``
    (everything before the signature, what git verifies) and the armored ``signature``."""

    sha: str
    raw: bytes
    target: str
    target_type: str
    fields: dict[str, str]
    payload: bytes
    signature: bytes

    @property
    def is_witness(self) -> bool:
        """True for a witness co-signature (it points at a checkpoint tag)."""
        return WITNESS_MARK in self.fields

    @property
    def head(self) -> str:
        """The ledger commit (hex) the checkpoint names."""
        return self.fields["Ledger-Head"]

    @property
    def count(self) -> int:
        """The number of events reachable from :attr:`head`."""
        return int(self.fields["Event-Count"])

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` over the event ids reachable from :attr:`head`, in the total order."""
        return self.fields["Event-Digest"]

    def describe(self) -> str:
        """``checkpoint <sha12> (N events at <head12>)`` for messages."""
        what = "witness" if self.is_witness else "checkpoint"
        return f"{what} {self.sha[:12]} ({self.count} events at {self.head[:12]})"


def tag_object(raw: bytes) -> RawObject:
    """The git tag object of content ``raw`` (its hex sha computed as git does)."""
    return make_object(TAG, raw)


def build_payload(
    target: str, target_type: str, name: str, tagger: bytes, ts_s: int, subject: str,
    fields: dict[str, str],
) -> bytes:  # fmt: skip
    """The unsigned content of a tag object in git's layout (``object``, ``type``, ``tag``,
    ``tagger`` headers, a blank line, the subject, a blank line, ``Key: value`` trailers)."""
    lines = [f"{k}: {v}" for k, v in fields.items()]
    return (
        f"object {target}\ntype {target_type}\ntag {name}\n".encode()
        + b"tagger "
        + tagger
        + f" {ts_s} +0000\n\n{subject}\n\n".encode()
        + "\n".join(lines).encode()
        + b"\n"
    )


def parse_tag(sha: str, raw: bytes) -> SignedTag:
    """Parse a checkpoint or witness tag object's content ``raw`` (``sha``: its hex name).
    Raises: IntegrityError when it is unsigned, malformed, of an unknown format version, or
        its trailers disagree with its headers."""
    if len(raw) > MAX_TAG_BYTES:
        raise IntegrityError(
            f"tag {sha} under refs/perfledger/ holds {len(raw)} bytes; a checkpoint is under "
            f"{MAX_TAG_BYTES}"
        )
    # the last signature line, as git's parse_signed_buffer takes it: the signed payload is then
    # exactly what git verify-tag checks
    start = raw.rfind(b"\n" + SIGNATURE_BEGIN)
    if start < 0 or not raw.endswith(SIGNATURE_END + b"\n"):
        raise IntegrityError(f"tag {sha} under refs/perfledger/ carries no SSH signature")
    payload, signature = raw[: start + 1], raw[start + 1 :]
    header, _, message = payload.partition(b"\n\n")
    headers: dict[str, str] = {}
    for line in header.split(b"\n"):
        key, _, value = line.partition(b" ")
        headers[key.decode(errors="replace")] = value.decode(errors="replace")
    fields: dict[str, str] = {}
    for line in message.split(b"\n"):
        if match := _TRAILER.match(line):
            fields[match.group(1).decode()] = match.group(2).decode(errors="replace")
    tag = SignedTag(
        sha, raw, headers.get("object", ""), headers.get("type", ""), fields, payload, signature
    )
    _check_shape(tag)
    return tag


def _check_shape(tag: SignedTag) -> None:
    """Refuse a tag whose format version is unknown or whose trailers are malformed."""
    mark = WITNESS_MARK if tag.is_witness else CHECKPOINT_MARK
    version = tag.fields.get(mark)
    if version != TAG_FORMAT_VERSION:
        raise IntegrityError(
            f"tag {tag.sha} is not a perfledger checkpoint of format {TAG_FORMAT_VERSION} "
            f"({mark}: {version!r})",
            hint="upgrade perfledger if a newer one wrote it",
        )
    head, count, digest = (
        tag.fields.get(k, "") for k in ("Ledger-Head", "Event-Count", "Event-Digest")
    )
    expected = ("tag", tag.fields.get("Checkpoint", "")) if tag.is_witness else ("commit", head)
    if not (
        _SHA.match(head) and count.isdigit() and _DIGEST.match(digest)
        and (tag.target_type, tag.target) == expected and _SHA.match(tag.target)
    ):  # fmt: skip
        raise IntegrityError(
            f"tag {tag.sha} is a malformed {mark.lower()} (its object, type, Ledger-Head, "
            "Event-Count or Event-Digest is missing or disagrees)"
        )


# ------------------------------------------------------------------------ replay


def event_digest(event_ids: Iterable[str]) -> str:
    """``sha256:<hex>`` of the event ids (already in the total order), each followed by a
    newline: ``... | sha256sum`` of the ids one a line gives the same hex."""
    h = hashlib.sha256()
    for event_id in event_ids:
        h.update(event_id.encode() + b"\n")
    return DIGEST_PREFIX + h.hexdigest()


def ancestry(node: NodeFn, head: bytes) -> dict[bytes, CommitNode]:
    """Every commit reachable from ``head`` (hex bytes), itself included: sha -> node."""
    found: dict[bytes, CommitNode] = {}
    stack = [head]
    while stack:
        sha = stack.pop()
        if sha in found:
            continue
        found[sha] = current = node(sha)
        stack.extend(current.parents)
    return found


def replay(node: NodeFn, head: bytes) -> tuple[int, str]:
    """(the number of events reachable from ``head``, their :func:`event_digest`), computed
    from the commits' Lamport and Event-Id trailers in the total order (lamport, id)."""
    events = sorted(
        (n.lamport, n.event_id) for n in ancestry(node, head).values() if n.event_id is not None
    )
    return len(events), event_digest(event_id for _, event_id in events)


# ------------------------------------------------------------------------ collections


def published(
    refs: dict[bytes, bytes], read: Callable[[bytes], tuple[int, bytes]]
) -> dict[str, SignedTag]:
    """The checkpoint and witness tags named by ``refs`` (full ref name -> hex sha, bytes),
    read through ``read`` (binary sha -> (type, content)).
    Raises: IntegrityError for a ref whose name is not its value (rewritten), or whose object
        is not a well-formed signed tag."""
    tags: dict[str, SignedTag] = {}
    for ref, value in refs.items():
        prefix = (
            CHECKPOINT_REF_PREFIX if ref.startswith(CHECKPOINT_REF_PREFIX) else WITNESS_REF_PREFIX
        )
        if not ref.startswith(prefix):
            continue
        sha = value.decode()
        if ref[len(prefix) :] != value or not _SHA.match(sha):
            raise IntegrityError(
                f"ref {ref.decode(errors='replace')} holds {sha}: a checkpoint ref is named by "
                "its tag's sha and never rewritten",
                hint="someone moved a checkpoint ref: restore it from a witness's copy",
            )
        type_num, raw = read(bytes.fromhex(sha))
        if type_num != TAG:
            raise IntegrityError(f"ref {ref.decode()} names a git object that is not a tag")
        tag = parse_tag(sha, raw)
        if tag.is_witness != (prefix == WITNESS_REF_PREFIX):
            raise IntegrityError(f"ref {ref.decode()} names a tag of the other kind")
        tags[sha] = tag
    return tags


def ref_of(tag: SignedTag) -> bytes:
    """The ref a tag is published under."""
    prefix = WITNESS_REF_PREFIX if tag.is_witness else CHECKPOINT_REF_PREFIX
    return prefix + tag.sha.encode()


def read_trusted(directory: str) -> dict[str, SignedTag]:
    """The tags a witness kept in ``directory`` (``<sha>.tag``, the tag's content).
    Raises: BadRequest when it is not a directory; IntegrityError for a file whose content
        does not hash to its name, or that is not a well-formed signed tag."""
    if not os.path.isdir(directory):
        raise BadRequest(f"no witness directory at {directory}", hint="pass --trust DIR")
    tags: dict[str, SignedTag] = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(TRUST_SUFFIX):
            continue
        with open(os.path.join(directory, name), "rb") as f:
            raw = f.read()
        sha = tag_object(raw).id.decode()
        if name != sha + TRUST_SUFFIX:
            raise IntegrityError(
                f"{os.path.join(directory, name)} does not hash to its name (git sha {sha})",
                hint="the witness's copy was altered",
            )
        tags[sha] = parse_tag(sha, raw)
    return tags


def keep_copies(directory: str, tags: Sequence[SignedTag]) -> list[str]:
    """Write each tag into the witness's ``directory`` (made if absent) as ``<sha>.tag``,
    fsynced. Returns: the paths written."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for tag in tags:
        path = os.path.join(directory, tag.sha + TRUST_SUFFIX)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(tag.raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        paths.append(path)
    return paths


# ------------------------------------------------------------------------ checks


@dataclass(frozen=True)
class CheckpointPolicy:
    """What a reader demands of a ledger's checkpoints: ``signers_file`` (git's allowed
    signers; None: signatures unchecked), ``trusted_dir`` (a witness's copies: the history
    must extend each), ``require_signers`` (names that must have signed or witnessed the last
    checkpoint) and ``max_unsigned_events`` (how many events the head may hold past it;
    None: any)."""

    signers_file: str | None = None
    trusted_dir: str | None = None
    require_signers: tuple[str, ...] = ()
    max_unsigned_events: int | None = None

    def __post_init__(self) -> None:
        if (self.trusted_dir or self.require_signers) and not self.signers_file:
            raise BadRequest(
                "--trust and --require-signer need --signers FILE (the allowed signers)",
                hint="add --signers FILE: one line per key, `NAME KEYTYPE BASE64KEY` (the format "
                "of git's gpg.ssh.allowedSignersFile)",
            )
        if self.max_unsigned_events is not None and self.max_unsigned_events < 0:
            raise BadRequest(
                "--max-unsigned-events must be 0 or more",
                hint="pass the number of events the head may run past the last checkpoint",
            )

    @property
    def demands(self) -> bool:
        """True when the policy asks for anything beyond a consistent set of checkpoints."""
        return bool(
            self.signers_file or self.trusted_dir or self.require_signers
            or self.max_unsigned_events is not None
        )  # fmt: skip


@dataclass
class CheckpointReport:
    """What :func:`check` found: the checkpoints in the order they extend each other (each
    with who signed and witnessed it), the head's event count, and how many events the head
    holds past the last checkpoint (None: no checkpoint)."""

    checkpoints: list[dict[str, object]] = field(default_factory=list)
    head_events: int = 0
    unsigned_events: int | None = None

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {
            "checkpoints": self.checkpoints,
            "head_events": self.head_events,
            "unsigned_events": self.unsigned_events,
        }


def check(
    tags: dict[str, SignedTag],
    node: NodeFn,
    head: bytes,
    policy: CheckpointPolicy,
    *,
    optional: frozenset[str] = frozenset(),
) -> CheckpointReport:
    """Check the checkpoint and witness ``tags`` against the ledger whose head is ``head``
    (hex bytes; ``node`` gives its commits): every signature (when the policy has a signers
    file), every witness repeats its checkpoint, every checkpoint names a commit of the ledger
    and its count and digest are what replay gives, the checkpoints extend each other (no
    fork), and the policy's signers and distance. ``optional``: checkpoints that may be absent
    from this history (a pull's local checkpoints not pushed yet; still part of the chain).
    Raises: IntegrityError naming the first checkpoint that fails (SPEC.md section 2).
    """
    signed_by: dict[str, set[str]] = {sha: set() for sha in tags}
    if policy.signers_file:
        for tag in tags.values():
            names = signers(tag.payload, tag.signature, policy.signers_file, what=tag.describe())
            signed_by[tag.target if tag.is_witness else tag.sha].update(names)
    checkpoints = {sha: t for sha, t in tags.items() if not t.is_witness}
    for tag in tags.values():
        if not tag.is_witness:
            continue
        cp = checkpoints.get(tag.target)
        if cp is None:
            raise IntegrityError(
                f"{tag.describe()} co-signs checkpoint {tag.target[:12]}, which is not there",
                hint="fetch the checkpoint refs too (perfledger pull carries them)",
            )
        if (cp.head, cp.count, cp.digest) != (tag.head, tag.count, tag.digest):
            raise IntegrityError(f"{tag.describe()} does not repeat what {cp.describe()} names")
    known = ancestry(node, head)
    report = CheckpointReport(head_events=sum(1 for n in known.values() if n.event_id))
    present: list[SignedTag] = []
    for cp in checkpoints.values():
        if cp.head.encode() not in known:
            if cp.sha in optional:
                continue
            raise IntegrityError(
                f"{cp.describe()} names commit {cp.head}, which is not in this ledger's history: "
                "the history was rewritten below a signed checkpoint",
                commit=cp.head,
                hint="this ledger is not the one that was signed; restore it from a clone or "
                "a witness that has the signed history",
            )
        count, digest = replay(node, cp.head.encode())
        if (count, digest) != (cp.count, cp.digest):
            raise IntegrityError(
                f"{cp.describe()} says {cp.count} events with digest {cp.digest}; replay of "
                f"its commit gives {count} events with digest {digest}",
                commit=cp.head,
                hint="the checkpoint lies about the ledger, or the events below it were changed",
            )
        present.append(cp)
    ordered = sorted(checkpoints.values(), key=lambda t: (t.count, t.head, t.sha))
    for earlier, later in itertools.pairwise(ordered):
        if earlier.head == later.head:
            continue
        if earlier.count == later.count or not _reaches(node, later.head, earlier.head):
            raise IntegrityError(
                f"{later.describe()} does not extend {earlier.describe()}: two signed "
                "checkpoints of one ledger fork",
                hint="a ledger's checkpoints only ever extend each other; one of them signs a "
                "rewritten history",
            )
    report.checkpoints = [
        {"tag": t.sha, "head": t.head, "events": t.count, "digest": t.digest,
         "signers": sorted(signed_by[t.sha]), "in_history": t in present}
        for t in ordered
    ]  # fmt: skip
    _apply_policy(present, signed_by, report, policy)
    return report


def _reaches(node: NodeFn, tip: str, target: str) -> bool:
    return target.encode() in ancestry(node, tip.encode())


def _apply_policy(
    present: list[SignedTag],
    signed_by: dict[str, set[str]],
    report: CheckpointReport,
    policy: CheckpointPolicy,
) -> None:
    """Refuse when the last checkpoint lacks a required signer or the head ran too far."""
    if not present:
        if policy.require_signers or policy.max_unsigned_events is not None:
            raise IntegrityError(
                "the ledger has no signed checkpoint, and a signed one is required",
                hint="sign one (perfledger checkpoint sign) and have it witnessed",
            )
        return
    last = max(present, key=lambda t: t.count)
    names = set().union(*(signed_by[t.sha] for t in present if t.head == last.head))
    report.unsigned_events = report.head_events - last.count
    missing = [n for n in policy.require_signers if n not in names]
    if missing:
        raise IntegrityError(
            f"the last checkpoint ({last.count} events at {last.head[:12]}) lacks a signature "
            f"by {', '.join(missing)} (signed by: {', '.join(sorted(names)) or 'nobody known'})",
            hint="ask them to co-sign it: perfledger checkpoint witness",
        )
    limit = policy.max_unsigned_events
    if limit is not None and report.unsigned_events > limit:
        raise IntegrityError(
            f"the head holds {report.unsigned_events} events past the last checkpoint "
            f"({last.count} events at {last.head[:12]}); at most {limit} are allowed",
            hint="sign a new checkpoint (perfledger checkpoint sign) and have it witnessed",
        )
