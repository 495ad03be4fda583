"""Opening a ledger without dulwich (``perfledger.ledger.gitdir``): the two plain layouts are
found and their ``[perfledger]`` keys read exactly as git reads them; anything else is left to
dulwich, and the store opens either way. Checked against the real ``git config``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from perfledger.api import Ledger
from perfledger.errors import NewerLedger, NotALedger
from perfledger.ledger.gitdir import find_controldir, read_remotes, read_section
from perfledger.ledger.store import GitStore


def _git(*args: str | Path) -> str:
    return subprocess.run(
        ["git", *map(str, args)], check=True, capture_output=True, text=True
    ).stdout


def test_bare_and_work_tree_layouts_are_found(tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    _git("init", "-q", "--bare", bare)
    assert find_controldir(str(bare)) == (str(bare), str(bare))
    tree = tmp_path / "tree"
    _git("init", "-q", tree)
    assert find_controldir(str(tree)) == (str(tree), str(tree / ".git"))
    assert find_controldir(str(tmp_path / "missing")) is None
    assert find_controldir(str(tmp_path)) is None


def test_linked_work_tree_is_left_to_dulwich(tmp_path: Path) -> None:
    main = tmp_path / "main"
    _git("init", "-q", main)
    _git(
        "-c",
        "user.name=a",
        "-c",
        "user.email=a@b",
        "-C",
        main,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "x",
    )
    linked = tmp_path / "linked"
    _git("-C", main, "worktree", "add", "-q", linked)
    assert (linked / ".git").is_file()
    assert find_controldir(str(linked)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[core]\n\tbare = true\n", {}),
        ("[perfledger]\n\tformatVersion = 1\n", {b"formatversion": b"1"}),
        ("[PerfLedger]\n  FSYNCMETHOD=fsync ; why\n", {b"fsyncmethod": b"fsync"}),
        ("[perfledger]\n\tflag\n", {b"flag": b"true"}),
        ("[perfledger]\n\tx = 1\n[perfledger]\n\tx = 2 # last wins\n", {b"x": b"2"}),
        ('[perfledger "sub"]\n\tx = 1\n', {}),
        ('[remote "o"]\n\turl = "quoted; fine elsewhere"\n', {}),
        ('[perfledger]\n\tx = "quoted"\n', None),
        ("[perfledger]\n\tx = a\\\n b\n", None),
        ("[include]\n\tpath = other\n", None),
        ('[includeIf "gitdir:/x/"]\n\tpath = other\n', None),
        ("x = 1\n", None),
    ],
)
def test_read_section_matches_git_or_declines(
    tmp_path: Path, text: str, expected: dict[bytes, bytes] | None
) -> None:
    (tmp_path / "config").write_text(text)
    got = read_section(str(tmp_path), b"perfledger")
    assert got == expected
    if got:  # what it read is what git reads
        for key, value in got.items():
            if key in (b"formatversion", b"fsyncmethod", b"x"):
                shown = _git("config", "--file", tmp_path / "config", f"perfledger.{key.decode()}")
                assert shown.strip() == value.decode()


def test_open_refuses_a_future_format_through_either_path(tmp_path: Path) -> None:
    """A newer storage format is a ledger written by a newer perfledger (exit 7), not "not a
    ledger"; an unknown older one stays NotALedger."""
    path = tmp_path / "l"
    Ledger.init(path, actor="t").close()
    _git("--git-dir", path, "config", "perfledger.formatVersion", "99")
    with pytest.raises(NewerLedger, match="format 99"):
        GitStore.open(path)
    _git("--git-dir", path, "config", "--add", "include.path", "/nonexistent")  # -> dulwich
    assert read_section(str(path), b"perfledger") is None
    with pytest.raises(NewerLedger, match="format 99"):
        GitStore.open(path)
    _git("--git-dir", path, "config", "perfledger.formatVersion", "zero")
    with pytest.raises(NotALedger, match="format zero"):
        GitStore.open(path)


def test_ledger_in_a_linked_work_tree_opens_through_dulwich(tmp_path: Path) -> None:
    main = tmp_path / "main"
    GitStore.init(main, actor="t", bare=False).close()
    linked = tmp_path / "linked"
    _git("-C", main, "worktree", "add", "-q", "--detach", linked, "ledger")
    with Ledger.open(linked) as ledger:
        assert ledger.append("NoteRecorded", {"text": "hi", "tags": []}, actor="t").lamport == 2
        assert ledger.verify().ok


def test_state_and_a_note_need_no_dulwich(tmp_path: Path) -> None:
    """The CLI's common calls answer without importing dulwich (its import and repository
    setup cost as much as the rest of such a call)."""
    path = tmp_path / "l"
    Ledger.init(path, actor="t").close()
    code = (
        "import sys\n"
        "from perfledger.commands.cli.app import main\n"
        "for args in (['note', 'one'], ['state', '--json'], ['note', 'two'], ['state']):\n"
        "    try:\n"
        f"        main(['--ledger', {str(path)!r}, *args])\n"
        "    except SystemExit as exc:\n"
        "        assert not exc.code, exc.code\n"
        "print('DULWICH', sorted(m for m in sys.modules if m.startswith('dulwich')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "DULWICH []", out.stdout[-500:]


def _dulwich_remotes(controldir: Path) -> dict[str, str]:
    """The remotes as :func:`perfledger.app.handoff.resume_context` read them through dulwich."""
    from dulwich.config import ConfigFile

    config = ConfigFile.from_path(str(controldir / "config"))
    found = {}
    for section in config.sections():
        if len(section) == 2 and section[0] == b"remote":
            try:
                found[section[1].decode()] = config.get(section, b"url").decode()
            except KeyError:
                continue
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[core]\n\tbare = true\n", {}),
        ('[remote "origin"]\n\turl = /srv/l.git\n\tfetch = +x:y\n', {"origin": "/srv/l.git"}),
        ('[remote "a"]\n\tURL = /one # why\n\turl = /two\n[remote "b"]\n', {"a": "/two"}),
        ('[remote "a"]\n\turl = /one\n[core]\n\turl = /no\n', {"a": "/one"}),
        ('[remote "a"]\n\turl = "/quoted"\n', None),
        ('[remote "a\\"b"]\n\turl = /x\n', None),
        ('[Remote "a"]\n\turl = /x\n', None),
        ("[remote.a]\n\turl = /x\n", None),
        ('[remote "a"]\n\turl\n', None),
        ("[include]\n\tpath = other\n", None),
        ("url = /x\n", None),
    ],
)
def test_read_remotes_matches_dulwich_or_declines(
    tmp_path: Path, text: str, expected: dict[str, str] | None
) -> None:
    """``status`` reads the remotes without dulwich: what it reads is what dulwich reads, and a
    config it does not read exactly is left to dulwich (None)."""
    (tmp_path / "config").write_text(text)
    got = read_remotes(str(tmp_path))
    assert got == expected
    if got is not None:
        assert got == _dulwich_remotes(tmp_path)


def test_remotes_added_by_git_are_read_without_dulwich(tmp_path: Path) -> None:
    path = tmp_path / "l"
    Ledger.init(path, actor="t").close()
    _git("--git-dir", path, "remote", "add", "up", "/srv/up.git")
    _git("--git-dir", path, "remote", "add", "down", "https://example.org/d.git")
    assert (
        read_remotes(str(path))
        == _dulwich_remotes(path)
        == {
            "up": "/srv/up.git",
            "down": "https://example.org/d.git",
        }
    )
    assert read_remotes(str(tmp_path / "none")) == {}
