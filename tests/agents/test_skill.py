"""The Agent Skill shipped with perfledger: its format (front matter, size), its installation,
and every command in it, run in order on a scratch ledger (like the README's blocks)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfledger.skill import SKILL_FILES, install, read

#: Rough characters per token of English prose and shell (an upper bound on the token count
#: is what matters: the body must stay under ~5k tokens).
CHARS_PER_TOKEN = 3.5


def _front_matter(text: str) -> tuple[dict[str, str], str]:
    match = re.match(r"---\n(.*?)\n---\n(.*)", text, flags=re.S)
    assert match, "SKILL.md must start with YAML front matter between --- lines"
    fields = dict(line.split(": ", 1) for line in match.group(1).splitlines() if ": " in line)
    return fields, match.group(2)


def _blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.S)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PERFLEDGER_ACTOR"] = "skill-test"
    env.pop("PERFLEDGER_DIR", None)
    return env


def test_skill_has_name_and_description_front_matter_and_a_short_body() -> None:
    fields, body = _front_matter(read())
    assert fields["name"] == "perfledger"
    assert re.fullmatch(r"[a-z0-9-]{1,64}", fields["name"])
    assert 50 < len(fields["description"]) <= 1024
    assert len(body) / CHARS_PER_TOKEN < 5000, len(body)


def test_skill_references_name_every_rule_and_the_schema_command() -> None:
    rules = read("references/rules.md")
    for n in range(1, 26):
        assert re.search(rf"\bR{n}\b", rules), f"R{n} missing"
    assert "perfledger schema" in read("references/requests.md")
    for name in SKILL_FILES[1:]:
        assert f"`{name}`" in read() or name.split("/")[-1] in read()


@pytest.mark.slow
@pytest.mark.serial  # measures a real baseline under the real monitor: other load refuses it (R17)
def test_every_command_of_the_skill_runs_in_order_on_a_scratch_ledger(tmp_path: Path) -> None:
    """SKILL.md's blocks (a whole session: target to audited handoff), then the request
    protocol's blocks on that ledger: each line must succeed."""
    blocks = _blocks(read()) + _blocks(read("references/requests.md"))
    assert len(blocks) >= 10
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(blocks)],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=1800,  # about 80 workload calls: seconds alone, minutes on a loaded machine
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    assert re.search(r"^ok: \d+ events replayed", done.stdout, flags=re.M), done.stdout[-3000:]
    assert "ChampionSelected" in done.stdout and "FinalAuditRecorded" in done.stdout


def test_skill_install_writes_skill_and_references(tmp_path: Path) -> None:
    written = install(tmp_path / "skills")
    assert [p.relative_to(tmp_path / "skills").as_posix() for p in written] == [
        f"perfledger/{name}" for name in SKILL_FILES
    ]
    assert (tmp_path / "skills/perfledger/SKILL.md").read_text() == read()


def test_skill_cli_install_and_print(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "perfledger", "skill"]
    done = subprocess.run([*run, "install", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "perfledger/references/rules.md").is_file()
    printed = subprocess.run([*run, "--print"], capture_output=True, text=True)
    assert printed.returncode == 0 and printed.stdout == read()


def test_skill_install_into_an_unwritable_place_is_a_bad_request(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    done = subprocess.run(
        [sys.executable, "-m", "perfledger", "skill", "install", str(blocker / "sub")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot write the skill" in done.stderr and "Traceback" not in done.stderr
