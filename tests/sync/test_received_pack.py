"""The received-pack reader against packs made by the real ``git pack-objects`` (deltas, thin
packs), and the ancestry walk used to detect rewritten remotes."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.errors import IntegrityError
from perfledger.ledger.dag import CommitNode, descends_from
from perfledger.ledger.reader import read_pack

_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3}


def _repo_with_similar_blobs(git: Any, path: Path, n: int) -> list[str]:
    git("init", "-q", "--bare", path)
    shas = []
    for i in range(n):
        text = ("perfledger event payload, mostly the same text\n" * 40 + f"variant {i}\n").encode()
        proc = subprocess.run(
            ["git", "-C", str(path), "hash-object", "-w", "--stdin"],
            input=text, capture_output=True, check=True,
        )  # fmt: skip
        shas.append(proc.stdout.decode().strip())
    return shas


def _pack(path: Path, shas: list[str], *extra: str) -> bytes:
    proc = subprocess.run(
        ["git", "-C", str(path), "pack-objects", "--stdout", "--window=50", *extra],
        input="\n".join(shas).encode() + b"\n", capture_output=True, check=True,
    )  # fmt: skip
    return proc.stdout


def _cat(path: Path, sha: str) -> tuple[int, bytes]:
    kind = subprocess.run(["git", "-C", str(path), "cat-file", "-t", sha],
                          capture_output=True, check=True).stdout.strip()  # fmt: skip
    raw = subprocess.run(["git", "-C", str(path), "cat-file", kind.decode(), sha],
                         capture_output=True, check=True).stdout  # fmt: skip
    return _TYPES[kind], raw


def test_read_pack_resolves_git_deltas_and_names_objects_by_content(
    tmp_path: Path, git: Any
) -> None:
    repo = tmp_path / "r.git"
    shas = _repo_with_similar_blobs(git, repo, 30)
    data = _pack(repo, shas)
    objects = read_pack(data, lambda sha: (_ for _ in ()).throw(KeyError(sha)))
    assert sorted(o.hex() for o in objects) == sorted(shas)
    for sha in shas[:5] + shas[-5:]:
        assert objects[bytes.fromhex(sha)] == _cat(repo, sha)
    # the pack really holds deltas (else this test would not test them)
    (tmp_path / "p.pack").write_bytes(data)
    subprocess.run(["git", "index-pack", str(tmp_path / "p.pack")], capture_output=True,
                   check=True)  # fmt: skip
    listing = subprocess.run(["git", "verify-pack", "-v", str(tmp_path / "p.idx")],
                             capture_output=True, check=True).stdout  # fmt: skip
    assert b"chain length = 1" in listing


def test_read_pack_completes_a_thin_pack_from_local_objects(tmp_path: Path, git: Any) -> None:
    repo = tmp_path / "r.git"
    shas = _repo_with_similar_blobs(git, repo, 20)
    base, rest = shas[:1], shas[1:]
    # a thin pack of `rest` that may delta against `base`, which it does not contain
    data = _pack(repo, [*rest, *("^" + s for s in base)], "--thin", "--revs")
    local = {bytes.fromhex(s): _cat(repo, s) for s in base}

    def external(sha: bytes) -> tuple[int, bytes]:
        return local[sha]

    objects = read_pack(data, external)
    assert set(rest) <= {o.hex() for o in objects}


def test_read_pack_refuses_a_corrupt_pack(tmp_path: Path, git: Any) -> None:
    repo = tmp_path / "r.git"
    shas = _repo_with_similar_blobs(git, repo, 3)
    data = bytearray(_pack(repo, shas))
    data[40] ^= 0xFF
    with pytest.raises(IntegrityError):
        read_pack(bytes(data), lambda sha: (_ for _ in ()).throw(KeyError(sha)))
    # even with a recomputed checksum, a damaged zlib stream or delta is refused
    body = bytes(data[:-20])
    with pytest.raises(IntegrityError):
        read_pack(
            body + hashlib.sha1(body).digest(), lambda sha: (_ for _ in ()).throw(KeyError(sha))
        )


@st.composite
def _dags(draw: st.DrawFn) -> dict[bytes, CommitNode]:
    """Random ledger-shaped DAGs: event commits with one parent, merges with two, Lamport
    clocks one more than the largest below."""
    nodes: dict[bytes, CommitNode] = {b"c0": CommitNode("e0", 1, ())}
    lamport = {b"c0": 1}
    for i in range(1, draw(st.integers(2, 25))):
        sha = f"c{i}".encode()
        existing = sorted(nodes)
        if draw(st.booleans()) and len(existing) > 1:
            parents = tuple(
                sorted(set(draw(st.lists(st.sampled_from(existing), min_size=2, max_size=2))))
            )
            if len(parents) == 2:
                nodes[sha] = CommitNode(None, 0, parents)
                lamport[sha] = max(lamport[p] for p in parents)
                continue
        parent = draw(st.sampled_from(existing))
        nodes[sha] = CommitNode(f"e{i}", lamport[parent] + 1, (parent,))
        lamport[sha] = lamport[parent] + 1
    return nodes


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(_dags(), st.data())
def test_descends_from_agrees_with_a_full_walk(nodes: dict[bytes, CommitNode], data: Any) -> None:
    shas = sorted(nodes)
    ancestor = data.draw(st.sampled_from(shas))
    tip = data.draw(st.sampled_from(shas))
    seen, stack = set(), [tip]
    while stack:
        sha = stack.pop()
        if sha not in seen:
            seen.add(sha)
            stack.extend(nodes[sha].parents)
    assert descends_from(nodes.__getitem__, ancestor, tip) == (ancestor in seen)
