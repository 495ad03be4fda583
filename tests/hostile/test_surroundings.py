"""perfledger run inside or beside real-world git repositories, each built with the real `git`
CLI: one row per surrounding, with the exit code and the words of the message expected
(docs/workflow.md, "Where perfledger runs", has the same table). Never exit 1, never a
traceback; where perfledger cannot work it says why and what to do.

The permission rows run as the unprivileged user ``nobody`` (``setpriv``), because root reads
every directory; without ``setpriv`` they are skipped, naming why."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from perfledger.api import Ledger
from subprocess_env import isolated_env, perfledger_command


def _git(*args: str | os.PathLike[str], cwd: Path | None = None) -> None:
    env = isolated_env(Path("/nonexistent"))
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "protocol.file.allow=always",
         *map(os.fspath, args)],
        cwd=cwd, env=env, check=True, capture_output=True,
    )  # fmt: skip


def _repo_with_commit(path: Path) -> Path:
    _git("init", "-q", path)
    _git("-C", path, "commit", "-q", "--allow-empty", "-m", "x")
    return path


def _ledger(path: Path) -> Path:
    Ledger.init(path, name=path.name, actor="t").close()
    with Ledger.open(path) as ledger:
        ledger.append("NoteRecorded", {"text": "n", "tags": []}, actor="t")
    return path


@dataclass
class Row:
    """One surrounding: ``build(tmp) -> (cwd, argv)``, the exit code and the words expected in
    stdout + stderr."""

    build: Callable[[Path], tuple[Path, list[str]]]
    exit_code: int
    says: str


def _beside_packed_refs(tmp: Path) -> tuple[Path, list[str]]:
    clone_src = _repo_with_commit(tmp / "src")
    _git("clone", "-q", clone_src, tmp / "clone")
    _git("-C", tmp / "clone", "pack-refs", "--all")
    return tmp, ["status"]


def _init_beside_packed_refs(tmp: Path) -> tuple[Path, list[str]]:
    cwd, _ = _beside_packed_refs(tmp)
    return cwd, ["init", "new", "--actor", "t"]


def _ledger_found_below_through_packed_refs(tmp: Path) -> tuple[Path, list[str]]:
    _ledger(tmp / "led")
    _git("--git-dir", tmp / "led", "pack-refs", "--all")
    return tmp, ["status"]


def _ledger_with_packed_refs(tmp: Path) -> tuple[Path, list[str]]:
    _ledger(tmp / "led")
    _git("--git-dir", tmp / "led", "pack-refs", "--all")
    return tmp, ["--ledger", "led", "note", "after pack-refs"]


def _inside_a_plain_repo_with_packed_refs(tmp: Path) -> tuple[Path, list[str]]:
    repo = _repo_with_commit(tmp / "repo")
    _git("-C", repo, "pack-refs", "--all")
    return repo, ["status"]


def _in_a_worktree_of_a_plain_repo(tmp: Path) -> tuple[Path, list[str]]:
    repo = _repo_with_commit(tmp / "repo")
    _git("-C", repo, "worktree", "add", "-q", tmp / "wt")
    return tmp / "wt", ["status"]


def _ledger_in_a_linked_worktree(tmp: Path) -> tuple[Path, list[str]]:
    repo = tmp / "repo"
    _git("init", "-q", repo)
    _ledger(repo)
    _git("-C", repo, "worktree", "add", "-q", tmp / "wt", "ledger")
    return tmp / "wt", ["note", "from a linked worktree"]


def _in_a_submodule(tmp: Path) -> tuple[Path, list[str]]:
    sup = _repo_with_commit(tmp / "sup")
    _repo_with_commit(tmp / "subsrc")
    _git("-C", sup, "submodule", "-q", "add", tmp / "subsrc", "sub")
    return sup / "sub", ["status"]


def _a_bare_repo_that_is_not_a_ledger(tmp: Path) -> tuple[Path, list[str]]:
    _git("init", "-q", "--bare", tmp / "bare.git")
    return tmp, ["--ledger", "bare.git", "note", "x"]


def _a_shallow_clone(tmp: Path) -> tuple[Path, list[str]]:
    led = _ledger(tmp / "led")
    for i in range(3):
        with Ledger.open(led) as ledger:
            ledger.append("NoteRecorded", {"text": f"n{i}", "tags": []}, actor="t")
    _git("clone", "-q", "--bare", "--depth", "1", "--branch", "ledger", f"file://{led}",
         tmp / "shallow")  # fmt: skip
    return tmp, ["--ledger", "shallow", "note", "x"]


def _init_on_a_sha256_repo(tmp: Path) -> tuple[Path, list[str]]:
    _git("init", "-q", "--object-format=sha256", tmp / "s256")
    return tmp, ["init", "s256", "--actor", "t"]


def _a_dot_git_file(tmp: Path) -> tuple[Path, list[str]]:
    _git("init", "-q", f"--separate-git-dir={tmp / 'real.git'}", tmp / "work")
    _ledger(tmp / "work")
    return tmp / "work", ["note", "through a .git file"]


ROWS = {
    "beside a clone with packed refs: status": Row(_beside_packed_refs, 2, "no ledger here"),
    "beside a clone with packed refs: init": Row(_init_beside_packed_refs, 0, "initialised"),
    "beside a ledger whose refs are packed: the hint finds it": Row(
        _ledger_found_below_through_packed_refs, 2, "found a ledger in ./led"
    ),
    "a ledger whose refs are packed: note": Row(_ledger_with_packed_refs, 0, ""),
    "inside a plain repo with packed refs": Row(
        _inside_a_plain_repo_with_packed_refs, 2, "not a ledger"
    ),
    "in a worktree of a plain repo": Row(_in_a_worktree_of_a_plain_repo, 2, "not a ledger"),
    "a ledger's linked worktree: note": Row(_ledger_in_a_linked_worktree, 0, ""),
    "in a submodule": Row(_in_a_submodule, 2, "not a ledger"),
    "a bare repo that is not a ledger": Row(_a_bare_repo_that_is_not_a_ledger, 2, "not a ledger"),
    "a shallow clone of a ledger": Row(_a_shallow_clone, 5, "shallow git clone"),
    "init on a SHA-256 repository": Row(_init_on_a_sha256_repo, 2, "object format sha256"),
    "a work tree whose .git is a file: note": Row(_a_dot_git_file, 0, ""),
}


def _run(
    cwd: Path, argv: list[str], home: Path, *, user: str | None = None
) -> subprocess.CompletedProcess[str]:
    prefix = perfledger_command()
    if user is not None:
        who = pwd.getpwnam(user)
        prefix = ["setpriv", f"--reuid={who.pw_uid}", f"--regid={who.pw_gid}", "--clear-groups",
                  *prefix]  # fmt: skip
    proc = subprocess.run(
        [*prefix, *argv], cwd=cwd, env=isolated_env(home), capture_output=True, text=True,
        check=False, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize("name", list(ROWS))
def test_surrounding(tmp_path: Path, name: str) -> None:
    row = ROWS[name]
    cwd, argv = row.build(tmp_path)
    proc = _run(cwd, argv, tmp_path)
    assert proc.returncode == row.exit_code, (proc.stdout, proc.stderr)
    assert row.says in proc.stdout + proc.stderr


def test_sha256_repository_is_left_untouched_by_a_refused_init(tmp_path: Path) -> None:
    cwd, argv = _init_on_a_sha256_repo(tmp_path)
    _run(cwd, argv, tmp_path)
    assert not (tmp_path / "s256" / ".git" / "refs" / "heads" / "ledger").exists()
    config = (tmp_path / "s256" / ".git" / "config").read_text()
    assert "perfledger" not in config


# ---------------------------------------------------------------- as an unprivileged user

NOBODY = "nobody"


def _can_drop_privileges() -> str | None:
    """Why the permission rows cannot run here, or None."""
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed: cannot run as an unprivileged user"
    if os.geteuid() != 0:
        return None  # already unprivileged: setpriv is not needed, but the rows drop anyway
    return None


@pytest.fixture
def world(tmp_path: Path) -> Path:
    """A directory everyone may enter (tmp_path's parents are root's)."""
    reason = _can_drop_privileges()
    if reason:
        pytest.skip(reason)
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"perfledger-perm-{os.getpid()}-{tmp_path.name}"
    base.mkdir(mode=0o777)
    base.chmod(0o777)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _chmod_tree(path: Path, dir_mode: int, file_mode: int) -> None:
    for root, _dirs, files in os.walk(path):
        os.chmod(root, dir_mode)
        for name in files:
            os.chmod(os.path.join(root, name), file_mode)


def test_as_nobody_status_beside_an_unreadable_directory_is_not_a_ledger(world: Path) -> None:
    secret = world / "secret"
    secret.mkdir()
    secret.chmod(0)
    proc = _run(world, ["status"], world, user=NOBODY)
    assert proc.returncode == 2, proc.stderr
    assert "no ledger here" in proc.stderr


def test_as_nobody_an_unreadable_ledger_is_a_permission_error(world: Path) -> None:
    _ledger(world / "led")
    (world / "led").chmod(0o700)  # root's: nobody may not enter
    proc = _run(world, ["--ledger", "led", "note", "x"], world, user=NOBODY)
    assert proc.returncode == 1, proc.stderr  # a resource error: not "not a ledger"
    assert "permission denied on led" in proc.stderr


def test_as_nobody_a_read_only_ledger_reads_and_refuses_a_write(world: Path) -> None:
    _ledger(world / "led")
    _chmod_tree(world / "led", 0o755, 0o644)  # root's, readable by all
    read = _run(world, ["--ledger", "led", "verify"], world, user=NOBODY)
    assert read.returncode == 0, read.stderr
    before = (world / "led" / "refs" / "heads" / "ledger").read_text()
    write = _run(world, ["--ledger", "led", "note", "x"], world, user=NOBODY)
    assert write.returncode == 1, write.stderr
    assert "permission denied" in write.stderr
    assert (world / "led" / "refs" / "heads" / "ledger").read_text() == before
