"""The readers of outside bytes, each with a structure-aware hypothesis strategy of hostile inputs
and the errors it may answer with (docs/storage.md, "Limits"). Shared by the property tests
(``test_reader_properties.py``, a small budget), the corpus replay (``test_fuzz_corpus.py``) and
the long fuzzing run (``bench/fuzz_readers.py``).

The property of every reader: it returns, or raises one of its documented
:class:`~perfledger.errors.PerfledgerError` classes (a clear message, a documented exit code);
never another exception (the CLI's exit 1), never a ``RecursionError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from perfledger.errors import BadRequest, EvidenceError, IntegrityError, PerfledgerError
from perfledger.events.limits import MAX_CONTAINER_ITEMS, MAX_DEPTH, MAX_PARENTS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROFILERS = FIXTURES / "profilers"
#: Where the long run keeps the inputs that found a defect, one directory per reader.
CORPUS = FIXTURES / "fuzz"


@dataclass(frozen=True)
class Reader:
    """``run(data)`` reads the hostile ``data``; it may raise only ``allowed``."""

    name: str
    inputs: st.SearchStrategy[bytes]
    run: Callable[[bytes], object]
    allowed: tuple[type[PerfledgerError], ...]


# ------------------------------------------------------------------ hostile JSON, by structure


def nested(depth: int, leaf: bytes = b"0", opener: bytes = b"[") -> bytes:
    """``depth`` arrays (or objects, ``opener`` ``{"k":``) around ``leaf``."""
    closer = b"]" if opener == b"[" else b"}"
    return opener * depth + leaf + closer * depth


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_json_values = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


@st.composite
def hostile_json(draw: st.DrawFn) -> bytes:
    """JSON bytes shaped to exhaust a reader: deep nesting (arrays or objects, around the limit
    and far past it), long strings, long arrays, huge integers, NaN literals, duplicate keys,
    truncation, or an ordinary value."""
    shape = draw(
        st.sampled_from(
            ["deep", "deep-objects", "near-limit", "long-string", "long-array", "huge-int",
             "nan", "duplicate-keys", "truncated", "plain"]
        )
    )  # fmt: skip
    if shape == "deep":
        return nested(draw(st.integers(0, 200_000)))
    if shape == "deep-objects":
        return nested(draw(st.integers(0, 5_000)), opener=b'{"k":')
    if shape == "near-limit":
        return nested(draw(st.integers(MAX_DEPTH - 4, MAX_DEPTH + 4)))
    if shape == "long-string":
        return b'"' + b"x" * draw(st.integers(0, 2 * 1024 * 1024)) + b'"'
    if shape == "long-array":
        return b"[" + b"0," * draw(st.integers(0, MAX_CONTAINER_ITEMS + 10)) + b"0]"
    if shape == "huge-int":
        return str(draw(st.integers(2**63 - 2, 2**80)) * draw(st.sampled_from([1, -1]))).encode()
    if shape == "nan":
        return b'{"a": [1, NaN, Infinity, -Infinity, 1e999]}'
    if shape == "duplicate-keys":
        return b'{"a": 1, "a": 2}'
    plain = json.dumps(draw(_json_values)).encode()
    if shape == "truncated":
        return plain[: draw(st.integers(0, max(len(plain) - 1, 0)))]
    return plain


# -------------------------------------------------------------------------- the readers


_TEMPLATE = (
    b'{"actor":"t","artifacts":{},"id":"' + b"0" * 64 + b'","idempotency_key":null,'
    b'"kind":"NoteRecorded","lamport":2,"parents":["' + b"1" * 64 + b'"],'
    b'"payload":{"tags":[],"text":"x"},"request":@,"schema":1,"ts":"2026-01-01T00:00:00.000000Z"}'
)


@st.composite
def event_json(draw: st.DrawFn) -> bytes:
    """An ``event.json``: the envelope of a note with a hostile request, or hostile bytes."""
    if draw(st.booleans()):
        return _TEMPLATE.replace(b"@", draw(hostile_json()))
    return draw(st.one_of(hostile_json(), st.binary(max_size=2048)))


def _read_event_json(data: bytes) -> object:
    from perfledger.events.envelope import decode_envelope

    return decode_envelope(data)


_COMMIT = (
    b"tree " + b"a" * 40 + b"\n@author t <perfledger> 1767225600 +0000\n"
    b"committer t <perfledger> 1767225600 +0000\n\nNoteRecorded: x\n\nEvent-Id: " + b"b" * 64
    + b"\nLamport: 2\n"
)  # fmt: skip


@st.composite
def commit_raw(draw: st.DrawFn) -> bytes:
    """A raw commit: many parents, odd header lines, a long message, or random bytes."""
    shape = draw(st.sampled_from(["parents", "headers", "message", "bytes"]))
    if shape == "parents":
        count = draw(st.integers(0, MAX_PARENTS + 300))
        return _COMMIT.replace(b"@", b"".join(b"parent %040x\n" % i for i in range(count)))
    if shape == "headers":
        lines = draw(st.lists(st.binary(max_size=60).filter(lambda b: b"\n" not in b), max_size=8))
        return _COMMIT.replace(b"@", b"".join(line + b"\n" for line in lines))
    if shape == "message":
        return _COMMIT.replace(b"@", b"") + b"x" * draw(st.integers(0, 600_000))
    return draw(st.binary(max_size=4096))


def _read_commit(raw: bytes) -> object:
    from perfledger.ledger.index import entry_from_raw
    from perfledger.ledger.objects import event_trailers, parse_commit

    parsed = parse_commit(b"\x01" * 20, raw)
    event_trailers(parsed.message)
    return entry_from_raw(raw, "01" * 20)


@st.composite
def tree_raw(draw: st.DrawFn) -> bytes:
    """A raw tree: entries with odd modes and names, many entries, or random bytes."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=4096))
    modes = st.sampled_from([b"100644", b"100755", b"120000", b"40000", b"0100644", b"1", b""])
    names = st.one_of(st.binary(min_size=0, max_size=80).filter(lambda b: b"\0" not in b),
                      st.just(b"event.json"), st.just(b"artifacts"))  # fmt: skip
    entries = draw(st.lists(st.tuples(modes, names, st.binary(min_size=20, max_size=20)),
                            max_size=draw(st.sampled_from([5, 50, 30_000]))))  # fmt: skip
    return b"".join(mode + b" " + name + b"\0" + sha for mode, name, sha in entries)


def _read_tree(raw: bytes) -> object:
    from perfledger.ledger import verify

    return verify._tree_entries(raw, "a tree")


@st.composite
def packed_refs(draw: st.DrawFn) -> bytes:
    """A ``packed-refs`` file: long names, lines without a newline, peeled lines, or bytes."""
    lines = draw(
        st.lists(
            st.one_of(
                st.builds(
                    lambda n: b"%040x refs/heads/ledger" % 1 + b"x" * n, st.integers(0, 9000)
                ),
                st.just(b"# pack-refs with: peeled fully-peeled sorted"),
                st.just(b"^" + b"c" * 40),
                st.binary(max_size=200).map(lambda b: b.replace(b"\n", b"")),
                st.just(b"d" * 40 + b" refs/heads/ledger"),
            ),
            max_size=20,
        )
    )
    text = b"\n".join(lines)
    return text if draw(st.booleans()) else text + b"\n"


def _git_dir(files: dict[str, bytes]) -> tempfile.TemporaryDirectory[str]:
    holder = tempfile.TemporaryDirectory(prefix="fuzz-refs-")
    for name, data in files.items():
        path = os.path.join(holder.name, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(data)
    return holder


def _read_packed_refs(data: bytes) -> object:
    from perfledger.api import ledgers_below
    from perfledger.ledger.refcas import read_ref

    with _git_dir({"repo/HEAD": b"ref: refs/heads/ledger\n", "repo/packed-refs": data}) as top:
        ledgers_below(top)  # never raises
        return read_ref(os.path.join(top, "repo"), b"refs/heads/ledger")


def _read_loose_ref(data: bytes) -> object:
    from perfledger.ledger.refcas import read_ref

    with _git_dir({"refs/heads/ledger": data}) as top:
        return read_ref(top, b"refs/heads/ledger")


# ------------------------------------------------------------------ git objects and packs

_KINDS = [b"blob", b"tree", b"commit", b"tag", b"blub", b""]


@st.composite
def loose_object(draw: st.DrawFn) -> bytes:
    """A loose object file: a zlib stream of ``<type> <size>\0<content>`` whose size may lie
    (far larger: a decompression bomb's header; smaller; not a number), a stream cut short,
    or random bytes."""
    how = draw(st.sampled_from(["honest", "lying", "bomb", "cut", "bytes"]))
    if how == "bytes":
        return draw(st.binary(max_size=2048))
    content = draw(st.binary(max_size=512))
    size = {
        "honest": str(len(content)).encode(),
        "lying": draw(st.sampled_from([b"0", b"-1", b"1e3", b"9" * 25, b" 1", b"12a"])),
        "bomb": str(draw(st.integers(2**26, 2**40))).encode(),
    }.get(how, str(len(content)).encode())
    if how == "bomb" and draw(st.booleans()):  # a real run of zeros behind the header
        content = b"\0" * draw(st.integers(0, 4 << 20))
    stream = zlib.compress(draw(st.sampled_from(_KINDS)) + b" " + size + b"\0" + content)
    return stream[: draw(st.integers(0, len(stream)))] if how == "cut" else stream


def _read_loose_object(data: bytes) -> object:
    from perfledger.ledger.reader import read_loose

    sha = bytes(range(20))
    with _git_dir({sha.hex()[:2] + "/" + sha.hex()[2:]: data}) as top:
        return read_loose(top, sha, check=True, max_size=64 << 20)


def _entry(type_num: int, size: int) -> bytes:
    """A pack entry header: type and size, size little-endian base-128 (4 bits first)."""
    out = bytearray([(type_num << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


@st.composite
def received_pack(draw: st.DrawFn) -> bytes:
    """A pack a remote sends: entries whose declared sizes may lie (larger: a bomb; smaller),
    deltas declaring huge results, entries cut short, a wrong count or checksum."""
    entries = []
    for _ in range(draw(st.integers(0, 6))):
        type_num = draw(st.sampled_from([1, 2, 3, 4, 6, 7, 0, 5]))
        content = draw(st.binary(max_size=300))
        if draw(st.integers(0, 4)) == 0:
            content = b"\0" * draw(st.integers(0, 8 << 20))  # zeros: compress ~1000 times
        if type_num in (6, 7):  # a delta: base size, result size (maybe huge), instructions
            result = draw(st.sampled_from([len(content), 2**40, 2**30, 5]))
            content = _entry(0, 7)[1:] + bytes([7]) + _varint(result) + content
        size = len(content)
        if draw(st.integers(0, 3)) == 0:
            size = draw(st.sampled_from([0, size + 1, max(size - 1, 0), 2**40, 2**31]))
        head = _entry(type_num, size)
        if type_num == 6:
            head += bytes([draw(st.integers(0, 255)) & 0x7F])
        elif type_num == 7:
            head += draw(st.binary(min_size=20, max_size=20))
        stream = zlib.compress(content)
        if draw(st.integers(0, 5)) == 0:
            stream = stream[: draw(st.integers(0, len(stream)))]
        entries.append(head + stream)
    count = len(entries) + draw(st.sampled_from([0, 0, 0, 1, -1, 2**31 - 8]))
    body = b"PACK\0\0\0\2" + max(count, 0).to_bytes(4, "big")[-4:] + b"".join(entries)
    checksum = (
        hashlib.sha1(body).digest()
        if draw(st.booleans())
        else draw(st.binary(min_size=20, max_size=20))
    )
    return body + checksum


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_received_pack(data: bytes) -> object:
    from perfledger.ledger.reader import read_pack

    def external(sha: bytes) -> tuple[int, bytes]:
        raise KeyError(sha)

    return read_pack(data, external)


def _read_request(data: bytes) -> object:
    from perfledger.app.request_json import read_request
    from perfledger.commands.registry.operations import validate

    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(data)
        handle.flush()
        body = read_request(handle.name)
    return validate("target.freeze", body)


_VERSIONS = {
    "ncu": (PROFILERS / "ncu_version.txt").read_text(),
    "nsys-stats": "2025.1.1",
    "torch": "2.11.0",
    "ptxas": (PROFILERS / "nvcc_version.txt").read_text(),
    "sass": (PROFILERS / "nvcc_version.txt").read_text(),
}
_SEEDS = {
    "ncu": ["ncu_details_rules.csv", "ncu_raw.csv", "ncu_summary.csv"],
    "nsys-stats": ["nsys_stats_cuda_gpu_kern_sum.csv"],
    "torch": ["torch_trace.json"],
    "ptxas": ["ptxas_v.txt"],
    "sass": ["cuobjdump_sass.txt"],
}


def mutated(kind: str) -> st.SearchStrategy[bytes]:
    """A real report of ``kind`` (tests/fixtures/profilers) mutated: cut short, a span replaced
    by random bytes, a line repeated many times, a value nested deeply (JSON), or one very long
    line."""

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        seed = (PROFILERS / draw(st.sampled_from(_SEEDS[kind]))).read_bytes()
        how = draw(st.sampled_from(["cut", "splice", "repeat", "deep", "long-line"]))
        at = draw(st.integers(0, len(seed)))
        if how == "cut":
            return seed[:at]
        if how == "splice":
            return seed[:at] + draw(st.binary(max_size=64)) + seed[at + draw(st.integers(0, 64)) :]
        if how == "repeat":
            lines = seed.split(b"\n")
            line = lines[min(at, len(lines) - 1) % max(len(lines), 1)]
            return b"\n".join([*lines, *[line] * draw(st.integers(2, 20_000))])
        if how == "deep":
            return seed[:at] + nested(draw(st.integers(10, 100_000))) + seed[at:]
        return seed[:at] + b"y" * draw(st.integers(1, 3 * 1024 * 1024)) + seed[at:]

    return build()


def _profiler(kind: str) -> Callable[[bytes], object]:
    def run(data: bytes) -> object:
        from perfledger.kernels.profilers.parse import parse_report

        with tempfile.NamedTemporaryFile(suffix=".report") as handle:
            handle.write(data)
            handle.flush()
            options = {"tool_version": _VERSIONS[kind]}
            if kind == "sass":
                options["binary_hash"] = "sha256:" + "0" * 64
            return parse_report(kind, handle.name, **options)

    return run


READERS: dict[str, Reader] = {
    reader.name: reader
    for reader in [
        Reader("event_json", event_json(), _read_event_json, (BadRequest,)),
        Reader("commit", commit_raw(), _read_commit, (IntegrityError,)),
        Reader("tree", tree_raw(), _read_tree, (IntegrityError,)),
        Reader("packed_refs", packed_refs(), _read_packed_refs, (IntegrityError,)),
        Reader("loose_ref", st.binary(max_size=3000), _read_loose_ref, (IntegrityError,)),
        Reader("request", hostile_json(), _read_request, (BadRequest,)),
        Reader("loose_object", loose_object(), _read_loose_object, (IntegrityError,)),
        Reader("received_pack", received_pack(), _read_received_pack, (IntegrityError,)),
        *[
            Reader(
                f"profiler_{kind.replace('-', '_')}",
                mutated(kind),
                _profiler(kind),
                (EvidenceError,),
            )
            for kind in _SEEDS
        ],
    ]
}


def check(reader: Reader, data: bytes) -> str | None:
    """Run ``reader`` on ``data``; return None when it kept the property, else what broke it
    (the exception's type and message)."""
    try:
        reader.run(data)
    except reader.allowed as exc:
        if not exc.message:
            return f"{type(exc).__name__} without a message"
        return None
    except BaseException as exc:  # the property: nothing else may come out
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None
