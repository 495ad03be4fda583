"""Decompression bombs (issue 35; docs/storage.md "Limits"): a git object whose zlib stream
inflates enormously (1 GiB of zeros stored in about 1 MiB) as an event's ``event.json``, as an
event's tree, and in a history a ``perfledger pull`` receives from a real ``git daemon``. Every
reader refuses it with an integrity error (exit 5) naming it, in bounded memory (peak RSS of the
command <= 256 MiB, read with ``wait4``) and without writing anything; a control beside each:
the same ledger without the bomb verifies, the same pull of an honest ledger succeeds.

The bomb is a real loose object (``<type> <size>\\0`` then the zeros, zlib-compressed, named by
its sha1) written byte by byte as git writes one; the commits around it are made by the real
``git`` CLI (``mktree``, ``hash-object``, ``update-ref``) and ``git cat-file -s`` reads its
size."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hostile_forge import git

from perfledger.api import Ledger
from perfledger.ledger.gitobj import _entry_header
from perfledger.ledger.packindex import IndexArrays
from subprocess_env import isolated_env, peak_rss_command, peak_rss_mib

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sync"))
from gitservers import git_daemon

BOMB_BYTES = 1024**3
BOUND_RSS_MIB = 256
_CHUNK = b"\0" * (1 << 20)


def _zeros_stream(prefix: bytes, chunks: int = BOMB_BYTES // len(_CHUNK)) -> tuple[bytes, str]:
    """A zlib stream of ``prefix`` then ``chunks`` chunks of zeros (``BOMB_BYTES`` in all by
    default), and the sha1 of what it inflates to (never more than a chunk of it in memory).

    The stream is built, not compressed chunk by chunk (deflating 1 GiB was most of this
    file's time): a full flush after the prefix makes the compressor forget all history, so the
    deflate blocks of one zero chunk compressed next refer to nothing before them and decode to
    the same chunk wherever they stand; they are repeated, then an empty final block and the
    adler-32 of everything follow. The same construction of three chunks is inflated by zlib
    first (which checks the adler-32 at the end), so a bomb is a whole stream."""
    if chunks > 3:
        small, _ = _zeros_stream(prefix, 3)
        assert zlib.decompress(small) == prefix + _CHUNK * 3
    sha = hashlib.sha1(prefix)
    adler = zlib.adler32(prefix)
    packer = zlib.compressobj(9)
    start = packer.compress(prefix) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(_CHUNK) + packer.flush(zlib.Z_FULL_FLUSH)
    for _ in range(chunks):
        sha.update(_CHUNK)
        adler = zlib.adler32(_CHUNK, adler)
    # an empty fixed-Huffman final block (the stream is byte-aligned after a flush), then the
    # adler-32 of the uncompressed bytes, big-endian
    return start + block * chunks + b"\x03\x00" + adler.to_bytes(4, "big"), sha.hexdigest()


def write_bomb(objects_dir: Path, kind: bytes) -> str:
    """Write a loose object of type ``kind`` holding ``BOMB_BYTES`` zeros under ``objects_dir``;
    returns its hex sha."""
    stream, name = _zeros_stream(kind + b" %d\0" % BOMB_BYTES)
    path = objects_dir / name[:2] / name[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(stream)
    return name


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two bomb objects (a blob and a "tree"), made once: kind -> their loose file."""
    where = tmp_path_factory.mktemp("bombs")
    found = {}
    for kind in ("blob", "tree"):
        name = write_bomb(where / kind, kind.encode())
        found[kind] = where / kind / name[:2] / name[2:]
    return found


def _plant(repo: Path, bomb: Path) -> str:
    """Copy the loose ``bomb`` file into ``repo``'s objects; returns its sha."""
    name = bomb.parent.name + bomb.name
    target = repo / "objects" / bomb.parent.name / bomb.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bomb, target)
    assert int(git(repo, "cat-file", "-s", name)) == BOMB_BYTES  # git reads it as a real object
    return name


