"""Every code block of the ``docs/`` pages runs as written (GUIDE.md: the docs cannot drift).

Each page except ``SPEC.md`` (the specification, no walkthrough) is run as one bash script: its
``sh``/``bash`` blocks as they are and its ``python`` blocks through ``python -``, in page order, in a
scratch directory that links the repository's ``tests/``, ``examples/``, ``schemas/`` and
``bench/`` (so relative paths in the blocks resolve) and with ``/tmp/...`` moved into it.

A block is left to another test, or not run at all, only when the line just above it says so:

- ``<!-- run by tests/PATH.py -->``: that test runs the block (with a ledger or fixture it sets
  up); the test file must exist and name the page;
- ``<!-- not run: REASON -->``: e.g. it needs a GPU or a server; the reason is required.

``json``, ``toml``, ``cuda`` and ``text`` blocks are data, file contents or printed output, not
commands; a block without a language is refused, so every block says which it is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name != "SPEC.md")
RUN = {"sh", "bash", "python"}
DATA = {"json", "toml", "cuda", "text"}
LINKED = ("tests", "examples", "schemas", "bench")

#: What a page's run must print (stdout) or write (a file in the scratch directory, and a
#: substring of it), beyond exiting 0: the figures a reader is told to expect.
EXPECT_STDOUT: dict[str, list[str | tuple[str, ...]]] = {
    # the example chain's typed resolution decides nothing (R4): its loop stops at the champion
    "workflow.md": ["True 2 ", "t1 (current): original"],
    "agents.md": ["name: perfledger"],
    "checkpoints.md": ["signed by alice, witness; the head holds 0 events past it"],
    # the Python API refuses as the CLI does, and the MCP server answers from the same ledger
    "api.md": [
        "refused: R2 | record it first",
        "audit: True 2 events, exit 0",
        "audit over MCP: True",
        # the measuring use cases from Python, and over MCP in the server's process; on a
        # machine other work keeps busy the baseline is refused instead (R17: no flag waives it)
        ("baseline: BaselineRecorded 4 values, ms", "refused: R17: the monitor saw foreign"),
        ("A/A over MCP: ['small'] False", "refused: R17: the monitor saw foreign"),
    ],
}
EXPECT_FILES: dict[str, dict[str, str]] = {
    "workflow.md": {"target.schema.json": "min_effect"},
}

_FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\n(.*?)^```\s*$", flags=re.S | re.M)
_MARK = re.compile(r"<!--\s*(not run:\s*(?P<why>.*?)|run by\s+(?P<test>\S+))\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: its language, text, and the marker line above it."""

    language: str
    text: str
    not_run: str | None  # the reason, when marked not run
    run_by: str | None  # the test file that runs it, when marked


def parse(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text in order, each with the marker just above it."""
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(
            Block(
                language=match.group(1),
                text=match.group(2),
                not_run=(mark.group("why") or "").strip() if mark and mark.group(1).startswith("not") else None,
                run_by=mark.group("test") if mark else None,
            )
        )  # fmt: skip
    return found


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``docs/<page>``."""
    return parse((DOCS / page).read_text())


def script(page: str, scratch: Path) -> str:
    """The page's runnable blocks as one bash script, ``/tmp/`` moved into ``scratch``."""
    parts = []
    for block in blocks(page):
        if block.language not in RUN or block.not_run is not None or block.run_by:
            continue
        body = block.text.replace("/tmp/", f"{scratch}/")
        if block.language == "python":
            body = f"python - <<'PERFLEDGER_DOCS_PY'\n{body}PERFLEDGER_DOCS_PY\n"
        parts.append(body)
    return "\n".join(parts)


@pytest.mark.parametrize("page", PAGES)
def test_every_block_says_what_it_is(page: str) -> None:
    """Each block has a known language; a skipped block gives its reason or names its test."""
    for block in blocks(page):
        assert block.language in RUN | DATA, f"{page}: a block in {block.language or 'no'} language"
        if block.not_run is not None:
            assert block.not_run, f"{page}: a block is marked not run without a reason"
        if block.run_by:
            test = ROOT / block.run_by
            assert test.is_file(), f"{page}: {block.run_by} does not exist"
            assert page in test.read_text(), f"{block.run_by} does not read {page}"


#: Pages whose blocks run a whole session through the CLI (seconds): `make test-fast` leaves
#: them to `make test` (marked slow); the other pages' blocks run in both.
SLOW_PAGES = {"workflow.md"}


@pytest.mark.parametrize("page", [
    pytest.param(p, marks=pytest.mark.slow) if p in SLOW_PAGES else p
    for p in PAGES
    if any(b.language in RUN and b.not_run is None and not b.run_by for b in blocks(p))
])  # fmt: skip
def test_page_blocks_run(page: str, tmp_path: Path) -> None:
    """The page's blocks succeed, in order, in one shell, and print what the page says."""
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PERFLEDGER_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", HOME=str(tmp_path),
        TMPDIR=str(tmp_path), USER="docs", PERFLEDGER_ACTOR="docs", GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )  # fmt: skip
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script(page, tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    for needle in EXPECT_STDOUT.get(page, []):  # a tuple: one of its lines is printed
        either = needle if isinstance(needle, tuple) else (needle,)
        assert any(n in done.stdout for n in either), f"{page}: {needle!r} not printed"
    for name, needle in EXPECT_FILES.get(page, {}).items():
        assert needle in (tmp_path / name).read_text(), f"{page}: {name} lacks {needle!r}"


def test_markers_are_read() -> None:
    """The marker parser sees both kinds of marker and only on the line just above a block."""
    page = "<!-- not run: needs a GPU -->\n```sh\na\n```\n\n<!-- run by tests/x.py -->\n```sh\nb\n```\n"
    page += "<!-- not run: far -->\n\ntext\n```sh\nc\n```\n"
    found = parse(page)
    assert found[0].not_run == "needs a GPU" and found[0].run_by is None
    assert found[1].run_by == "tests/x.py" and found[1].not_run is None
    assert found[2].not_run is None and found[2].run_by is None
