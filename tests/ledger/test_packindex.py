"""Git's pack index codec (``packindex``): byte-identical to what the real git writes, its two
readers agree with the encoder (64-bit offsets included), and pack merges keep each object
once, checked by git fsck."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfledger.ledger.gitobj import copy_merge_packs, make_blob, write_pack
from perfledger.ledger.packindex import IndexArrays, MappedIndex, object_count, read_index


@pytest.mark.parametrize("count", [1, 2000])
def test_the_index_of_a_written_pack_is_the_one_git_index_pack_writes(
    tmp_path: Path, count: int
) -> None:
    objects = [make_blob(os.urandom(n % 1500) + n.to_bytes(4, "big")) for n in range(count)]
    base = write_pack(str(tmp_path), objects)
    theirs = tmp_path / "git.idx"
    subprocess.run(
        ["git", "index-pack", "-o", str(theirs), base + ".pack"], check=True, capture_output=True
    )
    assert Path(base + ".idx").read_bytes() == theirs.read_bytes()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=20, max_size=20),
            st.one_of(st.integers(12, 2**31 - 1), st.integers(2**31, 2**40)),
            st.integers(0, 2**32 - 1),
        ),
        unique_by=lambda e: e[0],
        max_size=40,
    )
)
def test_encode_and_every_reader_round_trip_with_large_offsets(
    entries: list[tuple[bytes, int, int]],
) -> None:
    shuffled = entries[::-1]  # the encoder sorts: entries come in any order
    data = IndexArrays(
        np.array([e[0] for e in shuffled], dtype="S20"),
        np.array([e[1] for e in shuffled], dtype=np.uint64),
        np.array([e[2] for e in shuffled], dtype=np.uint32),
    ).encode(b"\x07" * 20)
    entries.sort()
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"pl-idx-{os.getpid()}.idx"
    path.write_bytes(data)
    mapped = MappedIndex.open(str(path))
    try:
        back = read_index(str(path))
        assert object_count(str(path)) == len(entries)
        assert mapped is not None
        for name, offset, _ in entries:
            assert mapped.find(name) == offset
    finally:
        if mapped is not None:
            mapped.close()
        path.unlink()
    assert back is not None
    reversed_ = IndexArrays(back.names[::-1], back.offsets[::-1], back.crcs[::-1])
    assert reversed_.encode(b"\x07" * 20) == data  # numpy columns
    assert back.names.tobytes() == b"".join(e[0] for e in entries)
    assert back.offsets.tolist() == [e[1] for e in entries]
    assert back.crcs.tolist() == [e[2] for e in entries]
    # fan-out: entry i of the table counts the names whose first byte is <= i
    fanout = np.frombuffer(data, dtype=">u4", count=256, offset=8)
    assert fanout.tolist() == [sum(e[0][0] <= i for e in entries) for i in range(256)]


def test_merged_packs_hold_each_object_once_and_pass_git_fsck(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    pack_dir = str(repo / "objects" / "pack")
    first = [make_blob(os.urandom(n)) for n in range(1, 300)]
    second = [make_blob(os.urandom(n)) for n in range(1, 200)] + first[:40]  # shares 40
    third = [make_blob(b"x" * n) for n in range(2000, 2050)]  # compressed entries
    bases = [write_pack(pack_dir, objs) for objs in (first, second, third)]
    merged = copy_merge_packs(pack_dir, bases)
    for base in bases:
        if base != merged:
            os.remove(base + ".pack")
            os.remove(base + ".idx")
    fsck = subprocess.run(
        ["git", "-C", str(repo), "fsck", "--strict", "--full", "--no-dangling"],
        capture_output=True,
        text=True,
    )
    assert fsck.returncode == 0, fsck.stderr
    index = read_index(merged + ".idx")
    assert index is not None and len(index.names) == 299 + 199 + 50
    theirs = tmp_path / "git.idx"
    subprocess.run(
        ["git", "index-pack", "-o", str(theirs), merged + ".pack"], check=True, capture_output=True
    )
    assert Path(merged + ".idx").read_bytes() == theirs.read_bytes()