def _plant_packed(repo: Path, bomb: Path) -> str:
    """Put the blob of the loose ``bomb`` into ``repo`` as a pack of it alone (its entry not a
    delta, its index with the entry's CRC-32): a ``git upload-pack`` sends it on as it is
    stored, where a loose one is inflated and deflated again (a 1 GiB deflate). Returns its
    sha."""
    name = bomb.parent.name + bomb.name
    stream, _ = _zeros_stream(b"")
    entry = _entry_header(3, BOMB_BYTES) + stream
    body = b"PACK" + (2).to_bytes(4, "big") + (1).to_bytes(4, "big") + entry
    checksum = hashlib.sha1(body).digest()
    index = IndexArrays(
        np.array([bytes.fromhex(name)], dtype="S20"),
        np.array([12], dtype="uint64"),
        np.array([zlib.crc32(entry)], dtype="uint32"),
    )
    pack = repo / "objects" / "pack" / f"pack-{checksum.hex()}"
    pack.parent.mkdir(parents=True, exist_ok=True)
    pack.with_suffix(".pack").write_bytes(body + checksum)
    pack.with_suffix(".idx").write_bytes(index.encode(checksum))
    assert int(git(repo, "cat-file", "-s", name)) == BOMB_BYTES  # git reads it as a real object
    return name


def _commit(repo: Path, tree: str, subject: str) -> str:
    """An event-looking commit on the ledger head pointing at ``tree``; moves the ref."""
    head = git(repo, "rev-parse", "refs/heads/ledger").decode()
    stamp = "forger <perfledger> 1767225600 +0000"
    message = f"{subject}\n\nEvent-Id: {'ab' * 32}\nLamport: 2\n"
    raw = f"tree {tree}\nparent {head}\nauthor {stamp}\ncommitter {stamp}\n\n{message}"
    commit = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw.encode()).decode()
    git(repo, "update-ref", "refs/heads/ledger", commit, head)
    return commit


def _ledger(path: Path) -> Path:
    ledger = Ledger.init(path, name="bombs", actor="agent")
    ledger.close()
    git_dir = path / ".git"
    return git_dir if git_dir.is_dir() else path


