"""perfledger's Agent Skill: ``SKILL.md`` (front matter ``name``/``description``, the workflow of
SPEC.md section 4 through the CLI) and ``references/`` (the request protocol, the rules), shipped
as package data and installed where an agent looks by ``perfledger skill install DIR``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from perfledger.errors import BadRequest

#: The skill's name (its folder under an agent's skills directory, and its front matter's name).
SKILL_NAME = "perfledger"
#: The skill's files, relative to this package (and to the installed ``DIR/perfledger/``).
SKILL_FILES = ("SKILL.md", "references/requests.md", "references/rules.md")


def read(name: str = "SKILL.md") -> str:
    """The text of one of :data:`SKILL_FILES` (UTF-8). Raises: KeyError for another name."""
    if name not in SKILL_FILES:
        raise KeyError(name)
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def install(directory: str | Path) -> list[Path]:
    """Write the skill to ``directory/perfledger/`` (``SKILL.md`` and ``references/``), creating
    folders and replacing earlier copies of these files. Returns the written paths.

    Raises: BadRequest (exit 2) when the directory cannot be written."""
    root = Path(directory) / SKILL_NAME
    written = []
    try:
        for name in SKILL_FILES:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(read(name), encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise BadRequest(
            f"cannot write the skill under {str(directory)!r}: {exc.strerror or exc}",
            hint="name a directory you can write (an agent's skills folder)",
        ) from None
    return written
