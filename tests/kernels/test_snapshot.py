"""Taking a subject's snapshot from disk (R11, :mod:`perfledger.kernels.workload.snapshot`) and the pure
parts it rests on (:mod:`perfledger.events.identity`): the rule for what is taken, the tree
digest, git commit and dirty flag from a real git work tree, and the driver-template match."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import blake3
import msgspec
import pytest

from perfledger.errors import BadRequest, RuleRefused
from perfledger.events.identity import differing_paths, subject_of, tree_digest
from perfledger.kernels.workload.snapshot import git_state, remove_bytecode_caches, take_snapshot
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


def test_snapshot_takes_every_file_under_the_subject_and_driver_files_outside_it(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path / "code")
    (tmp_path / "shared.py").write_text("driver\n")
    taken = take_snapshot(
        "code", ["sh", "code/run.sh", "--helper=shared.py", "code"], _in_src, tmp_path
    )
    snap = taken.snapshot
    # R11: files outside the scope are part of the code that ran (a module shadowing the stdlib)
    assert sorted(snap.files) == ["README.md", "run.sh", "src/deep/d.py", "src/k.py"]
    assert snap.coverage == "subject"
    assert snap.files["run.sh"].mode == "100755" and snap.files["src/k.py"].mode == "100644"
    assert sorted(snap.driver) == ["shared.py"]
    data = (root / "src" / "k.py").read_bytes()
    assert snap.files["src/k.py"].blake3 == blake3.blake3(data).hexdigest()
    assert taken.blobs[snap.files["src/k.py"].blake3] == data
    assert snap.digest == tree_digest(snap.files, snap.driver)
    assert snap.git is None  # not in a git work tree


def test_r11_snapshot_digest_changes_with_any_file_under_the_subject(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    first = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    (root / "statistics.py").write_text("def mean(x):\n    return 0\n")
    added = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    assert differing_paths(first.files, added.files) == ["statistics.py"]
    (root / "statistics.py").unlink()
    os.chmod(root / "src" / "k.py", 0o755)
    moded = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    assert differing_paths(first.files, moded.files) == ["src/k.py"]


def test_snapshot_of_the_scope_only_is_kept_for_originals_recorded_before(tmp_path: Path) -> None:
    root = _tree(tmp_path / "code")
    first = take_snapshot("code", ["x"], _in_src, tmp_path, whole=False).snapshot
    assert sorted(first.files) == ["src/deep/d.py", "src/k.py"]
    assert first.coverage is msgspec.UNSET  # encodes as the snapshots recorded before
    (root / "README.md").write_text("changed, outside the scope\n")
    again = take_snapshot("code", ["x"], _in_src, tmp_path, whole=False).snapshot
    assert again.digest == first.digest


def test_snapshot_records_a_relative_link_inside_the_subject_without_following_it(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path / "code")
    os.symlink("deep/d.py", root / "src" / "link.py")
    os.symlink("src/deep", root / "alias")
    snap = take_snapshot("code", ["x"], _in_src, tmp_path).snapshot
    entry = snap.files["src/link.py"]
    assert entry.mode == "120000"
    assert entry.blake3 == blake3.blake3(b"deep/d.py").hexdigest()
    assert snap.files["alias"].mode == "120000"
    assert "alias/d.py" not in snap.files  # a linked directory is not followed


@pytest.mark.parametrize(
    "kind", ["absolute_outside", "relative_outside", "absolute_inside", "dir", "loop"]
)
def test_r11_snapshot_refuses_a_symbolic_link_out_of_the_subject(tmp_path: Path, kind: str) -> None:
    root = _tree(tmp_path / "code")
    (tmp_path / "ext.py").write_text("def run(n):\n    return 0\n")
    (tmp_path / "extdir").mkdir()
    target = {
        "absolute_outside": str(tmp_path / "ext.py"),
        "relative_outside": "../../ext.py",
        "absolute_inside": str(root / "src" / "k.py"),  # checkout would point at the original
        "dir": "../../extdir",
        "loop": "other.py",
    }[kind]
    os.symlink(target, root / "src" / ("linked" if kind == "dir" else "kernel.py"))
    if kind == "loop":
        os.symlink("kernel.py", root / "src" / "other.py")
    with pytest.raises(RuleRefused, match="symbolic link") as err:
        take_snapshot("code", ["x"], _in_src, tmp_path)
    assert err.value.rule == "R11"
    # whatever the coverage: an old-rule snapshot is refused as well
    with pytest.raises(RuleRefused):
        take_snapshot("code", ["x"], _in_src, tmp_path, whole=False)


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


def test_bytecode_caches_are_removed_without_following_links_or_entering_git(
    tmp_path: Path,
) -> None:
    subject = tmp_path / "s"
    (subject / "src" / "__pycache__").mkdir(parents=True)
    (subject / "src" / "__pycache__" / "kern.cpython-312.pyc").write_bytes(b"planted")
    (subject / "src" / "kern.py").write_text("x = 1\n")
    (subject / ".git" / "__pycache__").mkdir(parents=True)  # git's own: never entered
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.pyc").write_bytes(b"not the subject's")
    (subject / "lib").mkdir()
    (subject / "lib" / "__pycache__").symlink_to(elsewhere)  # removed as a link, not followed
    assert remove_bytecode_caches(subject) == 2
    assert not (subject / "src" / "__pycache__").exists()
    assert not (subject / "lib" / "__pycache__").is_symlink()
    assert (elsewhere / "keep.pyc").exists() and (subject / ".git" / "__pycache__").is_dir()
    assert (subject / "src" / "kern.py").read_text() == "x = 1\n"


def test_cheat_a_driver_named_by_an_absolute_path_outside_the_subject_is_refused(
    tmp_path: Path,
) -> None:
    """R11: a file the command names by an absolute path outside the subject would run
    without being in any snapshot (its digest would not change when it does): refused naming
    it. The interpreter's installation is the environment's (the honest control)."""
    import sys

    code = _tree(tmp_path / "code")
    shared = tmp_path / "shared" / "bench.py"
    shared.parent.mkdir()
    shared.write_text("print('{}')\n")
    with pytest.raises(RuleRefused) as caught:
        take_snapshot("code", [sys.executable, str(shared), "{output}"], _in_src, tmp_path)
    assert caught.value.rule == "R11" and str(shared) in caught.value.message
    # the same file named by a relative path is snapshotted as a driver file
    taken = take_snapshot("code", [sys.executable, "shared/bench.py"], _in_src, tmp_path)
    assert list(taken.snapshot.driver) == ["shared/bench.py"] and code.is_dir()