def _run(home: Path, *args: str | os.PathLike[str]) -> tuple[int, str, float]:
    """(exit code, output, peak RSS in MiB) of the perfledger CLI with ``args``."""
    peak_file = home / "peak_rss_kib"
    child = subprocess.Popen(
        [*peak_rss_command(), *map(os.fspath, args)],
        env={**isolated_env(home), "PEAK_RSS_FILE": str(peak_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert child.stdout is not None
    output = child.stdout.read()
    code = child.wait()
    assert "Traceback" not in output, output
    return code, output, peak_rss_mib(peak_file)


@pytest.mark.slow
@pytest.mark.parametrize("place", ["event.json", "tree"])
def test_a_bomb_in_a_ledger_is_refused_by_verify_in_bounded_memory(
    bombs: dict[str, Path], tmp_path: Path, place: str
) -> None:
    path = tmp_path / "ledger"
    repo = _ledger(path)
    assert _run(tmp_path, "--ledger", path, "verify")[0] == 0  # control: before the bomb
    if place == "event.json":
        blob = _plant(repo, bombs["blob"])
        tree = git(repo, "mktree", data=f"100644 blob {blob}\tevent.json\n".encode()).decode()
    else:
        tree = _plant(repo, bombs["tree"])
    _commit(repo, tree, "NoteRecorded: forged")
    for args in (["verify"], ["state", "--json"], ["audit", "--json"]):
        code, output, rss = _run(tmp_path, "--ledger", path, *args)
        assert code == 5, (args, output)
        assert "refused before inflating" in output, (args, output)
        assert rss <= BOUND_RSS_MIB, (args, rss)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory ``git daemon`` serves, and its URL prefix."""
    base = tmp_path / "served"
    base.mkdir()
    with git_daemon(str(base)) as url:
        yield base, url


@pytest.mark.slow
def test_a_bomb_in_a_pulled_history_is_refused_before_anything_is_written(
    bombs: dict[str, Path], tmp_path: Path, served: tuple[Path, str]
) -> None:
    base, url = served
    remote = base / "remote.git"
    remote_git = _ledger(remote)
    local = tmp_path / "local"
    assert _run(tmp_path, "clone", f"{url}/remote.git", local)[0] == 0
    assert _run(tmp_path, "--ledger", remote, "note", "an honest note")[0] == 0
    code, output, _ = _run(tmp_path, "--ledger", local, "pull")  # control: an honest pull
    assert code == 0, output
    blob = _plant_packed(remote_git, bombs["blob"])
    tree = git(remote_git, "mktree", data=f"100644 blob {blob}\tevent.json\n".encode()).decode()
    _commit(remote_git, tree, "NoteRecorded: forged")
    local_git = local / ".git" if (local / ".git").is_dir() else local
    before = git(local_git, "rev-parse", "refs/heads/ledger")
    objects = sorted(p.name for p in (local_git / "objects").rglob("*") if p.is_file())
    code, output, rss = _run(tmp_path, "--ledger", local, "pull")
    assert code == 5, output
    assert "decompression bomb" in output, output
    assert rss <= BOUND_RSS_MIB, rss
    assert git(local_git, "rev-parse", "refs/heads/ledger") == before
    assert sorted(p.name for p in (local_git / "objects").rglob("*") if p.is_file()) == objects


def _ofs(distance: int) -> bytes:
    """git's ofs-delta distance encoding (big-endian base-128, each continuation minus one)."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.append(0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(reversed(out))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value >> 7 else 0))
        value >>= 7
        if not value:
            return bytes(out)


def write_delta_bomb_pack(objects_dir: Path, name: str) -> None:
    """A pack of a 64 KiB blob of zeros and an ofs-delta on it that copies it 16,384 times (one
    byte per copy: 1 GiB from 16 KiB of instructions, a few hundred bytes once deflated), the
    delta named ``name`` (the sha of 1 GiB of zeros as a blob), with its index."""
    base = b"\0" * 65536
    delta = _varint(len(base)) + _varint(BOMB_BYTES) + b"\x80" * (BOMB_BYTES // 65536)
    first = _entry_header(3, len(base)) + zlib.compress(base)
    second = _entry_header(6, len(delta)) + _ofs(len(first)) + zlib.compress(delta)
    body = b"PACK" + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + first + second
    checksum = hashlib.sha1(body).digest()
    names = [hashlib.sha1(b"blob 65536\0" + base).digest(), bytes.fromhex(name)]
    index = IndexArrays(
        np.array(names, dtype="S20"),
        np.array([12, 12 + len(first)], dtype="uint64"),
        np.array([zlib.crc32(first), zlib.crc32(second)], dtype="uint32"),
    )
    pack = objects_dir / "pack" / f"pack-{checksum.hex()}"
    pack.parent.mkdir(parents=True, exist_ok=True)
    pack.with_suffix(".pack").write_bytes(body + checksum)
    pack.with_suffix(".idx").write_bytes(index.encode(checksum))


@pytest.mark.slow
def test_a_delta_that_builds_a_bomb_from_a_small_pack_is_refused_unresolved(
    bombs: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "ledger"
    repo = _ledger(path)
    name = bombs["blob"].parent.name + bombs["blob"].name
    write_delta_bomb_pack(repo / "objects", name)
    assert int(git(repo, "cat-file", "-s", name)) == BOMB_BYTES  # git resolves its size
    tree = git(repo, "mktree", data=f"100644 blob {name}\tevent.json\n".encode()).decode()
    _commit(repo, tree, "NoteRecorded: forged")
    code, output, rss = _run(tmp_path, "--ledger", path, "verify")
    assert code == 5, output
    assert "refused before inflating" in output, output
    assert rss <= BOUND_RSS_MIB, rss
