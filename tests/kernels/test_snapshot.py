"""Taking a subject's snapshot from disk (R11, :mod:`perfledger.kernels.snapshot`) and the pure
parts it rests on (:mod:`perfledger.events.identity`): the rule for what is taken, the tree
digest, git commit and dirty flag from a real git work tree, and the driver-template match."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import blake3
import pytest

from perfledger.errors import BadRequest
from perfledger.events.identity import differing_paths, subject_of, tree_digest
from perfledger.kernels.snapshot import git_state, take_snapshot
from subprocess_env import isolated_env


def _in_src(rel: str) -> bool:
    return rel.startswith("src/")


def _tree(root: Path) -> Path:
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "k.py").write_text("x = 1\n")
    (root / "src" / "deep" / "d.py").write_text("y = 2\n")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "README.md").write_text("not read\n")
    (root / ".git").mkdir()
    (root / ".git" / "src").mkdir()
    return root


def test_snapshot_takes_scope_files_and_files_named_on_the_command_line(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (tmp_path / "shared.py").write_text("driver\n")
    taken = take_snapshot(
        "code", ["sh", "code/run.sh", "--helper=shared.py", "code"], _in_src, tmp_path
    )
    snap = taken.snapshot
    assert sorted(snap.files) == ["run.sh", "src/deep/d.py", "src/k.py"]
    assert snap.files["run.sh"].mode == "100755" and snap.files["src/k.py"].mode == "100644"
    assert sorted(snap.driver) == ["shared.py"]
    data = (root / "src" / "k.py").read_bytes()
    assert snap.files["src/k.py"].blake3 == blake3.blake3(data).hexdigest()
    assert taken.blobs[snap.files["src/k.py"].blake3] == data
    assert snap.digest == tree_digest(snap.files, snap.driver)
    assert snap.git is None  # not in a git work tree


def test_snapshot_digest_changes_with_content_and_mode_only(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    first = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    (root / "README.md").write_text("changed, outside the scope\n")
    assert take_snapshot("code", ["x"], _in_src, tmp_path).snapshot.digest == first.digest
    os.chmod(root / "src" / "k.py", 0o755)
    moded = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    assert differing_paths(first.files, moded.files) == ["src/k.py"]


def test_snapshot_records_a_symbolic_link_without_following_it(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (tmp_path / "secret.py").write_text("outside\n")
    os.symlink(tmp_path / "secret.py", root / "src" / "link.py")
    snap = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    entry = snap.files["src/link.py"]
    assert entry.mode == "120000"
    assert entry.blake3 == blake3.blake3(str(tmp_path / "secret.py").encode()).hexdigest()


def test_snapshot_of_a_missing_subject_is_a_bad_request(tmp_path: Path) -> None:
    with pytest.raises(BadRequest, match="not a directory"):
        take_snapshot("nowhere", ["x"], _in_src, tmp_path)


def test_git_commit_and_dirty_flag_come_from_the_work_tree(tmp_path: Path) -> None:
    env = isolated_env(tmp_path)

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=tmp_path, env=env,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    root = _tree(tmp_path / "code")
    (root / ".git" / "src").rmdir()
    (root / ".git").rmdir()
    git("init", "-q")
    git("add", "code")
    git("commit", "-q", "-m", "c")
    head = git("rev-parse", "HEAD")
    state = git_state(root)
    assert state is not None and state.commit == head and not state.dirty and state.path == "code"
    (root / "src" / "k.py").write_text("x = 3\n")
    dirty = git_state(root)
    assert dirty is not None and dirty.commit == head and dirty.dirty


def test_subject_is_found_in_the_drivers_declared_place() -> None:
    template = ["python", "{subject}/bench.py", "--code={subject}", "--n", "3"]
    argv = ["python", "a b/bench.py", "--code=a b", "--n", "3"]
    assert subject_of(template, argv) == "a b"
    assert subject_of(template, ["python", "a/bench.py", "--code=b", "--n", "3"]) is None
    assert subject_of(template, ["python", "a/bench.py", "--code=a", "--n", "4"]) is None
    assert subject_of(template, ["python", "a/bench.py", "--code=a"]) is None


def test_snapshot_skips_git_and_bytecode_cache_directories(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    (root / ".git" / "src" / "HEAD").write_text("ref\n")
    (root / "src" / "__pycache__").mkdir()
    (root / "src" / "__pycache__" / "k.cpython-312.pyc").write_bytes(b"\x00")
    snap = take_snapshot("code", ["x"], lambda rel: True, tmp_path).snapshot
    assert sorted(snap.files) == ["README.md", "run.sh", "src/deep/d.py", "src/k.py"]
